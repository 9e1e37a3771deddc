//! Object stores, and nothing about networks: locations of any object
//! store read and written behind `store`'s [`store::BlockSource`] and
//! [`store::BlockSink`], so the transfer engine moves blocks between a
//! bucket and the wire as it does for files. A store implements the small
//! core in [`api`]; everything else is here, once.
//!
//! - [`api`]: [`Objects`], the calls a store implements.
//! - [`url`]: `SCHEME://BUCKET/KEY` and `SCHEME://BUCKET/PREFIX/`.
//! - [`store`](mod@store): a store's calls and the runtime they run on.
//! - [`list`]: a source as a manifest.
//! - [`read`]: one object read at offsets, ranged GETs ahead of the reader.
//! - [`source`]: objects as the sender's block source.
//! - [`upload`]: one object written in parts, in parallel.
//! - [`resume`]: the journal an interrupted upload leaves to resume from.
//! - [`sink`]: a bucket as the receiver's block sink.
//! - [`copy`](mod@copy): copies inside one store, no byte leaving it.
//! - [`http`]: what the stores spoken to over plain HTTP share.

pub mod api;
pub mod copy;
pub mod http;
pub mod list;
pub mod read;
pub mod resume;
pub mod sink;
pub mod source;
pub mod store;
pub mod upload;
pub mod url;

pub use api::{Fut, Limits, ObjectInfo, Objects, Page, Part, S3_LIMITS};
pub use copy::{copy_listed, Copied};
pub use list::{list, Listed};
pub use sink::ObjectSink;
pub use source::ObjectSource;
pub use store::{Store, Tuning};
pub use url::ObjectUrl;

/// The error a read of an object that changed since it was listed ends
/// with: the same words as a changed file's (P-14).
pub fn changed(url: &ObjectUrl) -> ::store::StoreError {
    ::store::StoreError::new(
        ::store::StoreErrorKind::Other,
        format!("{url} {}", ::store::source::CHANGED),
    )
}
