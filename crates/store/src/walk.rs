//! Turns sources into a manifest: one entry per directory, file and symlink,
//! with paths relative to each source's parent so the first component is the
//! source's own name (P-8). Sources named on the command line are followed
//! if they are symlinks, as scp does; links inside a tree are sent as links.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use wire::{Entry, EntryKind};

use crate::error::{StoreError, StoreErrorKind};

/// The manifest of a set of sources.
#[derive(Default, Debug)]
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
    /// Listed paths that could not be read (`--files-from`), each with
    /// why: the rest is sent, and the run ends as a partial transfer.
    pub missing: Vec<String>,
}

impl Walked {
    /// Keeps the entries `keep` says (one verdict an entry, in order),
    /// numbered again from 0.
    pub fn retain(&mut self, keep: &[bool]) {
        let mut entries = Vec::new();
        let (mut paths, mut inodes) = (Vec::new(), Vec::new());
        let old = std::mem::take(&mut self.entries);
        let olds = std::mem::take(&mut self.paths)
            .into_iter()
            .zip(std::mem::take(&mut self.inodes));
        for ((mut e, (p, i)), _) in old.into_iter().zip(olds).zip(keep).filter(|(_, k)| **k) {
            e.id = entries.len() as u32;
            entries.push(e);
            paths.push(p);
            inodes.push(i);
        }
        (self.entries, self.paths, self.inodes) = (entries, paths, inodes);
    }

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

    /// The same, from a `stat` made relative to a descriptor.
    pub fn of_stat(st: &rustix::fs::Stat) -> Inode {
        Inode {
            dev: st.st_dev,
            ino: st.st_ino,
            ctime: st.st_ctime,
            ctime_nsec: st.st_ctime_nsec as i64,
        }
    }

    /// Whether `other` is the same file (device and inode), whatever
    /// happened to it since.
    pub fn same_file(&self, other: &Inode) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
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
        if meta.is_dir() && !recursive {
            return Err(not_recursive(src));
        }
        let name = top_name(src)?;
        add(&mut w, src, name, &meta, recursive, true)?;
    }
    Ok(w)
}

/// Enumerates the paths of `list` under `base` (`--files-from`, as
/// rsync's): each named relative to `base`, with the directories it lies
/// in as entries before it (those alone, not their other contents). A
/// listed directory is its tree with `recursive`, else itself. A path
/// listed twice, or inside a directory listed with `recursive`, is sent
/// once. A leading `/` or `./` is dropped; `..` is refused.
pub fn walk_listed(base: &Path, list: &[Vec<u8>], recursive: bool) -> Result<Walked, StoreError> {
    let mut paths: Vec<Vec<u8>> = Vec::with_capacity(list.len());
    for raw in list {
        let mut p: &[u8] = raw;
        while let Some(rest) = p.strip_prefix(b"/").or_else(|| p.strip_prefix(b"./")) {
            p = rest;
        }
        let p = p.strip_suffix(b"/").unwrap_or(p);
        if p.is_empty() || p == b"." {
            continue;
        }
        if p.split(|&b| b == b'/').any(|c| c == b".." || c.is_empty()) {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!(
                    "--files-from: {:?} leaves the source directory or has an empty component; list paths below it",
                    String::from_utf8_lossy(raw)
                ),
            ));
        }
        paths.push(p.to_vec());
    }
    paths.sort();
    paths.dedup();
    let mut w = Walked::default();
    let mut dirs: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
    let mut walked_trees: Vec<Vec<u8>> = Vec::new();
    for rel in paths {
        let inside = |t: &Vec<u8>| rel.starts_with(t) && rel.get(t.len()) == Some(&b'/');
        if walked_trees.iter().any(inside) || dirs.contains(&rel) {
            continue;
        }
        let path = base.join(OsStr::from_bytes(&rel));
        let meta = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            // As rsync: said, and the rest sent.
            Err(e) => {
                w.missing
                    .push(StoreError::io("read source", &path, &e).message);
                continue;
            }
        };
        // The directories it lies in, each once.
        let mut at = 0;
        while let Some(i) = rel[at..].iter().position(|&b| b == b'/') {
            let parent = rel[..at + i].to_vec();
            at += i + 1;
            if dirs.insert(parent.clone()) {
                let path = base.join(OsStr::from_bytes(&parent));
                let meta = fs::symlink_metadata(&path)
                    .map_err(|e| StoreError::io("read source", &path, &e))?;
                if !meta.is_dir() {
                    return Err(StoreError::new(
                        StoreErrorKind::BadRequest,
                        format!("--files-from: {} is not a directory", path.display()),
                    ));
                }
                add(&mut w, &path, parent, &meta, false, true)?;
            }
        }
        if meta.is_dir() {
            dirs.insert(rel.clone());
            if recursive {
                walked_trees.push(rel.clone());
            }
        }
        add(&mut w, &path, rel, &meta, recursive, true)?;
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
        if !recursive && !top {
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
        if recursive {
            add_children(w, path, Some(&rel), recursive)?;
        }
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
        assert!(walk(std::slice::from_ref(&top), false).is_err());
        let list: Vec<Vec<u8>> = [&b"b/x"[..], b"./link", b"b/x", b"empty/", b"/a b"]
            .iter()
            .map(|p| p.to_vec())
            .collect();
        let l = walk_listed(&top, &list, false).unwrap();
        let names: Vec<String> = l
            .entries
            .iter()
            .map(|e| String::from_utf8(e.path.clone()).unwrap())
            .collect();
        assert_eq!(names, ["a b", "b", "b/x", "empty", "link"]);
        assert!(matches!(l.entries[1].kind, EntryKind::Dir { .. }));
        let inside: Vec<Vec<u8>> = vec![b"b".to_vec(), b"b/x".to_vec()];
        assert_eq!(walk_listed(&top, &inside, true).unwrap().entries.len(), 2);
        for bad in [&b"../t/b"[..], b"b/../x", b"b//x"] {
            assert!(walk_listed(&top, &[bad.to_vec()], true).is_err());
        }
        // A listed path that is not there is named, and the rest walked
        // (rsync's exit 23 is the caller's).
        let w = walk_listed(&top, &[b"nope".to_vec(), b"b/x".to_vec()], true).unwrap();
        assert_eq!(w.missing.len(), 1, "{:?}", w.missing);
        assert!(w.missing[0].contains("nope"));
        assert!(w.entries.iter().any(|e| e.path == b"b/x"));
        assert_eq!(
            walk(&[d.path().join("nope")], true).err().map(|e| e.kind),
            Some(StoreErrorKind::NotFound)
        );
    }
}
