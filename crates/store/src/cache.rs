//! The receiver's persistent chunk cache (`--cache DIR`, P-31), like a WAN
//! optimizer's byte cache: every chunk of every file received is kept, so
//! a later transfer can copy chunks seen before, in any file, instead of
//! receiving them.
//!
//! Layout of `DIR`: chunk bytes are appended to segment files
//! (`NNNNNNNN.seg`, up to [`SEGMENT_BYTES`] each); `index` maps each
//! chunk's short hash to its segment, offset and length and records when
//! each segment was last used. The cache stays within its size limit by
//! removing whole segments, least recently used first. `lock` is held
//! (flock) while a process uses the cache; another process finds it busy
//! and goes without.
//!
//! Nothing here is trusted for correctness: a chunk read from the cache is
//! checked with the block it rebuilds, by the block's hash.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::StoreError;

/// Largest segment file.
pub const SEGMENT_BYTES: u64 = 64 << 20;
const MAGIC: &[u8; 12] = b"haul-cache1\n";

#[derive(Clone, Copy)]
struct Loc {
    seg: u32,
    offset: u32,
    len: u32,
}

struct Segment {
    len: u64,
    /// Seconds since the epoch (or a counter, whichever is larger) when a
    /// chunk of it was last stored or read.
    used: u64,
    file: Option<Arc<File>>,
}

struct Inner {
    index: HashMap<[u8; 16], Loc>,
    segs: BTreeMap<u32, Segment>,
    /// Ticks on every use, so uses within one second still order.
    clock: u64,
    dirty: bool,
}

