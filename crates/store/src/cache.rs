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
//!
//! A daemon's cache (`haul serve --cache DIR`, [`open_for_daemon`]) is one
//! cache per client key, in `DIR/peers/FINGERPRINT/`
//! ([`ChunkCache::for_peer`]): a receiver announces its cache's chunk
//! hashes to every sender (P-31), so a cache shared by several clients
//! would tell each the hashes of the others' data (issue 23). The root
//! holds the lock and nothing else.
//!
//! Every file here is opened without following a symlink (`O_NOFOLLOW`),
//! and so is a placed file read into the cache ([`ChunkCache::insert_file`]),
//! so a link swapped in for a name is never read or written through.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
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
    /// A daemon's root: one cache per client key, opened on first use and
    /// kept open (and locked) while the daemon runs. `None`: a cache of
    /// its own, which [`ChunkCache::for_peer`] gives every peer.
    peers: Option<Mutex<HashMap<String, Arc<ChunkCache>>>>,
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

/// Options that never follow a symlink at the last component (`open` of a
/// link fails with `ELOOP`).
fn no_follow() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.custom_flags(libc::O_NOFOLLOW);
    o
}

/// Reads the file at `path` whole, refusing a symlink.
fn read_no_follow(path: &Path) -> io::Result<Vec<u8>> {
    let mut b = Vec::new();
    no_follow().read(true).open(path)?.read_to_end(&mut b)?;
    Ok(b)
}

/// Where the caches of a daemon's clients live, under its root.
const PEERS: &str = "peers";

/// The directory name of a client key's cache: its fingerprint
/// (`b3:HEX`) with `:` as `-`. `None` for anything that is not plainly a
/// fingerprint, so no name can climb or hide.
fn peer_dir_name(fingerprint: &str) -> Option<String> {
    let name = fingerprint.replace(':', "-");
    let plain = (1..=128).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    plain.then_some(name)
}

/// Creates `dir` (one level) unless it is there, and refuses it unless it
/// is a directory itself, not a link to one.
fn own_dir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    if fs::symlink_metadata(dir)?.file_type().is_dir() {
        Ok(())
    } else {
        Err(io::Error::other("not a directory of its own (a link?)"))
    }
}

/// Creates `dir` if missing and takes its lock; `None` if another process
/// holds it.
fn lock_dir(dir: &Path) -> Result<Option<File>, StoreError> {
    fs::create_dir_all(dir).map_err(|e| StoreError::io("create the cache", dir, &e))?;
    let lock_path = dir.join("lock");
    let lock = no_follow()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| StoreError::io("open", &lock_path, &e))?;
    // SAFETY: flock on a descriptor we own; no memory is passed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Ok(None);
    }
    Ok(Some(lock))
}

