//! One file being received (P-17, P-35): its temporary name, resumable
//! or not, the descriptor kept while few enough are open, and the journal
//! of the blocks written to it.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::OFlags;

use crate::beneath::Beneath;
use crate::error::StoreError;
use crate::journal::{Afresh, Journal, Stamp};
use crate::partial;
use crate::storage::Note;
use crate::temp::{create_temp, open_resumable};

/// Temporary files kept open at once. A tree's manifest announces every
/// file at once; beyond this many, a file's descriptor is opened for each
/// write and closed again, so a receiver of any number of files stays
/// within the process's descriptor limit.
pub(crate) const MAX_OPEN: usize = 256;

/// A file being received.
pub struct OutFile {
    /// The temporary file's descriptor while kept (at most [`MAX_OPEN`]
    /// are), and whether the file exists yet.
    pub(crate) handle: Mutex<Handle>,
    pub(crate) size: u64,
    pub(crate) open: Arc<AtomicUsize>,
    /// Where it is received, never reached through a link (P-38): the
    /// tree, the directory beneath its anchor, the temporary and final
    /// names in it. The directory is walked again when needed rather than
    /// held open, so a manifest of many directories holds no descriptors.
    pub(crate) tree: Arc<Beneath>,
    pub(crate) dir: Vec<u8>,
    pub(crate) temp: OsString,
    pub(crate) name: OsString,
    /// The final path, for messages.
    pub(crate) final_path: PathBuf,
    /// Its place below the destination, for notes to the sender (P-41).
    pub(crate) rel: Vec<u8>,
    /// Where notes about it go.
    pub(crate) notes: Arc<Notes>,
    /// What its transfer does when another wants its partial (P-41).
    pub(crate) poke: Option<Arc<partial::Poke>>,
    /// The temporary name is the resumable one (P-35).
    pub(crate) resumable: bool,
    /// It holds bytes worth resuming from: some written by this transfer,
    /// or by an earlier one.
    pub(crate) holds_data: AtomicBool,
    /// What the file is a copy of, for its journal (P-35).
    pub(crate) stamp: Stamp,
    /// The resumable file has a journal, once the file is open; `false`
    /// where there is none or writing it failed.
    pub(crate) journal: Mutex<bool>,
    /// The blocks an earlier transfer's journal listed, until taken.
    pub(crate) listed: Mutex<Vec<(u32, [u8; 32])>>,
    /// A journal may lie beside the partial (this transfer opened one, or
    /// an earlier transfer's partial was found), to remove when placed.
    pub(crate) journaled: AtomicBool,
    /// One block write into the file at a time. The file system takes the
    /// inode's lock for every buffered write anyway (ext4, tmpfs), and the
    /// stream threads that found it taken spun in the kernel for it: a
    /// fifth of a receiver's CPU on loopback (docs/BENCHMARKS.md). Waiting
    /// here sleeps instead, and leaves the core to the other stages.
    pub(crate) writing: Mutex<()>,
}

/// The notes a sink has made and not yet handed over.
#[derive(Default)]
pub struct Notes(Mutex<Vec<Note>>);

impl Notes {
    pub(crate) fn add(&self, kind: wire::NoteKind, text: String) {
        tracing::info!("{text}");
        self.0.lock().expect("notes").push((kind, text));
    }

    pub fn take(&self) -> Vec<Note> {
        std::mem::take(&mut *self.0.lock().expect("notes"))
    }
}

pub(crate) struct Handle {
    pub(crate) file: Option<Arc<File>>,
    pub(crate) created: bool,
}

impl OutFile {
    /// The directory it is received in.
    pub(crate) fn dir(&self) -> Result<Arc<OwnedFd>, StoreError> {
        self.tree.dir(&self.dir)
    }

    /// The journal beside its partial.
    pub(crate) fn with_journal<T>(&self, f: impl FnOnce(&Journal) -> T) -> Result<T, StoreError> {
        let dir = self.dir()?;
        let name = partial::journal_name(&self.name);
        Ok(f(&Journal {
            dir: &dir,
            name: &name,
        }))
    }

