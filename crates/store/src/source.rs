//! Reads blocks of source files by entry id, keeping recently used files
//! open so a large file is opened once, not once per block.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::error::{StoreError, StoreErrorKind};

const MAX_OPEN: usize = 64;

pub struct Sources {
    paths: Vec<PathBuf>,
    open: Mutex<HashMap<u32, Arc<File>>>,
}

impl Sources {
    /// `paths[id]` is the file of manifest entry `id`.
    pub fn new(paths: Vec<PathBuf>) -> Sources {
        Sources {
            paths,
            open: Mutex::new(HashMap::new()),
        }
    }

    pub fn path(&self, id: u32) -> Option<&PathBuf> {
        self.paths.get(id as usize)
    }

    fn file(&self, id: u32) -> Result<Arc<File>, StoreError> {
        let mut open = self.open.lock().expect("source table lock");
        if let Some(f) = open.get(&id) {
            return Ok(f.clone());
        }
        let path = self.path(id).ok_or_else(|| {
            StoreError::new(StoreErrorKind::Other, format!("no source for entry {id}"))
        })?;
        let f = Arc::new(File::open(path).map_err(|e| StoreError::io("open source", path, &e))?);
        if open.len() >= MAX_OPEN {
            open.clear();
        }
        open.insert(id, f.clone());
        Ok(f)
    }

    /// Fills `buf` with the bytes at `offset`. A file that shrank since it
    /// was listed is an error, never a short block.
    pub fn read_block(&self, id: u32, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        let f = self.file(id)?;
        f.read_exact_at(buf, offset).map_err(|e| {
            let path = self.path(id).cloned().unwrap_or_default();
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                StoreError::new(
                    StoreErrorKind::Other,
                    format!(
                        "source file {} shrank while it was being sent",
                        path.display()
                    ),
                )
            } else {
                StoreError::io("read", &path, &e)
            }
        })
    }
}
