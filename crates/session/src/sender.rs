//! The sending side of a transfer (P-14).
//!
//! It announces the manifest, hands blocks to streams through the
//! [`Scheduler`], collects each block's hash as streams read it, sends a
//! file's digest once every block of it has been read, and retires the
//! transfer when the receiver reports every file placed.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
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
    #[error("{message}")]
    Remote { code: ErrorCode, message: String },
}

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
    files_left: usize,
    summary: Option<Summary>,
    /// The receiver answers each file before its blocks go (P-31).
    gated: bool,
    /// What the receiver holds for each file (its basis) ...
    known: HashMap<u32, Known>,
    /// ... and anywhere (its cache).
    cache: Known,
    /// Files to cut into chunks and match, in order.
    to_plan: VecDeque<u32>,
    /// Each planned file's delta plan.
    plans: HashMap<u32, Arc<Plan>>,
    /// Files the receiver already holds (P-32), and their bytes.
    pub skipped_files: u64,
    pub skipped_bytes: u64,
    /// Blocks sent again because the receiver rejected them.
    pub retransmitted: u64,
    /// File bytes the receiver has acknowledged.
    pub acked_bytes: u64,
    /// Files the receiver has placed.
    pub files_done: u64,
}

impl SenderSession {
    /// `entries` must have distinct ids; files are sent in the given order.
    pub fn new(entries: Vec<SourceEntry>, block_size: u32, window: u64) -> SenderSession {
        let mut outbox = VecDeque::new();
        let mut files = HashMap::new();
        let mut order = Vec::new();
        let (mut nfiles, mut nbytes) = (0u64, 0u64);
        for e in entries {
            if let EntryKind::File { size, .. } = e.kind {
                let n = block_count(size, block_size) as usize;
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
                let id = e.id;
                outbox.push_back(Msg::Entry(e));
                if n == 0 {
                    outbox.push_back(Msg::FileEnd {
                        file: id,
                        digest: FileDigest::of(0, []),
                    });
                }
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
            files_left,
            summary: None,
            gated: false,
            known: HashMap::new(),
            cache: Known::default(),
            to_plan: VecDeque::new(),
            plans: HashMap::new(),
            skipped_files: 0,
            skipped_bytes: 0,
            retransmitted: 0,
            acked_bytes: 0,
            files_done: 0,
        }
    }

    /// The receiver will answer every file with `Ready` or `Skip` (P-31):
    /// hold each file's blocks until it does. Call before any block.
    pub fn gate(&mut self) {
        self.gated = true;
        self.sched.hold_all();
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

    /// The chunks of `file`, cut by the driver: match them against what
    /// the receiver holds and let the file's blocks go.
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
        let basis = self.known.remove(&file).unwrap_or_default();
        let plan = Plan::new(chunks, &basis, &self.cache);
        if plan.copies_anything() {
            self.plans.insert(file, Arc::new(plan));
        }
        self.sched.release(file);
        Ok(())
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
                if f.missing == 0 {
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

    /// A stream read `block` (after [`SenderSession::block_read`]) and found
    /// only zeros: it is announced on the control connection instead of
    /// being sent (P-29). Announcements are batched into one `Zeros`
    /// message while the control writer has not taken it.
    pub fn block_zero(&mut self, block: &BlockRef) {
        const BATCH: usize = 1024;
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
            }
            Msg::Chunks { file, chunks } if self.gated => {
                if file == wire::CACHE_FILE {
                    self.cache.add_cache(&chunks);
                } else if self.files.contains_key(&file) && self.sched.is_held(file) {
                    self.known.entry(file).or_default().add_basis(&chunks);
                } else {
                    return Err(SenderError::Protocol(format!(
                        "chunks for file {file}, which is not waiting for them"
                    )));
                }
            }
            Msg::Ready(list) if self.gated => {
                for file in list {
                    if !self.files.contains_key(&file) {
                        return Err(SenderError::Protocol(format!(
                            "ready for unknown file {file}"
                        )));
                    }
                    let has_basis = self.known.get(&file).is_some_and(|k| !k.is_empty());
                    if self.sched.is_held(file) && (has_basis || !self.cache.is_empty()) {
                        self.to_plan.push_back(file);
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
                    "unexpected message {other:?}"
                )))
            }
        }
        Ok(())
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
    fn announces_manifest_and_empty_file_digest() {
        let e = file_entry(3, b"empty", 0);
        let mut tx = SenderSession::new(vec![e], 4, 1 << 20);
        assert!(matches!(tx.poll_control(), Some(Msg::Entry(_))));
        assert!(matches!(
            tx.poll_control(),
            Some(Msg::FileEnd { file: 3, .. })
        ));
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