    /// Checks, before it is renamed into place, that the temporary name
    /// in `dir` is still this transfer's file: one removed or replaced
    /// meanwhile (another program, a `sync --delete` of another client)
    /// would otherwise place nothing, or another file, under the final
    /// name (P-41).
    pub(crate) fn check_still_there(&self, dir: &OwnedFd) -> Result<(), StoreError> {
        let ours = self.handle()?;
        let ours = rustix::fs::fstat(&*ours)
            .map_err(|e| StoreError::io("stat", &self.final_path, &e.into()))?;
        let named = rustix::fs::statat(dir, &self.temp, rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
        match named {
            Ok(n) if (n.st_dev, n.st_ino) == (ours.st_dev, ours.st_ino) => Ok(()),
            Ok(_) | Err(rustix::io::Errno::NOENT) => Err(self.vanished()),
            Err(e) => Err(StoreError::io(
                "stat",
                &self.final_path.with_file_name(&self.temp),
                &e.into(),
            )),
        }
    }

    /// The error for a temporary that was removed or replaced while this
    /// transfer wrote it.
    pub(crate) fn vanished(&self) -> StoreError {
        StoreError::new(
            crate::error::StoreErrorKind::Other,
            format!(
                "the temporary file {} was removed or replaced while {} was being received (by another program, or another client's `sync --delete`); nothing was placed: run the same command again",
                self.final_path.with_file_name(&self.temp).display(),
                self.final_path.display()
            ),
        )
    }

    /// Opens the temporary file again with `flags` (it exists).
    pub(crate) fn reopen(&self, flags: OFlags) -> Result<File, StoreError> {
        Beneath::open_in(&*self.dir()?, &self.temp, flags, 0).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                self.vanished()
            } else {
                StoreError::io("open", &self.final_path.with_file_name(&self.temp), &e)
            }
        })
    }

    /// The temporary file's descriptor: the one kept, or a fresh one
    /// (kept if few enough are), creating the file on first use.
    pub(crate) fn handle(&self) -> Result<Arc<File>, StoreError> {
        let mut h = self.handle.lock().expect("file handle");
        if let Some(f) = &h.file {
            return Ok(f.clone());
        }
        let f = if h.created {
            self.reopen(OFlags::WRONLY)?
        } else if self.resumable {
            let dir = self.dir()?;
            let (f, had) = open_resumable(&dir, &self.temp, &self.final_path, self.size)?;
            if let Some(poke) = &self.poke {
                partial::on_contention(&f, poke);
            }
            if had {
                self.holds_data.store(true, Ordering::Release);
            }
            h.created = true;
            // Without its journal a partial still resumes, by content (P-31).
            // A file of one block keeps none (P-35): its block is all or
            // nothing, and the journal's create, record and removal were
            // seven of a small file's twenty-one system calls.
            if had || self.stamp.blocks() > 1 {
                self.journaled.store(true, Ordering::Release);
            }
            if self.stamp.blocks() > 1 {
                let name = partial::journal_name(&self.name);
                let j = Journal {
                    dir: &dir,
                    name: &name,
                };
                match j.open_why(&self.stamp, had) {
                    Ok((listed, why)) => {
                        *self.journal.lock().expect("journal") = true;
                        *self.listed.lock().expect("listed blocks") = listed;
                        if let Some(why) = why {
                            self.note_afresh(why);
                        }
                    }
                    Err(e) => {
                        tracing::warn!("no resume journal for {}: {e}", self.final_path.display())
                    }
                }
            }
            f
        } else {
            let f = create_temp(&*self.dir()?, &self.temp, &self.final_path, self.size)?;
            h.created = true;
            f
        };
        let f = Arc::new(f);
        if self.open.fetch_add(1, Ordering::SeqCst) < MAX_OPEN {
            h.file = Some(f.clone());
        } else {
            self.open.fetch_sub(1, Ordering::SeqCst);
        }
        Ok(f)
    }
}

impl OutFile {
    /// Its place below the destination, as notes show it.
    pub(crate) fn shown(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.rel)
    }

    /// Notes why the partial an earlier transfer left is reused by
    /// content only (P-41).
    fn note_afresh(&self, why: Afresh) {
        let (kind, reason) = match why {
            Afresh::Missing => (
                wire::NoteKind::PartialUnjournaled,
                "has no journal".to_string(),
            ),
            Afresh::Unreadable(e) => (
                wire::NoteKind::PartialUnjournaled,
                format!("has a journal that cannot be used ({e})"),
            ),
            Afresh::OtherStamp(old) => {
                let new = &self.stamp;
                let mut diff = Vec::new();
                if old.size != new.size {
                    diff.push(format!("{} bytes then, {} now", old.size, new.size));
                }
                if (old.mtime, old.mtime_nsec) != (new.mtime, new.mtime_nsec) {
                    diff.push("another modification time".to_string());
                }
                if old.block_size != new.block_size {
                    diff.push(format!(
                        "blocks of {} KiB then, {} KiB now",
                        old.block_size >> 10,
                        new.block_size >> 10
                    ));
                }
                (
                    wire::NoteKind::PartialStale,
                    format!("is of another version of the source ({})", diff.join(", ")),
                )
            }
        };
        self.notes.add(
            kind,
            format!(
                "{}: the partial an earlier transfer left {reason}, so it is reused by content only, where it matches",
                self.shown()
            ),
        );
    }
}

impl Drop for OutFile {
    fn drop(&mut self) {
        let kept = self
            .handle
            .get_mut()
            .map(|h| h.file.take().is_some())
            .unwrap_or(false);
        if kept {
            self.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
