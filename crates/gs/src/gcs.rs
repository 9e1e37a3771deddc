//! GCS's JSON API as [`Objects`]: one request helper that adds the
//! credentials, retries, and turns failures into errors people can act
//! on; then listing, HEAD, ranged reads bound to a generation, whole
//! uploads with metadata, deletes. Uploads in parts are in `compose`.

use std::collections::HashMap;

use bytes::Bytes;
use http::{Method, StatusCode};
use object::http::{request, Answer, Http, ATTEMPTS, QUICK};
use object::{Fut, Limits, ObjectInfo, ObjectUrl, Objects, Page, Part};
use store::{StoreError, StoreErrorKind};

use crate::auth::Auth;
use crate::error::{failure, kind, said};
use crate::wire::{enc, multipart, new_object, Listing, Resource, PARTS_DIR};

/// GCS's limits: S3's, whose object size (5 TiB) GCS shares.
pub const LIMITS: Limits = object::api::S3_LIMITS;

/// The JSON API at one endpoint, with its credentials.
pub struct Gcs {
    http: Http,
    endpoint: String,
    auth: Auth,
    /// Keys a listing page asks for; the store's default when none.
    page_size: Option<u32>,
}

/// One request: what it does (for messages), to which location, and how.
pub struct Call<'a> {
    pub what: &'a str,
    pub target: &'a ObjectUrl,
    pub method: Method,
    /// Path and query under the endpoint.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub attempts: u32,
}

impl<'a> Call<'a> {
    pub fn new(what: &'a str, target: &'a ObjectUrl, method: Method, path: String) -> Call<'a> {
        Call {
            what,
            target,
            method,
            path,
            headers: Vec::new(),
            body: Bytes::new(),
            attempts: ATTEMPTS,
        }
    }

    pub fn body(mut self, content_type: &str, body: Bytes) -> Call<'a> {
        self.headers
            .push(("content-type".into(), content_type.into()));
        self.body = body;
        self
    }
}

/// What a listing asks for: keys under `prefix`, directly below it
/// (`delimiter`) or all, from page `token`, at most `max` a page (the
/// store's page size when none), from `start` on.
#[derive(Default)]
pub struct Query<'a> {
    pub prefix: &'a str,
    pub delimiter: bool,
    pub token: Option<String>,
    pub max: Option<u32>,
    pub start: Option<&'a str>,
}

impl<'a> Query<'a> {
    pub fn new(prefix: &'a str) -> Query<'a> {
        Query {
            prefix,
            ..Query::default()
        }
    }

    pub fn delimiter(mut self, delimiter: bool) -> Query<'a> {
        self.delimiter = delimiter;
        self
    }

    pub fn token(mut self, token: Option<String>) -> Query<'a> {
        self.token = token;
        self
    }

    /// One key, from `start`, with few retries: a check.
    pub fn quick(mut self, start: Option<&'a str>) -> Query<'a> {
        self.max = Some(1);
        self.start = start;
        self
    }
}

/// `/storage/v1/b/BUCKET/o/KEY`: an object's resource.
pub fn object_path(url: &ObjectUrl, key: &str) -> String {
    format!("/storage/v1/b/{}/o/{}", enc(&url.bucket), enc(key))
}

impl Gcs {
    pub fn new(http: Http, endpoint: String, auth: Auth, page_size: Option<u32>) -> Gcs {
        Gcs {
            http,
            endpoint,
            auth,
            page_size,
        }
    }

    /// Sends `c`; the answer, whatever its status.
    pub async fn answer(&self, c: &Call<'_>) -> Result<Answer, StoreError> {
        let target = c.target.to_string();
        let f = failure(c.what, &target, &self.endpoint);
        let mut headers = c.headers.clone();
        if let Some(a) = self.auth.header(&self.http, &f).await? {
            headers.push(("authorization".into(), a));
        }
        let url = format!("{}{}", self.endpoint, c.path);
        let got = self
            .http
            .send(c.attempts, || {
                request(c.method.clone(), &url, &headers, c.body.clone())
            })
            .await?;
        got.map_err(|why| f.unreachable(&why))
    }

    /// Sends `c`; its answer when it succeeded, an error otherwise.
    pub async fn ok(&self, c: &Call<'_>) -> Result<Answer, StoreError> {
        let a = self.answer(c).await?;
        if a.status.is_success() {
            return Ok(a);
        }
        Err(self.refused(c, &a).await)
    }

    /// The error for a failed answer to `c`.
    pub async fn refused(&self, c: &Call<'_>, a: &Answer) -> StoreError {
        let said = said(&a.body);
        let mut k = kind(a.status, &said);
        if k == StoreErrorKind::NotFound && !self.bucket_exists(c.target).await {
            k = StoreErrorKind::NoBucket;
        }
        let target = c.target.to_string();
        failure(c.what, &target, &self.endpoint).answered(k, a.status, &said)
    }

