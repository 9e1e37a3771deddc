//! Reads blocks of source files by entry id, keeping recently used files
//! open so a large file is opened once, not once per block, and checks
//! after each read that the file is still the one the manifest listed.
//! Blocks found all zeros before the session started (a scan while the
//! connection is set up) are known as such and need no second read.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use wire::{Entry, EntryKind};

use crate::beneath::Beneath;
use crate::error::{StoreError, StoreErrorKind};
use crate::walk::Inode;

const MAX_OPEN: usize = 64;

/// What an error says when a source changed while it was being sent; the
/// client tries such a transfer once more (it resumes from what arrived).
pub const CHANGED: &str = "changed while it was being sent";

/// A file's size and modification time, as the manifest listed them,
/// and its inode as the walk found it (where known).
type Stamp = ((u64, i64, u32), Option<Inode>);

pub struct Sources {
    paths: Vec<PathBuf>,
    /// Where `paths` are: `None` as given (the user's own files, links
    /// followed as the command line names them); a served root's tree,
    /// opened by descriptor without following a link (P-43).
    beneath: Option<Arc<Beneath>>,
    stamps: HashMap<u32, Stamp>,
    open: Mutex<HashMap<u32, Arc<File>>>,
    /// Blocks (entry id, offset, length) already read and found all zeros.
    zeros: HashSet<(u32, u64, u32)>,
    /// A probe's generated data (P-36), instead of files.
    generated: Option<Vec<u8>>,
}

/// Length of the pattern a probe's generated data repeats: a prime, so
/// that blocks of a power-of-two size start at ever other places in it.
const PATTERN_LEN: usize = (1 << 20) + 7;

impl Sources {
    /// `paths[id]` is the file of manifest entry `id`.
    pub fn new(paths: Vec<PathBuf>) -> Sources {
        Sources {
            paths,
            beneath: None,
            stamps: HashMap::new(),
            open: Mutex::new(HashMap::new()),
            zeros: HashSet::new(),
            generated: None,
        }
    }

    /// A served pull's files (`paths[id]` below `tree`, as
    /// [`crate::walk_beneath`] found them): each opened component by
    /// component from the tree's descriptor, never through a link, and
    /// refused unless it is the inode the walk found (P-43). Call
    /// [`Self::stamped`] with the walk's inodes.
    pub fn beneath(tree: Arc<Beneath>, paths: Vec<PathBuf>) -> Sources {
        Sources {
            beneath: Some(tree),
            ..Sources::new(paths)
        }
    }

    /// Generated data in place of files, for a memory-to-memory goodput
    /// test (`haul probe`, P-36): every entry reads as the same
    /// pseudo-random pattern, which no codec shrinks, at memory speed.
    pub fn generated() -> Sources {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut pattern = Vec::with_capacity(PATTERN_LEN + 8);
        while pattern.len() < PATTERN_LEN {
            // xorshift64*: statistically random enough to be incompressible.
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            pattern.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
        }
        pattern.truncate(PATTERN_LEN);
        Sources {
            generated: Some(pattern),
            ..Sources::new(Vec::new())
        }
    }

    /// Notes blocks (entry id, offset, length) read before and found all
    /// zeros, so [`Self::known_zero`] spares reading them again.
    pub fn with_zeros(mut self, zeros: HashSet<(u32, u64, u32)>) -> Sources {
        self.zeros = zeros;
        self
    }

    /// Whether the block of `len` bytes at `offset` of entry `id` was found
    /// all zeros before. The caller still checks [`Self::check_unchanged`].
    pub fn known_zero(&self, id: u32, offset: u64, len: u32) -> bool {
        self.zeros.contains(&(id, offset, len))
    }

    /// Checks every read of the files among `entries` against the size and
    /// modification time they were listed with, and against the inode and
    /// its change time in `inodes` (by entry id, as the walk found them):
    /// a write to a file while it is read moves its change time even where
    /// the writer sets its modification time back, so a block read after
    /// one is never sent beside blocks read before it, as tar's "file
    /// changed as we read it".
    pub fn stamped(mut self, entries: &[Entry], inodes: &[Inode]) -> Sources {
        for e in entries {
            if let EntryKind::File {
                size,
                mtime,
                mtime_nsec,
                ..
            } = e.kind
            {
                let inode = inodes.get(e.id as usize).copied();
                self.stamps.insert(e.id, ((size, mtime, mtime_nsec), inode));
            }
        }
        self
    }

    pub fn path(&self, id: u32) -> Option<&PathBuf> {
        self.paths.get(id as usize)
    }

