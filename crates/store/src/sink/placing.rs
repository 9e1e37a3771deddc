//! The file sink as the engine sees it: each capability of the storage
//! interface, every one of which files have (P-15, P-17, P-32, P-35,
//! P-38, P-41).

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use rustix::fs::FileType;
use session::paths::Placement;

use super::*;
use crate::beneath;
use crate::out_file::OutFile;
use crate::partial;
use crate::storage::{
    BlockSink, Capabilities, DirTimes, Extraneous, Held, Note, Poke, Stamp, Verified,
};

impl BlockSink for Sink {
    fn capabilities(&self) -> Capabilities {
        let files = matches!(self.dest, Destination::Path { .. });
        Capabilities {
            resume: files,
            in_place: files,
            links: files,
            delete: files,
            modes: files,
        }
    }

    /// `poke` runs when another transfer of this process finds a partial
    /// this one holds while it still looks live: the transfer should tell
    /// its peer something at once, so that a peer gone without a word
    /// shows (P-41).
    fn on_contention(&self, poke: Arc<Poke>) {
        *self.poke.lock().expect("poke") = Some(poke);
    }

    /// The notes made since the last call (P-41).
    fn take_notes(&self) -> Vec<Note> {
        self.notes.take()
    }

    /// This transfer is ending (its peer gone, or a failure): its
    /// partials stop looking live, so a new transfer of the same names
    /// waits for them to be closed and resumes them instead of going
    /// around them (P-41).
    fn let_go(&self) {
        for f in self.files.lock().expect("file table").values() {
            if let Some(h) = &f.handle.lock().expect("file handle").file {
                partial::let_go(h);
            }
        }
    }

    /// Whether anything exists where the entries go: only then can a
    /// file be found already in place, or serve as a basis (P-31). An
    /// empty directory (one a `dir/` copy just made, say) holds nothing.
    fn destination_exists(&self) -> bool {
        let Destination::Path { base, root, .. } = &self.dest else {
            return false;
        };
        // Through the root's descriptor: a served root follows no link.
        match root.kind(base).unwrap_or(None) {
            Some(FileType::Directory) => root.open_dir(base).is_ok_and(|d| {
                rustix::fs::Dir::read_from(&d).is_ok_and(|mut it| {
                    it.any(|e| e.is_ok_and(|e| !matches!(e.file_name().to_bytes(), b"." | b"..")))
                })
            }),
            Some(_) => true,
            None => {
                let parent = base.parent().filter(|p| !p.as_os_str().is_empty());
                let name = base.file_name().unwrap_or(OsStr::new(""));
                root.open_dir(parent.unwrap_or(Path::new(".")))
                    .is_ok_and(|d| self.left_in(&d, name).is_some())
            }
        }
    }

    /// Where the manifest path `rel` ends up, for messages (`None` for
    /// `/dev/null` and standard output). Nothing is ever opened by this
    /// path: see [`Sink::open_placed`].
    fn final_path(&self, rel: &[u8]) -> Result<Option<PathBuf>, StoreError> {
        let Destination::Path {
            base, placement, ..
        } = &self.dest
        else {
            return Ok(None);
        };
        let below = self.below(rel)?;
        let anchor = match placement {
            Placement::Into => base.as_path(),
            Placement::As => base.parent().unwrap_or(Path::new(".")),
        };
        Ok(Some(anchor.join(OsStr::from_bytes(&below))))
    }

    /// The regular file at manifest path `rel` (one already in place, or
    /// one just placed), opened for reading without following a link;
    /// `None` if none is there.
    fn open_placed(&self, rel: &[u8]) -> Result<Option<Arc<dyn Held>>, StoreError> {
        let placed = match self.place(rel, false)? {
            Some((tree, below)) => tree.open_regular(&below)?,
            None => None,
        };
        Ok(placed.map(|f| Arc::new(f) as Arc<dyn Held>))
    }

    fn make_dir(&self, rel: &[u8], mode: u32) -> Result<(), StoreError> {
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
        let Some((tree, below)) = self.place(rel, true)? else {
            return Ok(());
        };
        let created = tree.mkdir(&below)?;
        self.dir_modes
            .lock()
            .expect("dir table")
            .insert(rel.to_vec(), (mode, created));
        Ok(())
    }

