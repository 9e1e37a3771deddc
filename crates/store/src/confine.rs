//! A served root: every path a client names is taken relative to it, and
//! anything that would lead outside it, by `..` or through a symlink, is
//! refused (P-16).

use std::path::{Component, Path, PathBuf};

use crate::error::{StoreError, StoreErrorKind};

#[derive(Debug, Clone)]
pub struct Root {
    canon: PathBuf,
}

impl Root {
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
        Ok(Root { canon })
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
        self.check_inside(&full).map_err(|_| outside())?;
        Ok(full)
    }

    /// Checks that the existing part of `path` resolves inside the root.
    pub fn check_inside(&self, path: &Path) -> Result<(), StoreError> {
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