    /// Entry `id` opened whole (kept open, as for its blocks): for
    /// chunking and digests.
    pub fn open_whole(&self, id: u32) -> Result<Arc<File>, StoreError> {
        self.file(id)
    }

    fn file(&self, id: u32) -> Result<Arc<File>, StoreError> {
        let mut open = self.open.lock().expect("source table lock");
        if let Some(f) = open.get(&id) {
            return Ok(f.clone());
        }
        let path = self.path(id).ok_or_else(|| {
            StoreError::new(StoreErrorKind::Other, format!("no source for entry {id}"))
        })?;
        let f = Arc::new(match &self.beneath {
            None => File::open(path).map_err(|e| StoreError::io("open source", path, &e))?,
            Some(tree) => self.open_beneath(tree, id, path)?,
        });
        if open.len() >= MAX_OPEN {
            open.clear();
        }
        open.insert(id, f.clone());
        Ok(f)
    }

    /// Opens `rel` beneath `tree`, and only if it is still the file the
    /// walk listed as entry `id`: a name swapped since for a link, or for
    /// another file, is refused before a byte is read.
    fn open_beneath(&self, tree: &Beneath, id: u32, rel: &Path) -> Result<File, StoreError> {
        let shown = tree.shown(rel.as_os_str().as_bytes());
        let gone = |why: &str| {
            StoreError::new(
                StoreErrorKind::Other,
                format!("source file {} {CHANGED} ({why})", shown.display()),
            )
        };
        let f = tree
            .open_regular(rel.as_os_str().as_bytes())?
            .ok_or_else(|| gone("it is no longer a regular file there"))?;
        let listed = self.stamps.get(&id).and_then(|(_, inode)| *inode);
        let meta = f
            .metadata()
            .map_err(|e| StoreError::io("stat", &shown, &e))?;
        match listed {
            Some(i) if i.same_file(&Inode::of(&meta)) => Ok(f),
            _ => Err(gone("another file took its name")),
        }
    }

    /// Fills `buf` with the bytes at `offset`. A file that shrank since it
    /// was listed is an error, never a short block.
    pub fn read_block(&self, id: u32, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        if let Some(pattern) = &self.generated {
            let mut at = (offset % PATTERN_LEN as u64) as usize;
            for piece in buf.chunks_mut(PATTERN_LEN) {
                let first = piece.len().min(PATTERN_LEN - at);
                piece[..first].copy_from_slice(&pattern[at..at + first]);
                let rest = piece.len() - first;
                piece[first..].copy_from_slice(&pattern[..rest]);
                at = rest;
            }
            return Ok(());
        }
        let f = self.file(id)?;
        let read = f.read_exact_at(buf, offset);
        self.unchanged(id, &f)?;
        read.map_err(|e| {
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

    /// Checks that entry `id` still has the size and modification time it
    /// was listed with, as after every read.
    pub fn check_unchanged(&self, id: u32) -> Result<(), StoreError> {
        if self.generated.is_some() {
            return Ok(());
        }
        self.unchanged(id, &*self.file(id)?)
    }

    fn unchanged(&self, id: u32, f: &File) -> Result<(), StoreError> {
        let Some(&(listed, inode)) = self.stamps.get(&id) else {
            return Ok(());
        };
        let Ok(m) = f.metadata() else {
            return Ok(());
        };
        let why = if (m.size(), m.mtime(), m.mtime_nsec() as u32) != listed {
            "its size or modification time moved"
        } else if inode.is_some_and(|i| i != Inode::of(&m)) {
            "it was written to, or replaced, with its size and modification time kept"
        } else {
            return Ok(());
        };
        let path = self.path(id).cloned().unwrap_or_default();
        Err(StoreError::new(
            StoreErrorKind::Other,
            format!("source file {} {CHANGED} ({why})", path.display()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_data_is_one_stream_at_any_offset_and_block_size() {
        let s = Sources::generated();
        let mut whole = vec![0u8; 3 * PATTERN_LEN + 5];
        s.read_block(0, 0, &mut whole).unwrap();
        for (offset, len) in [
            (0u64, 10usize),
            (PATTERN_LEN as u64 - 3, 9),
            (12345, 2 * PATTERN_LEN + 1),
        ] {
            let mut b = vec![0u8; len];
            s.read_block(7, offset, &mut b).unwrap();
            assert_eq!(b, whole[offset as usize..offset as usize + len]);
        }
        // The pattern repeats, and nothing within it does.
        assert_eq!(whole[..100], whole[PATTERN_LEN..PATTERN_LEN + 100]);
        assert!(s.check_unchanged(3).is_ok());
        let distinct: HashSet<u8> = whole[..4096].iter().copied().collect();
        assert!(distinct.len() > 250);
    }
}
