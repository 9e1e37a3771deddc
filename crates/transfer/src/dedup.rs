//! Deduplication and sync on the wire (P-31, P-32), around the sans-IO
//! plan of `chunk` and the answers of `session`.
//!
//! Receiving side: an answerer thread takes each file of a gated session
//! in manifest order, decides whether it is already in place (`--update`,
//! `--checksum`), and otherwise opens it and announces the chunks of its
//! basis (the destination's old version, or `--basis`). Stream threads
//! rebuild delta blocks from the basis. Sending side: a planner thread
//! cuts each answered file into chunks and matches them; stream threads
//! then send each block as a delta program when that is shorter.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use chunk::Part;
use session::{block_hash, FileDigest, SenderSession};
use store::{ChunkCache, Sources, StoreError};
use wire::program::{self, Piece};
use wire::{ChunkId, CODEC_DELTA};

use crate::engine::{Receiving, Shared, POLL};
use connect::error::TransferError;
use connect::progress::Progress;

/// What the receiving side does beyond storing what arrives.
#[derive(Clone, Default)]
pub struct ReceiveOptions {
    /// The request's dedup, update, checksum, delete and dry-run bits
    /// (P-31, P-32); `gated` is decided by [`ReceiveOptions::gated`].
    pub sync: wire::SyncOptions,
    /// The basis of the one file sent, instead of its old version: its
    /// path (for messages) and the file, opened when the request was
    /// accepted (a server opens it beneath its root, P-38).
    pub basis: Option<(PathBuf, Arc<File>)>,
    /// The receiver's chunk cache (`--cache`): announced to the sender,
    /// and fed every file received.
    pub cache: Option<Arc<ChunkCache>>,
    /// A source named a directory's contents (`dir/`): `--delete` also
    /// cleans the destination itself.
    pub contents: bool,
}

impl ReceiveOptions {
    /// Whether this receiver answers every file before it is sent: only
    /// when there can be something to answer, so a copy into a fresh
    /// destination pays no round trip. `dest_exists`: anything is already
    /// where the files go.
    pub fn gated(&self, dest_exists: bool) -> bool {
        let cached = self.cache.as_ref().is_some_and(|c| !c.is_empty());
        let s = &self.sync;
        (s.dedup && (dest_exists || self.basis.is_some() || cached))
            || (s.update && dest_exists)
            || s.dry_run
    }
}

/// One file for the answerer.
pub(crate) struct Question {
    pub id: u32,
    pub path: Vec<u8>,
    pub size: u64,
    pub mtime: (i64, u32),
}

/// The receiver's open bases, by manifest id.
#[derive(Default)]
pub(crate) struct Bases {
    open: Mutex<HashMap<u32, Arc<File>>>,
}

