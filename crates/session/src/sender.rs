//! The sending side of a transfer (P-14).
//!
//! It announces the manifest, hands blocks to streams through the
//! [`Scheduler`], collects each block's hash as streams read it, sends a
//! file's digest once every block of it has been read, and retires the
//! transfer when the receiver reports every file placed.
//!
//! What the receiver answers is bounded before it is kept (P-43, R-1 …
//! R-4), as the receiver bounds the sender's manifest (P-40): each answer
//! is taken only in the sessions that ask for it (chunks with dedup,
//! deleted paths with `--delete`, held blocks and answers in a gated
//! session, for a file still waiting), and what it makes this side hold
//! is charged, with the manifest's own bookkeeping, to the session's
//! budget and to the memory it shares with other sessions.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::receiver::{Pool, DEFAULT_BUDGET};
use std::time::Instant;

use chunk::{ChunkRef, Known, Part, Plan};

use thiserror::Error;
use wire::{Entry, EntryKind, ErrorCode, Msg, Summary};

use crate::digest::FileDigest;
use crate::schedule::{Next, Scheduler};
use crate::{block_count, BlockRef};

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SenderError {
    #[error("source file {path} changed while it was being sent (block {index} differs on re-read); copy it again once it is stable")]
    SourceChanged { path: String, index: u32 },
    #[error("block {index} of {path} failed verification {tries} times; the path corrupts data (check NICs, memory, or an intercepting middlebox)")]
    Corrupted {
        path: String,
        index: u32,
        tries: u32,
    },
    #[error("peer broke the protocol: {0}")]
    Protocol(String),
    /// The sources would need more bookkeeping than this side allows a
    /// session (R-1).
    #[error("the sources are {files} files in {blocks} blocks of {block_size} bytes: sending them would need {need} bytes of bookkeeping on this side, over its limit of {limit}; send fewer at once, or with a larger --block-size")]
    TooLarge {
        files: u64,
        blocks: u64,
        block_size: u32,
        need: u64,
        limit: u64,
    },
    /// What the receiver answered would take this side past its budget
    /// (R-2, R-3).
    #[error("the receiver's {what} would take {need} bytes of bookkeeping on this side, over its limit of {limit}")]
    Limit {
        what: &'static str,
        need: u64,
        limit: u64,
    },
    /// The memory this side shares among its sessions is held by others.
    #[error("this side's memory for transfers is held by its other sessions right now ({need} more bytes would not fit); try again later")]
    Busy { need: u64 },
    #[error("{message}")]
    Remote { code: ErrorCode, message: String },
}

impl SenderError {
    /// The code the peer is told, and the exit status it becomes.
    pub fn code(&self) -> ErrorCode {
        match self {
            SenderError::SourceChanged { .. } => ErrorCode::Other,
            SenderError::Corrupted { .. } => ErrorCode::Integrity,
            SenderError::Protocol(_) => ErrorCode::Protocol,
            SenderError::TooLarge { .. } => ErrorCode::BadRequest,
            SenderError::Limit { .. } => ErrorCode::Limit,
            SenderError::Busy { .. } => ErrorCode::Busy,
            SenderError::Remote { code, .. } => *code,
        }
    }
}

/// What this side holds per block of the manifest: the block's hash as
/// read (33 bytes) and whether it is acknowledged (R-1).
pub const SEND_BLOCK_COST: u64 = 34;
/// Per file besides its path and blocks: its record and map slot, with
/// the map's spare room, and its place in the scheduler.
const SEND_FILE_COST: u64 = (std::mem::size_of::<SendFile>() as u64 + 8) * 3 / 2 + 16;
/// Per entry besides its path and target: its announcement waiting in the
/// outbox.
const SEND_ENTRY_COST: u64 = std::mem::size_of::<Msg>() as u64 + 16;
/// Per chunk the receiver announces (R-2): its slot in a map of short
/// hashes, with the map's spare room.
pub const CHUNK_COST: u64 = 64;
/// Per held block the receiver announces (R-3): its index and hash in a
/// map, with the map's spare room.
pub const HAVE_COST: u64 = 80;
/// Per block the receiver rejected (R-5): its try count in a map.
const NACK_COST: u64 = 32;
/// Deleted paths kept to show (R-4); past either bound they are only
/// counted.
pub const DELETED_KEPT: usize = 10_000;
pub const DELETED_KEPT_BYTES: usize = 4 << 20;

/// How often one block may be rejected before the transfer fails: a path
/// that keeps corrupting the same block will not heal by retrying.
pub const MAX_NACKS: u32 = 8;

/// One manifest entry as the sender enumerated it.
pub type SourceEntry = Entry;

struct SendFile {
    size: u64,
    path: String,
    hashes: Vec<Option<[u8; 32]>>,
    missing: usize,
    acked: Vec<bool>,
    done: bool,
}

