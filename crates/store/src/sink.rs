//! The destination side of the file system (P-17, P-38).
//!
//! A file is written under a temporary name beside its final one
//! (`.NAME.haul.part`, kept for resume if the transfer stops: see
//! [`crate::partial`]), preallocated (on tmpfs: checked against the free
//! space) so a full disk is found early, and renamed into place only after
//! the session says it is verified and after its data is synced: nothing
//! incomplete or unverified ever sits under a final name. Directory modes
//! and times are applied last, deepest first, so a read-only directory can
//! still be filled.
//!
//! Every entry is reached from the destination's directory descriptor
//! through [`Beneath`], never by path and never through a link (P-38):
//! temporaries, journals, final names, directories, deletions, modes and
//! times alike.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{FileType, OFlags};
use session::paths::{self, Placement};

use crate::beneath::{self, Beneath};
use crate::confine::Root;
use crate::durable::{self, SyncObserver};
use crate::error::{StoreError, StoreErrorKind};
use crate::out_file::{Handle, MAX_OPEN};
pub use crate::out_file::{Notes, OutFile};
use crate::partial::{self, Holder, Kept};
pub use crate::storage::{Extraneous, Note};
use std::os::fd::OwnedFd;
use wire::NoteKind;

/// Where received entries go.
pub enum Destination {
    /// Under `base`, placed by the scp rule, never outside `root`.
    /// `make_base`: `base` is a directory to create if it is missing (a
    /// `dir/` source), when the first entry arrives or at the end.
    Path {
        base: PathBuf,
        placement: Placement,
        root: Root,
        make_base: bool,
    },
    /// Verified, then discarded (`/dev/null`).
    Null,
    /// The single file's bytes, in order, to standard output (`-`).
    Stdout,
}

impl Destination {
    /// Decides the destination for `path` as the user (or the client, on a
    /// server, after confinement) named it. `root` bounds where anything may
    /// be created; a client uses the destination's own directory.
    ///
    /// `contents`: a source names a directory's contents (rsync's `dir/`),
    /// so the destination is a directory, created when the first entry
    /// arrives if missing (its parent must exist). Nothing is created
    /// here: a dry run changes nothing.
    pub fn for_path(
        path: &Path,
        trailing_slash: bool,
        many_sources: bool,
        contents: bool,
        root: Root,
    ) -> Result<Destination, StoreError> {
        if path == Path::new("/dev/null") {
            return Ok(Destination::Null);
        }
        // Looked at through the root: a served root follows no link (P-43),
        // and a destination that must be a directory may not be one.
        let kind = root.kind(path)?;
        let mut is_dir = kind == Some(FileType::Directory);
        if kind == Some(FileType::Symlink) && (contents || trailing_slash) {
            return Err(StoreError::new(
                StoreErrorKind::OutsideRoot,
                format!(
                    "{} is a symbolic link; this server follows none in the paths it is asked for, so nothing outside the root you see is reached through one (name the link's target)",
                    path.display()
                ),
            ));
        }
        let parent = || {
            path.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
        };
        if contents && !is_dir && root.exists(path) {
            // Something is there now. Another transfer into the same
            // destination (a shard beside this one) may have made the
            // directory since the first look: look again.
            if root.kind(path)? != Some(FileType::Directory) {
                return Err(StoreError::new(
                    StoreErrorKind::BadRequest,
                    format!(
                        "{} is not a directory, and a source ending in '/' copies a directory's contents into one",
                        path.display()
                    ),
                ));
            }
            is_dir = true;
        }
        if contents && !is_dir {
            root.check_inside(path)?;
        }
        let placement =
            Placement::decide(is_dir, trailing_slash, many_sources, contents).map_err(|why| {
                StoreError::new(
                    StoreErrorKind::BadRequest,
                    format!("{}: {why}", path.display()),
                )
            })?;
        if (placement == Placement::As || !is_dir)
            && root.kind(parent())? != Some(FileType::Directory)
        {
            return Err(StoreError::new(
                StoreErrorKind::NotFound,
                format!(
                    "destination directory {} does not exist",
                    parent().display()
                ),
            ));
        }
        Ok(Destination::Path {
            base: path.to_path_buf(),
            placement,
            root,
            make_base: contents && !is_dir,
        })
    }
}

/// Whether `--delete` keeps `name` in `dir` (P-41): a partial or journal
/// of haul's always, unless `partials` asks for those no transfer holds;
/// with `remove`, such a free one is removed here, taken first so that a
/// transfer starting on it meanwhile is never cut off.
fn spared(dir: &OwnedFd, name: &OsStr, partials: bool, remove: bool) -> bool {
    let Some(k) = partial::kept_name(name) else {
        return false;
    };
    if !partials {
        return true;
    }
    match k {
        Kept::Journal(f) => {
            let held = partial::in_use_at(dir, &partial::resumable_name(&f));
            if !held && remove {
                let _ = rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty());
            }
            held
        }
        Kept::Resumable(_) | Kept::Random(_) if remove => !partial::remove_if_free(dir, name),
        Kept::Resumable(_) | Kept::Random(_) => partial::in_use_at(dir, name),
    }
}

