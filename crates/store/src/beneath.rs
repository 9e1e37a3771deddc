//! Files beneath a directory descriptor, reached without following links
//! (P-38).
//!
//! A receiver places what its peer names: `a/b/c` under its destination.
//! Checking a path and then using it by name lets a link in between: one
//! the peer placed itself a moment earlier (`a -> /etc`, then `a/passwd`),
//! or one named like a temporary file (`.c.haul.part -> ~/.bashrc`). So
//! nothing here takes a path: every operation starts from the
//! destination's directory descriptor (the anchor) and walks the peer's
//! components one `openat(O_NOFOLLOW | O_DIRECTORY)` at a time, so that a
//! component that is a link fails (`ELOOP`) instead of being followed. The
//! last component is then created, opened, renamed, removed or changed
//! relative to its parent's descriptor, again never through a link
//! (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`, `O_CREAT | O_EXCL`).
//!
//! Paths here are relative to the anchor, `/`-separated bytes whose
//! components are neither empty, `.` nor `..` (the session refuses such
//! names first; they are refused again here).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::error::{StoreError, StoreErrorKind};

/// Directories kept open for the next entries: a manifest lists a
/// directory's files together, so a few spare most walks.
const RECENT: usize = 16;

/// A directory, and everything beneath it reached without links.
pub struct Beneath {
    anchor: Arc<OwnedFd>,
    /// The anchor's path, for messages only.
    shown: PathBuf,
    recent: Mutex<Vec<(Vec<u8>, Arc<OwnedFd>)>>,
}

/// Opens the directory at `path` as an anchor. The path is the user's own
/// (or the served root's): links in it are followed.
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens directory `name` in `dir`, not following a link.
fn open_child_dir(dir: impl AsFd, name: impl rustix::path::Arg) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Splits `rel` into its parent's path and its last component.
pub(crate) fn split(rel: &[u8]) -> (&[u8], &OsStr) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], OsStr::from_bytes(&rel[i + 1..])),
        None => (&[], OsStr::from_bytes(rel)),
    }
}

