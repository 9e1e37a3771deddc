//! A served pull's sources, walked beneath the root by descriptor (P-16,
//! P-43).
//!
//! A daemon must never read what lies outside the root a key sees, even
//! when the same key swaps a link over a name between the request and the
//! read (issue 39). So nothing here takes a path that the kernel resolves
//! by itself: every directory is opened component by component from the
//! root's descriptor with `O_NOFOLLOW` ([`Beneath::dir`]), listed from its
//! own descriptor, and each child is looked at with `fstatat` relative to
//! that descriptor without following a link. A link, anywhere, is sent as
//! a link (a requested source that is one too), never followed. The
//! files found are later opened the same way ([`crate::Sources::beneath`])
//! and must then still be the inode the walk found.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use rustix::fs::{AtFlags, FileType, Stat};
use wire::{Entry, EntryKind};

use crate::beneath::{join, split, Beneath};
use crate::error::{StoreError, StoreErrorKind};
use crate::walk::{Inode, Walked};

/// One source of a pull: its path below the root (`/`-separated, no
/// empty, `.` or `..` component; empty for the root itself), and whether
/// it names a directory's contents (`dir/`, P-8).
pub struct Source {
    pub rel: Vec<u8>,
    pub contents: bool,
}

impl Source {
    /// A client's path, normalised below the root: `.` components and a
    /// leading `/` dropped, `..` taking one back (never above the root).
    /// `None` for a path that climbs out.
    pub fn parse(path: &str) -> Option<Source> {
        let mut parts: Vec<&[u8]> = Vec::new();
        for c in path.as_bytes().split(|&b| b == b'/') {
            match c {
                b"" | b"." => {}
                b".." => {
                    parts.pop()?;
                }
                c => parts.push(c),
            }
        }
        Some(Source {
            rel: parts.join(&b'/'),
            contents: crate::walk::names_contents(path.as_bytes()),
        })
    }
}

/// Enumerates `sources` beneath `tree`, as [`crate::walk`] does but
/// following no link. `Walked::paths` holds each entry's path below the
/// tree, for [`crate::Sources::beneath`]. `top` names the tree itself when
/// a source is the whole of it.
pub fn walk_beneath(
    tree: &Beneath,
    sources: &[Source],
    recursive: bool,
    top: &[u8],
) -> Result<Walked, StoreError> {
    let mut w = Walked::default();
    for src in sources {
        let st = tree
            .lstat(&src.rel)
            .map_err(|e| read_error(tree, &src.rel, e))?;
        let st = st.ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::NotFound,
                format!(
                    "read source {}: No such file or directory",
                    tree.shown(&src.rel).display()
                ),
            )
        })?;
        let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
        if is_dir && !recursive {
            return Err(not_recursive(tree, &src.rel));
        }
        if is_dir && src.contents {
            add_children(&mut w, tree, &src.rel, None, recursive)?;
            continue;
        }
        let name = match split(&src.rel).1.as_bytes() {
            b"" => top.to_vec(),
            n => n.to_vec(),
        };
        if name.is_empty() {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                "cannot copy the root itself by name; ask for its contents (`/`, with -r)",
            ));
        }
        add(&mut w, tree, &src.rel, name, &st, recursive, true)?;
    }
    Ok(w)
}

/// A link on the way to a source, said as a reader meets it.
fn read_error(tree: &Beneath, rel: &[u8], e: StoreError) -> StoreError {
    if e.kind != StoreErrorKind::OutsideRoot {
        return e;
    }
    StoreError::new(
        StoreErrorKind::OutsideRoot,
        format!(
            "{} passes through a symbolic link; this server follows no link in the paths it serves, so nothing outside the root you see is reached through one (ask for the link's target instead)",
            tree.shown(rel).display()
        ),
    )
}

fn not_recursive(tree: &Beneath, rel: &[u8]) -> StoreError {
    StoreError::new(
        StoreErrorKind::BadRequest,
        format!(
            "{} is a directory (use -r to copy directories)",
            tree.shown(rel).display()
        ),
    )
}

/// The directory `rel`'s children, sorted by name, under `name` (or at
/// the top): listed from the directory's descriptor, each looked at
/// relative to it.
fn add_children(
    w: &mut Walked,
    tree: &Beneath,
    rel: &[u8],
    name: Option<&[u8]>,
    recursive: bool,
) -> Result<(), StoreError> {
    let dir = tree.dir(rel).map_err(|e| read_error(tree, rel, e))?;
    let mut children = tree.list(rel)?;
    children.sort();
    for child in children {
        let crel = join(rel, child.as_bytes());
        let st = match rustix::fs::statat(&*dir, child.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Gone since it was listed: as if it never was.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(StoreError::io("read", &tree.shown(&crel), &e.into())),
        };
        let cname = match name {
            Some(n) => join(n, child.as_bytes()),
            None => child.as_bytes().to_vec(),
        };
        add(w, tree, &crel, cname, &st, recursive, false)?;
    }
    Ok(())
}