/// A manifest path's tree and its place below the tree's anchor.
type Placed = (Arc<Beneath>, Vec<u8>);

struct Ordered {
    next: u64,
    pending: BTreeMap<u64, Vec<u8>>,
}

pub struct Sink {
    dest: Destination,
    /// `-p`: exact modes and modification times; otherwise the sender's
    /// permission bits less this process's umask, and arrival times.
    preserve: bool,
    umask: u32,
    /// Where entries are placed from: the destination directory (placed
    /// into), or the directory holding the destination (placed as);
    /// opened on first need.
    tree: Mutex<Option<Arc<Beneath>>>,
    files: Mutex<HashMap<u32, Arc<OutFile>>>,
    /// Temporary files open now (at most [`MAX_OPEN`] kept).
    open: Arc<AtomicUsize>,
    /// Mode of each directory entry, and whether this sink created it.
    dir_modes: Mutex<HashMap<Vec<u8>, (u32, bool)>>,
    stdout: Mutex<Ordered>,
    /// What the user should hear about files that did not stop the
    /// transfer (P-41), until handed over.
    notes: Arc<Notes>,
    /// What to do when another transfer wants a partial this one holds
    /// (P-41).
    poke: Mutex<Option<Arc<partial::Poke>>>,
    /// Told of every sync (a test's fault layer; see [`crate::durable`]).
    observer: Mutex<Option<Arc<dyn SyncObserver>>>,
    /// A drop box's: a file is only ever added, never placed over one
    /// that is there ([`Sink::adding_only`]).
    pub(crate) adding_only: bool,
    /// What is left of the time this transfer waits, all files together,
    /// for partials that other transfers still hold live (P-41): two
    /// syncs of one tree at once must not wait that long for every file.
    live_grace: Mutex<Duration>,
}

fn timespec(t: SystemTime) -> rustix::fs::Timespec {
    let (tv_sec, tv_nsec) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
        Err(e) => (-(e.duration().as_secs() as i64), 0),
    };
    rustix::fs::Timespec { tv_sec, tv_nsec }
}

fn to_time(secs: i64, nsec: u32) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsec.min(999_999_999))
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
}

/// This process's umask, read without changing it (a server's sessions run
/// on threads, where setting it to read it would race).
fn current_umask() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

impl Sink {
    /// `preserve`: keep modes exactly and modification times (`-p`, P-8).
    pub fn new(dest: Destination, preserve: bool) -> Sink {
        Sink {
            dest,
            preserve,
            umask: current_umask(),
            tree: Mutex::new(None),
            files: Mutex::new(HashMap::new()),
            open: Arc::new(AtomicUsize::new(0)),
            dir_modes: Mutex::new(HashMap::new()),
            stdout: Mutex::new(Ordered {
                next: 0,
                pending: BTreeMap::new(),
            }),
            notes: Arc::new(Notes::default()),
            poke: Mutex::new(None),
            observer: Mutex::new(None),
            adding_only: false,
            live_grace: Mutex::new(partial::LIVE_GRACE),
        }
    }

    /// Files are only added: one whose name is taken is refused when it
    /// is opened, and placed with `RENAME_NOREPLACE`, so that no earlier
    /// file is replaced even by a race (a write-only key's drop box).
    pub fn adding_only(mut self) -> Sink {
        self.adding_only = true;
        self
    }

    /// A drop box's refusal of a name that is taken.
    pub(crate) fn taken(path: &std::path::Path) -> StoreError {
        StoreError::new(
            StoreErrorKind::Permission,
            format!(
                "{} is there already, and this destination only takes new files (a drop box): push it under another name",
                path.display()
            ),
        )
    }

    /// [`partial::settle`], out of this transfer's grace for live holders.
    fn settle(&self, dir: &OwnedFd, name: &OsStr) -> Holder {
        let mut grace = self.live_grace.lock().expect("live grace");
        let t0 = std::time::Instant::now();
        let h = partial::settle(dir, name, *grace);
        if h == Holder::Live {
            *grace = grace.saturating_sub(t0.elapsed());
        }
        h
    }

    /// [`partial::left_in`], out of this transfer's grace for live holders.
    fn left_in(&self, dir: &OwnedFd, name: &OsStr) -> Option<File> {
        (self.settle(dir, &partial::resumable_name(name)) == Holder::Nobody)
            .then(|| partial::left_in(dir, name, Duration::ZERO))
            .flatten()
    }

    /// Tells `observer` of every sync this sink makes, as it returns: for
    /// a fault layer that keeps what a host crash would leave (tests).
    pub fn observe_syncs(&self, observer: Arc<dyn SyncObserver>) {
        *self.observer.lock().expect("observer") = Some(observer);
    }

