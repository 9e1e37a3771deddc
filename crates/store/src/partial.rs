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
//! Two locks say who holds a partial (P-41). The `flock` says a transfer
//! has it open; an OFD lock on its first byte says that transfer is still
//! live. A transfer that is ending (its peer gone, or any other failure)
//! drops the second lock first ([`let_go`]), then closes the file when its
//! threads are done. A new transfer of the same name that finds the
//! partial held waits for one that is letting go, and takes it over when
//! it is released ([`settle`]); so `until haul cp …; do :; done` resumes
//! even when the retry arrives before the old session has wound down.
//! A partial held by a transfer that is still live is left alone; the new
//! transfer's file then goes to a random name (`.NAME.haul-XXXXXXXX.part`)
//! that nothing resumes, and the receiver says so (a `Note`).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

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

/// How long a new transfer waits for a partial whose holder is letting
/// go (its threads finishing their last writes) before it gives up and
/// receives under a random name.
pub const LET_GO_WAIT: Duration = Duration::from_secs(20);
/// How long a new transfer waits for a partial whose holder still looks
/// live to start letting go: a client killed a moment ago may not have
/// been noticed yet by its session, and one poked (see [`Poke`]) after an
/// outage hears of the reset once its connection's retransmission timer
/// fires.
pub const LIVE_GRACE: Duration = Duration::from_secs(5);

pub use crate::storage::Poke;

/// The pokes of the partials this process holds, by device and inode;
/// entries whose transfer has ended are pruned whenever the map has
/// doubled since the last pruning, so a tree of many files costs a
/// constant time a file.
#[derive(Default)]
struct Pokes {
    by_inode: HashMap<(u64, u64), Weak<Poke>>,
    pruned_at: usize,
}

fn pokes() -> &'static Mutex<Pokes> {
    static P: std::sync::OnceLock<Mutex<Pokes>> = std::sync::OnceLock::new();
    P.get_or_init(Default::default)
}

fn inode(f: &File) -> Option<(u64, u64)> {
    rustix::fs::fstat(f).ok().map(|st| (st.st_dev, st.st_ino))
}

/// Registers `poke` for `file`, a partial this transfer holds, until it is
/// dropped; [`settle`] calls it when another transfer of this process
/// finds the partial held by a transfer that still looks live.
pub fn on_contention(file: &File, poke: &Arc<Poke>) {
    if let Some(key) = inode(file) {
        let mut p = pokes().lock().unwrap_or_else(|e| e.into_inner());
        if p.by_inode.len() >= 2 * p.pruned_at.max(512) {
            p.by_inode.retain(|_, w| w.strong_count() > 0);
            p.pruned_at = p.by_inode.len();
        }
        p.by_inode.insert(key, Arc::downgrade(poke));
    }
}

fn poke_holder(f: &File) {
    let poke = inode(f).and_then(|key| {
        let p = pokes().lock().unwrap_or_else(|e| e.into_inner());
        p.by_inode.get(&key).and_then(Weak::upgrade)
    });
    if let Some(poke) = poke {
        poke();
    }
}

/// Who holds a partial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Nobody: it may be taken.
    Nobody,
    /// A transfer that is still running.
    Live,
    /// A transfer that is ending and will close it shortly.
    LettingGo,
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

fn unlock(file: &File) {
    // SAFETY: flock on a descriptor we own.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
}

/// The OFD lock on the first byte that says "live": `F_WRLCK` to take it,
/// `F_UNLCK` to drop it, on `cmd` (`F_OFD_SETLK` or `F_OFD_GETLK`).
/// Independent of the `flock` (Linux keeps the two apart), and owned by
/// the open file description, like the `flock`.
fn live_lock(file: &File, cmd: libc::c_int, kind: libc::c_int) -> io::Result<libc::c_int> {
    // SAFETY: an all-zero `struct flock` is valid; fcntl reads and (for
    // GETLK) writes only that struct.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l.l_start = 0;
    l.l_len = 1;
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), cmd, &mut l) };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(l.l_type as libc::c_int)
}

