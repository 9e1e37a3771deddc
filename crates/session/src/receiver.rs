//! The receiving side of a transfer (P-15).
//!
//! It turns manifest entries into actions (make a directory, open a
//! temporary file, make a link), judges every arriving block against its
//! hash and the manifest, acknowledges blocks once stored, and releases a
//! file for renaming into place only when every block is stored and the
//! sender's whole-file digest matches the hashes it verified.
//!
//! Everything the peer announces is checked before this side holds
//! anything for it (P-40, S-1 … S-5): the manifest's shape (each path once,
//! nothing under a file or a link), on a pull the names asked for, and
//! the bookkeeping the manifest costs, which must stay within the
//! session's budget.

use std::collections::{HashMap, VecDeque};

use thiserror::Error;
use wire::{BlockHeader, EntryKind, ErrorCode, Msg, Summary};

use crate::digest::{zero_hash, FileDigest};
use crate::manifest::{self, Node, Tree};
use crate::paths::{self, Asked, NotAsked};
use crate::{block_count, block_len};

/// The most bookkeeping a peer's manifest may make one session hold by
/// default (S-1): 2 GiB. Per-block state is allocated when a file's entry
/// arrives (its state and its hash, [`BLOCK_COST`] bytes a block), so the
/// check comes first, and every entry of the manifest counts against the
/// same budget. Within it: 100 TB in 16 MiB blocks (6 million blocks,
/// 197 MB), 60 TiB in the default 1 MiB blocks, or about 4 million small
/// files with 50-byte paths (540 bytes each). A single entry of 2^32 − 1
/// blocks (the largest a block index allows) would need 141 GB.
pub const DEFAULT_BUDGET: u64 = 2 << 30;
/// Memory shared by several sessions (a daemon's `--memory`, S-1): each
/// session takes its bookkeeping from it as entries arrive, before
/// allocating, and gives it all back when it ends.
pub trait Pool: Send + Sync {
    /// Takes `bytes` if that many are left; says whether it did.
    fn take(&self, bytes: u64) -> bool;
    /// Gives back `bytes` taken before.
    fn give(&self, bytes: u64);
}

/// Bookkeeping per block: its state (1 byte) and its hash (32).
pub const BLOCK_COST: u64 = 33;
/// Bookkeeping per entry besides its path and the keys of the manifest's
/// shape ([`manifest::KEY_COST`] each): its id, and its place in the list
/// of paths (for `--delete`) with the path's allocation. Each entry also
/// pays for the action it queues for the driver, with its own copy of the
/// path. What is held is counted, never refunded: the budget bounds the
/// manifest, not the moment.
const ENTRY_COST: u64 = 8 + 24 + 16 + ACTION_COST;
/// An action waiting for the driver, with its path's allocation.
const ACTION_COST: u64 = std::mem::size_of::<Action>() as u64 + 16;
/// Besides its path: a directory's place in the list whose metadata is
/// set at the end.
const DIR_COST: u64 = 48;
/// Besides its path and blocks: the file's record in its map, with the
/// map's spare room (half again, on average, for a table that doubles).
const FILE_COST: u64 = (std::mem::size_of::<RecvFile>() as u64 + 8) * 3 / 2 + 16;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ReceiverError {
    #[error("peer broke the protocol: {0}")]
    Protocol(String),
    #[error("refused path from peer: {0}")]
    Path(#[from] paths::PathError),
    /// An entry that breaks the manifest's shape (S-3).
    #[error("refused manifest entry {path:?}: {reason}")]
    Manifest { path: String, reason: String },
    /// On a pull, an entry outside what the client asked for (S-5).
    #[error("the server sent {path:?}, which was not asked for ({reason})")]
    NotAsked { path: String, reason: String },
    /// The manifest would need more bookkeeping than the session's budget
    /// (S-1): `need` bytes with this entry, over `limit`.
    #[error("refused {path:?}: {what}; with the entries before it the manifest would need {need} bytes of bookkeeping on this side, over its limit of {limit} ({BLOCK_COST} bytes a block; a larger --block-size needs fewer blocks)")]
    TooLarge {
        path: String,
        what: String,
        need: u64,
        limit: u64,
    },
    /// The memory this side shares among its sessions (a daemon's
    /// `--memory`) is taken by the others: `need` more bytes of
    /// bookkeeping would not fit (S-1).
    #[error("refused {path:?}: this side's memory for manifests is held by its other transfers right now ({need} more bytes of bookkeeping would not fit); try again later, or with a larger --block-size")]
    Busy { path: String, need: u64 },
    #[error("file {path} failed verification: its digest does not match the blocks received")]
    Integrity { path: String },
    #[error("{message}")]
    Remote { code: ErrorCode, message: String },
}

impl ReceiverError {
    /// The code the peer is told, and the exit status it becomes.
    pub fn code(&self) -> ErrorCode {
        match self {
            ReceiverError::Protocol(_)
            | ReceiverError::Manifest { .. }
            | ReceiverError::NotAsked { .. } => ErrorCode::Protocol,
            ReceiverError::Path(_) => ErrorCode::OutsideRoot,
            ReceiverError::TooLarge { .. } => ErrorCode::BadRequest,
            ReceiverError::Busy { .. } => ErrorCode::Busy,
            ReceiverError::Integrity { .. } => ErrorCode::Integrity,
            ReceiverError::Remote { code, .. } => *code,
        }
    }
}

/// Whether a block's bytes are still wanted, for the UDP channel's block
/// assembly (S-7): only blocks the manifest has and this side lacks get a
/// buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// In the manifest and not stored yet.
    Yes,
    /// Stored, being written, or its file skipped: the bytes are a repeat.
    Already,
    /// Its file has not been announced, and the manifest is not complete.
    NotYet,
    /// Not in the complete manifest, or past its file's end: no honest
    /// sender sends it.
    Never,
}