    /// Whether `url`'s bucket is there, asked after a 404 that did not
    /// say; true when that cannot be told.
    async fn bucket_exists(&self, url: &ObjectUrl) -> bool {
        let path = format!("/storage/v1/b/{}", enc(&url.bucket));
        let mut c = Call::new("look up the bucket of", url, Method::GET, path);
        c.attempts = QUICK;
        match self.answer(&c).await {
            Ok(a) => a.status != StatusCode::NOT_FOUND,
            Err(_) => true,
        }
    }

    /// One page of the listing `q` asks for, haul's temporary objects
    /// included.
    pub async fn list_raw(
        &self,
        what: &str,
        url: &ObjectUrl,
        q: Query<'_>,
    ) -> Result<Listing, StoreError> {
        let mut path = format!(
            "/storage/v1/b/{}/o?prefix={}",
            enc(&url.bucket),
            enc(q.prefix)
        );
        if q.delimiter {
            path.push_str("&delimiter=%2F");
        }
        if let Some(t) = q.token {
            path.push_str(&format!("&pageToken={}", enc(&t)));
        }
        if let Some(s) = q.start {
            path.push_str(&format!("&startOffset={}", enc(s)));
        }
        if let Some(n) = q.max.or(self.page_size) {
            path.push_str(&format!("&maxResults={n}"));
        }
        let mut c = Call::new(what, url, Method::GET, path);
        if q.max == Some(1) {
            c.attempts = QUICK;
        }
        let a = self.ok(&c).await?;
        parse_json(&a.body, &c, &self.endpoint)
    }

    /// A page of the listing, haul's temporary objects hidden. With a
    /// delimiter, a prefix a page already gave is not given again (GCS
    /// may repeat one on the next page; fake-gcs-server repeats them
    /// all): the token handed back carries the last prefix given.
    async fn do_list(
        &self,
        url: &ObjectUrl,
        delimiter: bool,
        token: Option<String>,
    ) -> Result<Page, StoreError> {
        let (token, given) = split_token(token);
        let q = Query::new(&url.key).delimiter(delimiter).token(token);
        let l = self.list_raw("list", url, q).await?;
        let key = self.mtime_key();
        let objects = l
            .items
            .iter()
            .filter(|r| !is_temporary(&r.name))
            .map(|r| (r.name.clone(), r.size(), r.mtime(key)))
            .collect();
        let prefixes: Vec<String> = l
            .prefixes
            .into_iter()
            .filter(|p| !is_temporary(p) && !matches!(&given, Some(g) if p <= g))
            .collect();
        let last = prefixes.iter().max().cloned().or(given);
        let next = l.next_page_token.filter(|t| !t.is_empty());
        Ok(Page {
            objects,
            prefixes,
            next: next.map(|t| join_token(t, last)),
        })
    }

    /// One key asked for, fast. Where the first key is one of haul's
    /// temporary objects, no other key sorts before them, so a second
    /// look starts after them.
    async fn do_check(&self, url: &ObjectUrl) -> Result<bool, StoreError> {
        let l = self
            .list_raw("list", url, Query::new(&url.key).quick(None))
            .await?;
        match l.items.first() {
            None => Ok(false),
            Some(r) if !is_temporary(&r.name) => Ok(true),
            Some(_) => {
                let q = Query::new(&url.key).quick(Some(AFTER_PARTS));
                let l = self.list_raw("list", url, q).await?;
                Ok(l.items.iter().any(|r| !is_temporary(&r.name)))
            }
        }
    }

    async fn do_head(&self, url: &ObjectUrl) -> Result<Option<ObjectInfo>, StoreError> {
        let c = Call::new("look up", url, Method::GET, object_path(url, &url.key));
        let a = self.answer(&c).await?;
        if a.status == StatusCode::NOT_FOUND {
            let e = self.refused(&c, &a).await;
            return if e.kind == StoreErrorKind::NotFound {
                Ok(None)
            } else {
                Err(e)
            };
        }
        if !a.status.is_success() {
            return Err(self.refused(&c, &a).await);
        }
        let r: Resource = parse_json(&a.body, &c, &self.endpoint)?;
        Ok(Some(ObjectInfo {
            url: url.clone(),
            size: r.size(),
            mtime: r.mtime(self.mtime_key()),
            version: r.generation,
        }))
    }