/// Marks `file`, a partial this transfer holds, as no longer live: a new
/// transfer of the same name now waits for it to be closed instead of
/// going around it. Best effort: where the OS refuses, the partial looks
/// live until closed, as before.
pub fn let_go(file: &File) {
    let _ = live_lock(file, libc::F_OFD_SETLK, libc::F_UNLCK);
}

/// Who holds `f`, an open partial: nobody, a live transfer, or one that
/// is letting go.
fn holder(f: &File) -> Holder {
    match lock(f) {
        Ok(()) => {
            unlock(f);
            Holder::Nobody
        }
        Err(e) if e.kind() != io::ErrorKind::WouldBlock => Holder::Nobody,
        Err(_) => match live_lock(f, libc::F_OFD_GETLK, libc::F_WRLCK) {
            Ok(t) if t == libc::F_UNLCK => Holder::LettingGo,
            _ => Holder::Live,
        },
    }
}

/// Who holds the file `name` in `dir` (nobody if it is not there).
pub fn holder_at(dir: &OwnedFd, name: &OsStr) -> Holder {
    match Beneath::open_in(dir, name, OFlags::RDONLY | OFlags::NONBLOCK, 0) {
        Ok(f) => holder(&f),
        Err(_) => Holder::Nobody,
    }
}

/// Waits for the partial `name` in `dir` to be free: up to [`LET_GO_WAIT`]
/// while its holder lets go, up to `live_grace` (at most [`LIVE_GRACE`],
/// what a transfer has left of it) for a holder that still looks live to
/// start letting go. Says who holds it at the end.
pub fn settle(dir: &OwnedFd, name: &OsStr, live_grace: Duration) -> Holder {
    let start = Instant::now();
    let mut poked = false;
    loop {
        let h = match Beneath::open_in(dir, name, OFlags::RDONLY | OFlags::NONBLOCK, 0) {
            Ok(f) => {
                let h = holder(&f);
                if h == Holder::Live && !poked {
                    poke_holder(&f);
                    poked = true;
                }
                h
            }
            Err(_) => Holder::Nobody,
        };
        let wait = match h {
            Holder::Nobody => return h,
            Holder::Live => live_grace,
            Holder::LettingGo => LET_GO_WAIT,
        };
        if start.elapsed() >= wait {
            return h;
        }
        std::thread::sleep(Duration::from_millis(5));
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
    hold(&file)?;
    Ok((file, existed))
}

/// Takes `file` (a temporary this transfer writes) for this transfer:
/// its `flock`, and the lock that says the transfer is live. Where the OS
/// has no OFD locks, it looks live until closed. `WouldBlock`: another
/// transfer holds it.
pub(crate) fn hold(file: &File) -> io::Result<()> {
    lock(file)?;
    let _ = live_lock(file, libc::F_OFD_SETLK, libc::F_WRLCK);
    Ok(())
}

/// Removes the temporary `name` in `dir` (and, for a resumable partial,
/// its journal) if nobody holds it: it is taken first, so a transfer that
/// starts on it meanwhile is never cut off, and only the file taken is
/// removed. Says whether it was.
pub fn remove_if_free(dir: &OwnedFd, name: &OsStr) -> bool {
    let Ok(f) = Beneath::open_in(dir, name, OFlags::RDONLY | OFlags::NONBLOCK, 0) else {
        return false;
    };
    if lock(&f).is_err() {
        return false;
    }
    let same = match (
        rustix::fs::fstat(&f),
        rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW),
    ) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    };
    if !same || rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty()).is_err() {
        return false;
    }
    if let Some(final_name) = final_of_resumable(name) {
        let _ = rustix::fs::unlinkat(
            dir,
            journal_name(&final_name).as_os_str(),
            rustix::fs::AtFlags::empty(),
        );
    }
    true
}