/// What the driver must do on the receiver's behalf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    MakeDir {
        id: u32,
        path: Vec<u8>,
        mode: u32,
    },
    /// Create the temporary file blocks will be written into. In a gated
    /// session (P-31) the driver first decides whether the file is already
    /// in place ([`ReceiverSession::skip`]) and what basis it has
    /// ([`ReceiverSession::ready`]).
    OpenFile {
        id: u32,
        path: Vec<u8>,
        size: u64,
        mtime: i64,
        mtime_nsec: u32,
    },
    MakeSymlink {
        id: u32,
        path: Vec<u8>,
        target: Vec<u8>,
    },
    /// Every block stored and verified: sync, set mode and times, rename.
    Finalize {
        id: u32,
        mode: u32,
        mtime: i64,
        mtime_nsec: u32,
    },
    /// Everything placed: set directory modes and times (deepest first),
    /// then call `complete`.
    Finish {
        dirs: Vec<(Vec<u8>, i64, u32)>,
    },
}

/// Most chunk ids in one `Chunks` message: 20 bytes each, 160 KiB.
const CHUNKS_PER_MESSAGE: usize = 8192;

/// What to do with an arriving block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockVerdict {
    /// Write the data at the header's offset, then call `block_written`.
    Write,
    /// Already have it (an endgame copy): drop it.
    Duplicate,
    /// Hash mismatch: a nack is queued; drop the data.
    Rejected,
    /// The file's entry has not been opened yet: wait and ask again.
    NotReady,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Slot {
    Missing,
    Writing,
    Stored,
}

struct RecvFile {
    path: Vec<u8>,
    size: u64,
    mode: u32,
    mtime: (i64, u32),
    opened: bool,
    slots: Box<[Slot]>,
    hashes: Box<[[u8; 32]]>,
    stored: usize,
    digest: Option<Box<[u8; 32]>>,
    released: bool,
    placed: bool,
    skipped: bool,
    /// The sender's whole-file digest, sent ahead under `--checksum`.
    source_digest: Option<Box<[u8; 32]>>,
    /// Blocks a partial already holds, announced in `Have` (P-35).
    /// Boxed: most files hold none, and every file's record counts
    /// against the budget (S-1), 40 bytes smaller this way.
    #[allow(clippy::box_collection)]
    held: Option<Box<HashMap<u32, [u8; 32]>>>,
}