pub struct SenderSession {
    outbox: VecDeque<Msg>,
    block_size: u32,
    sched: Scheduler,
    files: HashMap<u32, SendFile>,
    nacks: HashMap<(u32, u32), u32>,
    /// Bundles in flight (P-33): the leader's file and the other members'.
    bundles: HashMap<u32, Vec<u32>>,
    files_left: usize,
    summary: Option<Summary>,
    /// The receiver answers each file before its blocks go (P-31).
    gated: bool,
    /// What the receiver holds for each file (its basis) ...
    known: HashMap<u32, Known>,
    /// ... and anywhere (its cache).
    cache: Known,
    /// Files to cut into chunks and match, in order: queued at their first
    /// basis chunks, so cutting the source overlaps the receiver cutting
    /// its basis.
    to_plan: VecDeque<u32>,
    /// Files queued to cut, and files the receiver has answered `Ready`.
    planning: HashSet<u32>,
    answered: HashSet<u32>,
    /// Source chunks cut before the receiver's answer came.
    chunked: HashMap<u32, Vec<ChunkRef>>,
    /// Each planned file's delta plan.
    plans: HashMap<u32, Arc<Plan>>,
    /// Blocks the receiver's partials already hold, and their hashes
    /// (P-35), by file and index.
    held: HashMap<u32, HashMap<u32, [u8; 32]>>,
    /// File bytes the receiver already held, not sent again (P-35).
    pub kept_bytes: u64,
    /// Files the receiver already holds (P-32), and their bytes.
    pub skipped_files: u64,
    pub skipped_bytes: u64,
    /// `--dry-run`: files answered `Ready` are listed, not sent.
    dry_run: bool,
    /// Paths a dry run would send.
    pub listed: Vec<String>,
    pub listed_bytes: u64,
    /// Paths the receiver's `--delete` removed (or would): the first
    /// [`DELETED_KEPT`] (at most [`DELETED_KEPT_BYTES`]), and how many
    /// more (R-4).
    pub deleted: Vec<String>,
    pub deleted_more: u64,
    deleted_bytes: usize,
    /// What the receiver may answer besides acks (R-2, R-4): chunks of
    /// what it holds (dedup) and paths it deleted (`--delete`).
    may_offer_chunks: bool,
    may_delete: bool,
    /// Bookkeeping this session may hold (R-1 … R-3), what it holds so
    /// far, and the memory it shares with other sessions, if any.
    budget: u64,
    charged: u64,
    pool: Option<Arc<dyn Pool>>,
    /// What the receiver noted about files (P-41), at most
    /// [`wire::MAX_NOTES`].
    pub notes: Vec<(wire::NoteKind, String)>,
    /// Blocks sent again because the receiver rejected them.
    pub retransmitted: u64,
    /// File bytes the receiver has acknowledged.
    pub acked_bytes: u64,
    /// Files the receiver has placed.
    pub files_done: u64,
}

impl Drop for SenderSession {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.give(self.charged);
        }
    }
}

impl SenderSession {
    /// `entries` must have distinct ids; files are sent in the given order.
    pub fn new(entries: Vec<SourceEntry>, block_size: u32, window: u64) -> SenderSession {
        let mut outbox = VecDeque::new();
        let mut files = HashMap::new();
        let mut order = Vec::new();
        let (mut nfiles, mut nbytes) = (0u64, 0u64);
        let mut charged = 0u64;
        for e in entries {
            charged =
                charged.saturating_add(SEND_ENTRY_COST + (e.path.len() + e.target.len()) as u64);
            if let EntryKind::File { size, .. } = e.kind {
                let blocks = block_count(size, block_size);
                charged = charged
                    .saturating_add(SEND_FILE_COST + e.path.len() as u64)
                    .saturating_add(blocks.saturating_mul(SEND_BLOCK_COST));
                let n = blocks as usize;
                let path = String::from_utf8_lossy(&e.path).into_owned();
                files.insert(
                    e.id,
                    SendFile {
                        size,
                        path,
                        hashes: vec![None; n],
                        missing: n,
                        acked: vec![false; n],
                        done: false,
                    },
                );
                order.push((e.id, size));
                nfiles += 1;
                nbytes += size;
                // Files of at most one block get no FileEnd (P-12).
                outbox.push_back(Msg::Entry(e));
            } else {
                outbox.push_back(Msg::Entry(e));
            }
        }
        outbox.push_back(Msg::ManifestEnd {
            files: nfiles,
            bytes: nbytes,
        });
        let files_left = files.len();
        SenderSession {
            outbox,
            block_size,
            sched: Scheduler::new(order, block_size, window),
            files,
            nacks: HashMap::new(),
            bundles: HashMap::new(),
            files_left,
            summary: None,
            gated: false,
            known: HashMap::new(),
            cache: Known::default(),
            to_plan: VecDeque::new(),
            planning: HashSet::new(),
            answered: HashSet::new(),
            chunked: HashMap::new(),
            plans: HashMap::new(),
            held: HashMap::new(),
            kept_bytes: 0,
            skipped_files: 0,
            skipped_bytes: 0,
            dry_run: false,
            listed: Vec::new(),
            listed_bytes: 0,
            deleted: Vec::new(),
            deleted_more: 0,
            deleted_bytes: 0,
            may_offer_chunks: false,
            may_delete: false,
            // This side's own manifest, and what the receiver may make it
            // hold besides (unless [`Self::admit`] bounds both).
            budget: charged.saturating_add(DEFAULT_BUDGET),
            charged,
            pool: None,
            notes: Vec::new(),
            retransmitted: 0,
            acked_bytes: 0,
            files_done: 0,
        }
    }

    /// What the receiver may answer besides acks, from the request's
    /// sync options: chunks of what it holds with dedup, the paths it
    /// deleted with `--delete` (R-2, R-4). Without this, either is a
    /// protocol error.
    pub fn expect(&mut self, sync: &wire::SyncOptions) {
        self.may_offer_chunks = sync.dedup;
        self.may_delete = sync.delete;
    }

    /// Bounds this session's bookkeeping, its own manifest's included
    /// (R-1), to `budget` ([`DEFAULT_BUDGET`] unless set) and takes it
    /// from `pool`, shared with other sessions, as it grows. Refused if
    /// the manifest alone does not fit.
    pub fn admit(&mut self, budget: u64, pool: Option<Arc<dyn Pool>>) -> Result<(), SenderError> {
        self.budget = budget;
        if self.charged > budget {
            let blocks = self.files.values().map(|f| f.hashes.len() as u64).sum();
            return Err(SenderError::TooLarge {
                files: self.files.len() as u64,
                blocks,
                block_size: self.block_size,
                need: self.charged,
                limit: budget,
            });
        }
        if let Some(p) = &pool {
            if !p.take(self.charged) {
                return Err(SenderError::Busy { need: self.charged });
            }
        }
        self.pool = pool;
        Ok(())
    }

    /// Bookkeeping this session holds so far, in bytes (R-1 … R-3).
    pub fn bookkeeping(&self) -> u64 {
        self.charged
    }

