//! One file being received (P-17, P-35): its temporary name, resumable
//! or not, the descriptor kept while few enough are open, and the journal
//! of the blocks written to it.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::StoreError;
use crate::journal::{Journal, Stamp};
use crate::partial;
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
    pub(crate) temp: PathBuf,
    pub(crate) final_path: PathBuf,
    /// The temporary name is the resumable one (P-35).
    pub(crate) resumable: bool,
    /// It holds bytes worth resuming from: some written by this transfer,
    /// or by an earlier one.
    pub(crate) holds_data: AtomicBool,
    /// What the file is a copy of, for its journal (P-35).
    pub(crate) stamp: Stamp,
    /// The resumable file's journal, once the file is open; `None` where
    /// there is none or writing it failed.
    pub(crate) journal: Mutex<Option<Journal>>,
    /// The blocks an earlier transfer's journal listed, until taken.
    pub(crate) listed: Mutex<Vec<(u32, [u8; 32])>>,
    /// A journal may lie beside the partial (this transfer opened one, or
    /// an earlier transfer's partial was found), to remove when placed.
    pub(crate) journaled: AtomicBool,
}

pub(crate) struct Handle {
    pub(crate) file: Option<Arc<File>>,
    pub(crate) created: bool,
}

impl OutFile {
    /// The temporary file's descriptor: the one kept, or a fresh one
    /// (kept if few enough are), creating the file on first use.
    pub(crate) fn handle(&self) -> Result<Arc<File>, StoreError> {
        let mut h = self.handle.lock().expect("file handle");
        if let Some(f) = &h.file {
            return Ok(f.clone());
        }
        let f = if h.created {
            OpenOptions::new()
                .write(true)
                .open(&self.temp)
                .map_err(|e| StoreError::io("open", &self.temp, &e))?
        } else if self.resumable {
            let (f, had) = open_resumable(&self.temp, &self.final_path, self.size)?;
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
                let path = partial::journal_name(&self.final_path);
                match Journal::open(&path, &self.stamp, had) {
                    Ok((j, listed)) => {
                        *self.journal.lock().expect("journal") = Some(j);
                        *self.listed.lock().expect("listed blocks") = listed;
                    }
                    Err(e) => tracing::warn!("no resume journal for {}: {e}", path.display()),
                }
            }
            f
        } else {
            let f = create_temp(&self.temp, &self.final_path, self.size)?;
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