pub struct ReceiverSession {
    block_size: u32,
    files: HashMap<u32, RecvFile>,
    dirs: Vec<(Vec<u8>, i64, u32)>,
    seen_ids: std::collections::HashSet<u32>,
    manifest: Option<(u64, u64)>,
    files_placed: u64,
    bytes_placed: u64,
    actions: VecDeque<Action>,
    outbox: VecDeque<Msg>,
    acks: Vec<(u32, u32)>,
    finishing: bool,
    finished: bool,
    /// Every file is answered with `Ready` or `Skip` (P-31).
    gated: bool,
    /// The sender follows each non-empty file's entry with its `Digest`.
    expect_digests: bool,
    /// `--dry-run`: a file answered `Ready` is only listed, not sent.
    dry_run: bool,
    /// Every entry's path, in manifest order (for `--delete`).
    paths: Vec<Vec<u8>>,
    /// The manifest's shape so far (S-3).
    tree: Tree,
    /// On a pull: what the client asked for (S-5).
    asked: Option<Asked>,
    /// Bookkeeping the manifest may cost (S-1), and what it costs so far.
    budget: u64,
    charged: u64,
    /// The memory shared with other sessions, if any: `charged` is taken
    /// from it, and given back on drop.
    pool: Option<std::sync::Arc<dyn Pool>>,
    /// Files a dry run lists as to be sent, and their bytes.
    pub files_listed: u64,
    pub bytes_listed: u64,
    /// Files already in place that were not sent (P-32), and their bytes.
    pub files_skipped: u64,
    pub bytes_skipped: u64,
    /// Blocks whose bytes did not match their hash.
    pub bad_blocks: u64,
    /// Bytes of blocks verified and stored so far.
    pub bytes_stored: u64,
    /// Of those, bytes a partial already held, that the sender kept (P-35).
    pub bytes_kept: u64,
    /// What this receiver noted about files (P-41), also sent to the
    /// sender: at most [`wire::MAX_NOTES`], the last saying more were left
    /// out.
    pub notes: Vec<(wire::NoteKind, String)>,
    /// Announced total of file bytes, once the manifest is complete.
    pub bytes_expected: Option<u64>,
}

impl Drop for ReceiverSession {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.give(self.charged);
        }
    }
}

impl ReceiverSession {
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    pub fn new(block_size: u32) -> ReceiverSession {
        ReceiverSession {
            block_size,
            files: HashMap::new(),
            dirs: Vec::new(),
            seen_ids: Default::default(),
            manifest: None,
            files_placed: 0,
            bytes_placed: 0,
            actions: VecDeque::new(),
            outbox: VecDeque::new(),
            acks: Vec::new(),
            finishing: false,
            finished: false,
            gated: false,
            expect_digests: false,
            dry_run: false,
            paths: Vec::new(),
            tree: Tree::default(),
            asked: None,
            budget: DEFAULT_BUDGET,
            charged: 0,
            pool: None,
            files_listed: 0,
            bytes_listed: 0,
            files_skipped: 0,
            bytes_skipped: 0,
            bad_blocks: 0,
            bytes_stored: 0,
            bytes_kept: 0,
            notes: Vec::new(),
            bytes_expected: None,
        }
    }

    /// This side answers every file before its blocks are sent (P-31);
    /// the sender was told so in the request or the accept.
    pub fn gate(&mut self) {
        self.gated = true;
    }

    /// `--checksum` (P-32): each non-empty file's entry is followed by
    /// the sender's digest of it, and the file is opened only then.
    pub fn expect_digests(&mut self) {
        self.expect_digests = true;
    }

    /// `--dry-run` (P-32): nothing is sent; a file answered `Ready` is
    /// counted as listed, and the sender does the same.
    pub fn dry_run(&mut self) {
        self.dry_run = true;
    }

    /// The most bookkeeping the peer's manifest may make this side hold
    /// (S-1); [`DEFAULT_BUDGET`] unless set. Set it before the first entry.
    pub fn set_budget(&mut self, bytes: u64) {
        self.budget = bytes;
    }

