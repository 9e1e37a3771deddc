//! Path rules both sides apply to names that come from the peer (P-8).
//!
//! A manifest path is relative, '/'-separated, and may not contain empty,
//! `.` or `..` components or NUL bytes: a malicious sender cannot place
//! anything outside the destination. Where an entry lands is decided by the
//! scp rule in [`Placement`].

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PathError {
    #[error("path {0:?} is empty")]
    Empty(String),
    #[error("path {0:?} is absolute; manifest paths must be relative")]
    Absolute(String),
    #[error("path {0:?} has a `..`, `.` or empty component")]
    Escapes(String),
    #[error("path {0:?} contains a NUL byte")]
    Nul(String),
}

/// Splits and checks a relative manifest path.
pub fn components(path: &[u8]) -> Result<Vec<&[u8]>, PathError> {
    let show = || String::from_utf8_lossy(path).into_owned();
    if path.is_empty() {
        return Err(PathError::Empty(show()));
    }
    if path[0] == b'/' {
        return Err(PathError::Absolute(show()));
    }
    if path.contains(&0) {
        return Err(PathError::Nul(show()));
    }
    let parts: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
    if parts
        .iter()
        .any(|c| c.is_empty() || *c == b"." || *c == b"..")
    {
        return Err(PathError::Escapes(show()));
    }
    Ok(parts)
}

/// Where the manifest's top-level names go at the destination, as scp does:
/// into an existing directory (or one named with a trailing '/'), or, for a
/// single source whose destination does not exist as a directory, renamed
/// to the destination itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// `dst/<top>/...`
    Into,
    /// `dst/...` replacing the top component.
    As,
}

impl Placement {
    /// Decides the placement. `Err` when several sources meet a destination
    /// that is not a directory.
    ///
    /// `contents`: a source names a directory's contents (`dir/`, rsync's
    /// rule), so the destination is a directory that the caller creates if
    /// it is missing.
    pub fn decide(
        dest_is_dir: bool,
        dest_has_trailing_slash: bool,
        many_sources: bool,
        contents: bool,
    ) -> Result<Placement, &'static str> {
        if dest_is_dir || contents {
            Ok(Placement::Into)
        } else if many_sources {
            Err("several sources need a destination directory that exists")
        } else if dest_has_trailing_slash {
            Err("destination ends in '/' but is not an existing directory")
        } else {
            Ok(Placement::As)
        }
    }

    /// The path below the destination for a checked manifest path.
    pub fn relative<'a>(self, parts: &[&'a [u8]]) -> Vec<&'a [u8]> {
        match self {
            Placement::Into => parts.to_vec(),
            Placement::As => parts[1..].to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn refuses_escapes() {
        for bad in [
            &b""[..],
            b"/etc/passwd",
            b"a/../../x",
            b"..",
            b"a//b",
            b"./a",
            b"a/",
            b"a\0b",
        ] {
            assert!(
                components(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(components(b"dir/sub dir/f\nnew").unwrap().len(), 3);
        assert_eq!(components("ü/…".as_bytes()).unwrap().len(), 2);
    }

    #[test]
    fn scp_placement() {
        assert_eq!(
            Placement::decide(true, false, true, false),
            Ok(Placement::Into)
        );
        assert_eq!(
            Placement::decide(false, false, false, false),
            Ok(Placement::As)
        );
        assert!(Placement::decide(false, false, true, false).is_err());
        assert!(Placement::decide(false, true, false, false).is_err());
        // rsync's `dir/`: always into the destination, made if missing.
        assert_eq!(
            Placement::decide(false, false, false, true),
            Ok(Placement::Into)
        );
        assert_eq!(
            Placement::decide(false, true, true, true),
            Ok(Placement::Into)
        );
        let parts = components(b"top/a/b").unwrap();
        assert_eq!(Placement::As.relative(&parts), vec![&b"a"[..], b"b"]);
        assert_eq!(Placement::Into.relative(&parts).len(), 3);
    }

    proptest! {
        #[test]
        fn accepted_paths_never_climb(p in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(parts) = components(&p) {
                for c in parts {
                    prop_assert!(!c.is_empty() && c != b".." && c != b"." && !c.contains(&b'/'));
                }
            }
        }
    }
}
