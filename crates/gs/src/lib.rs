//! Google Cloud Storage as one of haul's object stores: `gs://BUCKET/KEY`
//! locations behind [`object::Objects`], over GCS's JSON API, so that
//! everything `object` builds on the small core (manifests, readers
//! ahead, uploads in parts, resume journals) works on GCS as on S3.
//!
//! Credentials and endpoint follow Google's own conventions:
//! `STORAGE_EMULATOR_HOST` for an emulator, `GOOGLE_OAUTH_ACCESS_TOKEN`
//! for a bearer token, `GOOGLE_APPLICATION_CREDENTIALS` for a
//! service-account key, gcloud's application default credentials.
//!
//! - this file: `gs://` locations, and the store built from the environment.
//! - `auth`: where credentials come from, the signed JWT, the token cache.
//! - `gcs`: the JSON API's calls, one `impl Objects`.
//! - `compose`: uploads in parts as temporary objects, composed at the end.
//! - `error`: what the store said, classified for exit codes.
//! - `wire`: the JSON the API speaks, paths, times.

mod auth;
mod compose;
mod error;
mod gcs;
mod wire;

use std::sync::Arc;

use object::http::Http;
use object::{ObjectUrl, Tuning};
use store::StoreError;

use crate::auth::Auth;
use crate::gcs::Gcs;

/// How `gs://` locations are written.
pub const SCHEME: &str = "gs://";

/// Google Cloud Storage itself.
pub const ENDPOINT: &str = "https://storage.googleapis.com";

/// `gs://BUCKET[/KEY]`, with GCS's rules for bucket names and keys of at
/// most 1024 bytes.
pub fn parse(s: &str) -> Result<ObjectUrl, String> {
    ObjectUrl::parse(s, SCHEME, 1, 1024, bucket_rule)
}

/// Why `b` cannot be a GCS bucket's name; `None` when it can.
fn bucket_rule(b: &str) -> Option<String> {
    let max = if b.contains('.') { 222 } else { 63 };
    let good_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c);
    let good_end =
        |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let why = if b.is_empty() {
        "no bucket named (write gs://BUCKET/KEY)".to_string()
    } else if b.len() < 3 || b.len() > max {
        format!(
            "a GCS bucket's name is 3 to 63 characters (222 with dots), not {}",
            b.len()
        )
    } else if !b.chars().all(good_char) {
        "a GCS bucket's name has only lowercase letters, digits, '-', '_' and '.'".to_string()
    } else if !good_end(b.chars().next()) || !good_end(b.chars().last()) {
        "a GCS bucket's name starts and ends with a letter or a digit".to_string()
    } else if b.split('.').any(|p| p.is_empty() || p.len() > 63) {
        "each dot-separated part of a GCS bucket's name is 1 to 63 characters".to_string()
    } else {
        return None;
    };
    Some(why)
}

/// The store of GCS's JSON API, as the environment configures it
/// (nothing is asked of the store yet).
pub fn connect(tuning: &Tuning) -> Result<Arc<object::Store>, StoreError> {
    connect_with(&|name| std::env::var(name).ok(), tuning)
}

/// The store at `endpoint` (an emulator's `http://HOST:PORT`), without
/// credentials: for tests, and for emulators that need none.
pub fn connect_to(endpoint: &str, tuning: &Tuning) -> Result<Arc<object::Store>, StoreError> {
    build(emulator_endpoint(endpoint), Auth::none(), None, tuning)
}

/// Like [`connect_to`], with listings of at most `page_size` keys a page,
/// so tests reach the second page with a few objects.
#[doc(hidden)]
pub fn connect_paged(
    endpoint: &str,
    page_size: u32,
    tuning: &Tuning,
) -> Result<Arc<object::Store>, StoreError> {
    build(
        emulator_endpoint(endpoint),
        Auth::none(),
        Some(page_size),
        tuning,
    )
}