    /// Charges `bytes` more for `what` the receiver answered, before it
    /// is kept.
    fn charge(&mut self, what: &'static str, bytes: u64) -> Result<(), SenderError> {
        let need = self.charged.saturating_add(bytes);
        if need > self.budget {
            return Err(SenderError::Limit {
                what,
                need,
                limit: self.budget,
            });
        }
        if let Some(p) = &self.pool {
            if !p.take(bytes) {
                return Err(SenderError::Busy { need: bytes });
            }
        }
        self.charged = need;
        Ok(())
    }

    /// Changes the cap on unacknowledged bytes given to [`SenderSession::new`].
    pub fn set_window(&mut self, window: u64) {
        self.sched.set_window(window);
    }

    /// The receiver will answer every file with `Ready` or `Skip` (P-31):
    /// hold each file's blocks until it does. Call before any block.
    pub fn gate(&mut self) {
        self.gated = true;
        self.sched.hold_all();
    }

    /// `--dry-run` (P-32): send nothing; list what the receiver would
    /// take. Implies [`SenderSession::gate`].
    pub fn dry_run(&mut self) {
        self.dry_run = true;
        self.gate();
    }

    /// Whether the receiver answers each file first (P-31).
    pub fn is_gated(&self) -> bool {
        self.gated
    }

    /// Sends `digest` after the entry of `file` (`--checksum`, P-32).
    /// Call before the first `poll_control`.
    pub fn add_digest(&mut self, file: u32, digest: [u8; 32]) {
        let at = self
            .outbox
            .iter()
            .position(|m| matches!(m, Msg::Entry(e) if e.id == file));
        if let Some(at) = at {
            self.outbox.insert(at + 1, Msg::Digest { file, digest });
        }
    }

