//! Deduplication against what the receiver already holds (issue 6).
//!
//! - [`cdc`]: content-defined chunks (FastCDC, 2020 variant) with their
//!   BLAKE3 hashes. Boundaries depend on content only, so an insertion or
//!   an append changes the chunks around it and no others.
//! - [`delta`]: what the receiver holds as the sender knows it, and the
//!   plan that rebuilds a source from copies of those chunks and new
//!   bytes, cut into per-block parts.
//!
//! Pure computation on bytes; the drivers read files and move messages.

pub mod cdc;
pub mod delta;

pub use cdc::{chunks, chunks_of, ChunkRef, AVG_CHUNK, MAX_CHUNK, MIN_CHUNK};
pub use delta::{short, From, Known, Part, Plan, Span};
