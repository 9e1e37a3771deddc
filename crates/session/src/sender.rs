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
    /// session.
    #[error("the sources are {files} files in {blocks} blocks of {block_size} bytes: sending them would need {need} bytes of bookkeeping on this side, over its limit of {limit}; send fewer at once, or with a larger --block-size")]
    TooLarge {
        files: u64,
        blocks: u64,
        block_size: u32,
        need: u64,
        limit: u64,
    },
    /// What the receiver answered would take this side past its budget
    ///
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
/// read (33 bytes) and whether it is acknowledged.
pub const SEND_BLOCK_COST: u64 = 34;
/// Per file besides its path and blocks: its record and map slot, with
/// the map's spare room, and its place in the scheduler.
const SEND_FILE_COST: u64 = (std::mem::size_of::<SendFile>() as u64 + 8) * 3 / 2 + 16;
/// Per entry besides its path and target: its announcement waiting in the
/// outbox.
const SEND_ENTRY_COST: u64 = std::mem::size_of::<Msg>() as u64 + 16;
/// Per chunk the receiver announces: its slot in a map of short
/// hashes, with the map's spare room.
pub const CHUNK_COST: u64 = 64;
/// Per held block the receiver announces: its index and hash in a
/// map, with the map's spare room.
pub const HAVE_COST: u64 = 80;
/// Per block the receiver rejected: its try count in a map.
const NACK_COST: u64 = 32;
/// Deleted paths kept to show; past either bound they are only
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
    /// `--itemize-changes` (P-44): take the receiver's `Changes`.
    pub itemize: bool,
    /// How each file the receiver took differs from what was in place:
    /// its path and `wire::CHANGE_*` bits, at most one a file.
    pub changed: Vec<(String, u8)>,
    pub listed_bytes: u64,
    /// Paths the receiver's `--delete` removed (or would): the first
    /// [`DELETED_KEPT`] (at most [`DELETED_KEPT_BYTES`]), and how many
    /// more.
    pub deleted: Vec<String>,
    pub deleted_more: u64,
    deleted_bytes: usize,
    /// What the receiver may answer besides acks: chunks of
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
            itemize: false,
            changed: Vec::new(),
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
    /// deleted with `--delete`. Without this, either is a
    /// protocol error.
    pub fn expect(&mut self, sync: &wire::SyncOptions) {
        self.may_offer_chunks = sync.dedup;
        self.may_delete = sync.delete;
    }

    /// Bounds this session's bookkeeping, its own manifest's included
    /// to `budget` ([`DEFAULT_BUDGET`] unless set) and takes it
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

    /// When [`SenderSession::next_block`] next has work that no message
    /// from the receiver brings (the endgame's copies): the deadline a
    /// driver waiting on [`Next::Wait`] arms; `None`: wait for a message.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.summary {
            Some(_) => None,
            None => self.sched.poll_timeout(),
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
            Msg::Changes(list) if self.itemize => {
                for (file, bits) in list {
                    let f = self.files.get(&file).ok_or_else(|| {
                        SenderError::Protocol(format!("changes of unknown file {file}"))
                    })?;
                    // One a file, at most: the list is bounded by the manifest.
                    if self.changed.len() >= self.files.len() {
                        return Err(SenderError::Protocol("more changes than files".into()));
                    }
                    self.changed.push((f.path.clone(), bits));
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

    /// Paths the receiver deleted, all told.
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
mod tests;
