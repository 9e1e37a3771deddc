//! The receiving side of a shard (P-42): whole files go to the file sink
//! as in any push; a piece is written at its offset into the file the
//! ledger keeps for it, journaled, and recorded done once whole and
//! synced. The receiver that records a file's last piece reads the file
//! back, checks every block against the hash its shard verified, and
//! places it; so does any shard's receiver that finds all of a file's
//! pieces done and the file still unplaced.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustix::fs::FlockOperation;
use session::{block_hash, FileDigest};
use store::beneath::Beneath;
use store::{
    BlockSink, Capabilities, DirTimes, Held, Note, Sink, Stamp, StoreError, StoreErrorKind,
    Verified,
};
use wire::{NoteKind, ShardSpec};

use crate::ledger::{list, path_key, Done, Ledger};
use crate::plan::short_id;

/// What the status says once the whole transfer is placed.
pub const COMPLETE: &str = "is complete and verified";

/// One piece being received.
struct OpenPiece {
    rel: Vec<u8>,
    key: String,
    offset: u64,
    whole: u64,
    len: u64,
    block_size: u32,
    /// The shared file; `None` once the file is placed (a shard run
    /// again after its file was placed holds every block already).
    data: Option<File>,
    journal: Mutex<Option<File>>,
    hashes: Mutex<Vec<Option<[u8; 32]>>>,
    /// Mode and time, once the piece is finalized.
    meta: Mutex<Option<(u32, i64, u32)>>,
}

impl OpenPiece {
    fn blocks(&self) -> usize {
        self.len.div_ceil(self.block_size as u64) as usize
    }
}

/// A shard's receiving side: the file sink, and the ledger for pieces.
pub struct ShardSink {
    inner: Sink,
    tree: Arc<Beneath>,
    ledger: Ledger,
    /// Path of each piece: (offset, whole size).
    pieces: HashMap<Vec<u8>, (u64, u64)>,
    open: Mutex<HashMap<u32, Arc<OpenPiece>>>,
    notes: Mutex<Vec<(NoteKind, String)>>,
    /// Only say where the shards stand (`--shard-status`).
    status_only: bool,
}

fn io(what: &str, shown: &std::path::Path, e: std::io::Error) -> StoreError {
    StoreError::io(what, shown, &e)
}