    async fn do_get_range(
        &self,
        info: &ObjectInfo,
        start: u64,
        len: u64,
    ) -> Result<Bytes, StoreError> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        let url = &info.url;
        let mut path = format!(
            "/download/storage/v1/b/{}/o/{}?alt=media",
            enc(&url.bucket),
            enc(&url.key)
        );
        if let Some(g) = &info.version {
            path.push_str(&format!("&generation={g}&ifGenerationMatch={g}"));
        }
        let mut c = Call::new("read", url, Method::GET, path);
        c.headers.push((
            "range".into(),
            format!("bytes={}-{}", start, start + len - 1),
        ));
        let a = self.answer(&c).await?;
        let replaced = a.status == StatusCode::PRECONDITION_FAILED
            || a.status == StatusCode::RANGE_NOT_SATISFIABLE
            || (a.status == StatusCode::NOT_FOUND && info.version.is_some());
        if replaced && self.bucket_exists(url).await {
            return Err(object::changed(url));
        }
        if !a.status.is_success() {
            return Err(self.refused(&c, &a).await);
        }
        let other_generation = match (a.header("x-goog-generation"), &info.version) {
            (Some(got), Some(want)) => got != want,
            _ => false,
        };
        if other_generation || a.body.len() as u64 != len {
            return Err(object::changed(url));
        }
        Ok(a.body)
    }

    /// Writes `key` of `url`'s bucket whole, with `metadata`; its resource.
    pub async fn upload(
        &self,
        what: &str,
        url: &ObjectUrl,
        key: &str,
        body: Bytes,
        metadata: &[(String, String)],
    ) -> Result<Resource, StoreError> {
        let (ctype, body) = multipart(&new_object(key, metadata, &body), &body);
        let path = format!(
            "/upload/storage/v1/b/{}/o?uploadType=multipart",
            enc(&url.bucket)
        );
        let c = Call::new(what, url, Method::POST, path).body(&ctype, body);
        let a = self.ok(&c).await?;
        parse_json(&a.body, &c, &self.endpoint)
    }

    /// Removes `key` of `url`'s bucket; a missing one is fine.
    pub async fn remove(&self, url: &ObjectUrl, key: &str) -> Result<(), StoreError> {
        let c = Call::new("delete", url, Method::DELETE, object_path(url, key));
        let a = self.answer(&c).await?;
        if a.status.is_success() {
            return Ok(());
        }
        let e = self.refused(&c, &a).await;
        if e.kind == StoreErrorKind::NotFound {
            return Ok(());
        }
        Err(e)
    }
}

/// Whether `name` is one of haul's temporary part objects, hidden from
/// every listing.
pub fn is_temporary(name: &str) -> bool {
    name.starts_with(PARTS_DIR)
}

/// GCS's page token, and the last prefix given before it (object names
/// hold no line feeds, so one parts them).
fn join_token(token: String, last_prefix: Option<String>) -> String {
    match last_prefix {
        Some(p) => format!("{token}\n{p}"),
        None => token,
    }
}

/// What [`join_token`] joined.
fn split_token(token: Option<String>) -> (Option<String>, Option<String>) {
    match token {
        Some(t) => match t.split_once('\n') {
            Some((t, p)) => (Some(t.to_string()), Some(p.to_string())),
            None => (Some(t), None),
        },
        None => (None, None),
    }
}

/// The first name after every temporary one ('0' follows '/').
const AFTER_PARTS: &str = ".haul-parts0";

/// The JSON of an answer to `c`, or an error saying it was not.
pub fn parse_json<T: serde::de::DeserializeOwned>(
    body: &[u8],
    c: &Call<'_>,
    endpoint: &str,
) -> Result<T, StoreError> {
    serde_json::from_slice(body).map_err(|e| {
        StoreError::new(
            StoreErrorKind::Other,
            format!(
                "the object store at {endpoint} answered a request to {} {} with what is not GCS's JSON ({e}): check {}",
                c.what,
                c.target,
                crate::error::ENDPOINT_HINT
            ),
        )
    })
}

impl Objects for Gcs {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn limits(&self) -> Limits {
        LIMITS
    }