/// `rel` joined to `name`.
pub(crate) fn join(rel: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = rel.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

fn is_link_error(e: &io::Error) -> bool {
    // O_NOFOLLOW on a link: ELOOP. O_PATH-less opens of a link with
    // O_DIRECTORY may also say ENOTDIR on some file systems; the caller
    // looks again with lstat to tell.
    e.raw_os_error() == Some(libc::ELOOP)
}

impl Beneath {
    pub fn new(anchor: OwnedFd, shown: PathBuf) -> Beneath {
        Beneath {
            anchor: Arc::new(anchor),
            shown,
            recent: Mutex::new(Vec::new()),
        }
    }

    /// The anchor's path, for messages.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// Where `rel` is, for messages.
    pub fn shown(&self, rel: &[u8]) -> PathBuf {
        if rel.is_empty() {
            self.shown.clone()
        } else {
            self.shown.join(OsStr::from_bytes(rel))
        }
    }

    fn link_refused(&self, rel: &[u8]) -> StoreError {
        StoreError::new(
            StoreErrorKind::OutsideRoot,
            format!(
                "{} is a symbolic link: haul never places, changes, reads or deletes anything through a link, so nothing outside is reached through one (remove the link, or name its target as the destination)",
                self.shown(rel).display()
            ),
        )
    }

    /// Classifies an error met at `rel`: a link there is refused as such.
    pub(crate) fn error(&self, what: &str, rel: &[u8], e: &io::Error) -> StoreError {
        if is_link_error(e) || self.is_link(rel) {
            return self.link_refused(rel);
        }
        if e.raw_os_error() == Some(libc::ENOTDIR) {
            return StoreError::new(
                StoreErrorKind::BadRequest,
                format!(
                    "cannot {what} {}: a part of that path is not a directory",
                    self.shown(rel).display()
                ),
            );
        }
        StoreError::io(what, &self.shown(rel), e)
    }

    fn is_link(&self, rel: &[u8]) -> bool {
        self.lstat(rel)
            .ok()
            .flatten()
            .is_some_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
    }

    /// The directory `rel` (the anchor itself when empty), every component
    /// of it a directory, none a link.
    pub fn dir(&self, rel: &[u8]) -> Result<Arc<OwnedFd>, StoreError> {
        if rel.is_empty() {
            return Ok(self.anchor.clone());
        }
        if let Some((_, fd)) = self
            .recent
            .lock()
            .expect("recent directories")
            .iter()
            .find(|(p, _)| p == rel)
        {
            return Ok(fd.clone());
        }
        let mut fd = self.anchor.clone();
        let mut at = 0;
        for part in rel.split(|&b| b == b'/') {
            let end = at + part.len();
            if part.is_empty() || part == b"." || part == b".." {
                return Err(StoreError::new(
                    StoreErrorKind::OutsideRoot,
                    format!(
                        "refused path {:?}: it leaves its directory",
                        String::from_utf8_lossy(rel)
                    ),
                ));
            }
            fd = Arc::new(
                open_child_dir(&*fd, part)
                    .map_err(|e| self.error("open directory", &rel[..end], &e))?,
            );
            at = end + 1;
        }
        let mut recent = self.recent.lock().expect("recent directories");
        if recent.len() >= RECENT {
            recent.remove(0);
        }
        recent.push((rel.to_vec(), fd.clone()));
        Ok(fd)
    }

    /// Forgets the directories kept open: one may have been removed or
    /// replaced.
    pub fn forget(&self) {
        self.recent.lock().expect("recent directories").clear();
    }

    /// `rel`'s parent directory and its last component.
    pub fn parent<'a>(&self, rel: &'a [u8]) -> Result<(Arc<OwnedFd>, &'a OsStr), StoreError> {
        let (dir, name) = split(rel);
        Ok((self.dir(dir)?, name))
    }

    /// `rel`'s parent directory and its last component; `None` where a
    /// directory on the way is missing or not one (nothing can be there).
    /// A link on the way is still refused.
    pub fn parent_if_there<'a>(
        &self,
        rel: &'a [u8],
    ) -> Result<Option<(Arc<OwnedFd>, &'a OsStr)>, StoreError> {
        match self.parent(rel) {
            Ok(p) => Ok(Some(p)),
            Err(e)
                if matches!(
                    e.kind,
                    StoreErrorKind::NotFound | StoreErrorKind::BadRequest
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// What is at `rel`, not following a link; `None` if nothing is (or a
    /// directory on the way is missing or not one).
    pub fn lstat(&self, rel: &[u8]) -> Result<Option<rustix::fs::Stat>, StoreError> {
        if rel.is_empty() {
            return rustix::fs::fstat(&*self.anchor)
                .map(Some)
                .map_err(|e| StoreError::io("stat", &self.shown, &e.into()));
        }
        let Some((fd, name)) = self.parent_if_there(rel)? else {
            return Ok(None);
        };
        match rustix::fs::statat(&*fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(StoreError::io("stat", &self.shown(rel), &e.into())),
        }
    }

    /// The kind of what is at `rel`, if anything.
    pub fn kind(&self, rel: &[u8]) -> Result<Option<FileType>, StoreError> {
        Ok(self
            .lstat(rel)?
            .map(|st| FileType::from_raw_mode(st.st_mode)))
    }

    /// Opens `name` in `dir` with `flags`, never through a link.
    pub fn open_in(dir: &OwnedFd, name: &OsStr, flags: OFlags, mode: u32) -> io::Result<File> {
        let fd = rustix::fs::openat(
            dir,
            name,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )?;
        Ok(File::from(fd))
    }

    /// Opens the regular file at `rel` for reading; `None` if nothing is
    /// there, or something other than a regular file.
    pub fn open_regular(&self, rel: &[u8]) -> Result<Option<File>, StoreError> {
        let Some((fd, name)) = self.parent_if_there(rel)? else {
            return Ok(None);
        };
        // O_NONBLOCK: a FIFO planted under the name must not hang the open.
        match Self::open_in(&fd, name, OFlags::RDONLY | OFlags::NONBLOCK, 0) {
            Ok(f) => {
                let meta = f
                    .metadata()
                    .map_err(|e| StoreError::io("stat", &self.shown(rel), &e))?;
                Ok(meta.is_file().then_some(f))
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT) | Some(libc::ELOOP) | Some(libc::ENXIO)
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(StoreError::io("open", &self.shown(rel), &e)),
        }
    }

    /// Makes directory `rel`; says whether it made it. One already there
    /// is taken as it is; a link or anything else under the name is
    /// refused.
    pub fn mkdir(&self, rel: &[u8]) -> Result<bool, StoreError> {
        let (dir, name) = self.parent(rel)?;
        match rustix::fs::mkdirat(&*dir, name, Mode::from_raw_mode(0o777)) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::EXIST) => {
                match rustix::fs::statat(&*dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode))
                {
                    Ok(FileType::Directory) => Ok(false),
                    Ok(FileType::Symlink) => Err(self.link_refused(rel)),
                    Ok(_) => Err(StoreError::new(
                        StoreErrorKind::BadRequest,
                        format!(
                            "cannot create directory {}: a file of that name is in the way",
                            self.shown(rel).display()
                        ),
                    )),
                    Err(e) => Err(StoreError::io("stat", &self.shown(rel), &e.into())),
                }
            }
            Err(e) => Err(self.error("create directory", rel, &e.into())),
        }
    }

    /// Places a link at `rel` pointing at `target`: made under `temp` in
    /// the same directory, then renamed over whatever file or link was
    /// there (never over a directory).
    pub fn symlink(&self, rel: &[u8], target: &[u8], temp: &OsStr) -> Result<(), StoreError> {
        let (dir, name) = self.parent(rel)?;
        if self.kind(rel)? == Some(FileType::Directory) {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!(
                    "cannot replace directory {} with a link",
                    self.shown(rel).display()
                ),
            ));
        }
        rustix::fs::symlinkat(OsStr::from_bytes(target), &*dir, temp)
            .map_err(|e| StoreError::io("create link", &self.shown(rel), &e.into()))?;
        rustix::fs::renameat(&*dir, temp, &*dir, name).map_err(|e| {
            let _ = rustix::fs::unlinkat(&*dir, temp, AtFlags::empty());
            StoreError::io("place link", &self.shown(rel), &e.into())
        })
    }

    /// The names in directory `rel`.
    pub fn list(&self, rel: &[u8]) -> Result<Vec<OsString>, StoreError> {
        let fd = self.dir(rel)?;
        list_fd(&fd).map_err(|e| StoreError::io("list", &self.shown(rel), &e))
    }

    /// Removes what is at `rel`: a file or link, or a directory with
    /// everything in it. Links are removed, never followed.
    pub fn remove_all(&self, rel: &[u8]) -> Result<(), StoreError> {
        self.remove_all_but(rel, &|_, _| None).map(|_| ())
    }

    /// [`Beneath::remove_all`], except that `special(dir, name)` handles
    /// the entries it knows (`Some(kept)`: it removed them, or kept them),
    /// and a directory that still holds a kept entry stays. Says whether
    /// everything at `rel` went.
    pub fn remove_all_but(&self, rel: &[u8], special: &Special) -> Result<bool, StoreError> {
        let (dir, name) = self.parent(rel)?;
        self.forget();
        remove_in(&dir, name, special).map_err(|e| StoreError::io("delete", &self.shown(rel), &e))
    }

    /// Sets the mode (and with `mtime`, the modification time) of the
    /// directory `rel`, itself opened without following a link.
    pub fn set_dir_meta(
        &self,
        rel: &[u8],
        mode: Option<u32>,
        mtime: Option<rustix::fs::Timespec>,
    ) -> Result<(), StoreError> {
        let fd = self.dir(rel)?;
        if let Some(m) = mode {
            rustix::fs::fchmod(&*fd, Mode::from_raw_mode(m))
                .map_err(|e| StoreError::io("set mode of", &self.shown(rel), &e.into()))?;
        }
        if let Some(t) = mtime {
            let times = rustix::fs::Timestamps {
                last_access: rustix::fs::Timespec {
                    tv_sec: 0,
                    tv_nsec: rustix::fs::UTIME_OMIT,
                },
                last_modification: t,
            };
            rustix::fs::futimens(&*fd, &times)
                .map_err(|e| StoreError::io("set times of", &self.shown(rel), &e.into()))?;
        }
        Ok(())
    }
}