impl ShardSink {
    /// The sink for shard `spec` of a push into `inner`'s destination.
    pub fn new(inner: Sink, spec: &ShardSpec, status_only: bool) -> Result<ShardSink, StoreError> {
        let tree = inner.tree_made()?.ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::BadRequest,
                "a shard of a split transfer needs a directory or file destination, not /dev/null or standard output",
            )
        })?;
        let ledger = Ledger::open(&tree, spec)?;
        Ok(ShardSink {
            inner,
            tree,
            ledger,
            pieces: spec
                .pieces
                .iter()
                .map(|p| (p.path.clone(), (p.offset, p.whole)))
                .collect(),
            open: Mutex::new(HashMap::new()),
            notes: Mutex::new(Vec::new()),
            status_only,
        })
    }

    fn piece(&self, id: u32) -> Option<Arc<OpenPiece>> {
        self.open.lock().expect("pieces").get(&id).cloned()
    }

    fn shown(&self, rel: &[u8]) -> PathBuf {
        self.inner
            .final_path(rel)
            .ok()
            .flatten()
            .unwrap_or_else(|| PathBuf::from(String::from_utf8_lossy(rel).into_owned()))
    }

    /// Places the file at `rel` if every piece of it is done and it is
    /// not placed yet: reads it back, checks each block against its done
    /// record, syncs it and renames it into place. `Ok(false)`: pieces
    /// are missing, or another receiver is placing it now.
    fn try_place(
        &self,
        rel: &[u8],
        key: &str,
        whole: u64,
        meta: (u32, i64, u32),
    ) -> Result<bool, StoreError> {
        if self.ledger.is_placed(key)? {
            return Ok(true);
        }
        let Some(data) = self.ledger.data_if_there(key)? else {
            return self.ledger.is_placed(key);
        };
        // One placer at a time, across hosts: a lock on the shared file
        // (NFS carries it as a byte-range lock), dropped with the file.
        if rustix::fs::flock(&data, FlockOperation::NonBlockingLockExclusive).is_err() {
            return Ok(false);
        }
        if self.ledger.is_placed(key)? {
            return Ok(true);
        }
        let done = self.ledger.done_pieces(key)?;
        let mut at = 0u64;
        for d in &done {
            if d.offset != at {
                return Ok(false);
            }
            at += d.len;
        }
        if at != whole || done.is_empty() {
            return Ok(false);
        }
        let shown = self.shown(rel);
        let mut hashes = Vec::new();
        let mut buf = Vec::new();
        for d in &done {
            let bs = d.block_size as u64;
            buf.resize(d.block_size as usize, 0);
            for (i, h) in d.hashes.iter().enumerate() {
                let off = i as u64 * bs;
                let n = (d.len - off).min(bs) as usize;
                FileExt::read_exact_at(&data, &mut buf[..n], d.offset + off)
                    .map_err(|e| io("read back", &shown, e))?;
                if block_hash(&buf[..n]) != *h {
                    self.ledger.drop_done(key, d.offset);
                    return Err(StoreError::new(
                        StoreErrorKind::Other,
                        format!(
                            "{}: bytes {} to {} in the shared destination are not what their shard's receiver verified and synced: another writer changed them, or the receiving hosts do not share the destination. That piece will be sent again when its shard runs again",
                            shown.display(),
                            d.offset,
                            d.offset + d.len
                        ),
                    ));
                }
                hashes.push(*h);
            }
        }
        let digest = FileDigest::of(whole, hashes.iter());
        let (mode, mtime) = self.inner.placed_meta(meta.0, meta.1, meta.2);
        use std::os::unix::fs::PermissionsExt;
        data.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| io("set mode of", &shown, e))?;
        if let Some(t) = mtime {
            data.set_times(std::fs::FileTimes::new().set_modified(t))
                .map_err(|e| io("set times of", &shown, e))?;
        }
        data.sync_all().map_err(|e| io("sync", &shown, e))?;
        let below = self.inner.place_below(rel)?;
        if self.tree.kind(&below)? == Some(rustix::fs::FileType::Directory) {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!("cannot overwrite directory {} with a file", shown.display()),
            ));
        }
        let (dir, name) = self.tree.parent(&below)?;
        // The directory keeps its time: a shard that finished before
        // this file was placed may have set it (`-p`).
        let before =
            rustix::fs::fstat(&*dir).map_err(|e| io("stat directory of", &shown, e.into()))?;
        self.ledger
            .place_data(key, &dir, name)
            .map_err(|e| io("rename into place", &shown, e))?;
        let times = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec {
                tv_sec: before.st_atime,
                tv_nsec: before.st_atime_nsec as _,
            },
            last_modification: rustix::fs::Timespec {
                tv_sec: before.st_mtime,
                tv_nsec: before.st_mtime_nsec as _,
            },
        };
        let _ = rustix::fs::futimens(&*dir, &times);
        rustix::fs::fsync(&*dir).map_err(|e| io("sync directory of", &shown, e.into()))?;
        self.ledger.mark_placed(key, &digest)?;
        Ok(true)
    }

    /// Where the shards stand, as one note; marks the ledger complete
    /// when every shard is done and every split file placed.
    fn status(&self) -> Result<String, StoreError> {
        let done = self.ledger.shards_done()?;
        let count = self.ledger.count;
        let plan = short_id(&self.ledger.plan);
        if done.len() as u32 == count {
            let keys = self.ledger.keys_of(&done)?;
            let mut unplaced = 0;
            for k in &keys {
                if !self.ledger.is_placed(k)? {
                    unplaced += 1;
                }
            }
            if unplaced == 0 {
                self.ledger.mark_complete()?;
                return Ok(format!(
                    "all {count} shards are done: the whole transfer (plan {plan}) {COMPLETE}"
                ));
            }
            return Ok(format!(
                "all {count} shards are done, but {unplaced} of the {} files split across them are not placed yet (plan {plan}); run any shard again to place them",
                keys.len()
            ));
        }
        let missing: Vec<u32> = (0..count).filter(|i| !done.contains(i)).collect();
        Ok(format!(
            "{} of {count} shards are done (plan {plan}): done {}, waiting for {}; the transfer completes once every shard has run (shards record themselves in {}, which every receiving host must share)",
            done.len(),
            list(&done),
            list(&missing),
            self.ledger.shown().display()
        ))
    }
}