    fn list<'a>(
        &'a self,
        url: &'a ObjectUrl,
        delimiter: bool,
        token: Option<String>,
    ) -> Fut<'a, Page> {
        Box::pin(self.do_list(url, delimiter, token))
    }

    fn check<'a>(&'a self, url: &'a ObjectUrl) -> Fut<'a, bool> {
        Box::pin(self.do_check(url))
    }

    fn head<'a>(&'a self, url: &'a ObjectUrl) -> Fut<'a, Option<ObjectInfo>> {
        Box::pin(self.do_head(url))
    }

    fn get_range<'a>(&'a self, info: &'a ObjectInfo, start: u64, len: u64) -> Fut<'a, Bytes> {
        Box::pin(self.do_get_range(info, start, len))
    }

    fn put<'a>(
        &'a self,
        url: &'a ObjectUrl,
        body: Bytes,
        metadata: &'a [(String, String)],
    ) -> Fut<'a, ()> {
        Box::pin(async move {
            self.upload("upload", url, &url.key, body, metadata).await?;
            Ok(())
        })
    }

    fn begin<'a>(
        &'a self,
        url: &'a ObjectUrl,
        _metadata: &'a [(String, String)],
    ) -> Fut<'a, String> {
        Box::pin(async move { self.begin_parts(url) })
    }

    fn put_part<'a>(
        &'a self,
        url: &'a ObjectUrl,
        id: &'a str,
        number: u32,
        body: Bytes,
    ) -> Fut<'a, Part> {
        Box::pin(self.upload_part(url, id, number, body))
    }

    fn list_parts<'a>(
        &'a self,
        url: &'a ObjectUrl,
        id: &'a str,
    ) -> Fut<'a, Option<HashMap<u32, (String, u64)>>> {
        Box::pin(self.held_parts(url, id))
    }

    fn complete<'a>(
        &'a self,
        url: &'a ObjectUrl,
        id: &'a str,
        parts: Vec<Part>,
        metadata: &'a [(String, String)],
    ) -> Fut<'a, ()> {
        Box::pin(self.compose_parts(url, id, parts, metadata))
    }

    fn abort<'a>(&'a self, url: &'a ObjectUrl, id: &'a str) -> Fut<'a, ()> {
        Box::pin(self.drop_parts(url, id))
    }

    fn delete<'a>(&'a self, url: &'a ObjectUrl) -> Fut<'a, ()> {
        Box::pin(self.remove(url, &url.key))
    }

    fn copy<'a>(&'a self, from: &'a ObjectInfo, to: &'a ObjectUrl) -> Fut<'a, bool> {
        Box::pin(self.rewrite(from, to))
    }
}

/// Most calls one rewrite may take: GCS copies up to some GiB a call
/// where it must move the bytes between locations (a few suffice within
/// one), and a store that never says done is not followed for ever.
const MAX_REWRITE_CALLS: usize = 10_000;

/// A rewrite's answer: done, or a token to go on with.
#[derive(serde::Deserialize)]
struct Rewrite {
    done: bool,
    #[serde(rename = "rewriteToken")]
    token: Option<String>,
}

impl Gcs {
    /// A copy inside the store (`rewriteTo`), bound to the listed
    /// generation, metadata kept; called again with its token until done.
    async fn rewrite(&self, from: &ObjectInfo, to: &ObjectUrl) -> Result<bool, StoreError> {
        let base = format!(
            "{}/rewriteTo/b/{}/o/{}",
            object_path(&from.url, &from.url.key),
            enc(&to.bucket),
            enc(&to.key)
        );
        let mut token: Option<String> = None;
        for _ in 0..MAX_REWRITE_CALLS {
            let mut query = Vec::new();
            if let Some(g) = &from.version {
                query.push(format!("ifSourceGenerationMatch={}", enc(g)));
            }
            if let Some(t) = &token {
                query.push(format!("rewriteToken={}", enc(t)));
            }
            let path = match query.is_empty() {
                true => base.clone(),
                false => format!("{base}?{}", query.join("&")),
            };
            let c = Call::new("copy into", to, Method::POST, path)
                .body("application/json", Bytes::from_static(b"{}"));
            let a = self.answer(&c).await?;
            if a.status == StatusCode::PRECONDITION_FAILED {
                return Err(object::changed(&from.url));
            }
            if !a.status.is_success() {
                return Err(self.refused(&c, &a).await);
            }
            let r: Rewrite = parse_json(&a.body, &c, &self.endpoint)?;
            if r.done {
                return Ok(true);
            }
            token = Some(r.token.ok_or_else(|| {
                StoreError::new(
                    StoreErrorKind::Other,
                    format!(
                        "{} answered a rewrite into {to} as not done, without a token",
                        self.endpoint
                    ),
                )
            })?);
        }
        Err(StoreError::new(
            StoreErrorKind::Other,
            format!(
                "{} did not finish copying into {to} in {MAX_REWRITE_CALLS} calls",
                self.endpoint
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_carry_the_last_prefix() {
        let t = join_token("abc".into(), Some("d/x/".into()));
        assert_eq!(
            split_token(Some(t)),
            (Some("abc".into()), Some("d/x/".into()))
        );
        let t = join_token("abc".into(), None);
        assert_eq!(split_token(Some(t)), (Some("abc".into()), None));
        assert_eq!(split_token(None), (None, None));
        assert!(is_temporary(".haul-parts/0a/00001") && !is_temporary(".haul-partsx"));
        assert!(AFTER_PARTS > ".haul-parts/ffff/99999" && AFTER_PARTS < ".haul-parts1");
    }
}
