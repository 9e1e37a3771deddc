//! What the stores spoken to over their REST APIs (`gs`, `az`) share: one
//! HTTP/1.1 client over TLS (or plain HTTP for an emulator on loopback),
//! retries with backoff for throttling and dropped connections, and the
//! classification of a status into an exit code.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use store::{StoreError, StoreErrorKind};

/// Attempts of one request before its error is final: throttling and
/// server errors are retried with backoff, as each cloud's SDK does, but
/// longer: a bulk transfer outlasts a store's bad minute.
pub const ATTEMPTS: u32 = 10;
/// Attempts of a request asked before a transfer starts: a wrong endpoint
/// is told in a second.
pub const QUICK: u32 = 3;
/// The largest answer body taken: more than any range haul asks for (8
/// MiB) or any page of a listing (5,000 keys); a store that sends more is
/// not believed.
pub const MAX_ANSWER: usize = 64 << 20;

/// An answer: status, headers, whole body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// One HTTP client, shared by a store's requests.
#[derive(Clone)]
pub struct Http {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

/// Why a request got no answer: the store was not reached.
#[derive(Debug)]
pub struct NoAnswer(pub String);

impl Http {
    /// A client for `https://` (with the system's roots) and `http://`.
    /// Must be called within the runtime it will run on.
    pub fn new() -> Result<Http, StoreError> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| {
                StoreError::new(
                    StoreErrorKind::Other,
                    format!("cannot read this host's TLS root certificates: {e}"),
                )
            })?
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https);
        Ok(Http { client })
    }

    /// Sends a request built by `make` (called again for each attempt, so
    /// that a signature carries a fresh date) until the answer is neither
    /// throttling nor a server error, or `attempts` are spent.
    pub async fn send(
        &self,
        attempts: u32,
        mut make: impl FnMut() -> Result<Request<Full<Bytes>>, StoreError>,
    ) -> Result<Result<Answer, NoAnswer>, StoreError> {
        let mut wait = Duration::from_millis(200);
        let mut last = None;
        for attempt in 1..=attempts.max(1) {
            let req = make()?;
            let got = match self.client.request(req).await {
                Ok(r) => {
                    let (parts, body) = r.into_parts();
                    match http_body_util::Limited::new(body, MAX_ANSWER)
                        .collect()
                        .await
                    {
                        Ok(b) => Ok(Answer {
                            status: parts.status,
                            headers: parts.headers,
                            body: b.to_bytes(),
                        }),
                        Err(e) => Err(NoAnswer(format!(
                            "its answer could not be read whole (at most {} MiB): {e}",
                            MAX_ANSWER >> 20
                        ))),
                    }
                }
                Err(e) => Err(NoAnswer(causes(&e))),
            };
            let again = match &got {
                Ok(a) => retried(a.status),
                Err(_) => true,
            };
            if !again || attempt == attempts {
                return Ok(got);
            }
            last = Some(got);
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(20));
        }
        Ok(last.unwrap_or_else(|| Err(NoAnswer("no attempt was made".into()))))
    }
}

/// Whether an answer with this status is worth another attempt.
pub fn retried(s: StatusCode) -> bool {
    s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::REQUEST_TIMEOUT || s.is_server_error()
}

/// The chain of causes, each said once.
pub fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut said: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let s = err.to_string();
        if !said.iter().any(|p| p.contains(&s)) {
            said.push(s);
        }
        next = err.source();
    }
    said.join(": ")
}

/// The kind of failure an HTTP status names, where the store's own code
/// did not say more.
pub fn kind_of(status: StatusCode) -> StoreErrorKind {
    match status.as_u16() {
        401 => StoreErrorKind::StoreAuth,
        403 => StoreErrorKind::Permission,
        404 => StoreErrorKind::NotFound,
        429 | 503 => StoreErrorKind::Throttled,
        _ => StoreErrorKind::Other,
    }
}