/// [`connect`], reading the environment through `var`.
fn connect_with(
    var: &dyn Fn(&str) -> Option<String>,
    tuning: &Tuning,
) -> Result<Arc<object::Store>, StoreError> {
    let emulator = var("STORAGE_EMULATOR_HOST").filter(|v| !v.trim().is_empty());
    let auth = Auth::from_env(var, emulator.is_some())?;
    let endpoint = match emulator {
        Some(host) => emulator_endpoint(&host),
        None => ENDPOINT.to_string(),
    };
    build(endpoint, auth, None, tuning)
}

/// `STORAGE_EMULATOR_HOST` as Google's libraries take it: a URL, or a
/// bare `HOST:PORT` spoken to over plain HTTP.
fn emulator_endpoint(host: &str) -> String {
    let host = host.trim().trim_end_matches('/');
    if host.starts_with("http://") || host.starts_with("https://") {
        host.to_string()
    } else {
        format!("http://{host}")
    }
}

fn build(
    endpoint: String,
    auth: Auth,
    page_size: Option<u32>,
    tuning: &Tuning,
) -> Result<Arc<object::Store>, StoreError> {
    let rt = object::store::runtime("haul-gs")?;
    let http = rt.block_on(async { Http::new() })?;
    let gcs = Gcs::new(http, endpoint, auth, page_size);
    Ok(object::Store::new(rt, Arc::new(gcs), tuning))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        let u = parse("gs://my-bucket/a/b.bin").unwrap();
        assert_eq!(
            (u.bucket.as_str(), u.key.as_str()),
            ("my-bucket", "a/b.bin")
        );
        assert_eq!(u.to_string(), "gs://my-bucket/a/b.bin");
        assert!(parse("gs://my.bucket.example.com/").unwrap().is_prefix());
        assert!(parse("gs://a_b").is_ok());
        let long_dotted = format!("{}.{}.{}", "a".repeat(63), "b".repeat(63), "c".repeat(63));
        assert!(parse(&format!("gs://{long_dotted}/k")).is_ok());
        for bad in [
            "gs://",
            "gs://ab",
            "gs://Upper",
            "gs://-abc",
            "gs://abc-",
            "gs://a..b",
            "gs://has space",
            "s3://bucket/k",
            "gs://bucket//k",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse(&format!("gs://{}", "a".repeat(64))).is_err());
        assert!(parse(&format!("gs://b12/{}", "k".repeat(1025))).is_err());
    }

    #[test]
    fn emulator_hosts() {
        assert_eq!(emulator_endpoint("127.0.0.1:4443"), "http://127.0.0.1:4443");
        assert_eq!(emulator_endpoint("http://h:1/"), "http://h:1");
        assert_eq!(emulator_endpoint("https://h:1"), "https://h:1");
    }

    #[test]
    fn emulator_without_credentials_connects() {
        let env = |k: &str| (k == "STORAGE_EMULATOR_HOST").then(|| "127.0.0.1:9".to_string());
        let s = connect_with(&env, &Tuning::default()).unwrap();
        assert_eq!(s.endpoint, "http://127.0.0.1:9");
        assert_eq!(s.limits().max_object, 5 << 40);
    }

    #[test]
    fn no_credentials_say_what_to_set() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path().to_str().unwrap().to_string();
        let env = move |k: &str| (k == "HOME").then(|| home.clone());
        let s = connect_with(&env, &Tuning::default()).unwrap();
        assert_eq!(s.endpoint, ENDPOINT);
        let u = parse("gs://bucket/k").unwrap();
        let e = s.block_on(s.api.head(&u)).unwrap_err();
        assert_eq!(e.kind, store::StoreErrorKind::StoreAuth);
        assert!(
            e.message.contains("GOOGLE_APPLICATION_CREDENTIALS"),
            "{}",
            e.message
        );
        assert!(e.message.contains("gs://bucket/k"), "{}", e.message);
    }
}