/// What a temporary or journal name in a directory is, if it is one of
/// haul's: the final name it stands for, and which kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// `.NAME.haul.part`: resumable.
    Resumable(OsString),
    /// `.NAME.haul-XXXXXXXX.part`: a transfer's temporary that nothing
    /// resumes (its resumable name was held).
    Random(OsString),
    /// `.NAME.haul.journal`.
    Journal(OsString),
}

/// Tells a name of haul's temporaries and journals from any other.
pub fn kept_name(name: &OsStr) -> Option<Kept> {
    let b = name.as_bytes().strip_prefix(b".")?;
    let os = |v: &[u8]| OsStr::from_bytes(v).to_os_string();
    if let Some(f) = b.strip_suffix(b".haul.part").filter(|f| !f.is_empty()) {
        return Some(Kept::Resumable(os(f)));
    }
    if let Some(f) = b.strip_suffix(b".haul.journal").filter(|f| !f.is_empty()) {
        return Some(Kept::Journal(os(f)));
    }
    let f = b.strip_suffix(b".part")?;
    let (f, hex) = f.split_at(f.len().checked_sub(14)?);
    let hex = hex.strip_prefix(b".haul-")?;
    (!f.is_empty() && hex.iter().all(|c| c.is_ascii_hexdigit())).then(|| Kept::Random(os(f)))
}

