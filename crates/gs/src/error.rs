//! What GCS said, classified for exit codes and told to people: which
//! call failed, on what, at which endpoint, and what to do about it.

use http::StatusCode;
use object::http::{kind_of, Failure};
use serde::Deserialize;
use store::StoreErrorKind;

/// Where GCS credentials come from, for advice.
pub const CREDENTIALS_HINT: &str = "GOOGLE_APPLICATION_CREDENTIALS to a service account's JSON key file \
     (or GOOGLE_OAUTH_ACCESS_TOKEN to an access token, or run `gcloud auth application-default login`), \
     or STORAGE_EMULATOR_HOST for an emulator";

/// What sets the endpoint, for advice.
pub const ENDPOINT_HINT: &str =
    "STORAGE_EMULATOR_HOST (unset, haul speaks to storage.googleapis.com)";

/// The message frame of call `what` on `target` at `endpoint`.
pub fn failure<'a>(what: &'a str, target: &'a str, endpoint: &'a str) -> Failure<'a> {
    Failure {
        what,
        target,
        endpoint,
        credentials_hint: CREDENTIALS_HINT,
        endpoint_hint: ENDPOINT_HINT,
    }
}

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    #[serde(default)]
    message: String,
}

/// What the store said in an error body: its JSON error's message, or
/// the start of the text.
pub fn said(body: &[u8]) -> String {
    if let Ok(e) = serde_json::from_slice::<ErrorBody>(body) {
        return e.error.message;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

/// The kind of failure an answer names. A 404 that GCS says is about
/// the bucket is [`StoreErrorKind::NoBucket`]; other 404s need a look
/// at the bucket to tell (see `Gcs::not_found`).
pub fn kind(status: StatusCode, said: &str) -> StoreErrorKind {
    if status == StatusCode::NOT_FOUND && said.to_ascii_lowercase().contains("bucket") {
        return StoreErrorKind::NoBucket;
    }
    kind_of(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_and_kinds() {
        let b = br#"{"error":{"code":404,"message":"The specified bucket does not exist.","errors":[]}}"#;
        let s = said(b);
        assert_eq!(s, "The specified bucket does not exist.");
        assert_eq!(kind(StatusCode::NOT_FOUND, &s), StoreErrorKind::NoBucket);
        assert_eq!(
            kind(StatusCode::NOT_FOUND, "Not Found"),
            StoreErrorKind::NotFound
        );
        assert_eq!(
            kind(StatusCode::UNAUTHORIZED, ""),
            StoreErrorKind::StoreAuth
        );
        assert_eq!(kind(StatusCode::FORBIDDEN, ""), StoreErrorKind::Permission);
        assert_eq!(
            kind(StatusCode::TOO_MANY_REQUESTS, ""),
            StoreErrorKind::Throttled
        );
        assert_eq!(
            kind(StatusCode::SERVICE_UNAVAILABLE, ""),
            StoreErrorKind::Throttled
        );
        assert_eq!(said(b"Not Found\n"), "Not Found");
        assert_eq!(said("x".repeat(300).as_bytes()).len(), 203);
    }

    #[test]
    fn messages_say_what_to_do() {
        let f = failure("read", "gs://b/k", "https://storage.googleapis.com");
        let e = f.no_credentials();
        assert_eq!(e.kind, StoreErrorKind::StoreAuth);
        assert!(
            e.message.contains("GOOGLE_APPLICATION_CREDENTIALS"),
            "{}",
            e.message
        );
        assert!(e.message.contains("STORAGE_EMULATOR_HOST"), "{}", e.message);
    }
}
