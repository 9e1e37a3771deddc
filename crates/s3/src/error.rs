//! What the store said, told to a person: which request, on which object,
//! why, and what to do; classified so each kind of failure has its own
//! exit code.

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use store::{StoreError, StoreErrorKind};

use object::ObjectUrl;

/// Classifies a failed request `what` ("read", "upload a part of", ...)
/// on `url`.
pub(crate) fn from_sdk<E>(e: SdkError<E>, what: &str, url: &ObjectUrl, endpoint: &str) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = e.raw_response().map(|r| r.status().as_u16());
    let code = e.code().unwrap_or("").to_string();
    let detail = e.message().map(str::to_string);
    let context = DisplayErrorContext(&e).to_string();
    let (kind, _) = classify(&code, status, &context);
    let why = object::http::causes(&e);
    let said = match (&detail, code.is_empty()) {
        (Some(m), false) => format!(" ({code}: {m})"),
        (None, false) => format!(" ({code})"),
        _ => String::new(),
    };
    let message = match kind {
        StoreErrorKind::NoBucket => format!(
            "bucket {:?} does not exist at {endpoint}{said}: create it, or check the name and --s3-endpoint",
            url.bucket
        ),
        StoreErrorKind::StoreAuth if status.is_none() => format!(
            "found no credentials for the object store at {endpoint} to {what} {url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a --profile of ~/.aws/credentials"
        ),
        StoreErrorKind::StoreAuth => format!(
            "the object store at {endpoint} refused the credentials while trying to {what} {url}{said}: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the --profile in ~/.aws/credentials"
        ),
        StoreErrorKind::Permission => format!(
            "access denied to {url} at {endpoint} while trying to {what} it{said}: the credentials work, but their policy does not allow this"
        ),
        StoreErrorKind::NotFound => format!("no object {url} at {endpoint}{said}"),
        StoreErrorKind::Throttled => format!(
            "the object store at {endpoint} kept asking to slow down while haul tried to {what} {url}{said}; retried with backoff and gave up: run again later, or with --rate"
        ),
        StoreErrorKind::Unreachable => format!(
            "cannot reach the object store at {endpoint} to {what} {url}: {why}; check --s3-endpoint (or AWS_ENDPOINT_URL) and the network"
        ),
        _ => format!("cannot {what} {url} at {endpoint}{said}: {why}"),
    };
    StoreError::new(kind, message)
}

fn classify(code: &str, status: Option<u16>, context: &str) -> (StoreErrorKind, String) {
    let kind = match code {
        "NoSuchBucket" => StoreErrorKind::NoBucket,
        "InvalidAccessKeyId"
        | "SignatureDoesNotMatch"
        | "ExpiredToken"
        | "InvalidToken"
        | "TokenRefreshRequired"
        | "AuthorizationHeaderMalformed" => StoreErrorKind::StoreAuth,
        "AccessDenied" | "AllAccessDisabled" => StoreErrorKind::Permission,
        "NoSuchKey" | "NotFound" => StoreErrorKind::NotFound,
        "SlowDown"
        | "Throttling"
        | "ThrottlingException"
        | "RequestLimitExceeded"
        | "TooManyRequests"
        | "ServiceUnavailable" => StoreErrorKind::Throttled,
        _ => match status {
            Some(403) => StoreErrorKind::Permission,
            Some(404) => StoreErrorKind::NotFound,
            Some(429) | Some(503) => StoreErrorKind::Throttled,
            Some(_) => StoreErrorKind::Other,
            // No answer: the store was never reached, or no credentials
            // were found to sign the request with.
            None if context.contains("credentials") || context.contains("identity") => {
                StoreErrorKind::StoreAuth
            }
            None => StoreErrorKind::Unreachable,
        },
    };
    (kind, context.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_statuses_classify() {
        let k = |c: &str, s: Option<u16>, ctx: &str| classify(c, s, ctx).0;
        assert_eq!(k("NoSuchBucket", Some(404), ""), StoreErrorKind::NoBucket);
        assert_eq!(k("", Some(404), ""), StoreErrorKind::NotFound);
        assert_eq!(
            k("SignatureDoesNotMatch", Some(403), ""),
            StoreErrorKind::StoreAuth
        );
        assert_eq!(
            k("InvalidAccessKeyId", Some(403), ""),
            StoreErrorKind::StoreAuth
        );
        assert_eq!(k("AccessDenied", Some(403), ""), StoreErrorKind::Permission);
        assert_eq!(k("SlowDown", Some(503), ""), StoreErrorKind::Throttled);
        assert_eq!(k("", Some(503), ""), StoreErrorKind::Throttled);
        assert_eq!(
            k("", None, "connection refused"),
            StoreErrorKind::Unreachable
        );
        assert_eq!(
            k("", None, "failed to resolve credentials"),
            StoreErrorKind::StoreAuth
        );
    }
}
