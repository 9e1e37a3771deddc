//! The ledger a split transfer keeps in its shared destination (P-42):
//! `.haul-shards/TRANSFER/` beside what it places, where every receiving
//! host of every shard reads and writes:
//!
//! - `plan`: the plan's id and the shard count, published once (by a hard
//!   link, which shared file systems make atomic); a shard of another
//!   plan is refused while this one is unfinished;
//! - `data-KEY`: a file split across shards, filled at its offsets by
//!   each shard's receiver, until placed;
//! - `piece-KEY-OFFSET`: the blocks of one piece verified so far (its
//!   resume journal);
//! - `done-KEY-OFFSET`: a piece whole and synced: its length, block size
//!   and every block's hash;
//! - `placed-KEY`: the file is in place, and its digest;
//! - `shard-N`: shard N's receiver finished, and the keys of its pieces;
//! - `complete`: every shard finished and every split file is placed.
//!
//! Every name is made through the directory's descriptor, never through
//! a link, and every record is written under a temporary name, synced,
//! and renamed (or linked) into place.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use rustix::fs::{AtFlags, OFlags};
use store::beneath::Beneath;
use store::{StoreError, StoreErrorKind};
use wire::ShardSpec;

use crate::plan::short_id;

/// The directory, in the destination's tree, that holds every ledger.
pub const LEDGER_DIR: &str = ".haul-shards";

/// Most bytes of one record read back: a done record of a piece of
/// 2^40 blocks would not fit, and a peer sharing the directory may write
/// anything.
const MAX_RECORD: u64 = 256 << 20;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The key of a file's path in the ledger's names.
pub fn path_key(rel: &[u8]) -> String {
    hex(&blake3::hash(rel).as_bytes()[..16])
}

/// A piece whole and synced, as its done record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    pub offset: u64,
    pub len: u64,
    pub block_size: u32,
    pub hashes: Vec<[u8; 32]>,
}

impl Done {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(24 + 32 * self.hashes.len());
        v.extend_from_slice(&self.offset.to_le_bytes());
        v.extend_from_slice(&self.len.to_le_bytes());
        v.extend_from_slice(&self.block_size.to_le_bytes());
        v.extend_from_slice(&(self.hashes.len() as u32).to_le_bytes());
        for h in &self.hashes {
            v.extend_from_slice(h);
        }
        v
    }

    /// A record as written by [`Done::encode`], its block count checked
    /// against its length.
    pub fn decode(b: &[u8]) -> Option<Done> {
        let u64_at = |i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
        let u32_at = |i: usize| Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?));
        let (offset, len, block_size, n) = (u64_at(0)?, u64_at(8)?, u32_at(16)?, u32_at(20)?);
        if block_size == 0
            || len.div_ceil(block_size as u64) != n as u64
            || b.len() != 24 + 32 * n as usize
        {
            return None;
        }
        let hashes = b[24..]
            .chunks_exact(32)
            .map(|c| c.try_into().expect("32 bytes"))
            .collect();
        Some(Done {
            offset,
            len,
            block_size,
            hashes,
        })
    }
}

/// One transfer's ledger, opened.
pub struct Ledger {
    dir: Arc<OwnedFd>,
    shown: PathBuf,
    pub plan: [u8; 32],
    pub index: u32,
    pub count: u32,
}

fn io_err(what: &str, shown: &std::path::Path, e: io::Error) -> StoreError {
    StoreError::io(what, shown, &e)
}

impl Ledger {
    /// Opens (making it where missing) the ledger of `spec`'s transfer in
    /// `tree`, and checks that it is of the same plan; a finished ledger
    /// of another plan is started afresh.
    pub fn open(tree: &Beneath, spec: &ShardSpec) -> Result<Ledger, StoreError> {
        tree.mkdir(LEDGER_DIR.as_bytes())?;
        let rel = format!("{LEDGER_DIR}/{}", hex(&spec.transfer));
        tree.mkdir(rel.as_bytes())?;
        let ledger = Ledger {
            dir: tree.dir(rel.as_bytes())?,
            shown: tree.shown(rel.as_bytes()),
            plan: spec.plan,
            index: spec.index,
            count: spec.count,
        };
        let ours = format!("{} {}\n", hex(&spec.plan), spec.count);
        loop {
            if ledger.publish("plan", ours.as_bytes(), false)? {
                return Ok(ledger);
            }
            let theirs = ledger.read("plan")?.unwrap_or_default();
            if theirs == ours.as_bytes() {
                return Ok(ledger);
            }
            if ledger.exists("complete")? {
                // The transfer this ledger recorded is over: start anew.
                ledger.clear()?;
                continue;
            }
            let done = ledger.shards_done()?;
            let theirs = String::from_utf8_lossy(&theirs);
            let old = theirs
                .split(' ')
                .next()
                .unwrap_or("")
                .get(..16)
                .unwrap_or("?");
            return Err(StoreError::new(
                StoreErrorKind::ShardPlan,
                format!(
                    "shard {} of {} computed plan {}, but the destination's ledger {} holds plan {old} (shards done: {}): the sources changed between shards, or shards of another size were started. Run every shard again from the same sources, after removing {} to drop what the other plan left",
                    spec.index,
                    spec.count,
                    short_id(&spec.plan),
                    ledger.shown.display(),
                    list(&done),
                    ledger.shown.display(),
                ),
            ));
        }
    }