fn final_of_resumable(name: &OsStr) -> Option<OsString> {
    match kept_name(name)? {
        Kept::Resumable(f) => Some(f),
        _ => None,
    }
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

/// Whether another transfer, live or letting go, holds the file `name`
/// in `dir`.
pub fn in_use_at(dir: &OwnedFd, name: &OsStr) -> bool {
    holder_at(dir, name) != Holder::Nobody
}

/// The partial an earlier transfer left for the file `name` in `dir`,
/// opened for reading, if a regular file is there and nobody holds it
/// once a holder letting go has closed it ([`settle`], with `live_grace`).
pub fn left_in(dir: &OwnedFd, name: &OsStr, live_grace: Duration) -> Option<File> {
    let part = resumable_name(name);
    if settle(dir, &part, live_grace) != Holder::Nobody {
        return None;
    }
    // Only a look: the transfer that resumes it takes its own lock.
    let f = Beneath::open_in(dir, &part, OFlags::RDONLY | OFlags::NONBLOCK, 0).ok()?;
    f.metadata().is_ok_and(|m| m.is_file()).then_some(f)
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
        assert!(
            left_in(&dir, fin, LIVE_GRACE).is_none(),
            "nothing there yet"
        );
        let p = resumable_name(fin);
        let (held, existed) = open_locked(&dir, &p).unwrap();
        assert!(!existed);
        assert!(in_use_at(&dir, &p));
        assert!(in_use(&d.path().join(&p)));
        assert!(
            left_in(&dir, fin, LIVE_GRACE).is_none(),
            "a live transfer holds it"
        );
        let again = open_locked(&dir, &p).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::WouldBlock);
        drop(held);
        assert!(!in_use_at(&dir, &p));
        let left = left_in(&dir, fin, LIVE_GRACE).expect("left for the next transfer");
        assert!(!in_use_at(&dir, &p), "looking takes no lock");
        drop(left);
        let (_f, existed) = open_locked(&dir, &p).unwrap();
        assert!(existed, "reopened with what it holds");
    }

    #[test]
    fn a_holder_is_live_until_it_lets_go_and_a_new_transfer_waits_for_that_one() {
        let d = tempfile::tempdir().unwrap();
        let dir = open_dir(d.path()).unwrap();
        let p = resumable_name(OsStr::new("x"));
        let (held, _) = open_locked(&dir, &p).unwrap();
        assert_eq!(holder_at(&dir, &p), Holder::Live);
        let t0 = Instant::now();
        assert_eq!(
            settle(&dir, &p, LIVE_GRACE),
            Holder::Live,
            "a live holder keeps it"
        );
        assert!(t0.elapsed() >= LIVE_GRACE);
        let_go(&held);
        assert_eq!(holder_at(&dir, &p), Holder::LettingGo);
        assert!(in_use_at(&dir, &p), "still open");
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(held);
        });
        let t0 = Instant::now();
        assert_eq!(
            settle(&dir, &p, LIVE_GRACE),
            Holder::Nobody,
            "taken over once closed"
        );
        assert!(t0.elapsed() >= Duration::from_millis(150));
        closer.join().unwrap();
        let left = left_in(&dir, OsStr::new("x"), LIVE_GRACE).expect("left for the next transfer");
        drop(left);
        let (again, existed) = open_locked(&dir, &p).unwrap();
        assert!(existed);
        assert_eq!(holder_at(&dir, &p), Holder::Live, "the new holder is live");
        drop(again);
    }

    #[test]
    fn a_live_holder_is_poked_once_by_a_transfer_that_wants_its_partial() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let d = tempfile::tempdir().unwrap();
        let dir = open_dir(d.path()).unwrap();
        let p = resumable_name(OsStr::new("z"));
        let (held, _) = open_locked(&dir, &p).unwrap();
        let pokes = Arc::new(AtomicUsize::new(0));
        let counted = pokes.clone();
        let poke: Arc<Poke> = Arc::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        on_contention(&held, &poke);
        let grace = Duration::from_millis(100);
        assert_eq!(settle(&dir, &p, grace), Holder::Live);
        assert_eq!(pokes.load(Ordering::SeqCst), 1, "once a wait");
        // A holder whose transfer has ended is no longer poked.
        drop(poke);
        assert_eq!(settle(&dir, &p, grace), Holder::Live);
        assert_eq!(pokes.load(Ordering::SeqCst), 1);
        drop(held);
    }

    #[test]
    fn a_holder_killed_mid_transfer_leaves_the_partial_free_at_once() {
        // A process's locks go with it: a second open file description
        // stands in for the dead process here.
        let d = tempfile::tempdir().unwrap();
        let dir = open_dir(d.path()).unwrap();
        let p = resumable_name(OsStr::new("y"));
        let (held, _) = open_locked(&dir, &p).unwrap();
        drop(held);
        let t0 = Instant::now();
        assert_eq!(settle(&dir, &p, LIVE_GRACE), Holder::Nobody);
        assert!(t0.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn haul_names_are_told_from_others() {
        let k = |s: &str| kept_name(OsStr::new(s));
        let os = |s: &str| OsStr::new(s).to_os_string();
        assert_eq!(
            k(".data.tar.haul.part"),
            Some(Kept::Resumable(os("data.tar")))
        );
        assert_eq!(
            k(".data.tar.haul.journal"),
            Some(Kept::Journal(os("data.tar")))
        );
        let r = random_name(OsStr::new("data.tar"));
        assert_eq!(kept_name(&r), Some(Kept::Random(os("data.tar"))));
        for other in [
            "data.tar",
            ".haul.part",
            ".haul.journal",
            ".x.haul-zzzzzzzz.part",
            ".x.part",
            "x.haul.part",
        ] {
            assert_eq!(k(other), None, "{other}");
        }
    }

    #[test]
    fn only_a_free_partial_is_removed_with_its_journal() {
        let d = tempfile::tempdir().unwrap();
        let dir = open_dir(d.path()).unwrap();
        let p = resumable_name(OsStr::new("x"));
        let j = d.path().join(journal_name(OsStr::new("x")));
        let (held, _) = open_locked(&dir, &p).unwrap();
        std::fs::write(&j, b"journal").unwrap();
        assert!(!remove_if_free(&dir, &p), "held: kept");
        let_go(&held);
        assert!(!remove_if_free(&dir, &p), "letting go: still kept");
        drop(held);
        assert!(remove_if_free(&dir, &p));
        assert!(!d.path().join(&p).exists() && !j.exists());
        assert!(!remove_if_free(&dir, &p), "nothing left");
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
        assert!(left_in(&dir, OsStr::new("x"), LIVE_GRACE).is_none());
        assert_eq!(std::fs::read(&victim).unwrap(), b"secret");
    }
}