    /// Takes this session's bookkeeping from `pool`, shared with other
    /// sessions, as well as within its own budget (S-1).
    pub fn set_pool(&mut self, pool: std::sync::Arc<dyn Pool>) {
        self.pool = Some(pool);
    }

    /// Bookkeeping the manifest costs so far, in bytes, as counted against
    /// the budget.
    pub fn bookkeeping(&self) -> u64 {
        self.charged
    }

    /// A pull (S-5): refuse every entry outside what the client asked for
    /// ([`Asked::new`] with the request's sources and `-r`).
    pub fn expect(&mut self, asked: Asked) {
        self.asked = Some(asked);
    }

    /// Whether block `index` of `file` is still wanted (S-7).
    pub fn wanted(&self, file: u32, index: u32) -> Wanted {
        let Some(f) = self.files.get(&file) else {
            return match self.manifest {
                Some(_) => Wanted::Never,
                None => Wanted::NotYet,
            };
        };
        match f.slots.get(index as usize) {
            None => Wanted::Never,
            Some(Slot::Missing) if !f.skipped => Wanted::Yes,
            Some(_) => Wanted::Already,
        }
    }

    /// Every entry's path so far, in manifest order.
    pub fn entry_paths(&self) -> &[Vec<u8>] {
        &self.paths
    }

    /// Notes something the user should know about a file (P-41), and
    /// tells the sender. Past [`wire::MAX_NOTES`], one last note says
    /// that more were left out.
    pub fn note(&mut self, kind: wire::NoteKind, text: String) {
        let text = match self.notes.len() {
            n if n + 1 < wire::MAX_NOTES => text,
            n if n + 1 == wire::MAX_NOTES => {
                "more notes like these were left out (see the receiver's log)".to_string()
            }
            _ => return,
        };
        self.outbox.push_back(Msg::Note {
            kind,
            text: text.clone(),
        });
        self.notes.push((kind, text));
    }

    /// Tells the sender what `--delete` removed (or would remove).
    pub fn deleted(&mut self, paths: Vec<Vec<u8>>) {
        for part in paths.chunks(wire::DELETED_PER_MESSAGE) {
            self.outbox.push_back(Msg::Deleted(part.to_vec()));
        }
    }

    pub fn is_gated(&self) -> bool {
        self.gated
    }

    /// Announces chunks of the receiver's cache, before any file's answer.
    pub fn announce_cache(&mut self, chunks: Vec<wire::ChunkId>) {
        for part in chunks.chunks(CHUNKS_PER_MESSAGE) {
            self.outbox.push_back(Msg::Chunks {
                file: wire::CACHE_FILE,
                chunks: part.to_vec(),
            });
        }
    }

    /// Answers `file`: the chunks of its basis, in order (none without
    /// one), then leave to send it.
    pub fn ready(&mut self, file: u32, basis: Vec<wire::ChunkId>) {
        for part in basis.chunks(CHUNKS_PER_MESSAGE) {
            self.outbox.push_back(Msg::Chunks {
                file,
                chunks: part.to_vec(),
            });
        }
        if let Some(Msg::Ready(list)) = self.outbox.back_mut() {
            list.push(file);
        } else {
            self.outbox.push_back(Msg::Ready(vec![file]));
        }
        if self.dry_run {
            if let Some(f) = self.files.get_mut(&file).filter(|f| !f.skipped) {
                f.skipped = true;
                self.files_listed += 1;
                self.bytes_listed += f.size;
                self.check_finished();
            }
        }
    }

    /// Before `file`'s answer, for the sender's `--itemize-changes`: how
    /// it differs from what was in place (`wire::CHANGE_*` bits, P-44).
    pub fn changed(&mut self, file: u32, bits: u8) {
        if let Some(Msg::Changes(list)) = self.outbox.back_mut() {
            list.push((file, bits));
        } else {
            self.outbox.push_back(Msg::Changes(vec![(file, bits)]));
        }
    }