impl Bases {
    fn get(&self, id: u32) -> Option<Arc<File>> {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    pub(crate) fn close(&self, id: u32) {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
}

/// The chunks of the file at `path`, as the wire names them.
fn chunk_ids(file: &File) -> std::io::Result<Vec<ChunkId>> {
    let chunks = chunk::chunks_of(std::io::BufReader::with_capacity(1 << 20, file), |_, _| {})?;
    Ok(chunks
        .iter()
        .map(|c| (chunk::short(&c.hash), c.len))
        .collect())
}

/// The whole-file digest of `f` as a sender would compute it.
fn file_digest(f: &File, size: u64, block_size: u32) -> std::io::Result<[u8; 32]> {
    let mut buf = vec![0u8; block_size as usize];
    let mut hashes = Vec::new();
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(block_size as u64) as usize;
        f.read_exact_at(&mut buf[..n], off)?;
        hashes.push(block_hash(&buf[..n]));
        off += n as u64;
    }
    Ok(FileDigest::of(size, hashes.iter()))
}

impl Receiving<'_, '_> {
    /// Answers the files of a gated session in manifest order.
    pub(crate) fn answerer(&self, questions: mpsc::Receiver<Question>) {
        while !self.sh.is_done() && !self.sh.stopped() {
            let q = match questions.recv_timeout(POLL) {
                Ok(q) => q,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            if let Err(e) = self.answer(q) {
                self.sh.fail(e, true);
                return;
            }
        }
    }

    fn answer(&self, q: Question) -> Result<(), TransferError> {
        // The file in place, opened without following a link (P-38): a
        // link there is neither read nor told about.
        let existing = self
            .sink
            .open_placed(&q.path)?
            .and_then(|f| f.metadata().ok().map(|m| (f, m)));
        if self.opts.sync.update && q.size > 0 {
            if let Some((file, meta)) = &existing {
                if meta.len() == q.size && self.up_to_date(q.id, file, meta, &q)? {
                    let mut st = self.sh.lock();
                    st.skip(q.id)?;
                    Progress::add(&self.sh.progress.skipped_files, 1);
                    Progress::add(&self.sh.progress.skipped_bytes, q.size);
                    let actions = Self::drain(&mut st);
                    drop(st);
                    return self.execute(actions);
                }
            }
        }
        if self.opts.sync.dry_run {
            let mut st = self.sh.lock();
            st.ready(q.id, Vec::new());
            self.sh
                .progress
                .listed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(String::from_utf8_lossy(&q.path).into_owned());
            Progress::add(&self.sh.progress.listed_bytes, q.size);
            let actions = Self::drain(&mut st);
            drop(st);
            self.sh.cv.notify_all();
            return self.execute(actions);
        }
        // What an interrupted transfer of this file left (P-35) is the
        // likelier match: it is this source, where the file in place may
        // be an older version. The file is written into it in place.
        let partial = match (&self.opts.basis, self.opts.sync.dedup) {
            (None, true) => self.sink.partial_of(&q.path)?,
            _ => None,
        };
        // The basis is open before the new file replaces it; the open file
        // stays readable whatever happens to its name.
        let shown = self.sink.final_path(&q.path)?.unwrap_or_default();
        let resuming = partial.is_some();
        let basis = match (&self.opts.basis, partial) {
            (Some((p, f)), _) => Some((p.clone(), f.clone())),
            (None, Some(f)) => Some((store::partial::resumable_path(&shown), Arc::new(f))),
            (None, None) if self.opts.sync.dedup => existing.map(|(f, _)| (shown, Arc::new(f))),
            (None, None) => None,
        };
        let stamp = store::Stamp {
            block_size: self.block_size,
            size: q.size,
            mtime: q.mtime.0,
            mtime_nsec: q.mtime.1,
        };
        self.sink.open_file(q.id, &q.path, &stamp)?;
        // A partial whose journal is of this very source resumes block by
        // block; otherwise it is a basis like any other (P-35).
        let held = match resuming {
            true => self.sink.held_blocks(q.id).unwrap_or_else(|e| {
                tracing::warn!("resuming by content instead: {e}");
                Vec::new()
            }),
            false => Vec::new(),
        };
        self.forward_notes();
        let basis = basis.filter(|_| held.is_empty());
        if !held.is_empty() {
            tracing::debug!("resuming file {} from {} held blocks", q.id, held.len());
        }
        let ids = match basis {
            Some((p, f)) => {
                let t0 = Instant::now();
                let ids = chunk_ids(&f)
                    .map_err(|e| TransferError::from(StoreError::io("read the basis", &p, &e)))?;
                tracing::debug!(
                    "basis {} cut into {} chunks in {:?}",
                    p.display(),
                    ids.len(),
                    t0.elapsed()
                );
                self.bases
                    .open
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(q.id, f);
                ids
            }
            None => Vec::new(),
        };
        let actions = {
            let mut st = self.sh.lock();
            st.opened(q.id)?;
            st.hold(q.id, held);
            st.ready(q.id, ids);
            Self::drain(&mut st)
        };
        self.sh.cv.notify_all();
        self.execute(actions)
    }

    /// `--update`: the same size and modification time (to the second,
    /// and the nanosecond where both sides keep them), or, with
    /// `--checksum`, the same content.
    fn up_to_date(
        &self,
        id: u32,
        file: &File,
        meta: &std::fs::Metadata,
        q: &Question,
    ) -> Result<bool, TransferError> {
        if self.opts.sync.checksum {
            let Some(want) = self.sh.lock().source_digest(id) else {
                return Ok(false);
            };
            let have = file_digest(file, q.size, self.block_size).map_err(|e| {
                let p = self
                    .sink
                    .final_path(&q.path)
                    .ok()
                    .flatten()
                    .unwrap_or_default();
                TransferError::from(StoreError::io("read", &p, &e))
            })?;
            return Ok(have == want);
        }
        let (secs, nsec) = (meta.mtime(), meta.mtime_nsec() as u32);
        Ok(secs == q.mtime.0 && (nsec == q.mtime.1 || nsec == 0 || q.mtime.1 == 0))
    }

    /// The bytes of a block as sent with `codec` (P-30, P-31). Bytes that
    /// do not decode come back as zeros, so the block fails its hash and
    /// is asked for again (whole, the second time).
    pub(crate) fn decode(&self, file: u32, codec: u8, data: &[u8], len: u32) -> Vec<u8> {
        let progress = self.sh.progress;
        if codec & CODEC_DELTA == 0 {
            return crate::compress::decode(codec, data, len, progress);
        }
        match self.rebuild(file, codec & !CODEC_DELTA, data, len) {
            Ok(out) => out,
            Err(why) => {
                tracing::warn!("a delta block of file {file} could not be rebuilt ({why}); asking for it whole");
                vec![0u8; len as usize]
            }
        }
    }

    fn rebuild(&self, file: u32, codec: u8, data: &[u8], len: u32) -> Result<Vec<u8>, String> {
        let (head, body) = data.split_at_checked(4).ok_or("short program")?;
        let plen = u32::from_le_bytes(head.try_into().expect("4 bytes"));
        if plen > 2 * wire::MAX_BLOCK_SIZE {
            return Err("program too long".into());
        }
        let progress = self.sh.progress;
        let prog = crate::compress::decode(codec, body, plen, progress);
        let (out, copied) = apply(
            &prog,
            len,
            |from, out| {
                let f = self.bases.get(file).ok_or("no basis for this file")?;
                f.read_exact_at(out, from)
                    .map_err(|e| format!("reading the basis: {e}"))
            },
            |hash, skip, out| {
                let c = self.opts.cache.as_ref().ok_or("no chunk cache here")?;
                match c.read(hash, skip, out) {
                    Ok(true) => Ok(()),
                    Ok(false) => Err("a chunk left the cache".into()),
                    Err(e) => Err(format!("reading the chunk cache: {e}")),
                }
            },
        )?;
        Progress::add(&progress.dedup_bytes, copied);
        Ok(out)
    }
}

/// Runs a delta program for a block of `len` bytes: literals from the
/// program, copies through `basis(from, out)` and `cache(hash, skip,
/// out)`. Returns the block and how many of its bytes were copied.
pub(crate) fn apply(
    prog: &[u8],
    len: u32,
    basis: impl Fn(u64, &mut [u8]) -> Result<(), String>,
    cache: impl Fn(&[u8; 16], u32, &mut [u8]) -> Result<(), String>,
) -> Result<(Vec<u8>, u64), String> {
    let pieces = program::decode(prog, len).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(len as usize);
    let mut copied = 0u64;
    for p in pieces {
        let at = out.len();
        match p {
            Piece::Literal(b) => out.extend_from_slice(b),
            Piece::Basis { from, len } => {
                out.resize(at + len as usize, 0);
                basis(from, &mut out[at..])?;
                copied += len as u64;
            }
            Piece::Cache { hash, skip, len } => {
                out.resize(at + len as usize, 0);
                cache(&hash, skip, &mut out[at..])?;
                copied += len as u64;
            }
        }
    }
    Ok((out, copied))
}

/// Cuts each file the receiver answered with a basis into chunks, in
/// order, and hands them to the session, which then lets the file go.
pub(crate) fn planner(sh: &Shared<SenderSession>, sources: &Sources) {
    while !sh.is_done() && !sh.stopped() {
        let file = {
            let mut st = sh.lock();
            match st.poll_plan() {
                Some(f) => f,
                None => {
                    let _ = sh.cv.wait_timeout(st, POLL);
                    continue;
                }
            }
        };
        let path = sources.path(file).cloned().unwrap_or_default();
        let chunks = File::open(&path).and_then(|f| {
            chunk::chunks_of(std::io::BufReader::with_capacity(1 << 20, f), |_, _| {})
        });
        let chunks = match chunks {
            Ok(c) => c,
            Err(e) => {
                sh.fail(StoreError::io("read", &path, &e).into(), true);
                return;
            }
        };
        let r = sh.lock().planned(file, &chunks);
        if let Err(e) = r {
            sh.fail(e.into(), true);
            return;
        }
        sh.cv.notify_all();
    }
}

/// Replaces the block in `buf[at..]` with `[program length][program]`
/// built from `parts`, if that is shorter by a margin; returns whether it
/// did. The caller may then compress the program in place (from `at + 4`).
pub(crate) fn encode(buf: &mut Vec<u8>, at: usize, parts: &[Part]) -> bool {
    let block = &buf[at..];
    let pieces = parts.iter().map(|p| match *p {
        Part::Literal { at, len } => Piece::Literal(&block[at as usize..(at + len) as usize]),
        Part::Basis { from, len } => Piece::Basis { from, len },
        Part::Cache { hash, skip, len } => Piece::Cache { hash, skip, len },
    });
    let mut out = vec![0u8; 4];
    program::encode(pieces, &mut out);
    if out.len() + 64 >= block.len() {
        return false;
    }
    let plen = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&plen.to_le_bytes());
    buf.truncate(at);
    buf.extend_from_slice(&out);
    true
}

/// `--delete` once every file is in place: removes (unless `--dry-run`)
/// what the source does not have, and tells the sender.
pub(crate) fn delete_extraneous(
    rx: &Receiving,
    dirs: &[(Vec<u8>, i64, u32)],
) -> Result<(), TransferError> {
    let keep = rx.sh.lock().entry_paths().to_vec();
    let dir_paths: Vec<Vec<u8>> = dirs.iter().map(|(p, ..)| p.clone()).collect();
    let partials = rx.opts.sync.delete_partials;
    let mut found = rx
        .sink
        .extraneous(&dir_paths, &keep, rx.opts.contents, partials)?;
    if !rx.opts.sync.dry_run {
        // What holds a partial another transfer has taken meanwhile stays
        // (P-41), and is not reported as removed.
        let places: Vec<Vec<u8>> = found.iter().map(|(p, _)| p.clone()).collect();
        let gone = rx.sink.remove(&places, partials)?;
        let mut it = gone.into_iter();
        found.retain(|_| it.next().unwrap_or(false));
    }
    let rels: Vec<Vec<u8>> = found.into_iter().map(|(_, r)| r).collect();
    rx.sh
        .progress
        .deleted
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend(rels.iter().map(|r| String::from_utf8_lossy(r).into_owned()));
    rx.sh.lock().deleted(rels);
    Ok(())
}

/// Prepares a sender whose receiver answers every file: under
/// `--checksum`, each file's digest follows its entry, so every source is
/// read once here, before anything is sent (as rsync does).
pub fn gate_sender(
    session: &mut SenderSession,
    sync: &wire::SyncOptions,
    sources: &Sources,
    block_size: u32,
) -> Result<(), TransferError> {
    session.gate();
    if sync.dry_run {
        session.dry_run();
        return Ok(());
    }
    if sync.update && sync.checksum {
        for (id, size) in session
            .file_sizes()
            .into_iter()
            .filter(|(_, size)| *size > 0)
        {
            let path = sources.path(id).cloned().unwrap_or_default();
            let digest = File::open(&path)
                .and_then(|f| file_digest(&f, size, block_size))
                .map_err(|e| TransferError::from(StoreError::io("read", &path, &e)))?;
            session.add_digest(id, digest);
        }
    }
    Ok(())
}

/// Prepares a receiver that answers every file (P-31, P-32): it first
/// announces its cache.
pub fn gate_receiver(session: &mut session::ReceiverSession, opts: &ReceiveOptions) {
    let sync = &opts.sync;
    session.gate();
    if sync.update && sync.checksum && !sync.dry_run {
        session.expect_digests();
    }
    if sync.dry_run {
        session.dry_run();
        return;
    }
    if let (Some(c), true) = (&opts.cache, sync.dedup) {
        session.announce_cache(c.ids());
    }
}

impl Receiving<'_, '_> {
    /// Feeds each placed file to the chunk cache, until the transfer ends
    /// and every file placed is in; then saves the cache's index.
    /// Each is named by its manifest path and opened through the sink,
    /// never by a path name that a link could have taken over (P-38).
    pub(crate) fn cacher(&self, cache: &ChunkCache, placed: mpsc::Receiver<Vec<u8>>) {
        let add = |rel: Vec<u8>| {
            let p = self
                .sink
                .final_path(&rel)
                .ok()
                .flatten()
                .unwrap_or_default();
            let r = match self.sink.open_placed(&rel) {
                Ok(Some(f)) => cache.insert_open(&f).map(|_| ()),
                Ok(None) => Err(std::io::Error::other("it is no longer a regular file")),
                Err(e) => Err(std::io::Error::other(e.to_string())),
            };
            if let Err(e) = r {
                tracing::warn!("could not add {} to the chunk cache: {e}", p.display());
            }
            self.caching
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        };
        loop {
            match placed.recv_timeout(POLL) {
                Ok(p) => add(p),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if self.sh.is_done() || self.sh.stopped() {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        while let Ok(p) = placed.try_recv() {
            if self.sh.stopped() {
                break;
            }
            add(p);
        }
        if let Err(e) = cache.save() {
            tracing::warn!("could not save the chunk cache's index: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chunk::{chunks, short, Known, Plan};
    use proptest::prelude::*;

    fn noise(n: usize, seed: u64) -> Vec<u8> {
        codec::samples::noise(n, seed)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Any source, basis and cache: every block sent as a program
        /// (as the sender encodes it) rebuilds byte-exact at the receiver.
        #[test]
        fn programs_rebuild_every_block_exactly(
            seed in any::<u64>(),
            base_len in 0usize..400_000,
            cache_len in 0usize..200_000,
            cut in 0usize..400_000,
            insert_len in 0usize..90_000,
            block in 65_536u32..300_000,
        ) {
            let basis = noise(base_len, seed);
            let cached = noise(cache_len, seed ^ 5);
            let cut = cut.min(basis.len());
            let mut source = basis[..cut].to_vec();
            source.extend_from_slice(&noise(insert_len, seed ^ 9));
            source.extend_from_slice(&cached);
            source.extend_from_slice(&basis[cut..]);
            let ids = |d: &[u8]| -> Vec<([u8; 16], u32)> {
                chunks(d).iter().map(|c| (short(&c.hash), c.len)).collect()
            };
            let (mut b, mut c) = (Known::default(), Known::default());
            b.add_basis(&ids(&basis));
            c.add_cache(&ids(&cached));
            let by_hash: HashMap<[u8; 16], Vec<u8>> = chunks(&cached)
                .iter()
                .map(|ch| {
                    let o = ch.offset as usize;
                    (short(&ch.hash), cached[o..o + ch.len as usize].to_vec())
                })
                .collect();
            let plan = Plan::new(&chunks(&source), &b, &c);
            let mut sent = 0usize;
            for start in (0..source.len()).step_by(block as usize) {
                let len = (source.len() - start).min(block as usize);
                let bytes = &source[start..start + len];
                let (parts, _) = plan.block(start as u64, len as u32);
                let mut buf = bytes.to_vec();
                if !encode(&mut buf, 0, &parts) {
                    prop_assert_eq!(&buf[..], bytes);
                    sent += len;
                    continue;
                }
                sent += buf.len();
                let plen = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
                prop_assert_eq!(plen, buf.len() - 4);
                let (out, _) = apply(
                    &buf[4..],
                    len as u32,
                    |from, o| {
                        let f = from as usize;
                        o.copy_from_slice(&basis[f..f + o.len()]);
                        Ok(())
                    },
                    |h, skip, o| {
                        let ch = by_hash.get(h).ok_or("missing")?;
                        o.copy_from_slice(&ch[skip as usize..skip as usize + o.len()]);
                        Ok(())
                    },
                )
                .unwrap();
                prop_assert!(out == bytes);
            }
            // What crossed is about what was new.
            prop_assert!(sent <= insert_len + source.len() / 4 + 3 * chunk::MAX_CHUNK as usize);
        }
    }
}
