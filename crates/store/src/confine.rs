//! A served root: every path a client names is taken relative to it, and
//! anything that would lead outside it, by `..` or through a symlink, is
//! refused (P-16). What is opened in it is opened through the root's own
//! descriptor with `openat2(RESOLVE_BENEATH)`, so that a link swapped in
//! after a path was checked still cannot lead out (P-38); where the kernel
//! lacks `openat2`, the path is walked one component at a time without
//! following any link.
//!
//! A daemon's root ([`Root::served`]) follows no link at all in a path a
//! client names (`RESOLVE_NO_SYMLINKS`), and its paths are taken as they
//! are written, never resolved by the file system first (P-43): a link a
//! key planted can neither lead another key out of its `root=` nor move
//! it. A user's own tree ([`Root::new`]: a pulling client's destination,
//! the login's `/` over ssh) follows links that stay inside it.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags, ResolveFlags};

use crate::beneath::{self, Beneath};
use crate::error::{StoreError, StoreErrorKind};

#[derive(Debug, Clone)]
pub struct Root {
    canon: PathBuf,
    fd: Arc<OwnedFd>,
    /// Whether links inside the root are followed (a user's own tree) or
    /// none at all (a served root, P-43).
    follow: bool,
}

impl Root {
    /// A user's own tree: links in it that stay inside are followed.
    pub fn new(dir: &Path) -> Result<Root, StoreError> {
        let canon = dir
            .canonicalize()
            .map_err(|e| StoreError::io("open served root", dir, &e))?;
        if !canon.is_dir() {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!("served root {} is not a directory", dir.display()),
            ));
        }
        let fd =
            beneath::open_dir(&canon).map_err(|e| StoreError::io("open served root", dir, &e))?;
        Ok(Root {
            canon,
            fd: Arc::new(fd),
            follow: true,
        })
    }

    /// A daemon's root (`haul serve --root`, or `--stdio --root`): no link
    /// is followed in any path a client names (P-43). The directory itself
    /// is the operator's and may be reached through links.
    pub fn served(dir: &Path) -> Result<Root, StoreError> {
        Ok(Root {
            follow: false,
            ..Root::new(dir)?
        })
    }

    /// Whether links inside the root are followed (see [`Root::served`]).
    pub fn follows_links(&self) -> bool {
        self.follow
    }

    /// The directory `sub` below this root as a root of its own (a key's
    /// `root=`, P-43): opened from this root's descriptor one component
    /// at a time, none a link, at every call, so that no link planted
    /// anywhere moves it. It follows no link either.
    pub fn sub_root(&self, sub: &str) -> Result<Root, StoreError> {
        let rel = crate::walk_beneath::Source::parse(sub)
            .filter(|s| !s.rel.is_empty())
            .ok_or_else(|| {
                StoreError::new(
                    StoreErrorKind::OutsideRoot,
                    format!("{sub:?} is not a directory below the served root"),
                )
            })?
            .rel;
        let fd = self.tree()?.dir(&rel)?;
        let fd = rustix::io::dup(&*fd)
            .map_err(|e| StoreError::io("open", &self.canon.join(sub), &e.into()))?;
        Ok(Root {
            canon: self.canon.join(std::ffi::OsStr::from_bytes(&rel)),
            fd: Arc::new(fd),
            follow: false,
        })
    }

    /// What is at `path` (inside the root). A user's tree follows a link
    /// at the end, as `stat` does; a served root looks without following
    /// any link, from its descriptor (P-43): `Symlink` for one at the end,
    /// `OutsideRoot` for one on the way. `None`: nothing there.
    pub fn kind(&self, path: &Path) -> Result<Option<rustix::fs::FileType>, StoreError> {
        if self.follow {
            return Ok(std::fs::metadata(path).ok().map(|m| {
                rustix::fs::FileType::from_raw_mode(std::os::unix::fs::MetadataExt::mode(&m))
            }));
        }
        let rel = self.relative(path)?;
        self.tree()?.kind(rel.as_os_str().as_bytes())
    }

    /// Whether anything is at `path`, a link included, not following it.
    pub fn exists(&self, path: &Path) -> bool {
        if self.follow {
            return std::fs::symlink_metadata(path).is_ok();
        }
        self.kind(path).is_ok_and(|k| k.is_some())
    }

    /// The root as a tree to walk and open beneath by descriptor, without
    /// following a link ([`crate::walk_beneath`], [`crate::Sources::beneath`]).
    pub fn tree(&self) -> Result<Beneath, StoreError> {
        let fd = rustix::io::dup(&*self.fd)
            .map_err(|e| StoreError::io("open", &self.canon, &e.into()))?;
        Ok(Beneath::new(fd, self.canon.clone()))
    }

    /// `message` as a client confined to this root may read it: the
    /// server's own path of the root (`/srv/data/projects/alpha`) is left
    /// out, so a path reads as the client names it (`/sub/f.bin`).
    pub fn hide(&self, message: &str) -> String {
        let canon = self.canon.to_string_lossy();
        if self.follow || canon == "/" {
            return message.to_string();
        }
        let mut out = String::with_capacity(message.len());
        let mut rest = message;
        while let Some(at) = rest.find(canon.as_ref()) {
            let after = &rest[at + canon.len()..];
            out.push_str(&rest[..at]);
            match after.chars().next() {
                // `/srv/data/x` reads `/x`; `/srv/data` alone reads `/`.
                Some('/') => {}
                None | Some(' ' | '"' | '\'' | ':' | ',' | ')' | ';') => out.push('/'),
                // `/srv/database`: another name, kept.
                Some(_) => out.push_str(&canon),
            }
            rest = after;
        }
        out.push_str(rest);
        out
    }

    /// `path` relative to the root; refused if it is not inside. A path
    /// the user named through a link (`~/data -> /srv/data`) is taken by
    /// its real place; what is then opened there is opened beneath the
    /// root whatever the path said.
    fn relative(&self, path: &Path) -> Result<PathBuf, StoreError> {
        let outside = || {
            StoreError::new(
                StoreErrorKind::OutsideRoot,
                format!("{} is outside {}", path.display(), self.canon.display()),
            )
        };
        if let Ok(rel) = path.strip_prefix(&self.canon) {
            return Ok(rel.to_path_buf());
        }
        if !self.follow {
            return Err(outside());
        }
        let real = match (path.canonicalize(), path.parent(), path.file_name()) {
            (Ok(real), ..) => real,
            (Err(_), Some(parent), Some(name)) => Some(parent)
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .canonicalize()
                .map_err(|e| StoreError::io("find", parent, &e))?
                .join(name),
            _ => return Err(outside()),
        };
        real.strip_prefix(&self.canon)
            .map(Path::to_path_buf)
            .map_err(|_| outside())
    }

    /// Opens `rel` beneath the root: links that stay inside it are
    /// followed, none that leads out (P-38).
    fn open_beneath(&self, path: &Path, flags: OFlags) -> Result<OwnedFd, StoreError> {
        let rel = self.relative(path)?;
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel.as_path()
        };
        let mut how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        if !self.follow {
            how |= ResolveFlags::NO_SYMLINKS;
        }
        let flags = flags | OFlags::CLOEXEC;
        let r = match rustix::fs::openat2(&*self.fd, rel, flags, Mode::empty(), how) {
            Err(rustix::io::Errno::NOSYS) => self.walk(rel, flags),
            r => r.map_err(io::Error::from),
        };
        r.map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) if !self.follow => StoreError::new(
                StoreErrorKind::OutsideRoot,
                format!(
                    "{} passes through a symbolic link; this server follows none in the paths it is asked for, so nothing outside the root you see is reached through one (name the link's target)",
                    path.display()
                ),
            ),
            Some(libc::EXDEV) | Some(libc::ELOOP) => StoreError::new(
                StoreErrorKind::OutsideRoot,
                format!(
                    "{} leads outside {} (through a symlink)",
                    path.display(),
                    self.canon.display()
                ),
            ),
            _ => StoreError::io("open", path, &e),
        })
    }

    /// Without `openat2`: every component opened in turn, no link
    /// followed.
    fn walk(&self, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
        let parts: Vec<_> = rel
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect();
        let tree = Beneath::new(rustix::io::dup(&*self.fd)?, self.canon.clone());
        let Some((last, dirs)) = parts.split_last() else {
            return Ok(rustix::io::dup(&*self.fd)?);
        };
        let dir_rel: Vec<u8> = dirs
            .iter()
            .map(|c| c.as_os_str().as_bytes())
            .collect::<Vec<_>>()
            .join(&b'/');
        let dir = tree
            .dir(&dir_rel)
            .map_err(|_| io::Error::from_raw_os_error(libc::ELOOP))?;
        Ok(rustix::fs::openat(
            &*dir,
            last.as_os_str(),
            flags | OFlags::NOFOLLOW,
            Mode::empty(),
        )?)
    }

    /// Opens the directory at `path` (inside the root) as a descriptor to
    /// work beneath.
    pub fn open_dir(&self, path: &Path) -> Result<OwnedFd, StoreError> {
        self.open_beneath(path, OFlags::RDONLY | OFlags::DIRECTORY)
    }

    /// Opens the file at `path` (inside the root) for reading; a served
    /// `--basis`, say.
    pub fn open_file(&self, path: &Path) -> Result<File, StoreError> {
        let f = File::from(self.open_beneath(path, OFlags::RDONLY | OFlags::NONBLOCK)?);
        let m = f.metadata().map_err(|e| StoreError::io("stat", path, &e))?;
        if !m.is_file() {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!("{} is not a regular file", path.display()),
            ));
        }
        Ok(f)
    }

    /// Makes the directory `path` (inside the root); its parent must be
    /// there.
    pub fn make_dir(&self, path: &Path) -> Result<(), StoreError> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!("cannot create directory {}", path.display()),
            ));
        };
        let parent = Some(parent)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let dir = self.open_dir(parent)?;
        match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
            Err(e) => Err(StoreError::io("create directory", path, &e.into())),
        }
    }

    pub fn path(&self) -> &Path {
        &self.canon
    }

    /// Maps a client's path (absolute or not, both relative to the root)
    /// to a path inside the root. The path need not exist; the part of it
    /// that does is checked for symlinks leading out.
    pub fn resolve(&self, user: &str) -> Result<PathBuf, StoreError> {
        let outside = || {
            StoreError::new(
                StoreErrorKind::OutsideRoot,
                format!("path {user:?} is outside the served root"),
            )
        };
        let mut rel = PathBuf::new();
        for c in Path::new(user).components() {
            match c {
                Component::RootDir | Component::CurDir => {}
                Component::Normal(n) => rel.push(n),
                Component::ParentDir => {
                    if !rel.pop() {
                        return Err(outside());
                    }
                }
                Component::Prefix(_) => return Err(outside()),
            }
        }
        let full = self.canon.join(&rel);
        // A served root resolves nothing through the file system: what is
        // opened there is opened by descriptor, following no link (P-43).
        if self.follow {
            self.check_inside(&full).map_err(|_| outside())?;
        }
        Ok(full)
    }

    /// Checks that the existing part of `path` resolves inside the root.
    /// A served root follows no link, so only the words count.
    pub fn check_inside(&self, path: &Path) -> Result<(), StoreError> {
        if !self.follow {
            return self.relative(path).map(|_| ());
        }
        let mut probe = path.to_path_buf();
        loop {
            match probe.canonicalize() {
                Ok(real) => {
                    return if real.starts_with(&self.canon) {
                        Ok(())
                    } else {
                        Err(StoreError::new(
                            StoreErrorKind::OutsideRoot,
                            format!(
                                "{} leads outside {} (through a symlink)",
                                path.display(),
                                self.canon.display()
                            ),
                        ))
                    };
                }
                Err(_) => {
                    if !probe.pop() {
                        return Ok(());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_dotdot_and_symlink_escapes() {
        let outer = tempfile::tempdir().unwrap();
        let root_dir = outer.path().join("root");
        std::fs::create_dir_all(root_dir.join("sub")).unwrap();
        std::os::unix::fs::symlink(outer.path(), root_dir.join("sub/out")).unwrap();
        std::os::unix::fs::symlink("../sub", root_dir.join("inside")).unwrap();
        let root = Root::new(&root_dir).unwrap();
        assert!(root
            .resolve("/sub/new.txt")
            .unwrap()
            .starts_with(root.path()));
        assert!(root.resolve("sub/../x").is_ok());
        assert!(root.resolve("inside/x").is_ok());
        std::os::unix::fs::symlink("sub", root_dir.join("good")).unwrap();
        assert!(root.open_dir(&root.resolve("good").unwrap()).is_ok());
        assert!(root.open_dir(&root.resolve("inside").unwrap()).is_err());
        assert_eq!(
            root.open_dir(&root_dir.join("sub/out")).unwrap_err().kind,
            StoreErrorKind::OutsideRoot
        );
        assert_eq!(
            root.open_dir(outer.path()).unwrap_err().kind,
            StoreErrorKind::OutsideRoot
        );
        for bad in [
            "..",
            "../x",
            "/../../etc/passwd",
            "sub/../../x",
            "sub/out/x",
            "sub/out",
        ] {
            let e = root.resolve(bad).unwrap_err();
            assert_eq!(e.kind, StoreErrorKind::OutsideRoot, "{bad}");
        }
    }
}