    /// Before `file`'s answer: blocks its partial already holds, verified
    /// against its journal, with their hashes (P-35). The sender keeps
    /// those whose hash it shares, and says so with `Kept`.
    pub fn hold(&mut self, file: u32, held: Vec<(u32, [u8; 32])>) {
        let Some(f) = self.files.get_mut(&file) else {
            return;
        };
        let blocks = f.slots.len();
        let held: Vec<_> = held
            .into_iter()
            .filter(|(i, _)| (*i as usize) < blocks)
            .collect();
        f.held
            .get_or_insert_with(Default::default)
            .extend(held.iter().copied());
        for part in held.chunks(wire::HAVE_PER_MESSAGE) {
            self.outbox.push_back(Msg::Have {
                file,
                blocks: part.to_vec(),
            });
        }
    }

    /// The sender kept these blocks as the receiver holds them: each is
    /// stored, with the hash the receiver verified, and acknowledged.
    fn kept(&mut self, list: Vec<(u32, u32)>) -> Result<(), ReceiverError> {
        for (file, index) in list {
            let bs = self.block_size;
            let f = self.files.get_mut(&file);
            let held = |f: &RecvFile| f.held.as_ref()?.get(&index).copied();
            let Some((f, hash)) = f.and_then(|f| held(f).map(|h| (f, h))) else {
                return Err(ReceiverError::Protocol(format!(
                    "kept block {index} of file {file}, which this side does not hold"
                )));
            };
            match f.slots[index as usize] {
                Slot::Missing => {
                    f.slots[index as usize] = Slot::Stored;
                    f.hashes[index as usize] = hash;
                    f.stored += 1;
                    let len = block_len(f.size, bs, index as u64) as u64;
                    self.bytes_stored += len;
                    self.bytes_kept += len;
                    self.acks.push((file, index));
                }
                Slot::Stored => self.acks.push((file, index)),
                Slot::Writing => {}
            }
            self.check_file(file)?;
        }
        Ok(())
    }

    /// Answers `file`: it is already in place, send nothing (P-32). Only
    /// for a non-empty file whose blocks have not begun to arrive.
    pub fn skip(&mut self, file: u32) -> Result<(), ReceiverError> {
        let f = self
            .files
            .get_mut(&file)
            .filter(|f| f.size > 0 && !f.opened && f.stored == 0 && !f.skipped)
            .ok_or_else(|| ReceiverError::Protocol(format!("cannot skip file {file}")))?;
        f.skipped = true;
        self.files_skipped += 1;
        self.bytes_skipped += f.size;
        if let Some(Msg::Skip(list)) = self.outbox.back_mut() {
            list.push(file);
        } else {
            self.outbox.push_back(Msg::Skip(vec![file]));
        }
        self.check_finished();
        Ok(())
    }

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Next control message to send. Pending acks go out first, as one
    /// batch, so they always precede the `FileDone` and `Done` they imply.
    pub fn poll_control(&mut self) -> Option<Msg> {
        if !self.acks.is_empty() {
            return Some(Msg::Acks(std::mem::take(&mut self.acks)));
        }
        self.outbox.pop_front()
    }

