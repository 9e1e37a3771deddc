//! S3's limits on objects and multipart uploads, and the part size haul
//! starts from.

/// Parts in one multipart upload, at most.
pub const MAX_PARTS: u64 = 10_000;
/// A part's size, but for the last: at least 5 MiB, at most 5 GiB.
pub const MIN_PART: u64 = 5 << 20;
pub const MAX_PART: u64 = 5 << 30;
/// An object's size, at most.
pub const MAX_OBJECT: u64 = 5 << 40;
/// The smallest part haul uses unless told: fewer requests, and parts big
/// enough to keep a store's connection busy.
pub const PART: u64 = 8 << 20;