/// The names in the directory open as `fd`, `.` and `..` left out.
fn list_fd(fd: &OwnedFd) -> io::Result<Vec<OsString>> {
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(fd)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    Ok(out)
}

/// Entries a removal handles itself: `Some(kept)` once handled.
pub type Special = dyn Fn(&OwnedFd, &OsStr) -> Option<bool>;

/// Removes `name` in `dir`, a directory's contents first, descending
/// through descriptors only; what `special` handles is left to it. Says
/// whether `name` is gone.
fn remove_in(dir: &OwnedFd, name: &OsStr, special: &Special) -> io::Result<bool> {
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(true),
        Err(e) => return Err(e.into()),
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        if let Some(kept) = special(dir, name) {
            return Ok(!kept);
        }
        return match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(true),
            Err(e) => Err(e.into()),
        };
    }
    let sub = open_child_dir(dir, name)?;
    let mut all = true;
    for child in list_fd(&sub)? {
        all &= remove_in(&sub, &child, special)?;
    }
    if !all {
        return Ok(false);
    }
    match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, PathBuf, Beneath) {
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("root");
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        std::fs::create_dir(outer.path().join("outside")).unwrap();
        std::fs::write(outer.path().join("outside/victim"), b"keep").unwrap();
        symlink(outer.path().join("outside"), root.join("link")).unwrap();
        symlink(outer.path().join("outside/victim"), root.join("d/flink")).unwrap();
        let b = Beneath::new(open_dir(&root).unwrap(), root.clone());
        (outer, root, b)
    }

    #[test]
    fn a_link_is_never_a_directory_on_the_way() {
        let (_o, _root, b) = tree();
        assert!(b.dir(b"d/e").is_ok());
        for bad in [&b"link"[..], b"link/x", b"d/flink", b"d/../link", b"d//e"] {
            let e = b.dir(bad).unwrap_err();
            assert!(
                matches!(
                    e.kind,
                    StoreErrorKind::OutsideRoot | StoreErrorKind::BadRequest
                ),
                "{}: {e}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            b.dir(b"link").unwrap_err().kind,
            StoreErrorKind::OutsideRoot
        );
        assert_eq!(
            b.mkdir(b"link/new").unwrap_err().kind,
            StoreErrorKind::OutsideRoot
        );
    }

    #[test]
    fn mkdir_refuses_a_link_in_the_way_and_keeps_a_directory() {
        let (o, root, b) = tree();
        assert!(b.mkdir(b"fresh").unwrap());
        assert!(!b.mkdir(b"d").unwrap());
        assert_eq!(
            b.mkdir(b"link").unwrap_err().kind,
            StoreErrorKind::OutsideRoot
        );
        assert!(root.join("fresh").is_dir());
        assert!(o.path().join("outside/victim").exists());
    }

    #[test]
    fn open_regular_and_remove_never_follow_links() {
        let (o, root, b) = tree();
        assert!(b.open_regular(b"d/flink").unwrap().is_none());
        assert_eq!(
            b.open_regular(b"link/victim").unwrap_err().kind,
            StoreErrorKind::OutsideRoot
        );
        b.remove_all(b"link").unwrap();
        b.remove_all(b"d").unwrap();
        assert!(!root.join("link").exists() && !root.join("d").exists());
        assert_eq!(
            std::fs::read(o.path().join("outside/victim")).unwrap(),
            b"keep"
        );
    }

    #[test]
    fn a_link_is_placed_over_a_file_but_never_over_a_directory() {
        let (o, root, b) = tree();
        std::fs::write(root.join("f"), b"x").unwrap();
        b.symlink(b"f", b"/etc/passwd", OsStr::new(".f.tmp"))
            .unwrap();
        assert_eq!(
            std::fs::read_link(root.join("f")).unwrap(),
            Path::new("/etc/passwd")
        );
        assert!(b.symlink(b"d", b"/", OsStr::new(".d.tmp")).is_err());
        assert!(root.join("d").is_dir());
        let victim = o.path().join("outside");
        b.set_dir_meta(b"d", Some(0o700), None).unwrap();
        assert!(b.set_dir_meta(b"link", Some(0o777), None).is_err());
        use std::os::unix::fs::PermissionsExt;
        assert_ne!(
            std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
            0o777
        );
    }
}
