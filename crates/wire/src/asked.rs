//! What a request asks beyond its operation and paths: sync options
//! (P-31, P-32, P-44), the selection of what is sent (P-44), and the
//! shard a push is (P-42); each with its decoder's bounds.

use crate::buf::{DecodeError, Reader, MAX_PATH_LEN};

/// Most filter rules one request carries (P-44).
pub const MAX_FILTER_RULES: usize = 4096;
/// Longest filter rule, in bytes.
pub const MAX_FILTER_RULE_LEN: usize = 4096;
/// All of a request's rules together, in bytes: what a server compiles
/// for one session stays small, whatever the count.
pub const MAX_FILTER_BYTES: usize = 256 << 10;

/// What a transfer selects (P-44): rsync's filter rules, each `- PATTERN`
/// or `+ PATTERN`, first match deciding; files outside a size range or
/// older than a time are left out too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub rules: Vec<String>,
    pub min_size: u64,
    /// `u64::MAX`: no upper bound.
    pub max_size: u64,
    /// Seconds since the epoch; files modified earlier are left out.
    /// `i64::MIN`: no bound.
    pub not_before: i64,
}

impl Default for Selection {
    fn default() -> Selection {
        Selection {
            rules: Vec::new(),
            min_size: 0,
            max_size: u64::MAX,
            not_before: i64::MIN,
        }
    }
}

impl Selection {
    /// Whether it leaves nothing out.
    pub fn is_all(&self) -> bool {
        *self == Selection::default()
    }
}

/// Most shards one transfer may be split into (P-42).
pub const MAX_SHARDS: u32 = 100_000;

/// Most pieces of files one shard moves: a shard moves one contiguous run
/// of the manifest, so only its first and last files may be pieces (P-42).
pub const MAX_PIECES: usize = 2;

/// A push that is one shard of a transfer split across hosts (P-42): the
/// receiver places its pieces into files that other shards fill too, and
/// keeps a ledger beside the destination so that a file split across
/// shards is placed only once every piece of it is there and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSpec {
    /// Names the transfer the shards belong to (the sources and the
    /// destination as named, and the count), whatever the sources hold.
    pub transfer: [u8; 16],
    /// The plan this shard computed (P-42): every shard of one transfer
    /// must have computed the same.
    pub plan: [u8; 32],
    pub index: u32,
    pub count: u32,
    /// The entries of this shard that are pieces of a larger file.
    pub pieces: Vec<Piece>,
    /// Only ask where the shards stand (`--shard-status`): the manifest
    /// is empty and nothing is recorded.
    pub status: bool,
}

/// The manifest entry at `path` is the piece of the file of `whole` bytes
/// that starts at `offset` (P-42): its blocks belong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub path: Vec<u8>,
    pub offset: u64,
    pub whole: u64,
}

/// Deduplication and sync options of a request (P-31, P-32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncOptions {
    /// Match files against what the receiver holds (P-31).
    pub dedup: bool,
    /// Pull: the client, as receiver, answers every file with `Ready` or
    /// `Skip` before the server sends its blocks.
    pub gated: bool,
    /// Skip files whose size and modification time match (P-32).
    pub update: bool,
    /// With `update`: compare content digests instead of times.
    pub checksum: bool,
    /// Remove files under the destination that the source does not have.
    pub delete: bool,
    /// Change nothing: report what would be sent and removed.
    pub dry_run: bool,
    /// With `delete`: also remove partials and journals that interrupted
    /// transfers left and that no transfer holds now (P-41).
    pub delete_partials: bool,
    /// Skip every file that exists at the destination, whatever it holds
    /// (`--ignore-existing`, P-44).
    pub ignore_existing: bool,
}

const SYNC_DEDUP: u8 = 1;
const SYNC_GATED: u8 = 2;
const SYNC_UPDATE: u8 = 4;
const SYNC_CHECKSUM: u8 = 8;
const SYNC_DELETE: u8 = 16;
const SYNC_DRY_RUN: u8 = 32;
const SYNC_DELETE_PARTIALS: u8 = 64;
const SYNC_IGNORE_EXISTING: u8 = 128;

impl SyncOptions {
    /// Bits that only compare or skip, and never remove what is at the
    /// destination: a one-time grant allows them whatever it names
    /// (P-45 G-4).
    pub const HARMLESS: u8 =
        SYNC_DEDUP | SYNC_GATED | SYNC_UPDATE | SYNC_CHECKSUM | SYNC_DRY_RUN | SYNC_IGNORE_EXISTING;

    pub fn bits(&self) -> u8 {
        [
            (self.dedup, SYNC_DEDUP),
            (self.gated, SYNC_GATED),
            (self.update, SYNC_UPDATE),
            (self.checksum, SYNC_CHECKSUM),
            (self.delete, SYNC_DELETE),
            (self.dry_run, SYNC_DRY_RUN),
            (self.delete_partials, SYNC_DELETE_PARTIALS),
            (self.ignore_existing, SYNC_IGNORE_EXISTING),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |acc, (_, bit)| acc | bit)
    }

    pub fn from_bits(b: u8) -> Result<SyncOptions, DecodeError> {
        Ok(SyncOptions {
            ignore_existing: b & SYNC_IGNORE_EXISTING != 0,
            dedup: b & SYNC_DEDUP != 0,
            gated: b & SYNC_GATED != 0,
            update: b & SYNC_UPDATE != 0,
            checksum: b & SYNC_CHECKSUM != 0,
            delete: b & SYNC_DELETE != 0,
            dry_run: b & SYNC_DRY_RUN != 0,
            delete_partials: b & SYNC_DELETE_PARTIALS != 0,
        })
    }
}

pub(crate) fn decode_selection(r: &mut Reader) -> Result<Selection, DecodeError> {
    let n = r.u32()? as usize;
    if n > MAX_FILTER_RULES {
        return Err(DecodeError::Invalid("filter rule count"));
    }
    let mut rules = Vec::with_capacity(n);
    let mut total = 0;
    for _ in 0..n {
        let rule = r.string("filter rule", MAX_FILTER_RULE_LEN)?;
        total += rule.len();
        if total > MAX_FILTER_BYTES {
            return Err(DecodeError::Invalid("filter rule bytes"));
        }
        rules.push(rule);
    }
    Ok(Selection {
        rules,
        min_size: r.u64()?,
        max_size: r.u64()?,
        not_before: r.i64()?,
    })
}

pub(crate) fn decode_shard(r: &mut Reader, status: bool) -> Result<ShardSpec, DecodeError> {
    let transfer = r.array()?;
    let plan = r.array()?;
    let index = r.u32()?;
    let count = r.u32()?;
    if count == 0 || count > MAX_SHARDS || index >= count {
        return Err(DecodeError::Invalid("shard index or count"));
    }
    let n = r.u8()? as usize;
    if n > MAX_PIECES {
        return Err(DecodeError::Invalid("piece count"));
    }
    let mut pieces = Vec::with_capacity(n);
    for _ in 0..n {
        let path = r.var_bytes("piece path", MAX_PATH_LEN)?.to_vec();
        let offset = r.u64()?;
        let whole = r.u64()?;
        if offset >= whole || whole > i64::MAX as u64 {
            return Err(DecodeError::Invalid("piece offset"));
        }
        pieces.push(Piece {
            path,
            offset,
            whole,
        });
    }
    Ok(ShardSpec {
        transfer,
        plan,
        index,
        count,
        pieces,
        status,
    })
}