    fn make_symlink(&self, rel: &[u8], target: &[u8]) -> Result<(), StoreError> {
        let Some((tree, below)) = self.place(rel, true)? else {
            return match self.dest {
                Destination::Stdout => Err(StoreError::new(
                    StoreErrorKind::BadRequest,
                    "cannot write a symlink to standard output",
                )),
                _ => Ok(()),
            };
        };
        let (_, name) = beneath::split(&below);
        tree.symlink(&below, target, &partial::random_name(name))
    }

    /// Creates the temporary file for entry `id`, a copy of `stamp`.
    fn open_file(&self, id: u32, rel: &[u8], stamp: &Stamp) -> Result<(), StoreError> {
        let size = stamp.size;
        let Some((tree, below)) = self.place(rel, true)? else {
            return Ok(());
        };
        let final_path = tree.shown(&below);
        if tree.kind(&below)? == Some(FileType::Directory) {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!(
                    "cannot overwrite directory {} with a file",
                    final_path.display()
                ),
            ));
        }
        if self.adding_only && tree.kind(&below)?.is_some() {
            return Err(Sink::taken(&final_path));
        }
        let (dir_rel, name) = beneath::split(&below);
        let dir = tree.dir(dir_rel)?;
        // The resumable name, unless another transfer keeps it (one that
        // is ending is waited for) or something other than a partial is
        // under it (a link, say: P-35, P-38, P-41).
        let resumable = partial::resumable_name(name);
        let kind = tree.kind(&beneath::join(dir_rel, resumable.as_bytes()))?;
        let held = match kind {
            None => Holder::Nobody,
            Some(FileType::RegularFile) => self.settle(&dir, &resumable),
            Some(_) => Holder::Live,
        };
        let (temp, resumable) = match held {
            Holder::Nobody => (resumable, true),
            _ => (partial::random_name(name), false),
        };
        let shown = String::from_utf8_lossy(&below);
        match held {
            Holder::Live if kind == Some(FileType::RegularFile) => {
                self.notes.add(
                    NoteKind::PartialHeld,
                    format!(
                        "{shown}: its partial is held by another transfer that is still running, so this one starts afresh under another name (run it again once that one has ended to resume from what it left)"
                    ),
                )
            }
            Holder::LettingGo => self.notes.add(
                NoteKind::PartialHeld,
                format!(
                    "{shown}: the transfer that left its partial had not let go of it after {} s, so this one starts afresh under another name",
                    partial::LET_GO_WAIT.as_secs()
                ),
            ),
            _ => {}
        }
        // The first files are created now, so that a destination that
        // refuses them says so at once; beyond MAX_OPEN, a file is created
        // when its first block arrives, so a manifest of many files costs
        // no descriptors before their data does.
        let out = OutFile {
            handle: Mutex::new(Handle {
                file: None,
                created: false,
            }),
            size,
            open: self.open.clone(),
            tree,
            dir: dir_rel.to_vec(),
            temp,
            name: name.to_os_string(),
            final_path,
            rel: below.clone(),
            notes: self.notes.clone(),
            poke: self.poke.lock().expect("poke").clone(),
            resumable,
            holds_data: AtomicBool::new(false),
            stamp: *stamp,
            journal: Mutex::new(false),
            listed: Mutex::new(Vec::new()),
            journaled: AtomicBool::new(false),
            writing: Mutex::new(()),
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
    fn write_block(&self, id: u32, offset: u64, data: &[u8]) -> Result<(), StoreError> {
        match &self.dest {
            Destination::Null => Ok(()),
            Destination::Stdout => self.write_ordered(offset, data),
            Destination::Path { .. } => {
                let f = self.file(id, "block")?;
                let handle = f.handle()?;
                let one = f.writing.lock().unwrap_or_else(|p| p.into_inner());
                handle
                    .write_all_at(data, offset)
                    .map_err(|e| StoreError::io("write", &f.final_path, &e))?;
                drop(one);
                // A file of one block is written back by its batch's
                // syncfs, with the rest of the batch: starting it here
                // cost a system call and an I/O of its own a file.
                if f.stamp.blocks() > 1 {
                    durable::start_writeback(&handle, offset, data.len());
                }
                f.holds_data.store(true, Ordering::Release);
                Ok(())
            }
        }
    }

    /// Notes in file `id`'s journal that its block `index`, hashing to
    /// `hash`, is written (P-35). A journal that cannot be written is
    /// dropped with a warning: resuming then goes by content.
    fn record(&self, id: u32, index: u32, hash: &[u8; 32]) {
        let Some(f) = self.files.lock().expect("file table").get(&id).cloned() else {
            return;
        };
        let mut alive = f.journal.lock().expect("journal");
        if !*alive {
            return;
        }
        let r = f
            .with_journal(|j| j.record(index, hash))
            .and_then(|r| r.map_err(|e| StoreError::io("write the journal of", &f.final_path, &e)));
        if let Err(e) = r {
            tracing::warn!("stopped the resume journal: {e}");
            *alive = false;
        }
    }

    /// The blocks of file `id` that an earlier transfer's journal lists
    /// and that its partial still holds: each is read back and hashed, and
    /// only those whose bytes match their record are returned (P-35).
    fn held_blocks(&self, id: u32) -> Result<Vec<(u32, [u8; 32])>, StoreError> {
        let Some(f) = self.files.lock().expect("file table").get(&id).cloned() else {
            return Ok(Vec::new());
        };
        f.handle()?;
        let listed = std::mem::take(&mut *f.listed.lock().expect("listed blocks"));
        if listed.is_empty() {
            return Ok(listed);
        }
        let r = f.reopen(OFlags::RDONLY)?;
        let bs = f.stamp.block_size as u64;
        let mut buf = vec![0u8; bs as usize];
        let mut held = Vec::with_capacity(listed.len());
        for &(index, hash) in &listed {
            let off = index as u64 * bs;
            let len = (f.size - off).min(bs) as usize;
            match FileExt::read_exact_at(&r, &mut buf[..len], off) {
                Ok(()) if session::block_hash(&buf[..len]) == hash => held.push((index, hash)),
                Ok(()) => {}
                Err(e) => return Err(StoreError::io("read", &f.final_path, &e)),
            }
        }
        if held.len() < listed.len() {
            self.notes.add(
                NoteKind::PartialDamaged,
                format!(
                    "{}: {} of the {} blocks its partial's journal lists no longer hold what was written there (a crash before they reached the disk, or another writer), so they are sent again",
                    f.shown(),
                    listed.len() - held.len(),
                    listed.len()
                ),
            );
        }
        Ok(held)
    }

    /// Stores `len` zero bytes at `offset` of file `id` as a hole (P-29):
    /// the preallocated range is punched out, so the file stays sparse
    /// where the file system can. Where it cannot, zeros are written.
    fn write_zero(&self, id: u32, offset: u64, len: u32) -> Result<(), StoreError> {
        let f = match &self.dest {
            Destination::Null => return Ok(()),
            Destination::Stdout => return self.write_ordered(offset, &vec![0u8; len as usize]),
            Destination::Path { .. } => self.file(id, "zeros")?,
        };
        let file = f.handle()?;
        let punched = rustix::fs::fallocate(
            &*file,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            offset,
            len as u64,
        );
        if punched.is_ok() {
            return Ok(());
        }
        // No holes here: the bytes must still be zeros.
        file.write_all_at(&vec![0u8; len as usize], offset)
            .map_err(|e| StoreError::io("write", &f.final_path, &e))
    }

    /// Syncs, sets mode and times, and renames verified files into place,
    /// then syncs the directories that changed, so a file reported placed
    /// survives a crash. A batch of several files is made durable with one
    /// `syncfs` per file system instead of one `fsync` per file.
    ///
    /// Modes keep the permission and sticky bits; setuid and setgid are
    /// dropped, as a server writing as root must not create set-id files
    /// for a remote peer.
    fn finalize(&self, batch: &[Verified]) -> Result<(), StoreError> {
        if !matches!(self.dest, Destination::Path { .. }) || batch.is_empty() {
            return Ok(());
        }
        let found: Vec<(Arc<OutFile>, u32, SystemTime)> = batch
            .iter()
            .map(|v| {
                self.file(v.id, "finalize")
                    .map(|f| (f, v.mode, to_time(v.mtime, v.mtime_nsec)))
            })
            .collect::<Result<_, _>>()?;
        // Mode and times first, through the file's descriptor, so the sync
        // below makes them durable too.
        for (f, mode, mtime) in &found {
            let h = f.handle()?;
            h.set_permissions(fs::Permissions::from_mode(self.mode_of(*mode)))
                .map_err(|e| StoreError::io("set mode of", &f.final_path, &e))?;
            if self.preserve {
                h.set_times(fs::FileTimes::new().set_modified(*mtime))
                    .map_err(|e| StoreError::io("set times of", &f.final_path, &e))?;
            }
        }
        // The directories the files go into, each walked once.
        let mut dirs = HashMap::new();
        for (f, ..) in &found {
            if !dirs.contains_key(&f.dir) {
                dirs.insert(f.dir.clone(), f.dir()?);
            }
        }
        if let [(f, ..)] = &found[..] {
            let h = f.handle()?;
            h.sync_all()
                .map_err(|e| StoreError::io("sync", &f.final_path, &e))?;
            self.observed(|o| o.file_synced(&h));
        } else {
            // One syncfs per file system, through a directory on it.
            let mut per_device = HashSet::new();
            for d in dirs.values() {
                let dev = rustix::fs::fstat(&**d)
                    .map_err(|e| StoreError::io("stat", &found[0].0.final_path, &e.into()))?
                    .st_dev;
                if per_device.insert(dev) {
                    rustix::fs::syncfs(&**d)
                        .map_err(|e| StoreError::io("sync", &found[0].0.final_path, &e.into()))?;
                    self.observed(|o| o.all_synced(d));
                }
            }
        }
        for (f, ..) in &found {
            let dir = &dirs[&f.dir];
            f.check_still_there(dir)?;
            let placed = match self.adding_only {
                false => rustix::fs::renameat(&**dir, &f.temp, &**dir, &f.name),
                true => rustix::fs::renameat_with(
                    &**dir,
                    &f.temp,
                    &**dir,
                    &f.name,
                    rustix::fs::RenameFlags::NOREPLACE,
                ),
            };
            match placed {
                Err(rustix::io::Errno::EXIST) => return Err(Sink::taken(&f.final_path)),
                r => {
                    r.map_err(|e| StoreError::io("rename into place", &f.final_path, &e.into()))?
                }
            }
            if f.resumable && f.journaled.load(Ordering::Acquire) {
                *f.journal.lock().expect("journal") = false;
                f.with_journal(|j| j.remove())?;
            }
            if !f.resumable {
                // A partial an earlier attempt left under the resumable
                // name is of this file too, and now stale (P-41).
                partial::remove_if_free(dir, &partial::resumable_name(&f.name));
            }
        }
        for (rel, d) in &dirs {
            rustix::fs::fsync(&**d).map_err(|e| {
                StoreError::io("sync directory", &found[0].0.tree.shown(rel), &e.into())
            })?;
            self.observed(|o| o.dir_synced(d));
        }
        let mut table = self.files.lock().expect("file table");
        for v in batch {
            table.remove(&v.id);
        }
        Ok(())
    }

    /// Applies directory modes and times, deepest first: with `-p` to
    /// every directory of the manifest; otherwise only the mode, and only
    /// to directories this sink created. Each directory is opened without
    /// following a link (P-38). A `dir/` destination not made yet (no
    /// entry came) is made now.
    fn finish(&self, dirs: &[DirTimes]) -> Result<(), StoreError> {
        let Some(tree) = self.tree(true)? else {
            return Ok(());
        };
        let modes = self.dir_modes.lock().expect("dir table");
        for d in dirs {
            let below = self.below(&d.rel)?;
            let mode = match modes.get(&d.rel) {
                Some(&(mode, created)) if self.preserve || created => Some(self.mode_of(mode)),
                _ => None,
            };
            let time = self
                .preserve
                .then(|| timespec(to_time(d.mtime, d.mtime_nsec)));
            tree.set_dir_meta(&below, mode, time)?;
        }
        // Directories and links made along the way, and the metadata just
        // set, become durable with one sync of the destination's file system.
        let top = tree.dir(b"")?;
        rustix::fs::syncfs(&*top).map_err(|e| StoreError::io("sync", tree.path(), &e.into()))?;
        self.observed(|o| o.all_synced(&top));
        Ok(())
    }

    /// What `--delete` removes (P-32): everything in the directories of
    /// the manifest (`dirs`), and with `contents` in the destination
    /// itself, that no manifest entry (`keep`) names. Each is returned as
    /// its place below the tree (for [`Sink::remove`]) and its path
    /// relative to the destination (for the report). Directories are
    /// listed through descriptors: one that is a link is refused, never
    /// listed (P-38).
    ///
    /// Partials and journals that transfers leave (P-41) are never listed,
    /// unless `partials` asks for those that no transfer holds now.
    fn extraneous(
        &self,
        dirs: &[Vec<u8>],
        keep: &[Vec<u8>],
        contents: bool,
        partials: bool,
    ) -> Result<Vec<Extraneous>, StoreError> {
        let Destination::Path { placement, .. } = &self.dest else {
            return Ok(Vec::new());
        };
        let Some(tree) = self.tree(false)? else {
            return Ok(Vec::new());
        };
        let mut kept = HashSet::new();
        for rel in keep {
            kept.insert(self.below(rel)?);
        }
        let mut scopes = Vec::new();
        if contents && *placement == Placement::Into {
            scopes.push(Vec::new());
        }
        for rel in dirs {
            scopes.push(self.below(rel)?);
        }
        scopes.sort();
        scopes.dedup();
        let mut out = Vec::new();
        for scope in scopes {
            let mut names = match tree.list(&scope) {
                Ok(n) => n,
                Err(e) if e.kind == StoreErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            names.sort();
            let dir = tree.dir(&scope)?;
            for name in names {
                let below = beneath::join(&scope, name.as_bytes());
                if kept.contains(&below) || spared(&dir, &name, partials, false) {
                    continue;
                }
                let shown = match placement {
                    Placement::Into => below.clone(),
                    Placement::As => below
                        .splitn(2, |&b| b == b'/')
                        .nth(1)
                        .unwrap_or_default()
                        .to_vec(),
                };
                let st = rustix::fs::statat(
                    &*dir,
                    name.as_os_str(),
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                )
                .ok();
                let is = |t| {
                    st.as_ref()
                        .is_some_and(|s| rustix::fs::FileType::from_raw_mode(s.st_mode) == t)
                };
                let file = st
                    .as_ref()
                    .filter(|_| is(rustix::fs::FileType::RegularFile))
                    .map(|s| (s.st_size as u64, s.st_mtime));
                out.push(Extraneous {
                    place: below,
                    shown,
                    dir: is(rustix::fs::FileType::Directory),
                    file,
                });
            }
        }
        Ok(out)
    }

    /// Removes what [`Sink::extraneous`] found: files and links, and
    /// directories with everything in them, through descriptors (links
    /// are removed, never followed). A partial or journal inside is kept
    /// as [`Sink::extraneous`] keeps them, and so is the directory that
    /// holds it; with `partials`, one is removed only if no transfer has
    /// taken it meanwhile (P-41). Says which places went.
    fn remove(&self, places: &[Vec<u8>], partials: bool) -> Result<Vec<bool>, StoreError> {
        let Some(tree) = self.tree(false)? else {
            return Ok(vec![true; places.len()]);
        };
        let special = move |dir: &OwnedFd, name: &OsStr| {
            partial::kept_name(name).map(|_| spared(dir, name, partials, true))
        };
        places
            .iter()
            .map(|below| tree.remove_all_but(below, &special))
            .collect()
    }

    /// Removes every temporary file not yet renamed into place, except
    /// the resumable ones that hold data (P-35).
    fn abort(&self) {
        for (_, f) in self.files.lock().expect("file table").drain() {
            if f.resumable && f.holds_data.load(Ordering::Acquire) {
                continue;
            }
            let Ok(dir) = f.dir() else { continue };
            let _ = rustix::fs::unlinkat(&*dir, &f.temp, rustix::fs::AtFlags::empty());
            if f.resumable {
                let _ = f.with_journal(|j| j.remove());
            }
        }
    }

    /// The partial an earlier transfer left for the manifest path `rel`,
    /// opened for reading, if any and no live transfer holds it (P-35).
    fn partial_of(&self, rel: &[u8]) -> Result<Option<Arc<dyn Held>>, StoreError> {
        let Some((tree, below)) = self.place(rel, false)? else {
            return Ok(None);
        };
        Ok(tree
            .parent_if_there(&below)?
            .and_then(|(dir, name)| self.left_in(&dir, name))
            .map(|f| Arc::new(f) as Arc<dyn Held>))
    }
}