    pub fn shown(&self) -> &std::path::Path {
        &self.shown
    }

    pub fn dir(&self) -> &Arc<OwnedFd> {
        &self.dir
    }

    fn open_at(&self, name: &str, flags: OFlags, mode: u32) -> io::Result<File> {
        Beneath::open_in(&self.dir, OsStr::new(name), flags, mode)
    }

    fn exists(&self, name: &str) -> Result<bool, StoreError> {
        match rustix::fs::statat(&*self.dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(io_err("look in", &self.shown, e.into())),
        }
    }

    /// A record's bytes; `None` if there is none.
    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let f = match self.open_at(name, OFlags::RDONLY, 0) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("read", &self.shown.join(name), e)),
        };
        let mut v = Vec::new();
        f.take(MAX_RECORD)
            .read_to_end(&mut v)
            .map_err(|e| io_err("read", &self.shown.join(name), e))?;
        Ok(Some(v))
    }

    /// Writes `bytes` as record `name`: under a temporary name, synced,
    /// then renamed over (`replace`) or linked to `name` (false if it was
    /// there already).
    fn publish(&self, name: &str, bytes: &[u8], replace: bool) -> Result<bool, StoreError> {
        let temp = format!(".tmp-{name}-{}-{}", std::process::id(), unique());
        let shown = self.shown.join(name);
        let mut f = self
            .open_at(&temp, OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY, 0o600)
            .map_err(|e| io_err("write", &shown, e))?;
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| io_err("write", &shown, e))?;
        let r = if replace {
            rustix::fs::renameat(&*self.dir, temp.as_str(), &*self.dir, name).map(|()| true)
        } else {
            let linked = rustix::fs::linkat(
                &*self.dir,
                temp.as_str(),
                &*self.dir,
                name,
                AtFlags::empty(),
            );
            let _ = rustix::fs::unlinkat(&*self.dir, temp.as_str(), AtFlags::empty());
            match linked {
                Ok(()) => Ok(true),
                Err(rustix::io::Errno::EXIST) => Ok(false),
                Err(e) => Err(e),
            }
        };
        let placed = r.map_err(|e| io_err("write", &shown, e.into()))?;
        rustix::fs::fsync(&*self.dir).map_err(|e| io_err("sync", &self.shown, e.into()))?;
        Ok(placed)
    }

    /// Removes every record (a finished transfer's), the plan last.
    fn clear(&self) -> Result<(), StoreError> {
        for name in self.names()? {
            if name != "plan" {
                let _ = rustix::fs::unlinkat(&*self.dir, name.as_str(), AtFlags::empty());
            }
        }
        let _ = rustix::fs::unlinkat(&*self.dir, "plan", AtFlags::empty());
        Ok(())
    }

    fn names(&self) -> Result<Vec<String>, StoreError> {
        let dir = rustix::fs::openat(
            &*self.dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| io_err("list", &self.shown, e.into()))?;
        let mut out = Vec::new();
        let d =
            rustix::fs::Dir::read_from(&dir).map_err(|e| io_err("list", &self.shown, e.into()))?;
        for e in d {
            let e = e.map_err(|e| io_err("list", &self.shown, e.into()))?;
            let name = OsString::from(OsStr::from_bytes(e.file_name().to_bytes()));
            if let Some(n) = name.to_str().filter(|n| *n != "." && *n != "..") {
                out.push(n.to_string());
            }
        }
        Ok(out)
    }

    /// The file split across shards at key `key`, of `whole` bytes, opened
    /// to write and read at offsets (made where missing).
    pub fn data_file(&self, key: &str, whole: u64) -> Result<File, StoreError> {
        let name = format!("data-{key}");
        let shown = self.shown.join(&name);
        let f = self
            .open_at(&name, OFlags::CREATE | OFlags::RDWR, 0o600)
            .map_err(|e| io_err("open", &shown, e))?;
        let size = f.metadata().map_err(|e| io_err("stat", &shown, e))?.len();
        if size < whole {
            f.set_len(whole).map_err(|e| io_err("size", &shown, e))?;
        }
        Ok(f)
    }

    /// The file at key `key`, if it is still in the ledger (not placed).
    pub fn data_if_there(&self, key: &str) -> Result<Option<File>, StoreError> {
        let name = format!("data-{key}");
        match self.open_at(&name, OFlags::RDWR, 0) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("open", &self.shown.join(name), e)),
        }
    }

    /// Moves the file at key `key` to `name` in `dir`.
    pub fn place_data(&self, key: &str, dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
        rustix::fs::renameat(&*self.dir, format!("data-{key}").as_str(), dir, name)
            .map_err(Into::into)
    }

    /// The blocks a piece's journal lists: `(index, hash)`.
    pub fn journaled(&self, key: &str, offset: u64) -> Result<Vec<(u32, [u8; 32])>, StoreError> {
        let Some(b) = self.read(&format!("piece-{key}-{offset}"))? else {
            return Ok(Vec::new());
        };
        Ok(b.chunks_exact(36)
            .map(|c| {
                let i = u32::from_le_bytes(c[..4].try_into().expect("4 bytes"));
                (i, c[4..].try_into().expect("32 bytes"))
            })
            .collect())
    }

    /// Opens a piece's journal to append to.
    pub fn journal(&self, key: &str, offset: u64) -> Result<File, StoreError> {
        let name = format!("piece-{key}-{offset}");
        self.open_at(
            &name,
            OFlags::CREATE | OFlags::WRONLY | OFlags::APPEND,
            0o600,
        )
        .map_err(|e| io_err("open", &self.shown.join(name), e))
    }

    /// Records a piece whole and synced, and drops its journal.
    pub fn write_done(&self, key: &str, done: &Done) -> Result<(), StoreError> {
        self.publish(&format!("done-{key}-{}", done.offset), &done.encode(), true)?;
        let _ = rustix::fs::unlinkat(
            &*self.dir,
            format!("piece-{key}-{}", done.offset).as_str(),
            AtFlags::empty(),
        );
        Ok(())
    }

    /// Forgets a piece found damaged, so that its shard sends it again.
    pub fn drop_done(&self, key: &str, offset: u64) {
        let _ = rustix::fs::unlinkat(
            &*self.dir,
            format!("done-{key}-{offset}").as_str(),
            AtFlags::empty(),
        );
    }

    /// The done records of the file at key `key`, by offset; records that
    /// do not decode are left out (their pieces are sent again).
    pub fn done_pieces(&self, key: &str) -> Result<Vec<Done>, StoreError> {
        let prefix = format!("done-{key}-");
        let mut out = Vec::new();
        for name in self.names()? {
            let Some(off) = name
                .strip_prefix(&prefix)
                .and_then(|o| o.parse::<u64>().ok())
            else {
                continue;
            };
            if let Some(d) = self.read(&name)?.and_then(|b| Done::decode(&b)) {
                if d.offset == off {
                    out.push(d);
                }
            }
        }
        out.sort_by_key(|d| d.offset);
        Ok(out)
    }

    /// The done record of one piece.
    pub fn done(&self, key: &str, offset: u64) -> Result<Option<Done>, StoreError> {
        Ok(self
            .read(&format!("done-{key}-{offset}"))?
            .and_then(|b| Done::decode(&b))
            .filter(|d| d.offset == offset))
    }

    pub fn is_placed(&self, key: &str) -> Result<bool, StoreError> {
        self.exists(&format!("placed-{key}"))
    }

    pub fn mark_placed(&self, key: &str, digest: &[u8; 32]) -> Result<(), StoreError> {
        self.publish(&format!("placed-{key}"), hex(digest).as_bytes(), true)
            .map(|_| ())
    }

    /// Records that this shard's receiver finished; `keys`: its pieces.
    pub fn mark_shard_done(&self, keys: &[String]) -> Result<(), StoreError> {
        let body = keys.join("\n");
        self.publish(&format!("shard-{}", self.index), body.as_bytes(), true)
            .map(|_| ())
    }

    /// The shards whose receivers finished, and the keys of all their
    /// pieces.
    pub fn shards_done(&self) -> Result<Vec<u32>, StoreError> {
        let mut done: Vec<u32> = self
            .names()?
            .iter()
            .filter_map(|n| n.strip_prefix("shard-")?.parse().ok())
            .filter(|&i| i < self.count)
            .collect();
        done.sort_unstable();
        Ok(done)
    }

    /// The keys of the pieces that finished shards moved.
    pub fn keys_of(&self, shards: &[u32]) -> Result<Vec<String>, StoreError> {
        let mut keys = Vec::new();
        for i in shards {
            if let Some(b) = self.read(&format!("shard-{i}"))? {
                keys.extend(
                    String::from_utf8_lossy(&b)
                        .lines()
                        .filter(|l| l.len() == 32)
                        .map(str::to_string),
                );
            }
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    pub fn mark_complete(&self) -> Result<(), StoreError> {
        self.publish("complete", hex(&self.plan).as_bytes(), true)
            .map(|_| ())
    }

    pub fn is_complete(&self) -> Result<bool, StoreError> {
        self.exists("complete")
    }
}

/// Shard numbers as a person reads them: "0-3, 5".
pub fn list(shards: &[u32]) -> String {
    if shards.is_empty() {
        return "none".into();
    }
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < shards.len() {
        let mut j = i;
        while j + 1 < shards.len() && shards[j + 1] == shards[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            shards[i].to_string()
        } else {
            format!("{}-{}", shards[i], shards[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

/// A name part no other writer of the directory picks: receivers on
/// other hosts may have this process's id.
fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let mut h = blake3::Hasher::new();
    h.update(&t.to_le_bytes());
    h.update(&N.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    hex(&h.finalize().as_bytes()[..8])
}
