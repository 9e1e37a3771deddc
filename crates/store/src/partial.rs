//! Partial files, kept for resume (P-35).
//!
//! A file is received into `.NAME.haul.part` beside its final name `NAME`,
//! holding an exclusive `flock` while its descriptor is open. A transfer
//! that stops before the file is verified and placed (the peer lost, this
//! process killed, a full disk) leaves that file where it is if any block
//! was written into it. The next transfer of the same name finds it, uses
//! it as its basis (P-31), so only what it lacks crosses, and writes into
//! it in place. Nothing ever reads a partial as a result: a block taken
//! from it is checked against the sender's hash like any other, and the
//! file against its digest.
//!
//! A partial that another live transfer holds locked is left alone; that
//! transfer's file then goes to a random name (`.NAME.haul-XXXXXXXX.part`)
//! that nothing resumes.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use crate::beneath::Beneath;

/// The name a file is received under, and resumed from, beside its final
/// name `name`.
pub fn resumable_name(name: &OsStr) -> OsString {
    hidden(name, b".haul.part")
}

/// The journal of the resumable file (`store::journal`).
pub fn journal_name(name: &OsStr) -> OsString {
    hidden(name, b".haul.journal")
}

/// A name for a file whose resumable name another transfer holds (or
/// something other than a partial occupies).
pub fn random_name(name: &OsStr) -> OsString {
    let mut r = [0u8; 4];
    getrandom::fill(&mut r).expect("the OS random source is available");
    let suffix = format!(".haul-{:08x}.part", u32::from_le_bytes(r));
    hidden(name, suffix.as_bytes())
}

/// The resumable name beside the final path `final_path` (for tests and
/// messages).
pub fn resumable_path(final_path: &Path) -> PathBuf {
    let name = final_path.file_name().unwrap_or(OsStr::new("file"));
    final_path.with_file_name(resumable_name(name))
}

fn hidden(name: &OsStr, suffix: &[u8]) -> OsString {
    let mut t = b".".to_vec();
    t.extend_from_slice(name.as_bytes());
    t.extend_from_slice(suffix);
    OsStr::from_bytes(&t).to_os_string()
}

/// Takes `file`'s exclusive lock without waiting. `WouldBlock`: another
/// transfer holds it.
fn lock(file: &File) -> io::Result<()> {
    // SAFETY: flock on a descriptor we own.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Opens the resumable file `name` in `dir` for writing, creating it
/// (mode 0600) if missing, and locks it; never through a link (P-38).
/// Says whether it existed: then it holds what an earlier transfer wrote.
/// Anything but a regular file under the name fails with `ELOOP`.
pub fn open_locked(dir: &OwnedFd, name: &OsStr) -> io::Result<(File, bool)> {
    let fresh = Beneath::open_in(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
        0o600,
    );
    let (file, existed) = match fresh {
        Ok(f) => (f, false),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // O_NONBLOCK: a FIFO under the name must not hang the open.
            let f =
                Beneath::open_in(dir, name, OFlags::WRONLY | OFlags::NONBLOCK, 0).map_err(|e| {
                    match e.raw_os_error() {
                        Some(libc::ENXIO) | Some(libc::EISDIR) => {
                            io::Error::from_raw_os_error(libc::ELOOP)
                        }
                        _ => e,
                    }
                })?;
            if !f.metadata()?.is_file() {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            (f, true)
        }
        Err(e) => return Err(e),
    };
    lock(&file)?;
    Ok((file, existed))
}

/// Whether another live transfer holds the file at `path`.
pub fn in_use(path: &Path) -> bool {
    let Some(name) = path.file_name() else {
        return false;
    };
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    crate::beneath::open_dir(parent.unwrap_or(Path::new(".")))
        .is_ok_and(|dir| in_use_at(&dir, name))
}

/// Whether another live transfer holds the file `name` in `dir`.
pub fn in_use_at(dir: &OwnedFd, name: &OsStr) -> bool {
    match Beneath::open_in(dir, name, OFlags::RDONLY | OFlags::NONBLOCK, 0) {
        Ok(f) => matches!(lock(&f), Err(e) if e.kind() == io::ErrorKind::WouldBlock),
        Err(_) => false,
    }
}

/// The partial an earlier transfer left for the file `name` in `dir`,
/// opened for reading, if a regular file is there and no live transfer
/// holds it.
pub fn left_in(dir: &OwnedFd, name: &OsStr) -> Option<File> {
    let part = resumable_name(name);
    let f = Beneath::open_in(dir, &part, OFlags::RDONLY | OFlags::NONBLOCK, 0).ok()?;
    let regular = f.metadata().is_ok_and(|m| m.is_file());
    let free = match lock(&f) {
        Ok(()) => {
            // Only a look: the transfer that resumes it takes its own lock.
            // SAFETY: flock on a descriptor we own.
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
            true
        }
        Err(e) => e.kind() != io::ErrorKind::WouldBlock,
    };
    (regular && free).then_some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::beneath::open_dir;

    #[test]
    fn names_sit_beside_the_final_name() {
        let f = OsStr::new("data.tar");
        assert_eq!(resumable_name(f), OsStr::new(".data.tar.haul.part"));
        assert_eq!(journal_name(f), OsStr::new(".data.tar.haul.journal"));
        let r = random_name(f);
        let name = r.to_str().unwrap();
        assert!(
            name.starts_with(".data.tar.haul-") && name.ends_with(".part"),
            "{name}"
        );
        assert_eq!(
            resumable_path(Path::new("/a/b/data.tar")),
            Path::new("/a/b/.data.tar.haul.part")
        );
    }

    #[test]
    fn a_locked_partial_is_in_use_and_a_released_one_is_left() {
        let d = tempfile::tempdir().unwrap();
        let dir = open_dir(d.path()).unwrap();
        let fin = OsStr::new("x");
        assert!(left_in(&dir, fin).is_none(), "nothing there yet");
        let p = resumable_name(fin);
        let (held, existed) = open_locked(&dir, &p).unwrap();
        assert!(!existed);
        assert!(in_use_at(&dir, &p));
        assert!(in_use(&d.path().join(&p)));
        assert!(left_in(&dir, fin).is_none(), "a live transfer holds it");
        let again = open_locked(&dir, &p).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::WouldBlock);
        drop(held);
        assert!(!in_use_at(&dir, &p));
        let left = left_in(&dir, fin).expect("left for the next transfer");
        assert!(!in_use_at(&dir, &p), "looking takes no lock");
        drop(left);
        let (_f, existed) = open_locked(&dir, &p).unwrap();
        assert!(existed, "reopened with what it holds");
    }

    #[test]
    fn a_link_under_the_partial_name_is_never_opened() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"secret").unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join(".x.haul.part")).unwrap();
        let dir = open_dir(d.path()).unwrap();
        let e = open_locked(&dir, &resumable_name(OsStr::new("x"))).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        assert!(left_in(&dir, OsStr::new("x")).is_none());
        assert_eq!(std::fs::read(&victim).unwrap(), b"secret");
    }
}
