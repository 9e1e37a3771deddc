//! The one registry of object stores. A location written `SCHEME://...`
//! is parsed and reached by the backend its scheme picks here, and by
//! nothing else: `cp`, `sync`, `serve --root`, routes over ssh and shards
//! ask [`is_object`], [`parse`] and [`connect`], never a scheme of their
//! own. Adding a store is its crate (one `impl object::Objects`, a
//! `parse` and a `connect`) and one line of [`BACKENDS`].

use std::sync::Arc;

use object::{ObjectUrl, Store, Tuning};
use store::{StoreError, StoreErrorKind};

pub use s3::{S3Options, WriteOptions as S3WriteOptions};

/// What connecting to a store may take from the command line: the S3
/// profile and endpoint, and what every store shares. Other stores take
/// their credentials and endpoints from their own clouds' variables.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub s3: s3::S3Options,
    pub tuning: Tuning,
}

/// One store: its scheme, how its locations are parsed, and how it is
/// reached.
pub struct Backend {
    /// `"s3://"`.
    pub scheme: &'static str,
    /// What it is, for messages and help: "Amazon S3 or an S3-compatible store".
    pub what: &'static str,
    pub parse: fn(&str) -> Result<ObjectUrl, String>,
    pub connect: fn(&ObjectUrl, &Settings) -> Result<Arc<Store>, StoreError>,
}

/// Every store haul reaches, by scheme: one line each.
#[rustfmt::skip]
pub const BACKENDS: &[Backend] = &[
    Backend { scheme: s3::SCHEME, what: "Amazon S3 or an S3-compatible store", parse: s3::parse, connect: |_, s| s3::connect(&s.s3, &s.tuning) },
    Backend { scheme: gs::SCHEME, what: "Google Cloud Storage", parse: gs::parse, connect: |_, s| gs::connect(&s.tuning) },
    Backend { scheme: az::SCHEME, what: "Azure Blob Storage", parse: az::parse, connect: |u, s| az::connect(u, &s.tuning) },
];

/// The backend `s` is written for, if it names an object store.
pub fn backend_of(s: &str) -> Option<&'static Backend> {
    BACKENDS.iter().find(|b| s.starts_with(b.scheme))
}

/// Whether `s` names an object-store location rather than a path or a
/// host.
pub fn is_object(s: &str) -> bool {
    backend_of(s).is_some()
}

/// Parses an object-store location.
pub fn parse(s: &str) -> Result<ObjectUrl, String> {
    match backend_of(s) {
        Some(b) => (b.parse)(s),
        None => Err(format!(
            "{s:?} is not an object-store location: write {}",
            schemes()
        )),
    }
}

/// Connects to the store `url` is in. Nothing is asked of it yet.
pub fn connect(url: &ObjectUrl, settings: &Settings) -> Result<Arc<Store>, StoreError> {
    match backend_of(url.scheme) {
        Some(b) => (b.connect)(url, settings),
        None => Err(StoreError::new(
            StoreErrorKind::BadRequest,
            format!("no store is reached by {url}"),
        )),
    }
}

/// The schemes, for messages: "s3://BUCKET/KEY, gs://BUCKET/KEY or ...".
pub fn schemes() -> String {
    let all: Vec<String> = BACKENDS
        .iter()
        .map(|b| format!("{}...", b.scheme))
        .collect();
    all.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scheme_picks_its_backend_and_nothing_else_does() {
        for b in BACKENDS {
            let u = format!("{}acct1/cont1/k", b.scheme);
            assert!(is_object(&u), "{u}");
            assert_eq!(parse(&u).map(|p| p.scheme), Ok(b.scheme));
        }
        for not in ["/tmp/x", "host:/x", "host:s3://b/k", "./s3://x", "S3://b/k"] {
            assert!(!is_object(not), "{not}");
            assert!(parse(not).is_err());
        }
    }
}