fn add(
    w: &mut Walked,
    tree: &Beneath,
    rel: &[u8],
    name: Vec<u8>,
    st: &Stat,
    recursive: bool,
    top: bool,
) -> Result<(), StoreError> {
    let id = w.entries.len() as u32;
    let mode = st.st_mode & 0o7777;
    let (mtime, mtime_nsec) = (st.st_mtime, st.st_mtime_nsec as u32);
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => EntryKind::File {
            size: st.st_size as u64,
            mode,
            mtime,
            mtime_nsec,
        },
        FileType::Symlink => EntryKind::Symlink,
        FileType::Directory => EntryKind::Dir {
            mode,
            mtime,
            mtime_nsec,
        },
        _ => {
            let what = if top { "refusing to copy" } else { "skipped" };
            let why = format!(
                "{what} {}: not a regular file, directory or symlink",
                tree.shown(rel).display()
            );
            if top {
                return Err(StoreError::new(StoreErrorKind::BadRequest, why));
            }
            w.skipped.push(why);
            return Ok(());
        }
    };
    let target = match kind {
        EntryKind::Symlink => read_link(tree, rel)?,
        _ => Vec::new(),
    };
    let is_dir = matches!(kind, EntryKind::Dir { .. });
    w.entries.push(Entry {
        id,
        path: name.clone(),
        kind,
        target,
    });
    w.paths.push(PathBuf::from(OsStr::from_bytes(rel)));
    w.inodes.push(Inode::of_stat(st));
    if is_dir && recursive {
        add_children(w, tree, rel, Some(&name), recursive)?;
    }
    Ok(())
}

/// The target of the link at `rel`, read relative to its directory.
fn read_link(tree: &Beneath, rel: &[u8]) -> Result<Vec<u8>, StoreError> {
    let (dir, name) = tree.parent(rel)?;
    rustix::fs::readlinkat(&*dir, name, Vec::new())
        .map(|t| t.into_bytes())
        .map_err(|e| StoreError::io("read link", &tree.shown(rel), &e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    fn names(w: &Walked) -> Vec<String> {
        w.entries
            .iter()
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .collect()
    }

    #[test]
    fn walks_like_walk_and_sends_every_link_as_a_link() {
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("root");
        fs::create_dir_all(root.join("t/b")).unwrap();
        fs::create_dir_all(root.join("t/empty")).unwrap();
        fs::write(root.join("t/b/x"), b"hello").unwrap();
        fs::write(root.join("t/a b"), b"").unwrap();
        fs::write(outer.path().join("secret"), b"outside").unwrap();
        symlink("b/x", root.join("t/link")).unwrap();
        symlink(outer.path(), root.join("t/out")).unwrap();
        symlink(outer.path().join("secret"), root.join("top")).unwrap();
        let tree = Beneath::new(crate::beneath::open_dir(&root).unwrap(), root.clone());
        let src = |p: &str| Source::parse(p).unwrap();
        let w = walk_beneath(&tree, &[src("t")], true, b"root").unwrap();
        assert_eq!(
            names(&w),
            ["t", "t/a b", "t/b", "t/b/x", "t/empty", "t/link", "t/out"]
        );
        assert_eq!(w.paths[3], PathBuf::from("t/b/x"));
        assert_eq!(w.entries[6].target, outer.path().as_os_str().as_bytes());
        assert_eq!(w.file_bytes(), 5);
        // A source that is a link is a link; a path through one is refused.
        let w = walk_beneath(&tree, &[src("/top")], false, b"root").unwrap();
        assert!(matches!(w.entries[0].kind, EntryKind::Symlink));
        let e = walk_beneath(&tree, &[src("t/out/secret")], false, b"root").unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::OutsideRoot, "{e}");
        // Contents, the root's own, and a directory without -r.
        let w = walk_beneath(&tree, &[src("t/b/")], true, b"root").unwrap();
        assert_eq!(names(&w), ["x"]);
        let w = walk_beneath(&tree, &[src("/")], true, b"root").unwrap();
        assert_eq!(names(&w)[..2], ["t".to_string(), "t/a b".to_string()]);
        let w = walk_beneath(&tree, &[src("t/..")], true, b"root").unwrap();
        assert_eq!(names(&w)[0], "root");
        assert!(walk_beneath(&tree, &[src("t")], false, b"root").is_err());
        assert_eq!(
            walk_beneath(&tree, &[src("nope")], true, b"root")
                .err()
                .map(|e| e.kind),
            Some(StoreErrorKind::NotFound)
        );
        assert!(Source::parse("a/../../x").is_none());
        assert_eq!(Source::parse("/a/./b/../c/").unwrap().rel, b"a/c");
    }
}
