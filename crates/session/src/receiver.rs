//! The receiving side of a transfer (P-15).
//!
//! It turns manifest entries into actions (make a directory, open a
//! temporary file, make a link), judges every arriving block against its
//! hash and the manifest, acknowledges blocks once stored, and releases a
//! file for renaming into place only when every block is stored and the
//! sender's whole-file digest matches the hashes it verified.

use std::collections::{HashMap, VecDeque};

use thiserror::Error;
use wire::{BlockHeader, EntryKind, ErrorCode, Msg, Summary};

use crate::digest::{zero_hash, FileDigest};
use crate::paths;
use crate::{block_count, block_len};

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ReceiverError {
    #[error("peer broke the protocol: {0}")]
    Protocol(String),
    #[error("refused path from peer: {0}")]
    Path(#[from] paths::PathError),
    #[error("file {path} failed verification: its digest does not match the blocks received")]
    Integrity { path: String },
    #[error("{message}")]
    Remote { code: ErrorCode, message: String },
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
    slots: Vec<Slot>,
    hashes: Vec<[u8; 32]>,
    stored: usize,
    digest: Option<[u8; 32]>,
    released: bool,
    placed: bool,
    skipped: bool,
    /// The sender's whole-file digest, sent ahead under `--checksum`.
    source_digest: Option<[u8; 32]>,
    /// Blocks a partial already holds, announced in `Have` (P-35).
    held: HashMap<u32, [u8; 32]>,
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
    /// Announced total of file bytes, once the manifest is complete.
    pub bytes_expected: Option<u64>,
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
            files_listed: 0,
            bytes_listed: 0,
            files_skipped: 0,
            bytes_skipped: 0,
            bad_blocks: 0,
            bytes_stored: 0,
            bytes_kept: 0,
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

    /// Every entry's path so far, in manifest order.
    pub fn entry_paths(&self) -> &[Vec<u8>] {
        &self.paths
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
        f.held.extend(held.iter().copied());
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
            let Some((f, hash)) = f.and_then(|f| f.held.get(&index).copied().map(|h| (f, h)))
            else {
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
            Msg::Entry(e) => {
                if self.manifest.is_some() {
                    return Err(ReceiverError::Protocol(
                        "entry after the end of the manifest".into(),
                    ));
                }
                if !self.seen_ids.insert(e.id) {
                    return Err(ReceiverError::Protocol(format!(
                        "entry id {} repeated",
                        e.id
                    )));
                }
                paths::components(&e.path)?;
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
                        if e.target.is_empty() {
                            return Err(ReceiverError::Protocol(
                                "symlink with empty target".into(),
                            ));
                        }
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
                        let n = block_count(size, self.block_size);
                        if n > u32::MAX as u64 {
                            return Err(ReceiverError::Protocol(format!(
                                "file of {size} bytes has too many blocks"
                            )));
                        }
                        // Under --checksum the file is judged once its
                        // digest (the next message) is here.
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
                                slots: vec![Slot::Missing; n as usize],
                                hashes: vec![[0; 32]; n as usize],
                                stored: 0,
                                digest: None,
                                released: false,
                                placed: false,
                                skipped: false,
                                source_digest: None,
                                held: HashMap::new(),
                            },
                        );
                    }
                }
            }
            Msg::ManifestEnd { files, bytes } => {
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
                f.source_digest = Some(digest);
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
                f.digest = Some(digest);
                self.check_file(file)?;
            }
            Msg::Kept(list) => self.kept(list)?,
            Msg::Error { code, message } => return Err(ReceiverError::Remote { code, message }),
            other => {
                return Err(ReceiverError::Protocol(format!(
                    "unexpected message {other:?}"
                )))
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
        let slot = &mut f.slots[index as usize];
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
            let Some(digest) = f.digest else {
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
        self.files.get(&id).and_then(|f| f.source_digest)
    }

    pub fn path_of(&self, id: u32) -> Option<&[u8]> {
        self.files.get(&id).map(|f| f.path.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::{block_hash, FileDigest};
    use wire::Entry;

    fn file(id: u32, path: &str, size: u64) -> Msg {
        Msg::Entry(Entry {
            id,
            path: path.into(),
            kind: EntryKind::File {
                size,
                mode: 0o600,
                mtime: 0,
                mtime_nsec: 0,
            },
            target: vec![],
        })
    }

    fn opened(rx: &mut ReceiverSession) {
        while let Some(a) = rx.poll_action() {
            if let Action::OpenFile { id, .. } = a {
                rx.opened(id).unwrap();
            }
        }
    }

    #[test]
    fn refuses_escaping_paths_and_repeated_ids() {
        let mut rx = ReceiverSession::new(16);
        assert!(matches!(
            rx.handle(file(1, "../x", 1)),
            Err(ReceiverError::Path(_))
        ));
        rx.handle(file(2, "a", 1)).unwrap();
        assert!(matches!(
            rx.handle(file(2, "b", 1)),
            Err(ReceiverError::Protocol(_))
        ));
    }

    #[test]
    fn checks_bounds_hashes_and_digest() {
        let mut rx = ReceiverSession::new(4);
        rx.handle(file(1, "f", 6)).unwrap();
        opened(&mut rx);
        let data = b"abcdef";
        let h0 = block_hash(&data[..4]);
        let h1 = block_hash(&data[4..]);
        let hdr = |index: u32, offset: u64, len: u32, hash| BlockHeader {
            file: 1,
            index,
            offset,
            len,
            hash,
            codec: wire::CODEC_NONE,
            wire_len: len,
        };
        // Out of bounds: wrong length, wrong offset, beyond the file.
        assert!(rx.block_arrived(&hdr(0, 0, 3, h0), &h0).is_err());
        assert!(rx.block_arrived(&hdr(1, 3, 2, h1), &h1).is_err());
        assert!(rx.block_arrived(&hdr(2, 8, 0, h1), &h1).is_err());
        // Bad hash: rejected and nacked.
        assert_eq!(
            rx.block_arrived(&hdr(0, 0, 4, h0), &h1).unwrap(),
            BlockVerdict::Rejected
        );
        assert_eq!(rx.poll_control(), Some(Msg::Nack { file: 1, index: 0 }));
        for (i, h) in [(0, h0), (1, h1)] {
            let len = if i == 0 { 4 } else { 2 };
            assert_eq!(
                rx.block_arrived(&hdr(i, i as u64 * 4, len, h), &h).unwrap(),
                BlockVerdict::Write
            );
            rx.block_written(1, i).unwrap();
        }
        // A digest that does not match the verified blocks fails the file.
        assert!(matches!(
            rx.handle(Msg::FileEnd {
                file: 1,
                digest: [0; 32]
            }),
            Err(ReceiverError::Integrity { .. })
        ));
        let mut rx2 = ReceiverSession::new(4);
        rx2.handle(file(1, "f", 6)).unwrap();
        opened(&mut rx2);
        for (i, h) in [(0, h0), (1, h1)] {
            let len = if i == 0 { 4 } else { 2 };
            rx2.block_arrived(&hdr(i, i as u64 * 4, len, h), &h)
                .unwrap();
            rx2.block_written(1, i).unwrap();
        }
        rx2.handle(Msg::FileEnd {
            file: 1,
            digest: FileDigest::of(6, [&h0, &h1]),
        })
        .unwrap();
        assert!(matches!(
            rx2.poll_action(),
            Some(Action::Finalize { id: 1, .. })
        ));
        rx2.placed(1);
        rx2.handle(Msg::ManifestEnd { files: 1, bytes: 6 }).unwrap();
        assert!(matches!(rx2.poll_action(), Some(Action::Finish { .. })));
        assert!(!rx2.is_finished(), "Done waits for directory metadata");
        rx2.complete();
        assert!(rx2.is_finished());
    }

    #[test]
    fn files_of_one_block_or_none_need_no_digest() {
        let mut rx = ReceiverSession::new(4);
        rx.handle(file(1, "one", 3)).unwrap();
        rx.handle(file(2, "empty", 0)).unwrap();
        let mut finalized = Vec::new();
        let mut finalized_in = |rx: &mut ReceiverSession| {
            while let Some(a) = rx.poll_action() {
                match a {
                    Action::OpenFile { id, .. } => rx.opened(id).unwrap(),
                    Action::Finalize { id, .. } => finalized.push(id),
                    _ => {}
                }
            }
        };
        finalized_in(&mut rx);
        let h = block_hash(b"abc");
        assert!(
            matches!(
                rx.handle(Msg::FileEnd {
                    file: 1,
                    digest: FileDigest::of(3, [&h])
                }),
                Err(ReceiverError::Protocol(_))
            ),
            "a one-block file's digest is never sent (P-12)"
        );
        let hdr = BlockHeader {
            file: 1,
            index: 0,
            offset: 0,
            len: 3,
            hash: h,
            codec: wire::CODEC_NONE,
            wire_len: 3,
        };
        assert_eq!(rx.block_arrived(&hdr, &h).unwrap(), BlockVerdict::Write);
        rx.block_written(1, 0).unwrap();
        finalized_in(&mut rx);
        finalized.sort();
        assert_eq!(finalized, [1, 2]);
    }

    #[test]
    fn gated_answers_are_batched_and_skips_finish_the_transfer() {
        let mut rx = ReceiverSession::new(4);
        rx.gate();
        rx.announce_cache(vec![([9; 16], 4)]);
        rx.handle(file(1, "a", 6)).unwrap();
        rx.handle(file(2, "b", 6)).unwrap();
        rx.handle(file(3, "c", 6)).unwrap();
        rx.handle(Msg::ManifestEnd {
            files: 3,
            bytes: 18,
        })
        .unwrap();
        rx.ready(1, vec![([1; 16], 6)]);
        rx.ready(2, vec![]);
        rx.skip(3).unwrap();
        assert!(rx.skip(3).is_err(), "skipped twice");
        let msgs: Vec<Msg> = std::iter::from_fn(|| rx.poll_control()).collect();
        assert_eq!(
            msgs,
            vec![
                Msg::Chunks {
                    file: wire::CACHE_FILE,
                    chunks: vec![([9; 16], 4)]
                },
                Msg::Chunks {
                    file: 1,
                    chunks: vec![([1; 16], 6)]
                },
                Msg::Ready(vec![1, 2]),
                Msg::Skip(vec![3]),
            ]
        );
        assert_eq!((rx.files_skipped, rx.bytes_skipped), (1, 6));

        // A dry run lists what it would take and finishes at once.
        let mut dry = ReceiverSession::new(4);
        dry.gate();
        dry.dry_run();
        dry.handle(file(1, "a", 6)).unwrap();
        dry.handle(Msg::ManifestEnd { files: 1, bytes: 6 }).unwrap();
        dry.ready(1, vec![]);
        dry.deleted(vec![b"x".to_vec()]);
        assert!(
            std::iter::from_fn(|| dry.poll_action()).any(|a| matches!(a, Action::Finish { .. }))
        );
        dry.complete();
        assert!(dry.is_finished());
        assert_eq!(dry.files_listed, 1);
    }

    #[test]
    fn manifest_totals_must_match() {
        let mut rx = ReceiverSession::new(4);
        rx.handle(file(1, "f", 6)).unwrap();
        assert!(rx.handle(Msg::ManifestEnd { files: 1, bytes: 7 }).is_err());
    }
}