    pub fn has_control(&self) -> bool {
        !self.outbox.is_empty() || !self.acks.is_empty()
    }

    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// A control message from the sender.
    pub fn handle(&mut self, msg: Msg) -> Result<(), ReceiverError> {
        match msg {
            Msg::Entry(e) => self.entry(e)?,
            Msg::ManifestEnd { files, bytes } => {
                if self.manifest.is_some() {
                    return Err(ReceiverError::Protocol("the manifest ended twice".into()));
                }
                let (have_files, have_bytes) = (
                    self.files.len() as u64,
                    self.files.values().map(|f| f.size).sum::<u64>(),
                );
                if (files, bytes) != (have_files, have_bytes) {
                    return Err(ReceiverError::Protocol(format!(
                        "manifest announced {files} files / {bytes} bytes but listed {have_files} / {have_bytes}"
                    )));
                }
                self.manifest = Some((files, bytes));
                self.bytes_expected = Some(bytes);
                self.check_finished();
            }
            Msg::Digest { file, digest } => {
                let f = self.files.get_mut(&file).ok_or_else(|| {
                    ReceiverError::Protocol(format!("checksum for unknown file {file}"))
                })?;
                if f.source_digest.is_some() || f.size == 0 || !self.expect_digests {
                    return Err(ReceiverError::Protocol(format!(
                        "unexpected checksum for file {file}"
                    )));
                }
                f.source_digest = Some(Box::new(digest));
                self.actions.push_back(Action::OpenFile {
                    id: file,
                    path: f.path.clone(),
                    size: f.size,
                    mtime: f.mtime.0,
                    mtime_nsec: f.mtime.1,
                });
            }
            Msg::FileEnd { file, digest } => {
                let f = self.files.get_mut(&file).ok_or_else(|| {
                    ReceiverError::Protocol(format!("digest for unknown file {file}"))
                })?;
                if f.slots.len() <= 1 || f.digest.is_some() {
                    return Err(ReceiverError::Protocol(format!(
                        "unexpected digest for file {file}"
                    )));
                }
                f.digest = Some(Box::new(digest));
                self.check_file(file)?;
            }
            Msg::Kept(list) => self.kept(list)?,
            Msg::Error { code, message } => return Err(ReceiverError::Remote { code, message }),
            other => {
                return Err(ReceiverError::Protocol(format!(
                    "unexpected {} message (not one this side takes in this session)",
                    other.name()
                )))
            }
        }
        Ok(())
    }

    /// A manifest entry: every check comes before anything is held for it.
    fn entry(&mut self, e: wire::Entry) -> Result<(), ReceiverError> {
        if self.manifest.is_some() {
            return Err(ReceiverError::Protocol(
                "entry after the end of the manifest".into(),
            ));
        }
        if self.seen_ids.contains(&e.id) {
            return Err(ReceiverError::Protocol(format!(
                "entry id {} repeated",
                e.id
            )));
        }
        let show = || String::from_utf8_lossy(&e.path).into_owned();
        let parts = paths::components(&e.path)?;
        let node = match e.kind {
            EntryKind::Dir { .. } => Node::Dir,
            EntryKind::File { .. } => Node::File,
            EntryKind::Symlink => Node::Symlink,
        };
        if let Some(asked) = &self.asked {
            asked.check(&parts, node == Node::Dir).map_err(|why| {
                let reason = match why {
                    NotAsked::Name => format!("asked for {}", asked.describe()),
                    NotAsked::NotRecursive => {
                        "a directory, or inside one, and the pull is not recursive (-r)".into()
                    }
                };
                ReceiverError::NotAsked {
                    path: show(),
                    reason,
                }
            })?;
        }
        let plan = self
            .tree
            .check(&e.path, node)
            .map_err(|t| ReceiverError::Manifest {
                path: show(),
                reason: t.describe(),
            })?;
        if node == Node::Symlink && e.target.is_empty() {
            return Err(ReceiverError::Protocol("symlink with empty target".into()));
        }
        // What this entry costs, in saturating arithmetic: a size near
        // 2^64 must not wrap into a small figure.
        let path_len = e.path.len() as u64;
        // The list of paths and the action each hold a copy of the path.
        let mut cost = ENTRY_COST + 2 * path_len + plan.new_keys(&self.tree) * manifest::KEY_COST;
        let mut what = String::new();
        match e.kind {
            EntryKind::Dir { .. } => cost += DIR_COST + path_len,
            EntryKind::Symlink => cost += e.target.len() as u64,
            EntryKind::File { size, .. } => {
                let n = block_count(size, self.block_size);
                cost = cost
                    .saturating_add(FILE_COST + path_len)
                    .saturating_add(n.saturating_mul(BLOCK_COST));
                what = format!(
                    "a file of {size} bytes is {n} blocks of {} bytes",
                    self.block_size
                );
            }
        }
        let need = self.charged.saturating_add(cost);
        if need > self.budget {
            if what.is_empty() {
                what = format!("entry {} of the manifest", self.paths.len() + 1);
            }
            return Err(ReceiverError::TooLarge {
                path: show(),
                what,
                need,
                limit: self.budget,
            });
        }
        if let EntryKind::File { size, .. } = e.kind {
            if block_count(size, self.block_size) > u32::MAX as u64 {
                return Err(ReceiverError::Protocol(format!(
                    "file of {size} bytes has too many blocks"
                )));
            }
        }
        if let Some(pool) = &self.pool {
            if !pool.take(cost) {
                return Err(ReceiverError::Busy {
                    path: show(),
                    need: cost,
                });
            }
        }
        // Accepted: from here on nothing fails.
        self.charged = need;
        self.tree.commit(plan);
        self.seen_ids.insert(e.id);
        self.paths.push(e.path.clone());
        match e.kind {
            EntryKind::Dir {
                mode,
                mtime,
                mtime_nsec,
            } => {
                self.dirs.push((e.path.clone(), mtime, mtime_nsec));
                self.actions.push_back(Action::MakeDir {
                    id: e.id,
                    path: e.path,
                    mode,
                });
            }
            EntryKind::Symlink => {
                self.actions.push_back(Action::MakeSymlink {
                    id: e.id,
                    path: e.path,
                    target: e.target,
                });
            }
            EntryKind::File {
                size,
                mode,
                mtime,
                mtime_nsec,
            } => {
                let n = block_count(size, self.block_size) as usize;
                // Under --checksum the file is judged once its digest (the
                // next message) is here.
                if !self.expect_digests || size == 0 {
                    self.actions.push_back(Action::OpenFile {
                        id: e.id,
                        path: e.path.clone(),
                        size,
                        mtime,
                        mtime_nsec,
                    });
                }
                self.files.insert(
                    e.id,
                    RecvFile {
                        path: e.path,
                        size,
                        mode,
                        mtime: (mtime, mtime_nsec),
                        opened: false,
                        slots: vec![Slot::Missing; n].into_boxed_slice(),
                        hashes: vec![[0; 32]; n].into_boxed_slice(),
                        stored: 0,
                        digest: None,
                        released: false,
                        placed: false,
                        skipped: false,
                        source_digest: None,
                        held: None,
                    },
                );
            }
        }
        Ok(())
    }

