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

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The name a file is received under, and resumed from.
pub fn resumable_name(final_path: &Path) -> PathBuf {
    hidden(final_path, b".haul.part")
}

/// The journal of the resumable file (`store::journal`).
pub fn journal_name(final_path: &Path) -> PathBuf {
    hidden(final_path, b".haul.journal")
}

/// A name for a file whose resumable name another transfer holds.
pub fn random_name(final_path: &Path) -> PathBuf {
    let mut r = [0u8; 4];
    getrandom::fill(&mut r).expect("the OS random source is available");
    let suffix = format!(".haul-{:08x}.part", u32::from_le_bytes(r));
    hidden(final_path, suffix.as_bytes())
}

fn hidden(final_path: &Path, suffix: &[u8]) -> PathBuf {
    let name = final_path.file_name().unwrap_or(OsStr::new("file"));
    let mut t = b".".to_vec();
    t.extend_from_slice(name.as_bytes());
    t.extend_from_slice(suffix);
    final_path.with_file_name(OsStr::from_bytes(&t))
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

/// Opens the resumable file at `path` for writing, creating it (mode 0600)
/// if missing, and locks it. Says whether it existed: then it holds what
/// an earlier transfer wrote.
pub fn open_locked(path: &Path) -> io::Result<(File, bool)> {
    let fresh = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    let (file, existed) = match fresh {
        Ok(f) => (f, false),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            (OpenOptions::new().write(true).open(path)?, true)
        }
        Err(e) => return Err(e),
    };
    lock(&file)?;
    Ok((file, existed))
}

/// Whether another live transfer holds the file at `path`.
pub fn in_use(path: &Path) -> bool {
    match File::open(path) {
        Ok(f) => matches!(lock(&f), Err(e) if e.kind() == io::ErrorKind::WouldBlock),
        Err(_) => false,
    }
}

/// The partial an earlier transfer left for `final_path`, if one is there
/// and no live transfer holds it.
pub fn left_for(final_path: &Path) -> Option<PathBuf> {
    let p = resumable_name(final_path);
    let is_file = std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file());
    (is_file && !in_use(&p)).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sit_beside_the_final_name() {
        let f = Path::new("/a/b/data.tar");
        assert_eq!(resumable_name(f), Path::new("/a/b/.data.tar.haul.part"));
        let r = random_name(f);
        let name = r.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with(".data.tar.haul-") && name.ends_with(".part"),
            "{name}"
        );
        assert_eq!(r.parent(), f.parent());
    }

    #[test]
    fn a_locked_partial_is_in_use_and_a_released_one_is_left() {
        let d = tempfile::tempdir().unwrap();
        let fin = d.path().join("x");
        assert_eq!(left_for(&fin), None, "nothing there yet");
        let p = resumable_name(&fin);
        let (held, existed) = open_locked(&p).unwrap();
        assert!(!existed);
        assert!(in_use(&p));
        assert_eq!(left_for(&fin), None, "a live transfer holds it");
        let again = open_locked(&p).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::WouldBlock);
        drop(held);
        assert!(!in_use(&p));
        assert_eq!(left_for(&fin), Some(p.clone()));
        let (_f, existed) = open_locked(&p).unwrap();
        assert!(existed, "reopened with what it holds");
    }
}
