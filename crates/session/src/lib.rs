//! The transfer protocol, without I/O.
//!
//! A transfer has a sending side and a receiving side, whichever peer is
//! client or server. Both are state machines driven by the caller:
//!
//! - [`SenderSession`] hands out blocks to send through a work-stealing
//!   [`schedule::Scheduler`], takes acks and nacks, and produces the
//!   control messages (manifest entries, file digests) to send.
//! - [`ReceiverSession`] takes manifest entries, checks every arriving block
//!   against its hash, says where to write it, and says when a file is
//!   complete and verified so it can be renamed into place.
//!
//! Time is an argument where it matters (`now`), so the simulator in the
//! tests runs the same code as the real driver.

pub mod datagram;
pub mod digest;
mod manifest;
pub mod paths;
pub mod receiver;
pub mod schedule;
pub mod sender;

pub use digest::{block_hash, zero_hash, FileDigest};
pub use paths::Asked;
pub use receiver::{
    Action, BlockVerdict, Pool, ReceiverError, ReceiverSession, Wanted, DEFAULT_BUDGET,
};
pub use schedule::{BlockRef, Next, Scheduler};
pub use sender::{SenderError, SenderSession, SourceEntry};

/// Default block size: large enough that per-block costs vanish, small enough
/// that many streams share one file, a re-sent block is cheap, and a block
/// stays in cache between decryption and hashing (P-9).
pub const DEFAULT_BLOCK_SIZE: u32 = 1 << 20;

/// Number of blocks a file of `size` bytes has.
pub fn block_count(size: u64, block_size: u32) -> u64 {
    size.div_ceil(block_size as u64)
}

/// Length of block `index` of a file of `size` bytes.
pub fn block_len(size: u64, block_size: u32, index: u64) -> u32 {
    let start = index * block_size as u64;
    (size.saturating_sub(start)).min(block_size as u64) as u32
}

impl From<SenderError> for wire::TransferError {
    fn from(e: SenderError) -> Self {
        wire::TransferError::new(e.code(), e.to_string())
    }
}

impl From<ReceiverError> for wire::TransferError {
    fn from(e: ReceiverError) -> Self {
        wire::TransferError::new(e.code(), e.to_string())
    }
}