/// A layer over the file sink: what is not a piece of a split file, and
/// every capability not overridden here, goes to the files beneath.
impl BlockSink for ShardSink {
    fn inner(&self) -> Option<&dyn BlockSink> {
        Some(&self.inner)
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn take_notes(&self) -> Vec<Note> {
        let mut notes = self.inner.take_notes();
        notes.extend(std::mem::take(&mut *self.notes.lock().expect("notes")));
        notes
    }

    fn open_placed(&self, rel: &[u8]) -> Result<Option<Arc<dyn Held>>, StoreError> {
        if self.pieces.contains_key(rel) {
            return Ok(None);
        }
        BlockSink::open_placed(&self.inner, rel)
    }

    fn partial_of(&self, rel: &[u8]) -> Result<Option<Arc<dyn Held>>, StoreError> {
        let Some(&(offset, whole)) = self.pieces.get(rel) else {
            return BlockSink::partial_of(&self.inner, rel);
        };
        // What an earlier run of this shard left of the piece: its
        // journal or done record says which blocks (`held_blocks`).
        let key = path_key(rel);
        let left = !self.ledger.journaled(&key, offset)?.is_empty()
            || self.ledger.done(&key, offset)?.is_some();
        if !left {
            return Ok(None);
        }
        let file: Arc<dyn Held> = match self.ledger.data_if_there(&key)? {
            Some(f) => Arc::new(f),
            None => match self.inner.open_placed(rel)? {
                Some(f) => f,
                None => return Ok(None),
            },
        };
        Ok(Some(Arc::new(Region {
            file,
            offset,
            len: whole - offset,
        })))
    }

    fn make_dir(&self, rel: &[u8], mode: u32) -> Result<(), StoreError> {
        self.inner.make_dir(rel, mode)
    }

    fn open_file(&self, id: u32, rel: &[u8], stamp: &Stamp) -> Result<(), StoreError> {
        let Some(&(offset, whole)) = self.pieces.get(rel) else {
            return self.inner.open_file(id, rel, stamp);
        };
        if offset + stamp.size > whole || stamp.block_size == 0 {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!(
                    "{}: a piece of {} bytes at {offset} does not fit a file of {whole}",
                    self.shown(rel).display(),
                    stamp.size
                ),
            ));
        }
        let key = path_key(rel);
        let data = if self.ledger.is_placed(&key)? {
            None
        } else {
            Some(self.ledger.data_file(&key, whole)?)
        };
        let p = OpenPiece {
            rel: rel.to_vec(),
            key,
            offset,
            whole,
            len: stamp.size,
            block_size: stamp.block_size,
            data,
            journal: Mutex::new(None),
            hashes: Mutex::new(Vec::new()),
            meta: Mutex::new(None),
        };
        *p.hashes.lock().expect("hashes") = vec![None; p.blocks()];
        self.open.lock().expect("pieces").insert(id, Arc::new(p));
        Ok(())
    }

    fn held_blocks(&self, id: u32) -> Result<Vec<(u32, [u8; 32])>, StoreError> {
        let Some(p) = self.piece(id) else {
            return self.inner.held_blocks(id);
        };
        // A piece recorded done (by this shard before, or by the same
        // shard run twice) is held whole; otherwise what its journal
        // lists and the shared file still holds.
        let done = self
            .ledger
            .done(&p.key, p.offset)?
            .filter(|d| d.len == p.len && d.block_size == p.block_size);
        let listed: Vec<(u32, [u8; 32])> = match (&done, &p.data) {
            (Some(d), None) => {
                let all: Vec<_> = d
                    .hashes
                    .iter()
                    .enumerate()
                    .map(|(i, h)| (i as u32, *h))
                    .collect();
                let mut hs = p.hashes.lock().expect("hashes");
                for &(i, h) in &all {
                    hs[i as usize] = Some(h);
                }
                return Ok(all);
            }
            (Some(d), Some(_)) => d
                .hashes
                .iter()
                .enumerate()
                .map(|(i, h)| (i as u32, *h))
                .collect(),
            (None, _) => self.ledger.journaled(&p.key, p.offset)?,
        };
        let Some(data) = &p.data else {
            return Ok(Vec::new());
        };
        let bs = p.block_size as u64;
        let mut buf = vec![0u8; p.block_size as usize];
        let mut held = Vec::new();
        let mut hs = p.hashes.lock().expect("hashes");
        for (i, h) in listed {
            let off = i as u64 * bs;
            if (i as usize) >= hs.len() {
                continue;
            }
            let n = (p.len - off).min(bs) as usize;
            if FileExt::read_exact_at(data, &mut buf[..n], p.offset + off).is_ok()
                && block_hash(&buf[..n]) == h
            {
                hs[i as usize] = Some(h);
                held.push((i, h));
            }
        }
        Ok(held)
    }

    fn write_block(&self, id: u32, offset: u64, data: &[u8]) -> Result<(), StoreError> {
        let Some(p) = self.piece(id) else {
            return self.inner.write_block(id, offset, data);
        };
        let Some(f) = &p.data else {
            return Ok(());
        };
        f.write_all_at(data, p.offset + offset)
            .map_err(|e| io("write", &self.shown(&p.rel), e))?;
        store::durable::start_writeback(f, p.offset + offset, data.len());
        Ok(())
    }

    fn write_zero(&self, id: u32, offset: u64, len: u32) -> Result<(), StoreError> {
        let Some(p) = self.piece(id) else {
            return self.inner.write_zero(id, offset, len);
        };
        let Some(f) = &p.data else {
            return Ok(());
        };
        f.write_all_at(&vec![0u8; len as usize], p.offset + offset)
            .map_err(|e| io("write", &self.shown(&p.rel), e))
    }

    fn record(&self, id: u32, index: u32, hash: &[u8; 32]) {
        let Some(p) = self.piece(id) else {
            return self.inner.record(id, index, hash);
        };
        if let Some(h) = p.hashes.lock().expect("hashes").get_mut(index as usize) {
            *h = Some(*hash);
        }
        let mut j = p.journal.lock().expect("journal");
        if j.is_none() {
            *j = self.ledger.journal(&p.key, p.offset).ok();
        }
        if let Some(f) = j.as_mut() {
            let mut line = [0u8; 36];
            line[..4].copy_from_slice(&index.to_le_bytes());
            line[4..].copy_from_slice(hash);
            if f.write_all(&line).is_err() {
                *j = None;
            }
        }
    }

    fn finalize(&self, batch: &[Verified]) -> Result<(), StoreError> {
        let (pieces, whole): (Vec<Verified>, Vec<Verified>) =
            batch.iter().partition(|v| self.piece(v.id).is_some());
        self.inner.finalize(&whole)?;
        for &Verified {
            id,
            mode,
            mtime,
            mtime_nsec: nsec,
        } in &pieces
        {
            let p = self.piece(id).expect("a piece");
            let shown = self.shown(&p.rel);
            if let Some(f) = &p.data {
                f.sync_data().map_err(|e| io("sync", &shown, e))?;
                let hashes: Option<Vec<[u8; 32]>> =
                    p.hashes.lock().expect("hashes").iter().copied().collect();
                let hashes = hashes.ok_or_else(|| {
                    StoreError::new(
                        StoreErrorKind::Other,
                        format!(
                            "{}: a piece was finalized with blocks missing",
                            shown.display()
                        ),
                    )
                })?;
                self.ledger.write_done(
                    &p.key,
                    &Done {
                        offset: p.offset,
                        len: p.len,
                        block_size: p.block_size,
                        hashes,
                    },
                )?;
            }
            let _ = p.journal.lock().expect("journal").take();
            // Kept for `finish`, which tries again what is not placed.
            *p.meta.lock().expect("meta") = Some((mode, mtime, nsec));
            self.try_place(&p.rel, &p.key, p.whole, (mode, mtime, nsec))?;
        }
        Ok(())
    }

    fn finish(&self, dirs: &[DirTimes]) -> Result<(), StoreError> {
        if !self.status_only {
            self.inner.finish(dirs)?;
            let pieces: Vec<Arc<OpenPiece>> = self
                .open
                .lock()
                .expect("pieces")
                .values()
                .cloned()
                .collect();
            // A piece whose file another shard finished meanwhile.
            for p in &pieces {
                let meta = *p.meta.lock().expect("meta");
                if let Some(m) = meta {
                    self.try_place(&p.rel, &p.key, p.whole, m)?;
                }
            }
            let keys: Vec<String> = pieces.iter().map(|p| p.key.clone()).collect();
            self.ledger.mark_shard_done(&keys)?;
        }
        let status = self.status()?;
        self.notes
            .lock()
            .expect("notes")
            .push((NoteKind::Shards, status));
        Ok(())
    }

    fn abort(&self) {
        self.inner.abort()
    }
}

/// The part of a file from `offset`, read as if it were the whole: what a
/// piece's earlier run left, as the receiver's partial of it.
struct Region {
    file: Arc<dyn Held>,
    offset: u64,
    len: u64,
}

impl Held for Region {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.len)
    }

    fn stat(&self) -> std::io::Result<(u64, i64, u32)> {
        let (_, t, n) = self.file.stat()?;
        Ok((self.len, t, n))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        if offset + buf.len() as u64 > self.len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "read past the end of a piece",
            ));
        }
        self.file.read_exact_at(buf, self.offset + offset)
    }
}
