//! The destination side of the file system (P-17).
//!
//! A file is written under a temporary name beside its final one
//! (`.NAME.haul.part`, kept for resume if the transfer stops: see
//! [`crate::partial`]), preallocated (on tmpfs: checked against the free
//! space) so a full disk is found early, and renamed into place only after
//! the session says it is verified and after its data is synced: nothing
//! incomplete or unverified ever sits under a final name. Directory modes
//! and times are applied last, deepest first, so a read-only directory can
//! still be filled.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use session::paths::{self, Placement};

use crate::confine::Root;
use crate::error::{StoreError, StoreErrorKind};
use crate::journal::Stamp;
pub use crate::out_file::OutFile;
use crate::out_file::{Handle, MAX_OPEN};
use crate::partial;

/// Where received entries go.
pub enum Destination {
    /// Under `base`, placed by the scp rule, never outside `root`.
    Path {
        base: PathBuf,
        placement: Placement,
        root: Root,
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
    /// so the destination is a directory, created here if missing (its
    /// parent must exist).
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
        let is_dir = path.is_dir();
        if contents && !is_dir {
            if fs::symlink_metadata(path).is_ok() {
                return Err(StoreError::new(
                    StoreErrorKind::BadRequest,
                    format!(
                        "{} is not a directory, and a source ending in '/' copies a directory's contents into one",
                        path.display()
                    ),
                ));
            }
            root.check_inside(path)?;
            fs::create_dir(path).map_err(|e| StoreError::io("create directory", path, &e))?;
        }
        let placement =
            Placement::decide(is_dir, trailing_slash, many_sources, contents).map_err(|why| {
                StoreError::new(
                    StoreErrorKind::BadRequest,
                    format!("{}: {why}", path.display()),
                )
            })?;
        if placement == Placement::As {
            let parent = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !parent.is_dir() {
                return Err(StoreError::new(
                    StoreErrorKind::NotFound,
                    format!("destination directory {} does not exist", parent.display()),
                ));
            }
        }
        Ok(Destination::Path {
            base: path.to_path_buf(),
            placement,
            root,
        })
    }
}

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
    files: Mutex<HashMap<u32, Arc<OutFile>>>,
    /// Temporary files open now (at most [`MAX_OPEN`] kept).
    open: Arc<AtomicUsize>,
    /// Directories already found inside the root.
    inside: Mutex<HashSet<PathBuf>>,
    /// Mode of each directory entry, and whether this sink created it.
    dir_modes: Mutex<HashMap<Vec<u8>, (u32, bool)>>,
    stdout: Mutex<Ordered>,
}

