//! Deduplication against what the receiver already holds (issue 6).
//!
//! - [`cdc`]: content-defined chunks (FastCDC, 2020 variant) with their
//!   BLAKE3 hashes. Boundaries depend on content only, so an insertion or
//!   an append changes the chunks around it and no others.
//! - [`delta`]: an index of a basis's chunks, the plan that rebuilds a
//!   source from copies of basis chunks and new bytes, and applying it.
//!
//! Pure computation on bytes; not wired into transfers yet.

pub mod cdc;
pub mod delta;

pub use cdc::{chunks, ChunkRef, AVG_CHUNK, MAX_CHUNK, MIN_CHUNK};
pub use delta::{apply, Index, Op, Plan};
