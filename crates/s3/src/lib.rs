//! Object stores, and nothing about networks: `s3://` locations read and
//! written behind `store`'s [`store::BlockSource`] and [`store::BlockSink`],
//! so the transfer engine moves blocks between a bucket and the wire as
//! it does for files.
//!
//! - [`url`]: `s3://BUCKET/KEY` and `s3://BUCKET/PREFIX/`.
//! - [`client`]: the S3 client, configured by the AWS conventions, and
//!   the runtime its requests run on.
//! - [`error`](mod@error): what the store said, classified for exit codes.
//! - [`limits`]: S3's limits on parts and objects.
//! - [`list`]: an `s3://` source as a manifest.
//! - [`read`]: one object read at offsets, ranged GETs ahead of the reader.
//! - [`source`]: objects as the sender's block source.
//! - [`upload`]: one object written by a multipart upload, parts in parallel.
//! - [`resume`]: the journal an interrupted upload leaves to resume from.
//! - [`sink`]: a bucket as the receiver's block sink.

pub mod client;
pub mod error;
pub mod limits;
pub mod list;
pub mod read;
pub mod resume;
pub mod sink;
pub mod source;
pub mod upload;
pub mod url;

pub use client::{S3Options, Store};
pub use list::{list, Listed};
pub use sink::S3Sink;
pub use source::S3Source;
pub use url::{is_s3, S3Url};