    /// The driver created the temporary file for `id`.
    pub fn opened(&mut self, id: u32) -> Result<(), ReceiverError> {
        if let Some(f) = self.files.get_mut(&id) {
            f.opened = true;
        }
        self.check_file(id)
    }

    /// Judges a block whose bytes hash to `computed`.
    pub fn block_arrived(
        &mut self,
        h: &BlockHeader,
        computed: &[u8; 32],
    ) -> Result<BlockVerdict, ReceiverError> {
        let bs = self.block_size;
        let Some(f) = self.files.get_mut(&h.file) else {
            if self.manifest.is_some() {
                return Err(ReceiverError::Protocol(format!(
                    "block for unknown file {}",
                    h.file
                )));
            }
            return Ok(BlockVerdict::NotReady);
        };
        let idx = h.index as usize;
        if idx >= f.slots.len()
            || h.offset != h.index as u64 * bs as u64
            || h.len != block_len(f.size, bs, h.index as u64)
        {
            return Err(ReceiverError::Protocol(format!(
                "block {} of file {} is out of bounds",
                h.index, h.file
            )));
        }
        if !f.opened {
            return Ok(BlockVerdict::NotReady);
        }
        if f.slots[idx] != Slot::Missing {
            // Ack a stored block again so a sender that re-sent it (after a
            // nack raced an endgame copy) can retire it.
            if f.slots[idx] == Slot::Stored {
                self.acks.push((h.file, h.index));
            }
            return Ok(BlockVerdict::Duplicate);
        }
        if *computed != h.hash {
            self.bad_blocks += 1;
            self.outbox.push_back(Msg::Nack {
                file: h.file,
                index: h.index,
            });
            return Ok(BlockVerdict::Rejected);
        }
        f.slots[idx] = Slot::Writing;
        f.hashes[idx] = h.hash;
        Ok(BlockVerdict::Write)
    }

