//! Turns sources into a manifest: one entry per directory, file and symlink,
//! with paths relative to each source's parent so the first component is the
//! source's own name (P-8). Sources named on the command line are followed
//! if they are symlinks, as scp does; links inside a tree are sent as links.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use wire::{Entry, EntryKind};

use crate::error::{StoreError, StoreErrorKind};

/// The manifest of a set of sources.
#[derive(Default)]
pub struct Walked {
    pub entries: Vec<Entry>,
    /// Where each file entry's bytes are, indexed by entry id.
    pub paths: Vec<PathBuf>,
    /// Each entry's inode as the walk found it, indexed by entry id: a
    /// source is read from this inode only, unchanged since (its change
    /// time, which no program can set back, included).
    pub inodes: Vec<Inode>,
    /// Things skipped, for the user to read (sockets, devices, fifos).
    pub skipped: Vec<String>,
}

impl Walked {
    pub fn file_bytes(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| match e.kind {
                EntryKind::File { size, .. } => size,
                _ => 0,
            })
            .sum()
    }
}

/// Where a source's bytes are, and the time of its inode's last change:
/// any write (or `chmod`, `touch`, link) moves it, and nothing can set it
/// back, so a file rewritten with its size and modification time restored
/// is still told apart (issue 24).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Inode {
    pub dev: u64,
    pub ino: u64,
    pub ctime: i64,
    pub ctime_nsec: i64,
}

impl Inode {
    pub fn of(meta: &fs::Metadata) -> Inode {
        Inode {
            dev: meta.dev(),
            ino: meta.ino(),
            ctime: meta.ctime(),
            ctime_nsec: meta.ctime_nsec(),
        }
    }
}

/// Whether a source names a directory's contents rather than the directory
/// itself, by rsync's rule: it ends in `/` or `/.`, or is `.` (P-8).
pub fn names_contents(source: &[u8]) -> bool {
    source == b"." || source.ends_with(b"/") || source.ends_with(b"/.")
}

/// Enumerates `sources`. Directories need `recursive`. A directory named
/// as its contents (`dir/`, see [`names_contents`]) contributes its
/// children at the top of the manifest, not itself.
pub fn walk(sources: &[PathBuf], recursive: bool) -> Result<Walked, StoreError> {
    let mut w = Walked::default();
    for src in sources {
        let meta = fs::metadata(src).map_err(|e| StoreError::io("read source", src, &e))?;
        if meta.is_dir() && names_contents(src.as_os_str().as_bytes()) {
            if !recursive {
                return Err(not_recursive(src));
            }
            add_children(&mut w, src, None, recursive)?;
            continue;
        }
        let name = top_name(src)?;
        add(&mut w, src, name, &meta, recursive, true)?;
    }
    Ok(w)
}

fn not_recursive(path: &Path) -> StoreError {
    StoreError::new(
        StoreErrorKind::BadRequest,
        format!(
            "{} is a directory (use -r to copy directories)",
            path.display()
        ),
    )
}

/// Adds the children of directory `path`, sorted by name, under `rel`
/// (or at the top).
fn add_children(
    w: &mut Walked,
    path: &Path,
    rel: Option<&[u8]>,
    recursive: bool,
) -> Result<(), StoreError> {
    let mut children: Vec<_> = fs::read_dir(path)
        .map_err(|e| StoreError::io("list directory", path, &e))?
        .collect::<Result<_, _>>()
        .map_err(|e| StoreError::io("list directory", path, &e))?;
    children.sort_by_key(|c| c.file_name());
    for c in children {
        let cp = c.path();
        // fstatat on the open directory: no walk of the whole path again.
        let cm = c.metadata().map_err(|e| StoreError::io("read", &cp, &e))?;
        let mut crel = rel.map(|r| [r, b"/"].concat()).unwrap_or_default();
        crel.extend_from_slice(c.file_name().as_bytes());
        add(w, &cp, crel, &cm, recursive, false)?;
    }
    Ok(())
}

fn top_name(src: &Path) -> Result<Vec<u8>, StoreError> {
    // `dir/.` and `dir/` name the directory itself.
    let canon;
    let p = if src.file_name().is_none() {
        canon = src
            .canonicalize()
            .map_err(|e| StoreError::io("resolve source", src, &e))?;
        &canon
    } else {
        src
    };
    let name = p
        .file_name()
        .map(|n| n.as_bytes().to_vec())
        .unwrap_or_default();
    if name.is_empty() || name == b".." {
        return Err(StoreError::new(
            StoreErrorKind::BadRequest,
            format!("cannot copy {}: it has no name", src.display()),
        ));
    }
    Ok(name)
}

fn mtime(meta: &fs::Metadata) -> (i64, u32) {
    (meta.mtime(), meta.mtime_nsec() as u32)
}

fn add(
    w: &mut Walked,
    path: &Path,
    rel: Vec<u8>,
    meta: &fs::Metadata,
    recursive: bool,
    top: bool,
) -> Result<(), StoreError> {
    let id = w.entries.len() as u32;
    let mode = meta.permissions().mode() & 0o7777;
    let (mt, mtn) = mtime(meta);
    let ft = meta.file_type();
    if ft.is_file() {
        w.entries.push(Entry {
            id,
            path: rel,
            kind: EntryKind::File {
                size: meta.len(),
                mode,
                mtime: mt,
                mtime_nsec: mtn,
            },
            target: vec![],
        });
        w.paths.push(path.to_path_buf());
        w.inodes.push(Inode::of(meta));
    } else if ft.is_symlink() {
        let target = fs::read_link(path).map_err(|e| StoreError::io("read link", path, &e))?;
        w.entries.push(Entry {
            id,
            path: rel,
            kind: EntryKind::Symlink,
            target: target.as_os_str().as_bytes().to_vec(),
        });
        w.paths.push(path.to_path_buf());
        w.inodes.push(Inode::of(meta));
    } else if ft.is_dir() {
        if !recursive {
            return Err(not_recursive(path));
        }
        w.entries.push(Entry {
            id,
            path: rel.clone(),
            kind: EntryKind::Dir {
                mode,
                mtime: mt,
                mtime_nsec: mtn,
            },
            target: vec![],
        });
        w.paths.push(path.to_path_buf());
        w.inodes.push(Inode::of(meta));
        add_children(w, path, Some(&rel), recursive)?;
    } else {
        let what = if top { "refusing to copy" } else { "skipped" };
        w.skipped.push(format!(
            "{what} {}: not a regular file, directory or symlink",
            path.display()
        ));
        if top {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                w.skipped.pop().unwrap_or_default(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_a_tree_in_order() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().join("t");
        fs::create_dir_all(top.join("empty")).unwrap();
        fs::create_dir_all(top.join("b")).unwrap();
        fs::write(top.join("b/x"), b"hello").unwrap();
        fs::write(top.join("a b"), b"").unwrap();
        std::os::unix::fs::symlink("b/x", top.join("link")).unwrap();
        let w = walk(std::slice::from_ref(&top), true).unwrap();
        let names: Vec<String> = w
            .entries
            .iter()
            .map(|e| String::from_utf8(e.path.clone()).unwrap())
            .collect();
        assert_eq!(names, ["t", "t/a b", "t/b", "t/b/x", "t/empty", "t/link"]);
        assert_eq!(w.file_bytes(), 5);
        assert_eq!(w.entries[5].target, b"b/x");
        assert!(walk(&[top], false).is_err());
        assert_eq!(
            walk(&[d.path().join("nope")], true).err().map(|e| e.kind),
            Some(StoreErrorKind::NotFound)
        );
    }
}
