//! The bytes haul puts on the network, and nothing else.
//!
//! Everything here is pure encoding and decoding, specified in
//! `docs/PROTOCOL.md` (requirement numbers `P-n` are cited in comments).
//! Decoders never panic on any input: they return [`DecodeError`], which
//! ends the session (with an `Error` message to the peer where the control
//! connection still works).

mod asked;
mod block;
mod buf;
pub mod bundle;
pub mod datagram;
mod error_code;
pub mod hex;
mod msg;
pub mod packed;
mod packed_limit;
mod preamble;
pub mod program;
pub mod stdio;
pub mod tunnel;

pub use block::{check_coding, BlockHeader, BLOCK_HEADER_LEN};
pub use block::{CODEC_BUNDLE, CODEC_DELTA, CODEC_LZ4, CODEC_NONE, CODEC_ZSTD};
pub use buf::{DecodeError, Reader, Writer};
pub use error_code::{ErrorCode, TransferError};
pub use msg::{ChunkId, Entry, EntryKind, Msg, Op, Request, Summary, SyncOptions};
pub use msg::{NoteKind, MAX_NOTES};
pub use msg::{Piece, ShardSpec, MAX_PIECES, MAX_SHARDS};
pub use msg::{Selection, MAX_FILTER_BYTES, MAX_FILTER_RULES, MAX_FILTER_RULE_LEN};
pub use msg::{CACHE_FILE, DELETED_PER_MESSAGE, HAVE_PER_MESSAGE, MAX_PATH_LEN, MAX_PROBE_BYTES};
pub use msg::{CHANGE_NEW, CHANGE_SIZE, CHANGE_SUM, CHANGE_TIME};
pub use msg::{COMPRESS_AUTO, COMPRESS_LZ4, COMPRESS_NONE, COMPRESS_ZSTD};
pub use msg::{MAX_GRANT_LIFETIME, MAX_JOB_ANSWER, MAX_JOB_CALL};
pub use msg::{PROTECT_AES256GCM, PROTECT_CHACHA20POLY1305, PROTECT_INTEGRITY_ONLY};
pub use msg::{SHARE_BACKGROUND, SHARE_FAIR, SHARE_OFF};
pub use msg::{TRANSPORT_TCP, TRANSPORT_UDP};
pub use preamble::{
    ConnKind, HandshakeAnswer, HandshakeWishes, PinnedOpening, Preamble, PreambleReply, MAGIC,
    MAX_EARLY_REQUEST, MAX_WARMUP, PREAMBLE_LEN, PROTOCOL_VERSION, WARMUP_ASK,
};

/// Largest sealed frame body a peer may announce (P-4): a block of at most
/// [`MAX_BLOCK_SIZE`] plus room for its header. The length never includes
/// the tag. Larger announcements are refused before memory is allocated.
pub const MAX_FRAME_LEN: u32 = MAX_BLOCK_SIZE + 4096;

/// Largest block size the protocol allows (P-9).
pub const MAX_BLOCK_SIZE: u32 = 16 << 20;

/// Smallest block size the protocol allows (P-9).
pub const MIN_BLOCK_SIZE: u32 = 64 << 10;

/// Length of the authentication tag that follows every sealed frame body.
pub const TAG_LEN: usize = 16;