    /// The driver stored a block it was told to write.
    /// The header a block of zeros announced by `Zeros` would have come
    /// with (P-29); `None` if the file or block is not in the manifest.
    pub fn zero_header(&self, file: u32, index: u32) -> Option<BlockHeader> {
        let f = self.files.get(&file)?;
        ((index as usize) < f.slots.len()).then(|| {
            let len = block_len(f.size, self.block_size, index as u64);
            BlockHeader {
                file,
                index,
                offset: index as u64 * self.block_size as u64,
                len,
                hash: zero_hash(len),
                codec: wire::CODEC_NONE,
                wire_len: 0,
            }
        })
    }

    pub fn block_written(&mut self, file: u32, index: u32) -> Result<(), ReceiverError> {
        let f = self
            .files
            .get_mut(&file)
            .ok_or_else(|| ReceiverError::Protocol("write of unknown file".into()))?;
        let Some(slot) = f.slots.get_mut(index as usize) else {
            return Err(ReceiverError::Protocol("write past a file's end".into()));
        };
        if *slot == Slot::Writing {
            *slot = Slot::Stored;
            f.stored += 1;
            self.bytes_stored += block_len(f.size, self.block_size, index as u64) as u64;
            self.acks.push((file, index));
        }
        self.check_file(file)
    }

    fn check_file(&mut self, id: u32) -> Result<(), ReceiverError> {
        let Some(f) = self.files.get_mut(&id) else {
            return Ok(());
        };
        if f.released || !f.opened || f.stored != f.slots.len() {
            return Ok(());
        }
        // A file of at most one block has no digest to wait for (P-12): its
        // one verified block is the whole file.
        if f.slots.len() > 1 {
            let Some(digest) = f.digest.as_deref().copied() else {
                return Ok(());
            };
            if FileDigest::of(f.size, f.hashes.iter()) != digest {
                return Err(ReceiverError::Integrity {
                    path: String::from_utf8_lossy(&f.path).into_owned(),
                });
            }
        }
        f.released = true;
        self.actions.push_back(Action::Finalize {
            id,
            mode: f.mode,
            mtime: f.mtime.0,
            mtime_nsec: f.mtime.1,
        });
        Ok(())
    }

    /// The driver renamed `id` into place.
    pub fn placed(&mut self, id: u32) {
        if let Some(f) = self.files.get_mut(&id) {
            if f.released && !f.placed {
                f.placed = true;
                self.files_placed += 1;
                self.bytes_placed += f.size;
                self.outbox.push_back(Msg::FileDone { file: id });
                self.check_finished();
            }
        }
    }

    fn check_finished(&mut self) {
        if self.finishing
            || self.manifest.is_none()
            || self.files_placed + self.files_skipped + self.files_listed != self.files.len() as u64
        {
            return;
        }
        self.finishing = true;
        let mut dirs = std::mem::take(&mut self.dirs);
        dirs.sort_by_key(|(p, _, _)| std::cmp::Reverse(p.iter().filter(|&&b| b == b'/').count()));
        self.actions.push_back(Action::Finish { dirs });
    }

    /// The driver applied the directory metadata: the transfer is complete
    /// and the sender is told so.
    pub fn complete(&mut self) {
        if self.finishing && !self.finished {
            self.finished = true;
            self.outbox.push_back(Msg::Done(self.summary()));
        }
    }

    /// Files announced so far.
    pub fn files_expected(&self) -> u64 {
        self.files.len() as u64
    }

    pub fn summary(&self) -> Summary {
        Summary {
            files: self.files_placed,
            file_bytes: self.bytes_placed,
            bad_blocks: self.bad_blocks,
        }
    }

    /// The sender's digest of `id` under `--checksum` (P-32).
    pub fn source_digest(&self, id: u32) -> Option<[u8; 32]> {
        self.files
            .get(&id)
            .and_then(|f| f.source_digest.as_deref().copied())
    }

    pub fn path_of(&self, id: u32) -> Option<&[u8]> {
        self.files.get(&id).map(|f| f.path.as_slice())
    }
}

#[cfg(test)]
mod tests;
