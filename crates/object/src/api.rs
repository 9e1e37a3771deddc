//! The small core an object store implements: list, read a range, write
//! an object in parts, delete. Everything else haul does with objects
//! (manifests, readers ahead of the sender, uploads filled by blocks in any
//! order, resume journals, the scp rule over keys, `--delete`) is built on
//! these calls, once, in this crate. Each store (`s3`, `gs`, `az`) is a
//! crate of its own with one `impl Objects`.
//!
//! Calls are async and return boxed futures, so that one store is a trait
//! object the rest of haul holds without knowing which it is.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use store::StoreError;

use crate::url::ObjectUrl;

/// What a store's call returns.
pub type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// What a listing or a HEAD found about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub url: ObjectUrl,
    pub size: u64,
    /// What binds a read to this version of the object: an ETag, or a
    /// generation. Reads of another version fail as a changed source.
    pub version: Option<String>,
    /// Modification time: haul's metadata where a haul wrote the object,
    /// the store's last-modified time otherwise.
    pub mtime: (i64, u32),
}

/// One page of a listing.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// Objects: key, size, last-modified time.
    pub objects: Vec<(String, u64, (i64, u32))>,
    /// With a delimiter: the prefixes directly below, each ending in '/'.
    pub prefixes: Vec<String>,
    /// Where the next page starts; none after the last.
    pub next: Option<String>,
}

/// A part the store holds of an upload: its number (from 1), the tag the
/// store gave it, and its CRC32C where the store keeps one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub number: u32,
    pub tag: String,
    pub crc: Option<String>,
}

/// A store's limits on objects and uploads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Parts in one upload, at most.
    pub max_parts: u64,
    /// A part's size, but for the last.
    pub min_part: u64,
    pub max_part: u64,
    /// An object's size.
    pub max_object: u64,
    /// A key's length in bytes.
    pub max_key: usize,
}

/// S3's limits, which most stores share or exceed.
pub const S3_LIMITS: Limits = Limits {
    max_parts: 10_000,
    min_part: 5 << 20,
    max_part: 5 << 30,
    max_object: 5 << 40,
    max_key: 1024,
};

/// One object store, as haul uses it. Metadata is `(name, value)` pairs
/// kept with an object; names are the store's own (see
/// [`Objects::mtime_key`]).
pub trait Objects: Send + Sync + 'static {
    /// Where the store is, for messages: "AWS S3", `http://127.0.0.1:9000`.
    fn endpoint(&self) -> &str;

    /// The store's limits.
    fn limits(&self) -> Limits {
        S3_LIMITS
    }

    /// The metadata name that keeps a file's modification time.
    fn mtime_key(&self) -> &'static str {
        "haul-mtime"
    }

    /// One page of the keys under `url`'s key taken as a prefix, from
    /// `token`; with `delimiter`, only what lies directly below it.
    fn list<'a>(
        &'a self,
        url: &'a ObjectUrl,
        delimiter: bool,
        token: Option<String>,
    ) -> Fut<'a, Page>;

    /// Whether anything lies under `url`'s key taken as a prefix: asked
    /// before a transfer, so it should fail fast (few retries) and say
    /// what is wrong (credentials, bucket) as a listing does.
    fn check<'a>(&'a self, url: &'a ObjectUrl) -> Fut<'a, bool> {
        Box::pin(async move {
            let p = self.list(url, false, None).await?;
            Ok(!p.objects.is_empty())
        })
    }

    /// One object's size, version, and modification time; `None` when
    /// there is no such key.
    fn head<'a>(&'a self, url: &'a ObjectUrl) -> Fut<'a, Option<ObjectInfo>>;

    /// `len` bytes of the object from `start`, of the version `info`
    /// names: another version fails with [`crate::changed`].
    fn get_range<'a>(&'a self, info: &'a ObjectInfo, start: u64, len: u64) -> Fut<'a, Bytes>;

    /// Writes a whole object at once, with its metadata.
    fn put<'a>(
        &'a self,
        url: &'a ObjectUrl,
        body: Bytes,
        metadata: &'a [(String, String)],
    ) -> Fut<'a, ()>;

    /// Starts an upload in parts; its id. Nothing is visible under the key
    /// until [`Objects::complete`].
    fn begin<'a>(&'a self, url: &'a ObjectUrl, metadata: &'a [(String, String)])
        -> Fut<'a, String>;

    /// Part `number` (from 1) of upload `id`; parts arrive in any order.
    fn put_part<'a>(
        &'a self,
        url: &'a ObjectUrl,
        id: &'a str,
        number: u32,
        body: Bytes,
    ) -> Fut<'a, Part>;

    /// The parts the store holds of upload `id`: number to (tag, length);
    /// `None` when the upload is gone (completed or aborted).
    fn list_parts<'a>(
        &'a self,
        url: &'a ObjectUrl,
        id: &'a str,
    ) -> Fut<'a, Option<HashMap<u32, (String, u64)>>>;

    /// Makes the object of `parts` (in order, every one) appear under the
    /// key, with its metadata.
    fn complete<'a>(
        &'a self,
        url: &'a ObjectUrl,
        id: &'a str,
        parts: Vec<Part>,
        metadata: &'a [(String, String)],
    ) -> Fut<'a, ()>;

    /// Ends upload `id`; the store drops its parts.
    fn abort<'a>(&'a self, url: &'a ObjectUrl, id: &'a str) -> Fut<'a, ()>;

    /// Removes one object; a missing one is not an error.
    fn delete<'a>(&'a self, url: &'a ObjectUrl) -> Fut<'a, ()>;

    /// Copies the version `from` names to `to` inside the store (a
    /// server-side copy), its metadata with it; another version fails
    /// with [`crate::changed`]. `false`: this store does not copy this
    /// object so (none offered, or too large for one call), and the
    /// bytes must travel.
    fn copy<'a>(&'a self, from: &'a ObjectInfo, to: &'a ObjectUrl) -> Fut<'a, bool> {
        let _ = (from, to);
        Box::pin(async { Ok(false) })
    }
}
