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

/// The name a pulled source's manifest entry has at the top (P-8): the
/// source's last component, as the serving side names it. `None` where the
/// top-level names cannot be known from the request: a source that names a
/// directory's contents (`dir/`, `dir/.`, `.`: its children's names), or
/// one that ends in `..` or is empty (the name of a directory the request
/// does not spell out, which only the server knows).
pub fn asked_name(source: &[u8]) -> Option<Vec<u8>> {
    if source == b"." || source.ends_with(b"/") || source.ends_with(b"/.") {
        return None;
    }
    let last = source.rsplit(|&b| b == b'/').next().unwrap_or_default();
    (!last.is_empty() && last != b"..").then(|| last.to_vec())
}

/// What a pulling client asked for, against which every entry the server
/// sends is checked (P-8, S-5): a server may name only the sources' own
/// names at the top, and without `-r` nothing but top-level files and
/// links. This is what keeps a hostile server from dropping `.ssh/` or
/// `.bashrc` into `haul cp -r HOST:x ~/` (the class of scp's
/// CVE-2019-6111 and rsync's CVE-2022-29154).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// The top-level names allowed, sorted; `None`: any, because a source
    /// names a directory's contents or climbs (see [`asked_name`]).
    names: Option<Vec<Vec<u8>>>,
    recursive: bool,
}

/// Why an entry is not what the client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotAsked {
    /// Its top-level name is none of the sources'.
    Name,
    /// A directory, or an entry inside one, in a pull without `-r`.
    NotRecursive,
}

impl Asked {
    /// For a pull of `sources` (the paths as sent in the request).
    pub fn new<S: AsRef<[u8]>>(sources: &[S], recursive: bool) -> Asked {
        let names: Option<Vec<Vec<u8>>> = sources.iter().map(|s| asked_name(s.as_ref())).collect();
        let names = names.map(|mut n| {
            n.sort();
            n.dedup();
            n
        });
        Asked { names, recursive }
    }

    /// Checks a manifest entry's path (already through [`components`]).
    pub fn check(&self, parts: &[&[u8]], is_dir: bool) -> Result<(), NotAsked> {
        if !self.recursive && (is_dir || parts.len() > 1) {
            return Err(NotAsked::NotRecursive);
        }
        match &self.names {
            Some(names)
                if names
                    .binary_search_by(|n| n.as_slice().cmp(parts[0]))
                    .is_err() =>
            {
                Err(NotAsked::Name)
            }
            _ => Ok(()),
        }
    }

    /// The names asked for, for messages: `"a", "b"`, or `any name`.
    pub fn describe(&self) -> String {
        match &self.names {
            None => "any name (a directory's contents)".into(),
            Some(n) => n
                .iter()
                .map(|n| format!("{:?}", String::from_utf8_lossy(n)))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
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

    #[test]
    fn asked_names_are_the_sources_last_components() {
        for (src, name) in [
            ("x", Some("x")),
            ("a/b/x", Some("x")),
            ("/abs/x", Some("x")),
            ("../x", Some("x")),
            ("a/./x", Some("x")),
            ("a/...", Some("...")),
            ("x/y/..", None),
            ("..", None),
            ("", None),
            ("dir/", None),
            ("dir/.", None),
            (".", None),
            ("/", None),
        ] {
            assert_eq!(
                asked_name(src.as_bytes()).as_deref(),
                name.map(str::as_bytes),
                "{src:?}"
            );
        }
        let asked = Asked::new(&["a/x", "b/x", "y"], true);
        assert_eq!(asked.describe(), "\"x\", \"y\"");
        assert_eq!(Asked::new(&["x", "d/"], true).check(&[b"z"], false), Ok(()));
    }

    proptest! {
        /// Whatever the source, a name it yields is one valid component.
        #[test]
        fn asked_names_are_single_components(src in "[a./]{0,12}") {
            if let Some(n) = asked_name(src.as_bytes()) {
                prop_assert_eq!(components(&n).map(|c| c.len()), Ok(1));
            }
        }

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