    fn observed(&self, f: impl FnOnce(&dyn SyncObserver)) {
        if let Some(o) = &*self.observer.lock().expect("observer") {
            f(&**o);
        }
    }

    pub fn is_stdout(&self) -> bool {
        matches!(self.dest, Destination::Stdout)
    }

    /// The tree entries are placed in, opened (with `create`, the
    /// destination directory made first where it is to be); `None` for
    /// `/dev/null`, standard output, or a destination not there yet.
    fn tree(&self, create: bool) -> Result<Option<Arc<Beneath>>, StoreError> {
        let Destination::Path {
            base,
            placement,
            root,
            make_base,
        } = &self.dest
        else {
            return Ok(None);
        };
        let mut t = self.tree.lock().expect("destination tree");
        if let Some(t) = &*t {
            return Ok(Some(t.clone()));
        }
        let anchor = match placement {
            Placement::Into => base.clone(),
            Placement::As => base
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf(),
        };
        let fd = match root.open_dir(&anchor) {
            Err(e) if e.kind == StoreErrorKind::NotFound && *make_base && !create => {
                return Ok(None)
            }
            Err(e) if e.kind == StoreErrorKind::NotFound && *make_base => {
                root.make_dir(&anchor)?;
                root.open_dir(&anchor)?
            }
            r => r?,
        };
        let tree = Arc::new(Beneath::new(fd, anchor));
        *t = Some(tree.clone());
        Ok(Some(tree))
    }

    /// The tree entries are placed in, made where it is to be, for a
    /// layer that keeps its own records beside them (a split transfer's
    /// ledger, P-42); `None` for `/dev/null` and standard output.
    pub fn tree_made(&self) -> Result<Option<Arc<Beneath>>, StoreError> {
        self.tree(true)
    }

    /// Where manifest path `rel` is placed, below [`Sink::tree_made`].
    pub fn place_below(&self, rel: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.below(rel)
    }

    /// The mode and, with `-p`, the time a file placed from outside this
    /// sink gets, as [`Sink::finalize`] gives them.
    pub fn placed_meta(&self, mode: u32, mtime: i64, nsec: u32) -> (u32, Option<SystemTime>) {
        (
            self.mode_of(mode),
            self.preserve.then(|| to_time(mtime, nsec)),
        )
    }

    /// The manifest path `rel` below the tree's anchor.
    fn below(&self, rel: &[u8]) -> Result<Vec<u8>, StoreError> {
        let Destination::Path {
            base, placement, ..
        } = &self.dest
        else {
            return Ok(rel.to_vec());
        };
        let parts = paths::components(rel)
            .map_err(|e| StoreError::new(StoreErrorKind::OutsideRoot, e.to_string()))?;
        let mut out = Vec::new();
        if *placement == Placement::As {
            out.extend_from_slice(base.file_name().unwrap_or(OsStr::new(".")).as_bytes());
        }
        for c in placement.relative(&parts) {
            out = beneath::join(&out, c);
        }
        Ok(out)
    }

    /// The tree and the place below it of manifest path `rel`, the tree
    /// opened (with `create`, made) as needed; `None` where nothing is
    /// placed, or with `create` false where nothing is there yet.
    fn place(&self, rel: &[u8], create: bool) -> Result<Option<Placed>, StoreError> {
        let below = self.below(rel)?;
        Ok(self.tree(create)?.map(|t| (t, below)))
    }

    fn file(&self, id: u32, what: &str) -> Result<Arc<OutFile>, StoreError> {
        let f = self.files.lock().expect("file table").get(&id).cloned();
        f.ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::Other,
                format!("{what} for file {id} that is not open"),
            )
        })
    }

    fn write_ordered(&self, offset: u64, data: &[u8]) -> Result<(), StoreError> {
        let mut o = self.stdout.lock().expect("stdout order");
        o.pending.insert(offset, data.to_vec());
        let mut out = std::io::stdout().lock();
        loop {
            let next = o.next;
            let Some(buf) = o.pending.remove(&next) else {
                break;
            };
            out.write_all(&buf)
                .map_err(|e| StoreError::io("write", Path::new("standard output"), &e))?;
            o.next += buf.len() as u64;
        }
        out.flush()
            .map_err(|e| StoreError::io("flush", Path::new("standard output"), &e))
    }

    /// The mode a received file or directory gets from the sender's: with
    /// `-p` the permission and sticky bits, as they were; otherwise the
    /// permission bits less the umask, as cp and scp do. Setuid and setgid
    /// are dropped either way (P-8).
    fn mode_of(&self, mode: u32) -> u32 {
        if self.preserve {
            mode & 0o1777
        } else {
            mode & 0o777 & !self.umask
        }
    }
}

mod placing;
#[cfg(test)]
mod tests;