pub struct ChunkCache {
    dir: PathBuf,
    limit: u64,
    inner: Mutex<Inner>,
    _lock: File,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn seg_path(dir: &Path, seg: u32) -> PathBuf {
    dir.join(format!("{seg:08}.seg"))
}

impl ChunkCache {
    /// Opens (creating) the cache in `dir`, at most `limit` bytes of
    /// chunks. `Ok(None)`: another process is using it.
    pub fn open(dir: &Path, limit: u64) -> Result<Option<ChunkCache>, StoreError> {
        fs::create_dir_all(dir).map_err(|e| StoreError::io("create the cache", dir, &e))?;
        let lock_path = dir.join("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| StoreError::io("open", &lock_path, &e))?;
        // SAFETY: flock on a descriptor we own; no memory is passed.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Ok(None);
        }
        let mut inner = Inner {
            index: HashMap::new(),
            segs: BTreeMap::new(),
            clock: now_secs(),
            dirty: false,
        };
        match fs::read(dir.join("index")) {
            Ok(b) => {
                if load(&b, &mut inner).is_none() {
                    eprintln!(
                        "haul: the chunk cache index in {} is damaged; starting the cache afresh",
                        dir.display()
                    );
                    inner.index.clear();
                    inner.segs.clear();
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io("read the cache index in", dir, &e)),
        }
        // Segments the index does not know (a crash before it was saved)
        // hold nothing reachable: remove them.
        if let Ok(rd) = fs::read_dir(dir) {
            for e in rd.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if let Some(n) = name
                    .strip_suffix(".seg")
                    .and_then(|n| n.parse::<u32>().ok())
                {
                    if !inner.segs.contains_key(&n) {
                        let _ = fs::remove_file(e.path());
                    }
                }
            }
        }
        Ok(Some(ChunkCache {
            dir: dir.to_path_buf(),
            limit: limit.max(SEGMENT_BYTES),
            inner: Mutex::new(inner),
            _lock: lock,
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every chunk held, as the wire names them.
    pub fn ids(&self) -> Vec<([u8; 16], u32)> {
        self.lock().index.iter().map(|(h, l)| (*h, l.len)).collect()
    }

    pub fn len(&self) -> usize {
        self.lock().index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of segments on disk.
    pub fn bytes(&self) -> u64 {
        self.lock().segs.values().map(|s| s.len).sum()
    }

    fn segment_file(&self, inner: &mut Inner, seg: u32) -> io::Result<Arc<File>> {
        let s = inner
            .segs
            .get_mut(&seg)
            .ok_or_else(|| io::Error::other("segment gone"))?;
        if let Some(f) = &s.file {
            return Ok(f.clone());
        }
        let f = Arc::new(
            OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .open(seg_path(&self.dir, seg))?,
        );
        // Appends go to the file's real end, which a crash after writing
        // and before saving the index may have moved.
        s.len = s.len.max(f.metadata()?.len());
        s.file = Some(f.clone());
        Ok(f)
    }

    /// Copies `out.len()` bytes of chunk `hash`, from `skip` bytes in.
    /// `Ok(false)`: the cache does not hold it (any more).
    pub fn read(&self, hash: &[u8; 16], skip: u32, out: &mut [u8]) -> io::Result<bool> {
        let (loc, file) = {
            let mut inner = self.lock();
            let Some(loc) = inner.index.get(hash).copied() else {
                return Ok(false);
            };
            if skip as u64 + out.len() as u64 > loc.len as u64 {
                return Ok(false);
            }
            inner.clock += 1;
            let clock = inner.clock;
            if let Some(s) = inner.segs.get_mut(&loc.seg) {
                s.used = clock;
            }
            inner.dirty = true;
            (loc, self.segment_file(&mut inner, loc.seg)?)
        };
        file.read_exact_at(out, loc.offset as u64 + skip as u64)?;
        Ok(true)
    }

    /// Stores every chunk of the file at `path` that the cache lacks;
    /// returns the bytes added.
    pub fn insert_file(&self, path: &Path) -> io::Result<u64> {
        let f = File::open(path)?;
        let mut added = 0u64;
        let mut err = None;
        chunk::chunks_of(io::BufReader::with_capacity(1 << 20, f), |c, data| {
            if err.is_some() {
                return;
            }
            match self.insert(&chunk::short(&c.hash), data) {
                Ok(n) => added += n,
                Err(e) => err = Some(e),
            }
        })?;
        match err {
            Some(e) => Err(e),
            None => Ok(added),
        }
    }

    /// Stores one chunk unless held; returns the bytes added.
    pub fn insert(&self, hash: &[u8; 16], data: &[u8]) -> io::Result<u64> {
        let mut inner = self.lock();
        inner.clock += 1;
        let clock = inner.clock;
        if let Some(loc) = inner.index.get(hash).copied() {
            if let Some(s) = inner.segs.get_mut(&loc.seg) {
                s.used = clock;
            }
            return Ok(0);
        }
        let seg = match inner.segs.iter().next_back() {
            Some((&n, s)) if s.len + data.len() as u64 <= SEGMENT_BYTES => n,
            Some((&n, _)) => n + 1,
            None => 0,
        };
        inner.segs.entry(seg).or_insert(Segment {
            len: 0,
            used: clock,
            file: None,
        });
        let file = self.segment_file(&mut inner, seg)?;
        let offset = inner.segs[&seg].len;
        (&*file).write_all(data)?;
        let s = inner.segs.get_mut(&seg).expect("made above");
        s.len += data.len() as u64;
        s.used = clock;
        inner.index.insert(
            *hash,
            Loc {
                seg,
                offset: offset as u32,
                len: data.len() as u32,
            },
        );
        inner.dirty = true;
        self.evict(&mut inner);
        Ok(data.len() as u64)
    }

    /// Removes least recently used segments (never the one being filled)
    /// until the cache fits its limit.
    fn evict(&self, inner: &mut Inner) {
        let last = inner.segs.keys().next_back().copied();
        while inner.segs.values().map(|s| s.len).sum::<u64>() > self.limit {
            let victim = inner
                .segs
                .iter()
                .filter(|(n, _)| Some(**n) != last)
                .min_by_key(|(_, s)| s.used)
                .map(|(n, _)| *n);
            let Some(v) = victim else { break };
            inner.segs.remove(&v);
            inner.index.retain(|_, l| l.seg != v);
            let _ = fs::remove_file(seg_path(&self.dir, v));
            inner.dirty = true;
        }
    }

    /// Writes the index (under a temporary name, then renamed).
    pub fn save(&self) -> io::Result<()> {
        let mut inner = self.lock();
        if !inner.dirty {
            return Ok(());
        }
        for s in inner.segs.values() {
            if let Some(f) = &s.file {
                f.sync_data()?;
            }
        }
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&inner.clock.to_le_bytes());
        b.extend_from_slice(&(inner.segs.len() as u64).to_le_bytes());
        for (n, s) in &inner.segs {
            b.extend_from_slice(&n.to_le_bytes());
            b.extend_from_slice(&s.len.to_le_bytes());
            b.extend_from_slice(&s.used.to_le_bytes());
        }
        b.extend_from_slice(&(inner.index.len() as u64).to_le_bytes());
        for (h, l) in &inner.index {
            b.extend_from_slice(h);
            b.extend_from_slice(&l.seg.to_le_bytes());
            b.extend_from_slice(&l.offset.to_le_bytes());
            b.extend_from_slice(&l.len.to_le_bytes());
        }
        let sum = blake3::hash(&b);
        b.extend_from_slice(sum.as_bytes());
        let tmp = self.dir.join("index.tmp");
        let mut f = File::create(&tmp)?;
        f.write_all(&b)?;
        f.sync_all()?;
        fs::rename(&tmp, self.dir.join("index"))?;
        inner.dirty = false;
        Ok(())
    }
}

impl Drop for ChunkCache {
    fn drop(&mut self) {
        let _ = self.save();
    }
}

/// Whether `b` is an index [`ChunkCache::save`] could have written (its
/// checksum and every field): the decoder, for fuzzing and tests.
pub fn index_is_valid(b: &[u8]) -> bool {
    let mut inner = Inner {
        index: HashMap::new(),
        segs: BTreeMap::new(),
        clock: 0,
        dirty: false,
    };
    load(b, &mut inner).is_some()
}

/// Reads an index written by [`ChunkCache::save`]; `None` if damaged.
fn load(b: &[u8], inner: &mut Inner) -> Option<()> {
    let (body, sum) = b.split_at_checked(b.len().checked_sub(32)?)?;
    if blake3::hash(body).as_bytes() != sum || !body.starts_with(MAGIC) {
        return None;
    }
    let mut at = MAGIC.len();
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = body.get(at..at + n)?;
        at += n;
        Some(s)
    };
    let u64_of = |s: &[u8]| u64::from_le_bytes(s.try_into().expect("8 bytes"));
    let u32_of = |s: &[u8]| u32::from_le_bytes(s.try_into().expect("4 bytes"));
    inner.clock = inner.clock.max(u64_of(take(8)?));
    let nsegs = u64_of(take(8)?);
    for _ in 0..nsegs {
        let n = u32_of(take(4)?);
        let len = u64_of(take(8)?);
        let used = u64_of(take(8)?);
        inner.segs.insert(
            n,
            Segment {
                len,
                used,
                file: None,
            },
        );
    }
    let nchunks = u64_of(take(8)?);
    for _ in 0..nchunks {
        let h: [u8; 16] = take(16)?.try_into().ok()?;
        let seg = u32_of(take(4)?);
        let offset = u32_of(take(4)?);
        let len = u32_of(take(4)?);
        if !inner.segs.contains_key(&seg) {
            return None;
        }
        inner.index.insert(h, Loc { seg, offset, len });
    }
    Some(())
}

/// `--cache-size`'s default.
pub const DEFAULT_CACHE_BYTES: u64 = 10 << 30;

/// Opens the cache for a receiving side, or says why it goes without.
pub fn open_for_transfer(dir: &Path, limit: u64) -> Result<Option<ChunkCache>, StoreError> {
    match ChunkCache::open(dir, limit)? {
        Some(c) => Ok(Some(c)),
        None => {
            eprintln!(
                "haul: the chunk cache {} is in use by another transfer; this one goes without it",
                dir.display()
            );
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn keeps_chunks_across_opens_and_evicts_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("cache");
        let data = noise(3 << 20, 1);
        let f = dir.path().join("f");
        fs::write(&f, &data).unwrap();
        {
            let c = ChunkCache::open(&d, 1 << 30).unwrap().unwrap();
            assert!(ChunkCache::open(&d, 1 << 30).unwrap().is_none(), "locked");
            assert_eq!(c.insert_file(&f).unwrap(), data.len() as u64);
            assert_eq!(c.insert_file(&f).unwrap(), 0, "nothing new");
        }
        let c = ChunkCache::open(&d, 1 << 30).unwrap().unwrap();
        let chunks = chunk::chunks(&data);
        assert_eq!(c.len(), chunks.len());
        for ch in &chunks {
            let mut out = vec![0u8; ch.len as usize - 10];
            assert!(c.read(&chunk::short(&ch.hash), 10, &mut out).unwrap());
            let o = ch.offset as usize + 10;
            assert!(out == data[o..o + out.len()]);
        }
        assert!(!c.read(&[7; 16], 0, &mut [0u8; 4]).unwrap());
        drop(c);

        // Fill past the limit: the oldest segments go, the cache stays
        // within bounds, and a chunk just used survives.
        let c = ChunkCache::open(&d, SEGMENT_BYTES * 2).unwrap().unwrap();
        let keep = chunk::short(&chunks[0].hash);
        let first = noise(40 << 20, 10);
        for i in 0..5u64 {
            c.insert(&keep, b"ignored: already held").unwrap();
            let big = noise(40 << 20, 10 + i);
            let p = dir.path().join(format!("big{i}"));
            fs::write(&p, &big).unwrap();
            c.insert_file(&p).unwrap();
            assert!(c.bytes() <= SEGMENT_BYTES * 2 + SEGMENT_BYTES);
        }
        assert!(c.bytes() <= SEGMENT_BYTES * 3);
        let mut out = vec![0u8; 8];
        assert!(
            c.read(&keep, 0, &mut out).unwrap(),
            "recently used chunk evicted"
        );
        let gone = chunk::chunks(&first)
            .iter()
            .filter(|ch| !c.read(&chunk::short(&ch.hash), 0, &mut out).unwrap())
            .count();
        assert!(gone > 100, "only {gone} chunks of the oldest file evicted");
    }

    #[test]
    fn a_damaged_index_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("cache");
        {
            let c = ChunkCache::open(&d, 1 << 30).unwrap().unwrap();
            c.insert(&[1; 16], b"hello").unwrap();
        }
        let mut idx = fs::read(d.join("index")).unwrap();
        let n = idx.len();
        idx[n / 2] ^= 1;
        fs::write(d.join("index"), &idx).unwrap();
        let c = ChunkCache::open(&d, 1 << 30).unwrap().unwrap();
        assert!(c.is_empty());
        assert!(fs::read_dir(&d)
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().ends_with(".seg")));
    }
}