    /// Every file's id and size, by id.
    pub fn file_sizes(&self) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = self.files.iter().map(|(id, f)| (*id, f.size)).collect();
        v.sort_unstable();
        v
    }

    /// A file to cut into chunks (read from start to end) and hand to
    /// [`SenderSession::planned`].
    pub fn poll_plan(&mut self) -> Option<u32> {
        self.to_plan.pop_front()
    }

    /// The chunks of `file`, cut by the driver: once the receiver has
    /// answered, match them against what it holds and let the file go.
    pub fn planned(&mut self, file: u32, chunks: &[ChunkRef]) -> Result<(), SenderError> {
        let f = self
            .files
            .get(&file)
            .ok_or_else(|| SenderError::Protocol(format!("plan for unknown file {file}")))?;
        let covered: u64 = chunks.iter().map(|c| c.len as u64).sum();
        if covered != f.size {
            return Err(SenderError::SourceChanged {
                path: f.path.clone(),
                index: 0,
            });
        }
        if f.done {
            return Ok(());
        }
        self.chunked.insert(file, chunks.to_vec());
        self.try_match(file);
        Ok(())
    }

    /// Matches and releases `file` once both its chunks and the
    /// receiver's answer are in.
    fn try_match(&mut self, file: u32) {
        if !self.answered.contains(&file) {
            return;
        }
        let Some(chunks) = self.chunked.remove(&file) else {
            return;
        };
        self.answered.remove(&file);
        self.planning.remove(&file);
        let basis = self.known.remove(&file).unwrap_or_default();
        let plan = Plan::new(&chunks, &basis, &self.cache);
        if plan.copies_anything() {
            self.plans.insert(file, Arc::new(plan));
        }
        self.sched.release(file);
    }

    /// Queues `file` to be cut into chunks, once.
    fn plan_later(&mut self, file: u32) {
        if self.planning.insert(file) {
            self.to_plan.push_back(file);
        }
    }

    /// How block `b` travels as a delta program: its parts and how many
    /// of its bytes are literal. `None`: send it whole (no plan, nothing
    /// to copy, or the receiver already rejected it once).
    pub fn block_parts(&self, b: &BlockRef) -> Option<(Vec<Part>, u32)> {
        if self.nacks.contains_key(&(b.file, b.index)) {
            return None;
        }
        let (parts, literal) = self.plans.get(&b.file)?.block(b.offset, b.len);
        (literal < b.len).then_some((parts, literal))
    }

    /// Next control message to send, if any.
    pub fn poll_control(&mut self) -> Option<Msg> {
        self.outbox.pop_front()
    }

    pub fn has_control(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Whether `block`, just taken, may lead a bundle (P-33): it is a whole
    /// file of at most `max_len` bytes, sent for the first time, and the
    /// receiver is not answering files first (gated files may go as delta
    /// programs, which bundles do not carry).
    pub fn may_lead_bundle(&self, block: &BlockRef, max_len: u32) -> bool {
        !self.gated
            && block.index == 0
            && block.len <= max_len
            && !self.nacks.contains_key(&(block.file, 0))
            && self
                .files
                .get(&block.file)
                .is_some_and(|f| f.size == block.len as u64)
    }

    /// The next block for the bundle being built, if it is a whole file of
    /// at most `max_len` bytes (see [`Scheduler::next_whole_file`]).
    pub fn next_bundle_member(&mut self, max_len: u32, now: Instant) -> Option<BlockRef> {
        if self.summary.is_some() || self.gated {
            return None;
        }
        self.sched.next_whole_file(max_len, now)
    }

    /// The bundle led by `leader` carries `members` too: if the receiver
    /// asks for the leader again, they go again (alone).
    pub fn bundled(&mut self, leader: u32, members: Vec<u32>) {
        if !members.is_empty() {
            self.bundles.insert(leader, members);
        }
    }

    /// Every block has been handed out once (see [`Scheduler::all_handed_out`]).
    pub fn all_handed_out(&self) -> bool {
        self.sched.all_handed_out()
    }

    /// Next block for a stream that is ready.
    pub fn next_block(&mut self, now: Instant) -> Next {
        if self.summary.is_some() {
            return Next::Done;
        }
        match self.sched.next(now) {
            // Every block acked, but the receiver has yet to place the files.
            Next::Done => Next::Wait,
            n => n,
        }
    }

    /// A stream read `block` and computed `hash` over its bytes.
    pub fn block_read(&mut self, block: &BlockRef, hash: [u8; 32]) -> Result<(), SenderError> {
        let f = self
            .files
            .get_mut(&block.file)
            .ok_or_else(|| SenderError::Protocol("block of unknown file".into()))?;
        let slot = &mut f.hashes[block.index as usize];
        match slot {
            Some(h) if *h != hash => {
                return Err(SenderError::SourceChanged {
                    path: f.path.clone(),
                    index: block.index,
                });
            }
            Some(_) => {}
            None => {
                *slot = Some(hash);
                f.missing -= 1;
                // A file of one block needs no FileEnd: its block's hash,
                // checked on arrival, says all its digest would (P-12).
                if f.missing == 0 && f.hashes.len() > 1 {
                    let digest = FileDigest::of(
                        f.size,
                        f.hashes.iter().map(|h| h.as_ref().expect("all present")),
                    );
                    self.outbox.push_back(Msg::FileEnd {
                        file: block.file,
                        digest,
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether the receiver said it holds `block` with this hash (P-35):
    /// then [`SenderSession::block_kept`] rather than sending it. Not for a
    /// block it rejected since.
    pub fn receiver_holds(&self, block: &BlockRef, hash: &[u8; 32]) -> bool {
        !self.nacks.contains_key(&(block.file, block.index))
            && self.held.get(&block.file).and_then(|h| h.get(&block.index)) == Some(hash)
    }

    /// `block`, read and hashed, is as the receiver holds it: announced
    /// with `Kept` (batched like `Zeros`), not sent.
    pub fn block_kept(&mut self, block: &BlockRef) {
        const BATCH: usize = 1024;
        self.sched.announced(block.file, block.index);
        self.kept_bytes += block.len as u64;
        if let Some(Msg::Kept(list)) = self.outbox.back_mut() {
            if list.len() < BATCH {
                list.push((block.file, block.index));
                return;
            }
        }
        self.outbox
            .push_back(Msg::Kept(vec![(block.file, block.index)]));
    }

    /// A stream read `block` (after [`SenderSession::block_read`]) and found
    /// only zeros: it is announced on the control connection instead of
    /// being sent (P-29). Announcements are batched into one `Zeros`
    /// message while the control writer has not taken it.
    pub fn block_zero(&mut self, block: &BlockRef) {
        const BATCH: usize = 1024;
        self.sched.announced(block.file, block.index);
        if let Some(Msg::Zeros(list)) = self.outbox.back_mut() {
            if list.len() < BATCH {
                list.push((block.file, block.index));
                return;
            }
        }
        self.outbox
            .push_back(Msg::Zeros(vec![(block.file, block.index)]));
    }

    /// The file a receiver's ack or nack names, if the block is within it.
    fn block_of<'a>(
        files: &'a mut HashMap<u32, SendFile>,
        what: &str,
        file: u32,
        index: u32,
    ) -> Result<&'a mut SendFile, SenderError> {
        files
            .get_mut(&file)
            .filter(|f| (index as usize) < f.acked.len())
            .ok_or_else(|| {
                SenderError::Protocol(format!("{what} for block {index} of unknown file {file}"))
            })
    }

    /// A control message from the receiver.
    pub fn handle(&mut self, msg: Msg, now: Instant) -> Result<(), SenderError> {
        match msg {
            Msg::Acks(list) => {
                for (file, index) in list {
                    if index == 0 {
                        self.bundles.remove(&file);
                    }
                    self.sched.acked(file, index, now);
                    let f = Self::block_of(&mut self.files, "ack", file, index)?;
                    let slot = &mut f.acked[index as usize];
                    if !*slot {
                        *slot = true;
                        self.acked_bytes +=
                            crate::block_len(f.size, self.block_size, index as u64) as u64;
                    }
                }
            }
            Msg::Nack { file, index } => {
                let path = Self::block_of(&mut self.files, "nack", file, index)?
                    .path
                    .clone();
                if !self.nacks.contains_key(&(file, index)) {
                    self.charge("rejected blocks", NACK_COST)?;
                }
                let tries = self.nacks.entry((file, index)).or_insert(0);
                *tries += 1;
                if *tries > MAX_NACKS {
                    return Err(SenderError::Corrupted {
                        path,
                        index,
                        tries: *tries,
                    });
                }
                if self.sched.nacked(file, index) {
                    self.retransmitted += 1;
                }
                // A bundle that failed failed for all its members (P-33).
                let members = (index == 0)
                    .then(|| self.bundles.remove(&file))
                    .flatten()
                    .unwrap_or_default();
                for m in members {
                    if self.sched.nacked(m, 0) {
                        self.retransmitted += 1;
                    }
                    // Marked as sent again (never bundled again), with no
                    // try counted against it.
                    self.nacks.entry((m, 0)).or_insert(0);
                }
            }
            Msg::FileDone { file } => {
                let f = self.files.get_mut(&file).ok_or_else(|| {
                    SenderError::Protocol(format!("done for unknown file {file}"))
                })?;
                if !f.done {
                    f.done = true;
                    self.files_left -= 1;
                    self.files_done += 1;
                }
                self.plans.remove(&file);
                self.held.remove(&file);
            }
            Msg::Chunks { file, chunks } if self.gated && self.may_offer_chunks => {
                let waiting = file == wire::CACHE_FILE
                    || (self.files.contains_key(&file)
                        && self.sched.is_held(file)
                        && !self.answered.contains(&file));
                if waiting {
                    self.charge("chunks", chunks.len() as u64 * CHUNK_COST)?;
                }
                if file == wire::CACHE_FILE {
                    self.cache.add_cache(&chunks);
                } else if self.files.contains_key(&file)
                    && self.sched.is_held(file)
                    && !self.answered.contains(&file)
                {
                    self.known.entry(file).or_default().add_basis(&chunks);
                    self.plan_later(file);
                } else {
                    return Err(SenderError::Protocol(format!(
                        "chunks for file {file}, which is not waiting for them"
                    )));
                }
            }
            Msg::Have { file, blocks } if self.gated => {
                let n = self.files.get(&file).map(|f| f.acked.len());
                let waiting = self.sched.is_held(file) && !self.answered.contains(&file);
                let Some(n) = n.filter(|_| waiting) else {
                    return Err(SenderError::Protocol(format!(
                        "held blocks of file {file}, which is not waiting for them"
                    )));
                };
                if let Some((i, _)) = blocks.iter().find(|(i, _)| *i as usize >= n) {
                    return Err(SenderError::Protocol(format!(
                        "held block {i} of file {file}, past its {n} blocks"
                    )));
                }
                self.charge("held blocks", blocks.len() as u64 * HAVE_COST)?;
                self.held.entry(file).or_default().extend(blocks);
            }
            Msg::Ready(list) if self.gated => {
                for file in list {
                    let Some(f) = self.files.get_mut(&file) else {
                        return Err(SenderError::Protocol(format!(
                            "ready for unknown file {file}"
                        )));
                    };
                    if self.dry_run {
                        // An empty file was never held: it has no blocks.
                        if f.done || (f.size > 0 && !self.sched.skip(file)) {
                            return Err(SenderError::Protocol(format!(
                                "ready for file {file}, which is not waiting"
                            )));
                        }
                        f.done = true;
                        self.files_left -= 1;
                        self.listed.push(f.path.clone());
                        self.listed_bytes += f.size;
                        continue;
                    }
                    let has_basis = self.known.get(&file).is_some_and(|k| !k.is_empty());
                    if self.sched.is_held(file) && (has_basis || !self.cache.is_empty()) {
                        self.answered.insert(file);
                        self.plan_later(file);
                        self.try_match(file);
                    } else {
                        self.known.remove(&file);
                        self.sched.release(file);
                    }
                }
            }
            Msg::Skip(list) if self.gated => {
                for file in list {
                    let f = self.files.get_mut(&file).ok_or_else(|| {
                        SenderError::Protocol(format!("skip of unknown file {file}"))
                    })?;
                    if f.done || !self.sched.skip(file) {
                        return Err(SenderError::Protocol(format!(
                            "skip of file {file}, which is not waiting"
                        )));
                    }
                    f.done = true;
                    self.files_left -= 1;
                    self.skipped_files += 1;
                    self.skipped_bytes += f.size;
                    self.known.remove(&file);
                }
            }
            Msg::Deleted(paths) if self.may_delete => {
                for p in paths {
                    if self.deleted.len() >= DELETED_KEPT
                        || self.deleted_bytes + p.len() > DELETED_KEPT_BYTES
                    {
                        self.deleted_more += 1;
                        continue;
                    }
                    self.deleted_bytes += p.len();
                    self.deleted.push(String::from_utf8_lossy(&p).into_owned());
                }
            }
            Msg::Note { kind, text } => {
                if self.notes.len() < wire::MAX_NOTES {
                    // Shown on the user's terminal: no control characters
                    // from a peer.
                    let text = text
                        .chars()
                        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
                        .collect();
                    self.notes.push((kind, text));
                }
            }
            Msg::Done(s) => {
                if self.files_left != 0 {
                    return Err(SenderError::Protocol(format!(
                        "receiver finished with {} files unconfirmed",
                        self.files_left
                    )));
                }
                self.summary = Some(s);
            }
            Msg::Error { code, message } => return Err(SenderError::Remote { code, message }),
            other => {
                return Err(SenderError::Protocol(format!(
                    "unexpected {} message (not one this side takes in this session)",
                    other.name()
                )))
            }
        }
        Ok(())
    }

    /// Paths the receiver deleted, all told (R-4).
    pub fn deleted_count(&self) -> u64 {
        self.deleted.len() as u64 + self.deleted_more
    }

    /// The receiver's summary once it has placed every file.
    pub fn finished(&self) -> Option<Summary> {
        self.summary
    }

    pub fn endgame_copies(&self) -> u64 {
        self.sched.endgame_copies
    }

    pub fn in_flight_bytes(&self) -> u64 {
        self.sched.in_flight_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::EntryKind;

    fn dedup() -> wire::SyncOptions {
        wire::SyncOptions {
            dedup: true,
            gated: true,
            ..Default::default()
        }
    }

    /// A pool of `limit` bytes, shared by sessions.
    struct Pool(std::sync::Mutex<u64>, u64);

    impl crate::receiver::Pool for Pool {
        fn take(&self, bytes: u64) -> bool {
            let mut used = self.0.lock().unwrap();
            if *used + bytes > self.1 {
                return false;
            }
            *used += bytes;
            true
        }
        fn give(&self, bytes: u64) {
            *self.0.lock().unwrap() -= bytes;
        }
    }

    /// R-2, R-4: chunks only with dedup, deleted paths only with
    /// `--delete`, each a protocol error otherwise; issue 39's daemon
    /// kept both without bound.
    #[test]
    fn answers_are_taken_only_in_the_sessions_that_ask_for_them() {
        let now = Instant::now();
        let chunks = || Msg::Chunks {
            file: wire::CACHE_FILE,
            chunks: vec![([1; 16], 10)],
        };
        let mut tx = SenderSession::new(vec![file_entry(0, b"a", 10)], 4, 1 << 20);
        tx.gate();
        assert!(matches!(
            tx.handle(chunks(), now),
            Err(SenderError::Protocol(_))
        ));
        assert!(matches!(
            tx.handle(Msg::Deleted(vec![b"x".to_vec()]), now),
            Err(SenderError::Protocol(_))
        ));
        let mut ungated = SenderSession::new(vec![file_entry(0, b"a", 10)], 4, 1 << 20);
        ungated.expect(&dedup());
        assert!(ungated.handle(chunks(), now).is_err(), "not gated");
        let have = Msg::Have {
            file: 0,
            blocks: vec![(0, [0; 32])],
        };
        assert!(ungated.handle(have, now).is_err(), "not gated");
    }

    /// R-2, R-3: what the receiver announces is charged before it is
    /// kept; past the budget the session ends with `Limit`.
    #[test]
    fn chunks_and_held_blocks_past_the_budget_are_refused() {
        let now = Instant::now();
        let mut tx = SenderSession::new(vec![file_entry(0, b"a", 1 << 20)], 4096, 1 << 20);
        tx.gate();
        tx.expect(&dedup());
        let own = tx.bookkeeping();
        tx.admit(own + 100 * CHUNK_COST, None).unwrap();
        let many = |n: usize, at: u8| Msg::Chunks {
            file: wire::CACHE_FILE,
            chunks: (0..n)
                .map(|i| {
                    (
                        [
                            at,
                            i as u8,
                            (i >> 8) as u8,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                        ],
                        100,
                    )
                })
                .collect(),
        };
        tx.handle(many(60, 1), now).unwrap();
        let e = tx.handle(many(60, 2), now).unwrap_err();
        assert!(
            matches!(e, SenderError::Limit { what: "chunks", .. }),
            "{e}"
        );
        assert_eq!(e.code(), ErrorCode::Limit);
        // Held blocks: the same block announced again and again costs
        // each time, so a flood ends.
        let mut tx = SenderSession::new(vec![file_entry(0, b"a", 1 << 20)], 4096, 1 << 20);
        tx.gate();
        tx.admit(tx.bookkeeping() + 10 * HAVE_COST, None).unwrap();
        let have = || Msg::Have {
            file: 0,
            blocks: (0..4).map(|i| (i, [0; 32])).collect(),
        };
        tx.handle(have(), now).unwrap();
        tx.handle(have(), now).unwrap();
        assert!(matches!(
            tx.handle(have(), now),
            Err(SenderError::Limit {
                what: "held blocks",
                ..
            })
        ));
    }

    /// R-1: the sources' own bookkeeping, which a pulling client chooses
    /// (paths and block size), is checked against the budget and taken
    /// from the shared memory, and given back when the session ends.
    #[test]
    fn sources_past_the_budget_or_the_shared_memory_are_refused() {
        let big = vec![file_entry(0, b"big", 1 << 40)];
        let mut tx = SenderSession::new(big, 64 << 10, 1 << 20);
        let e = tx.admit(256 << 20, None).unwrap_err();
        assert!(
            matches!(
                e,
                SenderError::TooLarge {
                    blocks: 16_777_216,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("--block-size"), "{e}");
        let pool = Arc::new(Pool(std::sync::Mutex::new(0), 1 << 20));
        let shared: Arc<dyn crate::receiver::Pool> = pool.clone();
        let mut a = SenderSession::new(vec![file_entry(0, b"a", 1 << 30)], 64 << 10, 1 << 20);
        let mut b = SenderSession::new(vec![file_entry(0, b"b", 1 << 30)], 64 << 10, 1 << 20);
        a.admit(1 << 20, Some(shared.clone())).unwrap();
        assert!(matches!(
            b.admit(1 << 20, Some(shared.clone())),
            Err(SenderError::Busy { .. })
        ));
        drop(a);
        assert_eq!(*pool.0.lock().unwrap(), 0);
        b.admit(1 << 20, Some(shared)).unwrap();
    }

    /// R-4: deleted paths are kept to show up to a bound, and counted
    /// past it.
    #[test]
    fn deleted_paths_are_kept_to_a_bound_and_counted_past_it() {
        let now = Instant::now();
        let mut tx = SenderSession::new(vec![file_entry(0, b"a", 10)], 4, 1 << 20);
        tx.expect(&wire::SyncOptions {
            delete: true,
            ..Default::default()
        });
        let message = |len: usize| Msg::Deleted(vec![vec![b'p'; len]; wire::DELETED_PER_MESSAGE]);
        for _ in 0..20 {
            tx.handle(message(10), now).unwrap();
        }
        assert_eq!(tx.deleted.len(), DELETED_KEPT);
        assert_eq!(tx.deleted_count(), 20 * wire::DELETED_PER_MESSAGE as u64);
        // Long paths reach the bound on bytes first.
        let mut tx = SenderSession::new(vec![file_entry(0, b"a", 10)], 4, 1 << 20);
        tx.expect(&wire::SyncOptions {
            delete: true,
            ..Default::default()
        });
        for _ in 0..2 {
            tx.handle(message(4000), now).unwrap();
        }
        assert_eq!(tx.deleted.len(), DELETED_KEPT_BYTES / 4000);
        assert_eq!(tx.deleted_count(), 2 * wire::DELETED_PER_MESSAGE as u64);
    }

    /// A manifest entry for a file of `size` bytes.
    fn file_entry(id: u32, path: &[u8], size: u64) -> Entry {
        Entry {
            id,
            path: path.to_vec(),
            kind: EntryKind::File {
                size,
                mode: 0,
                mtime: 0,
                mtime_nsec: 0,
            },
            target: vec![],
        }
    }

    #[test]
    fn detects_a_source_that_changed_between_reads() {
        let e = file_entry(0, b"f", 8);
        let mut tx = SenderSession::new(vec![e], 4, 1 << 20);
        let now = Instant::now();
        let Next::Send(b) = tx.next_block(now) else {
            panic!()
        };
        tx.block_read(&b, [1; 32]).unwrap();
        tx.handle(
            Msg::Nack {
                file: 0,
                index: b.index,
            },
            now,
        )
        .unwrap();
        let Next::Send(again) = tx.next_block(now) else {
            panic!()
        };
        assert_eq!(again, b);
        assert!(matches!(
            tx.block_read(&again, [2; 32]),
            Err(SenderError::SourceChanged { .. })
        ));
    }

    #[test]
    fn bundles_take_whole_small_files_and_fail_together() {
        // Files of 3, 5, 20 (two blocks of 16) and 2 bytes.
        let entries = vec![
            file_entry(0, b"a", 3),
            file_entry(1, b"b", 5),
            file_entry(2, b"big", 20),
            file_entry(3, b"c", 2),
        ];
        let mut tx = SenderSession::new(entries, 16, 1 << 20);
        let now = Instant::now();
        let Next::Send(a) = tx.next_block(now) else {
            panic!()
        };
        assert!(tx.may_lead_bundle(&a, 8));
        assert!(!tx.may_lead_bundle(&a, 2), "larger than asked");
        // b fits; big is two blocks: the bundle stops there.
        let b = tx.next_bundle_member(8, now).unwrap();
        assert_eq!((b.file, b.index, b.len), (1, 0, 5));
        assert_eq!(tx.next_bundle_member(64, now), None);
        tx.block_read(&a, [1; 32]).unwrap();
        tx.block_read(&b, [2; 32]).unwrap();
        tx.bundled(0, vec![1]);
        // The bundle fails: the leader and its member both go again, alone.
        tx.handle(Msg::Nack { file: 0, index: 0 }, now).unwrap();
        let mut again = vec![];
        for _ in 0..2 {
            let Next::Send(r) = tx.next_block(now) else {
                panic!()
            };
            again.push(r.file);
            assert!(!tx.may_lead_bundle(&r, 8), "re-sent blocks go alone");
        }
        again.sort();
        assert_eq!(again, [0, 1]);
        // Re-sends waiting: no member is taken.
        tx.handle(Msg::Nack { file: 1, index: 0 }, now).unwrap();
        assert_eq!(tx.next_bundle_member(64, now), None);
        // A gated session never bundles.
        let mut gated = SenderSession::new(vec![file_entry(0, b"a", 3)], 16, 1 << 20);
        gated.gate();
        gated.handle(Msg::Ready(vec![0]), now).unwrap();
        if let Next::Send(g) = gated.next_block(now) {
            assert!(!gated.may_lead_bundle(&g, 8));
        }
    }

    #[test]
    fn zero_blocks_are_announced_in_batches_after_the_manifest() {
        let e = file_entry(0, b"z", 12);
        let mut tx = SenderSession::new(vec![e], 4, 1 << 20);
        let now = Instant::now();
        for _ in 0..3 {
            let Next::Send(b) = tx.next_block(now) else {
                panic!()
            };
            tx.block_read(&b, [0; 32]).unwrap();
            tx.block_zero(&b);
        }
        let msgs: Vec<Msg> = std::iter::from_fn(|| tx.poll_control()).collect();
        // Entry, ManifestEnd, then the zeros of blocks 0 and 1 in one
        // message, FileEnd (block 2 completed the file), block 2's zeros.
        assert!(matches!(msgs[0], Msg::Entry(_)));
        assert!(matches!(msgs[1], Msg::ManifestEnd { .. }));
        assert_eq!(msgs[2], Msg::Zeros(vec![(0, 0), (0, 1)]));
        assert!(matches!(msgs[3], Msg::FileEnd { file: 0, .. }));
        assert_eq!(msgs[4], Msg::Zeros(vec![(0, 2)]));
    }

    #[test]
    fn a_gated_file_waits_for_its_answer_then_goes_as_a_delta() {
        // Two files of 3 blocks of 4 bytes; the receiver holds the first
        // file's chunks and nothing of the second.
        let data = b"abcdefghijkl";
        let mut tx = SenderSession::new(
            vec![file_entry(0, b"a", 12), file_entry(1, b"b", 12)],
            4,
            1 << 20,
        );
        tx.gate();
        tx.expect(&dedup());
        let now = Instant::now();
        assert_eq!(tx.next_block(now), Next::Wait, "held until answered");
        let ours = chunk::chunks(data);
        let ids: Vec<_> = ours
            .iter()
            .map(|c| (chunk::short(&c.hash), c.len))
            .collect();
        tx.handle(
            Msg::Chunks {
                file: 0,
                chunks: ids,
            },
            now,
        )
        .unwrap();
        tx.handle(Msg::Ready(vec![0, 1]), now).unwrap();
        // File 0 is cut into chunks first; file 1 waits behind it.
        assert_eq!(tx.poll_plan(), Some(0));
        assert_eq!(tx.poll_plan(), None);
        assert_eq!(tx.next_block(now), Next::Wait);
        tx.planned(0, &ours).unwrap();
        let Next::Send(b) = tx.next_block(now) else {
            panic!()
        };
        let (parts, literal) = tx.block_parts(&b).expect("a delta");
        assert_eq!(literal, 0);
        assert_eq!(parts, vec![chunk::Part::Basis { from: 0, len: 4 }]);
        // A block the receiver rejected goes whole the second time.
        tx.block_read(&b, [1; 32]).unwrap();
        tx.handle(Msg::Nack { file: 0, index: 0 }, now).unwrap();
        assert!(tx.block_parts(&b).is_none());
        // A plan that does not cover the file means it changed.
        let mut other = SenderSession::new(vec![file_entry(0, b"a", 12)], 4, 1 << 20);
        other.gate();
        other.expect(&dedup());
        other
            .handle(
                Msg::Chunks {
                    file: 0,
                    chunks: vec![([0; 16], 12)],
                },
                now,
            )
            .unwrap();
        other.handle(Msg::Ready(vec![0]), now).unwrap();
        assert_eq!(other.poll_plan(), Some(0));
        assert!(matches!(
            other.planned(0, &chunk::chunks(b"short")),
            Err(SenderError::SourceChanged { .. })
        ));
    }

    #[test]
    fn a_resumed_file_keeps_the_blocks_the_receiver_holds_as_the_sender_has_them() {
        use crate::receiver::{Action, BlockVerdict, ReceiverSession};
        let data = b"abcdefghijkl";
        let hash = |i: usize| crate::block_hash(&data[i * 4..i * 4 + 4]);
        let now = Instant::now();
        let mut tx = SenderSession::new(vec![file_entry(0, b"f", 12)], 4, 1 << 20);
        let mut rx = ReceiverSession::new(4);
        tx.gate();
        rx.gate();
        let pass = |from: &mut dyn FnMut() -> Option<Msg>, to: &mut dyn FnMut(Msg)| {
            while let Some(m) = from() {
                to(m);
            }
        };
        pass(&mut || tx.poll_control(), &mut |m| rx.handle(m).unwrap());
        assert!(matches!(
            rx.poll_action(),
            Some(Action::OpenFile { id: 0, .. })
        ));
        rx.opened(0).unwrap();
        // The partial holds block 0 as the source has it, and block 2 of
        // another version; block 1 is past its end.
        rx.hold(0, vec![(0, hash(0)), (2, [7; 32]), (9, [0; 32])]);
        rx.ready(0, Vec::new());
        pass(&mut || rx.poll_control(), &mut |m| {
            tx.handle(m, now).unwrap()
        });
        let mut sent = Vec::new();
        while let Next::Send(b) = tx.next_block(now) {
            let h = hash(b.index as usize);
            tx.block_read(&b, h).unwrap();
            if tx.receiver_holds(&b, &h) {
                tx.block_kept(&b);
                continue;
            }
            sent.push(b.index);
            let header = wire::BlockHeader {
                file: 0,
                index: b.index,
                offset: b.offset,
                len: b.len,
                hash: h,
                codec: wire::CODEC_NONE,
                wire_len: b.len,
            };
            assert_eq!(rx.block_arrived(&header, &h).unwrap(), BlockVerdict::Write);
            rx.block_written(0, b.index).unwrap();
        }
        assert_eq!(sent, vec![1, 2], "the stale block 2 goes again");
        assert_eq!(tx.kept_bytes, 4);
        pass(&mut || tx.poll_control(), &mut |m| rx.handle(m).unwrap());
        assert_eq!(rx.bytes_kept, 4);
        // The digest covered the kept block's hash: the file is released.
        assert!(matches!(
            rx.poll_action(),
            Some(Action::Finalize { id: 0, .. })
        ));
        rx.placed(0);
        pass(&mut || rx.poll_control(), &mut |m| {
            tx.handle(m, now).unwrap()
        });
        assert_eq!(tx.acked_bytes, 12);
        // A Kept for a block the receiver never held breaks the protocol.
        assert!(rx.handle(Msg::Kept(vec![(0, 1)])).is_err());
        // And held blocks for a file not waiting for them.
        assert!(tx
            .handle(
                Msg::Have {
                    file: 0,
                    blocks: vec![(0, [0; 32])]
                },
                now
            )
            .is_err());
    }

    #[test]
    fn skipped_and_dry_run_files_are_done_without_blocks() {
        let now = Instant::now();
        let mut tx = SenderSession::new(
            vec![file_entry(0, b"a", 10), file_entry(1, b"b", 10)],
            4,
            1 << 20,
        );
        tx.gate();
        tx.handle(Msg::Skip(vec![0]), now).unwrap();
        assert!(tx.handle(Msg::Skip(vec![0]), now).is_err(), "skipped twice");
        tx.handle(Msg::Ready(vec![1]), now).unwrap();
        assert!(matches!(
            tx.next_block(now),
            Next::Send(BlockRef { file: 1, .. })
        ));
        assert!(
            tx.handle(Msg::Skip(vec![1]), now).is_err(),
            "a released file cannot be skipped"
        );
        assert_eq!((tx.skipped_files, tx.skipped_bytes), (1, 10));

        let mut dry = SenderSession::new(
            vec![file_entry(0, b"a", 10), file_entry(1, b"b", 0)],
            4,
            1 << 20,
        );
        dry.dry_run();
        dry.expect(&wire::SyncOptions {
            delete: true,
            ..Default::default()
        });
        dry.handle(Msg::Ready(vec![0, 1]), now).unwrap();
        assert_eq!(dry.listed, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(dry.next_block(now), Next::Wait, "nothing is sent");
        dry.handle(Msg::Deleted(vec![b"old".to_vec()]), now)
            .unwrap();
        dry.handle(Msg::Done(Summary::default()), now).unwrap();
        assert_eq!(dry.deleted, vec!["old".to_string()]);
    }

    #[test]
    fn notes_are_kept_to_their_limit_without_control_characters() {
        let now = Instant::now();
        let mut tx = SenderSession::new(vec![file_entry(0, b"a", 10)], 4, 1 << 20);
        for i in 0..wire::MAX_NOTES + 5 {
            let text = format!("a: note {i}\x1b[2J\r");
            let kind = wire::NoteKind::PartialHeld;
            tx.handle(Msg::Note { kind, text }, now).unwrap();
        }
        assert_eq!(tx.notes.len(), wire::MAX_NOTES);
        assert_eq!(tx.notes[0].1, "a: note 0\u{fffd}[2J\u{fffd}");
    }

    #[test]
    fn a_receivers_notes_stop_at_the_limit_with_a_last_one_saying_so() {
        use crate::receiver::ReceiverSession;
        let mut rx = ReceiverSession::new(4);
        for i in 0..wire::MAX_NOTES + 5 {
            rx.note(wire::NoteKind::PartialStale, format!("f{i}: stale"));
        }
        let sent: Vec<Msg> = std::iter::from_fn(|| rx.poll_control())
            .filter(|m| matches!(m, Msg::Note { .. }))
            .collect();
        assert_eq!(sent.len(), wire::MAX_NOTES);
        assert!(
            matches!(&sent[wire::MAX_NOTES - 1], Msg::Note { text, .. } if text.contains("left out")),
            "{sent:?}"
        );
        assert_eq!(rx.notes.len(), wire::MAX_NOTES);
    }

    #[test]
    fn announces_manifest_and_no_digest_for_an_empty_file() {
        let e = file_entry(3, b"empty", 0);
        let mut tx = SenderSession::new(vec![e], 4, 1 << 20);
        assert!(matches!(tx.poll_control(), Some(Msg::Entry(_))));
        assert_eq!(
            tx.poll_control(),
            Some(Msg::ManifestEnd { files: 1, bytes: 0 })
        );
        assert!(matches!(
            tx.handle(Msg::Done(Summary::default()), Instant::now()),
            Err(SenderError::Protocol(_))
        ));
        tx.handle(Msg::FileDone { file: 3 }, Instant::now())
            .unwrap();
        tx.handle(Msg::Done(Summary::default()), Instant::now())
            .unwrap();
        assert_eq!(tx.next_block(Instant::now()), Next::Done);
    }
}