impl ChunkCache {
    /// Opens (creating) the cache in `dir`, at most `limit` bytes of
    /// chunks. `Ok(None)`: another process is using it.
    pub fn open(dir: &Path, limit: u64) -> Result<Option<ChunkCache>, StoreError> {
        let Some(lock) = lock_dir(dir)? else {
            return Ok(None);
        };
        let mut inner = Inner {
            index: HashMap::new(),
            segs: BTreeMap::new(),
            clock: now_secs(),
            dirty: false,
        };
        match read_no_follow(&dir.join("index")) {
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
            peers: None,
            _lock: lock,
        }))
    }

    /// Opens (creating) a daemon's cache root in `dir`: one cache per
    /// client key under `dir/peers/`, each at most `limit` bytes, given
    /// out by [`ChunkCache::for_peer`]. The root holds no chunks itself: a
    /// cache that every client shared (an earlier release's, or a pulling
    /// client's in the same directory) is removed, since its chunks cannot
    /// be told apart by client. `Ok(None)`: another process is using it.
    pub fn open_per_peer(dir: &Path, limit: u64) -> Result<Option<ChunkCache>, StoreError> {
        let Some(lock) = lock_dir(dir)? else {
            return Ok(None);
        };
        let mut shared = 0;
        if let Ok(rd) = fs::read_dir(dir) {
            for e in rd.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name == "index" || name == "index.tmp" || name.ends_with(".seg") {
                    shared += fs::remove_file(e.path()).is_ok() as usize;
                }
            }
        }
        if shared > 0 {
            eprintln!(
                "haul: removed the chunk cache shared by every client in {}; each client key now has its own under {PEERS}/",
                dir.display()
            );
        }
        let peers = dir.join(PEERS);
        own_dir(&peers).map_err(|e| StoreError::io("create the cache", &peers, &e))?;
        Ok(Some(ChunkCache {
            dir: dir.to_path_buf(),
            limit: limit.max(SEGMENT_BYTES),
            inner: Mutex::new(Inner {
                index: HashMap::new(),
                segs: BTreeMap::new(),
                clock: now_secs(),
                dirty: false,
            }),
            peers: Some(Mutex::new(HashMap::new())),
            _lock: lock,
        }))
    }

    /// The cache a session with the client whose key has this fingerprint
    /// uses: under a daemon's root ([`ChunkCache::open_per_peer`]), that
    /// key's own (opened, or created, on first use and kept open), so one
    /// client's chunks are never announced to another; any other cache is
    /// its own (one login's, over ssh). `None`: the session goes without
    /// (a name that is not a fingerprint, or a cache that would not open,
    /// with a notice).
    pub fn for_peer(self: &Arc<Self>, key_fingerprint: &str) -> Option<Arc<ChunkCache>> {
        let Some(peers) = &self.peers else {
            return Some(self.clone());
        };
        let Some(name) = peer_dir_name(key_fingerprint) else {
            tracing::warn!("no chunk cache for a key named {key_fingerprint:?}");
            return None;
        };
        let mut open = peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = open.get(&name) {
            return Some(c.clone());
        }
        let dir = self.dir.join(PEERS).join(&name);
        let opened = own_dir(&dir)
            .map_err(|e| StoreError::io("create the cache", &dir, &e))
            .and_then(|()| ChunkCache::open(&dir, self.limit));
        match opened {
            Ok(Some(c)) => {
                let c = Arc::new(c);
                open.insert(name, c.clone());
                Some(c)
            }
            Ok(None) => {
                tracing::warn!(
                    "the chunk cache {} is in use by another process; going without",
                    dir.display()
                );
                None
            }
            Err(e) => {
                tracing::warn!("going without a chunk cache: {}", e.message);
                None
            }
        }
    }

    /// Whether this is a daemon's root, one cache per client key.
    pub fn is_per_peer(&self) -> bool {
        self.peers.is_some()
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

    /// Bytes of segments on disk; for a daemon's root, of every client's
    /// cache.
    pub fn bytes(&self) -> u64 {
        let own: u64 = self.lock().segs.values().map(|s| s.len).sum();
        if self.peers.is_none() {
            return own;
        }
        let segs = |dir: PathBuf| -> u64 {
            fs::read_dir(dir).map_or(0, |rd| {
                rd.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
        };
        let peers = fs::read_dir(self.dir.join(PEERS)).into_iter().flatten();
        own + peers.flatten().map(|e| segs(e.path())).sum::<u64>()
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
            no_follow()
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
    /// returns the bytes added. The file is opened without following a
    /// link (a link swapped in for a placed file after its placement is
    /// refused, not read through), and must be a regular file.
    pub fn insert_file(&self, path: &Path) -> io::Result<u64> {
        // Non-blocking, so that a FIFO swapped in cannot hold the open.
        let f = no_follow()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)?;
        if !f.metadata()?.file_type().is_file() {
            return Err(io::Error::other(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        self.insert_open(&f)
    }

    /// Stores every chunk of an open file that the cache lacks, read from
    /// its start; returns the bytes added.
    pub fn insert_open(&self, f: &dyn crate::storage::Held) -> io::Result<u64> {
        let mut added = 0u64;
        let mut err = None;
        let from_start = crate::storage::HeldReader::new(f)?;
        chunk::chunks_of(
            io::BufReader::with_capacity(1 << 20, from_start),
            |c, data| {
                if err.is_some() {
                    return;
                }
                match self.insert(&chunk::short(&c.hash), data) {
                    Ok(n) => added += n,
                    Err(e) => err = Some(e),
                }
            },
        )?;
        match err {
            Some(e) => Err(e),
            None => Ok(added),
        }
    }

    /// Stores one chunk unless held; returns the bytes added. A daemon's
    /// root stores nothing: its clients' chunks go to their own caches.
    pub fn insert(&self, hash: &[u8; 16], data: &[u8]) -> io::Result<u64> {
        if self.peers.is_some() {
            return Ok(0);
        }
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
        let file = match self.segment_file(&mut inner, seg) {
            Ok(f) => f,
            Err(e) => {
                // A segment begun here and never written is forgotten.
                if inner.segs.get(&seg).is_some_and(|s| s.len == 0) {
                    inner.segs.remove(&seg);
                }
                return Err(e);
            }
        };
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
        // A fresh file: whatever had the name (a link included) goes.
        match fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut f = no_follow().write(true).create_new(true).open(&tmp)?;
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

/// Opens a daemon's cache (`haul serve --cache`): one cache per client
/// key ([`ChunkCache::open_per_peer`]), or says why it goes without.
pub fn open_for_daemon(dir: &Path, limit: u64) -> Result<Option<ChunkCache>, StoreError> {
    match ChunkCache::open_per_peer(dir, limit)? {
        Some(c) => Ok(Some(c)),
        None => {
            eprintln!(
                "haul: the chunk cache {} is in use by another process; this server goes without it",
                dir.display()
            );
            Ok(None)
        }
    }
}

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

    const A: &str = "b3:0123456789abcdef0123456789abcdef";
    const B: &str = "b3:fedcba9876543210fedcba9876543210";

    #[test]
    fn each_client_key_has_its_own_cache() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("cache");
        {
            let root = Arc::new(ChunkCache::open_per_peer(&d, 1 << 30).unwrap().unwrap());
            assert!(root.is_per_peer());
            assert!(
                ChunkCache::open_per_peer(&d, 1 << 30).unwrap().is_none(),
                "locked"
            );
            let a = root.for_peer(A).unwrap();
            let b = root.for_peer(B).unwrap();
            assert!(Arc::ptr_eq(&a, &root.for_peer(A).unwrap()), "opened once");
            assert_eq!(a.insert(&[1; 16], b"client a's chunk").unwrap(), 16);
            // B is told nothing of A's chunks, and the root keeps none.
            assert!(b.is_empty() && b.ids().is_empty());
            assert!(!b.read(&[1; 16], 0, &mut [0u8; 4]).unwrap());
            assert_eq!(root.insert(&[2; 16], b"nobody's").unwrap(), 0);
            assert!(root.is_empty());
            assert_eq!(a.ids(), vec![([1; 16], 16)]);
            assert!(root.bytes() >= 16);
            assert!(d
                .join("peers/b3-0123456789abcdef0123456789abcdef/lock")
                .exists());
            // Names that are not fingerprints get no cache.
            for bad in ["", "../x", "a/b", ".hidden", "b3:..", "x\0y"] {
                assert!(root.for_peer(bad).is_none(), "{bad:?}");
            }
        }
        // Kept across opens, still apart.
        let root = Arc::new(ChunkCache::open_per_peer(&d, 1 << 30).unwrap().unwrap());
        let mut out = [0u8; 6];
        assert!(root
            .for_peer(A)
            .unwrap()
            .read(&[1; 16], 0, &mut out)
            .unwrap());
        assert_eq!(&out, b"client");
        assert!(root.for_peer(B).unwrap().is_empty());
        // A cache of its own (a pull's, or over ssh) is every peer's.
        let own = Arc::new(
            ChunkCache::open(&dir.path().join("own"), 1 << 30)
                .unwrap()
                .unwrap(),
        );
        assert!(!own.is_per_peer());
        assert!(Arc::ptr_eq(&own, &own.for_peer(A).unwrap()));
    }

    #[test]
    fn a_cache_shared_by_every_client_is_not_kept_by_a_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("cache");
        {
            let shared = ChunkCache::open(&d, 1 << 30).unwrap().unwrap();
            shared.insert(&[3; 16], b"anyone's chunk").unwrap();
        }
        assert!(d.join("index").exists() && d.join("00000000.seg").exists());
        let root = Arc::new(ChunkCache::open_per_peer(&d, 1 << 30).unwrap().unwrap());
        assert!(!d.join("index").exists() && !d.join("00000000.seg").exists());
        assert!(root.is_empty());
        assert!(root.for_peer(A).unwrap().is_empty());
    }

    #[test]
    fn links_are_never_followed() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("cache");
        let victim = dir.path().join("victim");
        fs::write(&victim, b"not the cache's").unwrap();
        let c = ChunkCache::open(&d, 1 << 30).unwrap().unwrap();

        // A placed file swapped for a link to another file, or a FIFO.
        let placed = dir.path().join("placed");
        symlink(&victim, &placed).unwrap();
        assert!(c.insert_file(&placed).is_err());
        assert!(c.is_empty());
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        assert!(c.insert_file(&fifo).is_err(), "refused, not blocked on");
        // An open file is read from its start, whatever its offset.
        let real = dir.path().join("real");
        fs::write(&real, noise(100_000, 4)).unwrap();
        let mut f = File::open(&real).unwrap();
        let mut skip = [0u8; 500];
        f.read_exact(&mut skip).unwrap();
        assert_eq!(c.insert_open(&f).unwrap(), 100_000);

        // The index's temporary name made a link: nothing is written
        // through it.
        let victim_bytes = fs::read(&victim).unwrap();
        symlink(&victim, d.join("index.tmp")).unwrap();
        c.save().unwrap();
        assert_eq!(fs::read(&victim).unwrap(), victim_bytes);
        assert!(!d.join("index.tmp").exists());
        assert!(index_is_valid(&fs::read(d.join("index")).unwrap()));
        drop(c);
        // A segment made a link: refused, and forgotten.
        let d2 = dir.path().join("cache2");
        let c2 = ChunkCache::open(&d2, 1 << 30).unwrap().unwrap();
        symlink(&victim, d2.join("00000000.seg")).unwrap();
        assert!(c2.insert(&[5; 16], b"through a link?").is_err());
        assert_eq!(fs::read(&victim).unwrap(), victim_bytes);
        assert!(c2.is_empty() && c2.bytes() == 0);

        // The index itself a link: refused, the cache starts afresh.
        fs::remove_file(d.join("index")).unwrap();
        symlink(&victim, d.join("index")).unwrap();
        assert!(ChunkCache::open(&d, 1 << 30).is_err());
        fs::remove_file(d.join("index")).unwrap();

        // A client's directory that is a link is not used.
        let root = Arc::new(ChunkCache::open_per_peer(&d, 1 << 30).unwrap().unwrap());
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        symlink(
            &elsewhere,
            d.join("peers/b3-fedcba9876543210fedcba9876543210"),
        )
        .unwrap();
        assert!(root.for_peer(B).is_none());
        assert!(fs::read_dir(&elsewhere).unwrap().next().is_none());
    }

    #[test]
    fn reads_past_a_chunk_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let c = ChunkCache::open(&dir.path().join("c"), 1 << 30)
            .unwrap()
            .unwrap();
        c.insert(&[1; 16], b"0123456789").unwrap();
        let mut out = [0u8; 4];
        assert!(c.read(&[1; 16], 6, &mut out).unwrap());
        assert_eq!(&out, b"6789");
        assert!(!c.read(&[1; 16], 7, &mut out).unwrap());
        assert!(!c.read(&[1; 16], u32::MAX, &mut out).unwrap());
    }
}