/// Sets the modification time of the file at `path` (a temporary file
/// this sink created), leaving its access time alone.
fn set_mtime(path: &Path, t: SystemTime) -> std::io::Result<()> {
    let (sec, nsec) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
        Err(e) => {
            let d = e.duration();
            (-(d.as_secs() as i64), 0)
        }
    };
    let times = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        },
    ];
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("a path with a NUL byte"))?;
    // SAFETY: a valid C string and two timespecs, as utimensat expects.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
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
            files: Mutex::new(HashMap::new()),
            open: Arc::new(AtomicUsize::new(0)),
            inside: Mutex::new(HashSet::new()),
            dir_modes: Mutex::new(HashMap::new()),
            stdout: Mutex::new(Ordered {
                next: 0,
                pending: BTreeMap::new(),
            }),
        }
    }

    pub fn is_stdout(&self) -> bool {
        matches!(self.dest, Destination::Stdout)
    }

    /// Whether anything exists where the entries go: only then can a
    /// file be found already in place, or serve as a basis (P-31). An
    /// empty directory (one a `dir/` copy just made, say) holds nothing.
    pub fn destination_exists(&self) -> bool {
        let Destination::Path { base, .. } = &self.dest else {
            return false;
        };
        match fs::symlink_metadata(base) {
            Ok(m) if m.is_dir() => fs::read_dir(base).is_ok_and(|mut d| d.next().is_some()),
            Ok(_) => true,
            Err(_) => partial::left_for(base).is_some(),
        }
    }

    /// Where the manifest path `rel` ends up (`None` for `/dev/null` and
    /// standard output), checked to stay inside the root.
    pub fn final_path(&self, rel: &[u8]) -> Result<Option<PathBuf>, StoreError> {
        let Destination::Path {
            base,
            placement,
            root,
        } = &self.dest
        else {
            return Ok(None);
        };
        let parts = paths::components(rel)
            .map_err(|e| StoreError::new(StoreErrorKind::OutsideRoot, e.to_string()))?;
        let mut p = base.clone();
        for c in placement.relative(&parts) {
            p.push(OsStr::from_bytes(c));
        }
        // A directory found inside the root stays so for this transfer: the
        // manifest cannot turn a directory into a link (P-16).
        let parent = p.parent().unwrap_or(&p).to_path_buf();
        let mut inside = self.inside.lock().expect("checked directories");
        if !inside.contains(&parent) {
            root.check_inside(&parent)?;
            inside.insert(parent);
        }
        Ok(Some(p))
    }

    pub fn make_dir(&self, rel: &[u8], mode: u32) -> Result<(), StoreError> {
        match &self.dest {
            Destination::Stdout => {
                return Err(StoreError::new(
                    StoreErrorKind::BadRequest,
                    "cannot write a directory to standard output",
                ))
            }
            Destination::Null => return Ok(()),
            Destination::Path { .. } => {}
        }
        let Some(p) = self.final_path(rel)? else {
            return Ok(());
        };
        let created = match fs::create_dir(&p) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && p.is_dir() => false,
            Err(e) => return Err(StoreError::io("create directory", &p, &e)),
        };
        self.dir_modes
            .lock()
            .expect("dir table")
            .insert(rel.to_vec(), (mode, created));
        Ok(())
    }

    pub fn make_symlink(&self, rel: &[u8], target: &[u8]) -> Result<(), StoreError> {
        let Some(p) = self.final_path(rel)? else {
            return match self.dest {
                Destination::Stdout => Err(StoreError::new(
                    StoreErrorKind::BadRequest,
                    "cannot write a symlink to standard output",
                )),
                _ => Ok(()),
            };
        };
        let temp = partial::random_name(&p);
        std::os::unix::fs::symlink(OsStr::from_bytes(target), &temp)
            .map_err(|e| StoreError::io("create link", &temp, &e))?;
        fs::rename(&temp, &p).map_err(|e| {
            let _ = fs::remove_file(&temp);
            StoreError::io("place link", &p, &e)
        })
    }

    /// Creates the temporary file for entry `id`, a copy of `stamp`.
    pub fn open_file(&self, id: u32, rel: &[u8], stamp: &Stamp) -> Result<(), StoreError> {
        let size = stamp.size;
        let Some(final_path) = self.final_path(rel)? else {
            return Ok(());
        };
        if final_path.is_dir() {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!(
                    "cannot overwrite directory {} with a file",
                    final_path.display()
                ),
            ));
        }
        // The first files are created now, so that a destination that
        // refuses them says so at once; beyond MAX_OPEN, a file is created
        // when its first block arrives, so a manifest of many files costs
        // no descriptors before their data does.
        // The resumable name, unless a live transfer holds it (P-35).
        let resumable = partial::resumable_name(&final_path);
        let (temp, resumable) = match partial::in_use(&resumable) {
            false => (resumable, true),
            true => (partial::random_name(&final_path), false),
        };
        let out = OutFile {
            handle: Mutex::new(Handle {
                file: None,
                created: false,
            }),
            size,
            open: self.open.clone(),
            temp,
            final_path,
            resumable,
            holds_data: AtomicBool::new(false),
            stamp: *stamp,
            journal: Mutex::new(None),
            listed: Mutex::new(Vec::new()),
            journaled: AtomicBool::new(false),
        };
        if self.open.load(Ordering::SeqCst) < MAX_OPEN {
            out.handle()?;
        }
        self.files
            .lock()
            .expect("file table")
            .insert(id, Arc::new(out));
        Ok(())
    }

    /// Writes a verified block at its offset.
    pub fn write_block(&self, id: u32, offset: u64, data: &[u8]) -> Result<(), StoreError> {
        match &self.dest {
            Destination::Null => Ok(()),
            Destination::Stdout => self.write_ordered(offset, data),
            Destination::Path { .. } => {
                let f = self.files.lock().expect("file table").get(&id).cloned();
                let f = f.ok_or_else(|| {
                    StoreError::new(
                        StoreErrorKind::Other,
                        format!("block for file {id} that is not open"),
                    )
                })?;
                f.handle()?
                    .write_all_at(data, offset)
                    .map_err(|e| StoreError::io("write", &f.final_path, &e))?;
                f.holds_data.store(true, Ordering::Release);
                Ok(())
            }
        }
    }

    /// Notes in file `id`'s journal that its block `index`, hashing to
    /// `hash`, is written (P-35). A journal that cannot be written is
    /// dropped with a warning: resuming then goes by content.
    pub fn record(&self, id: u32, index: u32, hash: &[u8; 32]) {
        let Some(f) = self.files.lock().expect("file table").get(&id).cloned() else {
            return;
        };
        let mut j = f.journal.lock().expect("journal");
        if let Some(Err(e)) = j.as_ref().map(|j| j.record(index, hash)) {
            tracing::warn!(
                "stopped the resume journal of {}: {e}",
                f.final_path.display()
            );
            *j = None;
        }
    }

    /// The blocks of file `id` that an earlier transfer's journal lists
    /// and that its partial still holds: each is read back and hashed, and
    /// only those whose bytes match their record are returned (P-35).
    pub fn held_blocks(&self, id: u32) -> Result<Vec<(u32, [u8; 32])>, StoreError> {
        let Some(f) = self.files.lock().expect("file table").get(&id).cloned() else {
            return Ok(Vec::new());
        };
        f.handle()?;
        let listed = std::mem::take(&mut *f.listed.lock().expect("listed blocks"));
        if listed.is_empty() {
            return Ok(listed);
        }
        let r = File::open(&f.temp).map_err(|e| StoreError::io("open", &f.temp, &e))?;
        let bs = f.stamp.block_size as u64;
        let mut buf = vec![0u8; bs as usize];
        let mut held = Vec::with_capacity(listed.len());
        for (index, hash) in listed {
            let off = index as u64 * bs;
            let len = (f.size - off).min(bs) as usize;
            match r.read_exact_at(&mut buf[..len], off) {
                Ok(()) if session::block_hash(&buf[..len]) == hash => held.push((index, hash)),
                Ok(()) => {}
                Err(e) => return Err(StoreError::io("read", &f.temp, &e)),
            }
        }
        Ok(held)
    }

    /// Stores `len` zero bytes at `offset` of file `id` as a hole (P-29):
    /// the preallocated range is punched out, so the file stays sparse
    /// where the file system can. Where it cannot, zeros are written.
    pub fn write_zero(&self, id: u32, offset: u64, len: u32) -> Result<(), StoreError> {
        let f = match &self.dest {
            Destination::Null => return Ok(()),
            Destination::Stdout => return self.write_ordered(offset, &vec![0u8; len as usize]),
            Destination::Path { .. } => self.files.lock().expect("file table").get(&id).cloned(),
        };
        let f = f.ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::Other,
                format!("zeros for file {id} that is not open"),
            )
        })?;
        let file = f.handle()?;
        // SAFETY: fallocate on a descriptor we own; no memory is passed.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        // No holes here: the bytes must still be zeros.
        file.write_all_at(&vec![0u8; len as usize], offset)
            .map_err(|e| StoreError::io("write", &f.final_path, &e))
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

    /// Syncs, sets mode and times, and renames verified files into place,
    /// then syncs the directories that changed, so a file reported placed
    /// survives a crash. A batch of several files is made durable with one
    /// `syncfs` per file system instead of one `fsync` per file.
    ///
    /// Modes keep the permission and sticky bits; setuid and setgid are
    /// dropped, as a server writing as root must not create set-id files
    /// for a remote peer.
    pub fn finalize(&self, batch: &[(u32, u32, i64, u32)]) -> Result<(), StoreError> {
        if !matches!(self.dest, Destination::Path { .. }) || batch.is_empty() {
            return Ok(());
        }
        let missing = |id: u32| {
            StoreError::new(
                StoreErrorKind::Other,
                format!("file {id} finalized but not open"),
            )
        };
        let found: Vec<(Arc<OutFile>, u32, SystemTime)> = {
            let table = self.files.lock().expect("file table");
            batch
                .iter()
                .map(|&(id, mode, mtime, nsec)| {
                    table
                        .get(&id)
                        .cloned()
                        .map(|f| (f, mode, to_time(mtime, nsec)))
                        .ok_or_else(|| missing(id))
                })
                .collect::<Result<_, _>>()?
        };
        // Mode and times first, so the sync below makes them durable too:
        // through the descriptor where one is kept, else by path, so that
        // finishing many files opens none of them again.
        for (f, mode, mtime) in &found {
            let perm = fs::Permissions::from_mode(self.mode_of(*mode));
            let (kept, created) = {
                let h = f.handle.lock().expect("file handle");
                (h.file.clone(), h.created)
            };
            // An empty file has had no write to create it.
            let kept = if created { kept } else { Some(f.handle()?) };
            match &kept {
                Some(h) => h.set_permissions(perm),
                None => fs::set_permissions(&f.temp, perm),
            }
            .map_err(|e| StoreError::io("set mode of", &f.final_path, &e))?;
            if self.preserve {
                match &kept {
                    Some(h) => h.set_times(fs::FileTimes::new().set_modified(*mtime)),
                    None => set_mtime(&f.temp, *mtime),
                }
                .map_err(|e| StoreError::io("set times of", &f.final_path, &e))?;
            }
        }
        if let [(f, ..)] = &found[..] {
            f.handle()?
                .sync_all()
                .map_err(|e| StoreError::io("sync", &f.final_path, &e))?;
        } else {
            // One syncfs per file system, through a directory on it.
            let mut per_device: HashMap<u64, PathBuf> = HashMap::new();
            let parents: HashSet<&Path> = found
                .iter()
                .map(|(f, ..)| f.final_path.parent().unwrap_or(Path::new(".")))
                .collect();
            for d in parents {
                let dev = fs::metadata(d)
                    .map_err(|e| StoreError::io("stat", d, &e))?
                    .dev();
                per_device.entry(dev).or_insert_with(|| d.to_path_buf());
            }
            for d in per_device.values() {
                let h = File::open(d).map_err(|e| StoreError::io("open", d, &e))?;
                // SAFETY: syncfs on a descriptor we own.
                if unsafe { libc::syncfs(h.as_raw_fd()) } != 0 {
                    return Err(StoreError::io("sync", d, &std::io::Error::last_os_error()));
                }
            }
        }
        let mut dirs = HashSet::new();
        for (f, ..) in &found {
            fs::rename(&f.temp, &f.final_path)
                .map_err(|e| StoreError::io("rename into place", &f.final_path, &e))?;
            if f.resumable && f.journaled.load(Ordering::Acquire) {
                *f.journal.lock().expect("journal") = None;
                let _ = fs::remove_file(partial::journal_name(&f.final_path));
            }
            dirs.insert(
                f.final_path
                    .parent()
                    .unwrap_or(Path::new("."))
                    .to_path_buf(),
            );
        }
        for d in dirs {
            File::open(&d)
                .and_then(|h| h.sync_all())
                .map_err(|e| StoreError::io("sync directory", &d, &e))?;
        }
        let mut table = self.files.lock().expect("file table");
        for (id, ..) in batch {
            table.remove(id);
        }
        Ok(())
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

    /// Applies directory modes and times, deepest first: with `-p` to
    /// every directory of the manifest; otherwise only the mode, and only
    /// to directories this sink created.
    pub fn finish(&self, dirs: &[(Vec<u8>, i64, u32)]) -> Result<(), StoreError> {
        let modes = self.dir_modes.lock().expect("dir table");
        for (rel, mtime, nsec) in dirs {
            let Some(p) = self.final_path(rel)? else {
                continue;
            };
            if let Some(&(mode, created)) = modes.get(rel) {
                if self.preserve || created {
                    fs::set_permissions(&p, fs::Permissions::from_mode(self.mode_of(mode)))
                        .map_err(|e| StoreError::io("set mode of", &p, &e))?;
                }
            }
            if self.preserve {
                let f = File::open(&p).map_err(|e| StoreError::io("open", &p, &e))?;
                f.set_times(fs::FileTimes::new().set_modified(to_time(*mtime, *nsec)))
                    .map_err(|e| StoreError::io("set times of", &p, &e))?;
            }
        }
        // Directories and links made along the way, and the metadata just
        // set, become durable with one sync of the destination's file system.
        if let Destination::Path { base, root, .. } = &self.dest {
            let anchor = if base.is_dir() {
                base.as_path()
            } else {
                root.path()
            };
            let d = File::open(anchor).map_err(|e| StoreError::io("open", anchor, &e))?;
            // SAFETY: syncfs on a descriptor we own.
            if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
                return Err(StoreError::io(
                    "sync",
                    anchor,
                    &std::io::Error::last_os_error(),
                ));
            }
        }
        Ok(())
    }

    /// What `--delete` removes (P-32): everything in the directories of
    /// the manifest (`dirs`), and with `contents` in the destination
    /// itself, that no manifest entry (`keep`) names. Each is returned
    /// with its path relative to the destination, for the report.
    pub fn extraneous(
        &self,
        dirs: &[Vec<u8>],
        keep: &[Vec<u8>],
        contents: bool,
    ) -> Result<Vec<(PathBuf, Vec<u8>)>, StoreError> {
        let Destination::Path { base, .. } = &self.dest else {
            return Ok(Vec::new());
        };
        let mut kept = HashSet::new();
        for rel in keep {
            if let Some(p) = self.final_path(rel)? {
                kept.insert(p);
            }
        }
        let mut scopes = Vec::new();
        if contents {
            scopes.push(base.clone());
        }
        for rel in dirs {
            if let Some(p) = self.final_path(rel)? {
                scopes.push(p);
            }
        }
        scopes.sort();
        scopes.dedup();
        let mut out = Vec::new();
        for dir in scopes {
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            let mut children: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
            children.sort();
            for child in children {
                if kept.contains(&child) {
                    continue;
                }
                let rel = child
                    .strip_prefix(base)
                    .unwrap_or(&child)
                    .as_os_str()
                    .as_bytes()
                    .to_vec();
                out.push((child, rel));
            }
        }
        Ok(out)
    }

    /// Removes what [`Sink::extraneous`] found: files and links, and
    /// directories with everything in them (links are not followed).
    pub fn remove(&self, paths: &[PathBuf]) -> Result<(), StoreError> {
        for p in paths {
            let meta = match fs::symlink_metadata(p) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(StoreError::io("read", p, &e)),
            };
            let r = if meta.is_dir() {
                fs::remove_dir_all(p)
            } else {
                fs::remove_file(p)
            };
            r.map_err(|e| StoreError::io("delete", p, &e))?;
        }
        Ok(())
    }

    /// Removes every temporary file not yet renamed into place, except
    /// the resumable ones that hold data (P-35).
    pub fn abort(&self) {
        for (_, f) in self.files.lock().expect("file table").drain() {
            if f.resumable && f.holds_data.load(Ordering::Acquire) {
                continue;
            }
            let _ = fs::remove_file(&f.temp);
            if f.resumable {
                let _ = fs::remove_file(partial::journal_name(&f.final_path));
            }
        }
    }

    /// The partial an earlier transfer left for the manifest path `rel`,
    /// if any and no live transfer holds it (P-35).
    pub fn partial_of(&self, rel: &[u8]) -> Result<Option<PathBuf>, StoreError> {
        Ok(self.final_path(rel)?.and_then(|p| partial::left_for(&p)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    fn stamp(size: u64) -> Stamp {
        Stamp {
            block_size: 1 << 20,
            size,
            mtime: 1_700_000_000,
            mtime_nsec: 0,
        }
    }

    fn sink_at(dir: &Path, base: &str, many: bool) -> Sink {
        let root = Root::new(dir).unwrap();
        Sink::new(
            Destination::for_path(&dir.join(base), false, many, false, root).unwrap(),
            true,
        )
    }

    #[test]
    fn any_number_of_files_within_the_descriptor_limit() {
        let open_fds = || fs::read_dir("/proc/self/fd").unwrap().count();
        let d = tempfile::tempdir().unwrap();
        fs::create_dir(d.path().join("many")).unwrap();
        let s = sink_at(d.path(), "many", true);
        let before = open_fds();
        let n = 3 * MAX_OPEN as u32;
        for id in 0..n {
            s.open_file(id, format!("f{id}").as_bytes(), &stamp(8))
                .unwrap();
        }
        for id in 0..n {
            s.write_block(id, 0, &id.to_le_bytes()).unwrap();
            s.write_zero(id, 4, 4).unwrap();
        }
        // Other tests' descriptors come and go meanwhile: allow for them.
        assert!(open_fds() < before + MAX_OPEN + 64, "{} open", open_fds());
        let batch: Vec<_> = (0..n).map(|id| (id, 0o644, 0, 0)).collect();
        s.finalize(&batch).unwrap();
        for id in 0..n {
            let got = fs::read(d.path().join(format!("many/f{id}"))).unwrap();
            assert_eq!(got[..4], id.to_le_bytes());
            assert_eq!(got[4..], [0; 4]);
        }
        assert_eq!(s.open.load(Ordering::SeqCst), 0);
        // Empty files too, announced beyond the descriptors kept.
        let s = sink_at(d.path(), "many", true);
        for id in 0..n {
            s.open_file(id, format!("e{id}").as_bytes(), &stamp(0))
                .unwrap();
        }
        s.finalize(&batch).unwrap();
        assert!(
            (0..n).all(|id| fs::metadata(d.path().join(format!("many/e{id}")))
                .unwrap()
                .len()
                == 0)
        );
    }

    #[test]
    fn file_appears_only_after_finalize() {
        let d = tempfile::tempdir().unwrap();
        let s = sink_at(d.path(), "out.bin", false);
        s.open_file(1, b"src.bin", &stamp(6)).unwrap();
        s.write_block(1, 3, b"def").unwrap();
        s.write_block(1, 0, b"abc").unwrap();
        assert!(!d.path().join("out.bin").exists());
        s.finalize(&[(1, 0o640, 1_000_000, 5)]).unwrap();
        let p = d.path().join("out.bin");
        assert_eq!(fs::read(&p).unwrap(), b"abcdef");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert_eq!(
            fs::metadata(&p).unwrap().modified().unwrap(),
            to_time(1_000_000, 5)
        );
        assert_eq!(
            fs::read_dir(d.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
    }

    #[test]
    fn a_file_of_one_block_keeps_no_journal() {
        let d = tempfile::tempdir().unwrap();
        let bs = 64 << 10;
        let st = Stamp {
            block_size: bs,
            ..stamp(1000)
        };
        let s = sink_at(d.path(), "small", false);
        s.open_file(1, b"small", &st).unwrap();
        s.write_block(1, 0, &[7; 1000]).unwrap();
        s.record(1, 0, &session::block_hash(&[7; 1000]));
        let journal = d.path().join(".small.haul.journal");
        assert!(!journal.exists());
        // Stopped here, its partial stays and resumes by content (P-35).
        s.abort();
        assert!(d.path().join(".small.haul.part").exists());
        let s = sink_at(d.path(), "small", false);
        s.open_file(1, b"small", &st).unwrap();
        assert_eq!(s.held_blocks(1).unwrap(), vec![]);
        s.write_block(1, 0, &[7; 1000]).unwrap();
        s.finalize(&[(1, 0o644, 0, 0)]).unwrap();
        assert_eq!(fs::read(d.path().join("small")).unwrap(), vec![7; 1000]);
        assert!(!journal.exists());
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_partial_resumes_the_blocks_its_journal_lists_and_still_holds() {
        let d = tempfile::tempdir().unwrap();
        let bs = 64 << 10;
        let st = Stamp {
            block_size: bs,
            ..stamp(3 * bs as u64)
        };
        let block = |i: u8| vec![i + 1; bs as usize];
        let s = sink_at(d.path(), "x", false);
        s.open_file(1, b"x", &st).unwrap();
        for i in 0..2u8 {
            s.write_block(1, i as u64 * bs as u64, &block(i)).unwrap();
            s.record(1, i as u32, &session::block_hash(&block(i)));
        }
        s.abort();
        let journal = d.path().join(".x.haul.journal");
        assert!(journal.exists(), "kept beside the partial");
        // Block 1 is damaged after the fact: the journal is not believed.
        let part = d.path().join(".x.haul.part");
        let f = OpenOptions::new().write(true).open(&part).unwrap();
        f.write_all_at(b"torn", bs as u64 + 10).unwrap();

        let s = sink_at(d.path(), "x", false);
        s.open_file(1, b"x", &st).unwrap();
        let held = s.held_blocks(1).unwrap();
        assert_eq!(held, vec![(0, session::block_hash(&block(0)))]);
        s.finalize(&[(1, 0o644, 0, 0)]).unwrap();
        assert!(!journal.exists(), "gone once the file is placed");

        // Another version of the source: its journal starts afresh.
        let s = sink_at(d.path(), "y", false);
        s.open_file(2, b"y", &st).unwrap();
        s.write_block(2, 0, &block(0)).unwrap();
        s.record(2, 0, &session::block_hash(&block(0)));
        s.abort();
        let s = sink_at(d.path(), "y", false);
        let newer = Stamp { mtime: 5, ..st };
        s.open_file(2, b"y", &newer).unwrap();
        assert!(s.held_blocks(2).unwrap().is_empty());
    }

    #[test]
    fn abort_keeps_only_partials_that_hold_data() {
        let d = tempfile::tempdir().unwrap();
        let s = sink_at(d.path(), "x", false);
        s.open_file(1, b"x", &stamp(10)).unwrap();
        s.abort();
        assert_eq!(
            fs::read_dir(d.path()).unwrap().count(),
            0,
            "nothing written"
        );

        let s = sink_at(d.path(), "x", false);
        s.open_file(1, b"x", &stamp(10)).unwrap();
        s.write_block(1, 0, b"hello").unwrap();
        s.abort();
        let kept = d.path().join(".x.haul.part");
        assert_eq!(fs::read(&kept).unwrap(), b"hello\0\0\0\0\0");
        assert!(!d.path().join("x").exists());

        // The next transfer finds it, writes on in place, and places it.
        let s = sink_at(d.path(), "x", false);
        assert!(s.destination_exists(), "a partial is something to resume");
        assert_eq!(s.partial_of(b"x").unwrap(), Some(kept.clone()));
        s.open_file(1, b"x", &stamp(12)).unwrap();
        assert_eq!(s.partial_of(b"x").unwrap(), None, "held by this transfer");
        s.write_block(1, 5, b" world!").unwrap();
        s.finalize(&[(1, 0o644, 0, 0)]).unwrap();
        assert_eq!(fs::read(d.path().join("x")).unwrap(), b"hello world!");
        assert!(!kept.exists());

        // A resumed partial that this transfer wrote nothing into is kept.
        fs::write(&kept, b"old").unwrap();
        let s = sink_at(d.path(), "x", false);
        s.open_file(1, b"x", &stamp(3)).unwrap();
        s.abort();
        assert_eq!(fs::read(&kept).unwrap(), b"old");
    }

    #[test]
    fn a_partial_held_by_a_live_transfer_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let first = sink_at(d.path(), "x", false);
        first.open_file(1, b"x", &stamp(4)).unwrap();
        first.write_block(1, 0, b"aaaa").unwrap();
        let second = sink_at(d.path(), "x", false);
        assert_eq!(second.partial_of(b"x").unwrap(), None);
        second.open_file(1, b"x", &stamp(4)).unwrap();
        second.write_block(1, 0, b"bbbb").unwrap();
        second.finalize(&[(1, 0o644, 0, 0)]).unwrap();
        assert_eq!(fs::read(d.path().join("x")).unwrap(), b"bbbb");
        first.abort();
        assert_eq!(fs::read(d.path().join(".x.haul.part")).unwrap(), b"aaaa");
    }

    #[test]
    fn refuses_writing_through_a_symlink_out_of_the_root() {
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("root");
        fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(outer.path(), root.join("escape")).unwrap();
        let s = sink_at(&root, "", true);
        let e = s.open_file(1, b"escape/owned", &stamp(1)).unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::OutsideRoot);
    }
}
