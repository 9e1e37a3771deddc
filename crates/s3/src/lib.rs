//! Amazon S3 and S3-compatible stores for `s3://` locations: the AWS
//! SDK's client behind `object`'s [`object::Objects`], so that everything
//! else haul does with objects (manifests, ranged reads, uploads in parts,
//! resume, `--delete`) is `object`'s, shared with every store.
//!
//! - [`url`]: `s3://BUCKET/KEY` and `s3://BUCKET/PREFIX/`.
//! - [`client`]: the S3 client, configured by the AWS conventions.
//! - [`calls`]: each of `object`'s calls as S3 requests.
//! - [`error`](mod@error): what the store said, classified for exit codes.

pub mod calls;
pub mod client;
pub mod error;
pub mod url;

pub use client::{connect, S3Options, WriteOptions};
pub use url::{is_s3, parse, SCHEME};