/// A request with `method` to `url`, `headers`, and `body`.
pub fn request(
    method: Method,
    url: &str,
    headers: &[(String, String)],
    body: Bytes,
) -> Result<Request<Full<Bytes>>, StoreError> {
    let mut b = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(k.as_str(), v.as_str());
    }
    b.body(Full::new(body)).map_err(|e| {
        StoreError::new(
            StoreErrorKind::BadRequest,
            format!("cannot make a request to {url}: {e}"),
        )
    })
}

/// The message for a failed request `what` ("read", "upload a part of")
/// on `target` at `endpoint`, given the store's `code` and `message` (from
/// its error body) and the `hint` for the kind (where credentials come
/// from, for this store).
pub struct Failure<'a> {
    pub what: &'a str,
    pub target: &'a str,
    pub endpoint: &'a str,
    /// The variables or flags that set credentials, endpoint, for advice.
    pub credentials_hint: &'a str,
    pub endpoint_hint: &'a str,
}

impl Failure<'_> {
    /// A store that answered with an error.
    pub fn answered(&self, kind: StoreErrorKind, status: StatusCode, said: &str) -> StoreError {
        let Failure {
            what,
            target,
            endpoint,
            ..
        } = self;
        let said = if said.is_empty() {
            format!(" (HTTP {})", status.as_u16())
        } else {
            format!(" ({said})")
        };
        let m = match kind {
            StoreErrorKind::NoBucket => format!(
                "the bucket of {target} does not exist at {endpoint}{said}: create it, or check the name and {}",
                self.endpoint_hint
            ),
            StoreErrorKind::StoreAuth => format!(
                "the object store at {endpoint} refused the credentials while trying to {what} {target}{said}: check {}",
                self.credentials_hint
            ),
            StoreErrorKind::Permission => format!(
                "access denied to {target} at {endpoint} while trying to {what} it{said}: the credentials work, but their policy does not allow this"
            ),
            StoreErrorKind::NotFound => format!("no object {target} at {endpoint}{said}"),
            StoreErrorKind::Throttled => format!(
                "the object store at {endpoint} kept asking to slow down while haul tried to {what} {target}{said}; retried with backoff and gave up: run again later, or with --rate"
            ),
            _ => format!("cannot {what} {target} at {endpoint}{said}"),
        };
        StoreError::new(kind, m)
    }

    /// A store that was not reached.
    pub fn unreachable(&self, why: &NoAnswer) -> StoreError {
        StoreError::new(
            StoreErrorKind::Unreachable,
            format!(
                "cannot reach the object store at {} to {} {}: {}; check {} and the network",
                self.endpoint, self.what, self.target, why.0, self.endpoint_hint
            ),
        )
    }

    /// No credentials were found.
    pub fn no_credentials(&self) -> StoreError {
        StoreError::new(
            StoreErrorKind::StoreAuth,
            format!(
                "found no credentials for the object store at {} to {} {}: set {}",
                self.endpoint, self.what, self.target, self.credentials_hint
            ),
        )
    }
}

/// POSTs `body` as JSON to `url` (a job's `--notify-url`, P-45), on a
/// runtime of its own, retried with backoff while no answer comes or
/// the answer is throttling or a server error, up to `attempts`. The
/// status of the answer, or why none came.
pub fn post_json(url: &str, body: Vec<u8>, attempts: u32) -> Result<StatusCode, String> {
    let rt = crate::store::runtime("haul-notify").map_err(|e| e.to_string())?;
    let body = Bytes::from(body);
    let headers = [("content-type".to_string(), "application/json".to_string())];
    rt.block_on(async {
        let http = Http::new().map_err(|e| e.to_string())?;
        let got = http
            .send(attempts, || {
                request(Method::POST, url, &headers, body.clone())
            })
            .await
            .map_err(|e| e.to_string())?;
        got.map(|a| a.status).map_err(|NoAnswer(why)| why)
    })
}
