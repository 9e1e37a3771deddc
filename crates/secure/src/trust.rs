//! Which peers a host trusts.
//!
//! The server admits only clients whose public key is listed in its
//! authorized-keys file (one `haul-x25519 HEX comment` per line). The client
//! pins each server's key the first time it connects, in a known-hosts file
//! of `HOST haul-x25519 HEX` lines, and refuses a server whose key changed.
//!
//! As sshd does, a line of the authorized-keys file that is not a key is
//! skipped with a warning naming it, so one bad line does not lock every
//! client out; and a file that others may write is warned about, since
//! anyone who can write it can let themselves in (P-39).

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::keys::{KeyError, PublicKey};

/// The set of client keys a server admits.
#[derive(Debug, Default, Clone)]
pub struct AuthorizedKeys {
    keys: HashSet<PublicKey>,
    /// The comment after each key (`alice@lab`), naming it in logs.
    comments: std::collections::HashMap<PublicKey, String>,
    /// The options before each key, as written (`root=projects/alpha,
    /// read-only`): what the key may do, read by the server. Of a key's
    /// lines, the first applies, as sshd takes the first that matches.
    options: std::collections::HashMap<PublicKey, String>,
    /// Lines that name a key an earlier line named: (earlier, later),
    /// 1-based. The later one is ignored, and warned about.
    repeated: Vec<(usize, usize)>,
}

/// An authorized-keys file as read: its keys, and what is wrong with it
/// (each a line to log; the keys still apply).
#[derive(Debug, Default)]
pub struct LoadedKeys {
    pub keys: AuthorizedKeys,
    pub warnings: Vec<String>,
}

impl AuthorizedKeys {
    /// Reads an authorized-keys file. Blank lines and `#` comments are
    /// skipped, and so is any other line that is not a key, with a warning
    /// naming its number; a file or directory others may write is warned
    /// about too.
    pub fn load(path: &Path) -> Result<LoadedKeys, KeyError> {
        let text = fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let (keys, bad) = Self::parse(&text);
        let mut warnings: Vec<String> = bad
            .iter()
            .map(|line| {
                format!(
                    "{}, line {line}: not a haul public key (`haul-x25519 HEX [comment]`); line skipped",
                    path.display()
                )
            })
            .collect();
        warnings.extend(keys.repeated.iter().map(|(first, again)| {
            format!(
                "{}, line {again}: the key of line {first} again; line {first} applies, as sshd takes the first line that matches (remove one of them)",
                path.display()
            )
        }));
        warnings.extend(writable_by_others(path));
        Ok(LoadedKeys { keys, warnings })
    }

    /// Parses the file's text: the keys, and the 1-based numbers of the
    /// lines that are neither keys, blank nor comments (skipped).
    pub fn parse(text: &str) -> (AuthorizedKeys, Vec<usize>) {
        let mut keys = HashSet::new();
        let mut comments = std::collections::HashMap::new();
        let mut options = std::collections::HashMap::new();
        let mut first_line = std::collections::HashMap::new();
        let mut repeated = Vec::new();
        let mut bad = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // ssh's form: options, if any, come first, before the key.
            let first = line.split_whitespace().next().unwrap_or("");
            let (opts, line) = if first == "haul-x25519" || PublicKey::parse(first).is_some() {
                (None, line)
            } else {
                (Some(first), line[first.len()..].trim_start())
            };
            match PublicKey::parse(line) {
                Some(k) => {
                    if let Some(first) = first_line.get(&k) {
                        repeated.push((*first, i + 1));
                        continue;
                    }
                    first_line.insert(k, i + 1);
                    keys.insert(k);
                    if let Some(o) = opts {
                        options.insert(k, o.to_string());
                    }
                    let words: Vec<&str> = line.split_whitespace().collect();
                    let skip = if words.first() == Some(&"haul-x25519") {
                        2
                    } else {
                        1
                    };
                    let comment = words.get(skip..).unwrap_or_default().join(" ");
                    if !comment.is_empty() {
                        comments.insert(k, comment);
                    }
                }
                None => bad.push(i + 1),
            }
        }
        (
            AuthorizedKeys {
                keys,
                comments,
                options,
                repeated,
            },
            bad,
        )
    }

    /// The options written before `key`, if any.
    pub fn options(&self, key: &PublicKey) -> Option<&str> {
        self.options.get(key).map(String::as_str)
    }

    /// Every key that has options, with them, in no set order.
    pub fn with_options(&self) -> impl Iterator<Item = (&PublicKey, &str)> {
        self.options.iter().map(|(k, o)| (k, o.as_str()))
    }

    /// The comment the file gives `key`, if any.
    pub fn comment(&self, key: &PublicKey) -> Option<&str> {
        self.comments.get(key).map(String::as_str)
    }

    pub fn insert(&mut self, key: PublicKey) {
        self.keys.insert(key);
    }

    pub fn contains(&self, key: &PublicKey) -> bool {
        self.keys.contains(key)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// A warning if `path`, or the directory holding it, may be written by its
/// group or by others: whoever can write an authorized-keys file can add
/// their own key (sshd's `StrictModes` refuses such a file; haul warns).
/// Being readable is no risk: the file holds public keys only.
pub fn writable_by_others(path: &Path) -> Option<String> {
    let open = |p: &Path| {
        fs::metadata(p)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
            .filter(|mode| mode & 0o022 != 0)
    };
    if let Some(mode) = open(path) {
        return Some(format!(
            "{} may be written by others (mode {mode:o}): anyone who can write it can let themselves in; run `chmod go-w {}`",
            path.display(),
            path.display()
        ));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty())?;
    let mode = open(dir)?;
    // A sticky directory (like /tmp) lets others add files, not replace ours.
    if mode & 0o1000 != 0 {
        return None;
    }
    Some(format!(
        "{} may be written by others (mode {mode:o}), who could replace {}; run `chmod go-w {}`",
        dir.display(),
        path.display(),
        dir.display()
    ))
}

/// What the client's pinned keys say of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKeyStatus {
    /// Pinned, and the same key.
    Known,
    /// Never seen: pin it (trust on first use).
    Unknown,
    /// Pinned with another key: refuse, someone may be in the middle.
    Changed { pinned: PublicKey, line: usize },
}

/// The client's pinned server keys.
pub struct KnownHosts {
    path: PathBuf,
    entries: Vec<(String, PublicKey)>,
}

impl KnownHosts {
    /// Reads the file; a missing file is an empty set.
    pub fn load(path: &Path) -> Result<KnownHosts, KeyError> {
        let text = match fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => {
                return Err(KeyError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let mut entries = Vec::new();
        let lines = text.lines().count();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (host, key) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            // A last line without its newline is being appended by another
            // haul pinning a host right now: not a pin yet.
            let unfinished = i + 1 == lines && !text.ends_with('\n');
            if unfinished && PublicKey::parse(key).is_none() {
                continue;
            }
            let key = PublicKey::parse(key).ok_or_else(|| KeyError::Malformed {
                path: path.to_path_buf(),
                why: format!("line {} is not `HOST haul-x25519 HEX`", i + 1),
            })?;
            entries.push((host.to_string(), key));
        }
        Ok(KnownHosts {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// `host` is `name:port` as the user wrote it.
    pub fn check(&self, host: &str, key: &PublicKey) -> HostKeyStatus {
        let mut status = HostKeyStatus::Unknown;
        for (i, (h, k)) in self.entries.iter().enumerate() {
            if h == host {
                if k == key {
                    return HostKeyStatus::Known;
                }
                status = HostKeyStatus::Changed {
                    pinned: *k,
                    line: i + 1,
                };
            }
        }
        status
    }

    /// Whether any key is pinned for `host` (`name:port`).
    pub fn knows(&self, host: &str) -> bool {
        self.entries.iter().any(|(h, _)| h == host)
    }

    /// The key pinned for `host` (`name:port`), where exactly one is:
    /// a pinned start (P-48) encrypts its first message to it.
    pub fn pinned(&self, host: &str) -> Option<PublicKey> {
        let mut keys = self.entries.iter().filter(|(h, _)| h == host).map(|e| e.1);
        let first = keys.next()?;
        keys.all(|k| k == first).then_some(first)
    }

    /// Pins `key` for `host`, appending to the file.
    pub fn add(&mut self, host: &str, key: &PublicKey) -> Result<(), KeyError> {
        let werr = |source| KeyError::Write {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(werr)?;
        }
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(werr)?;
        // One write of the whole line: clients pinning at once (the
        // shards of a split transfer) append whole lines, never mixed.
        f.write_all(format!("{host} {key}\n").as_bytes())
            .map_err(werr)?;
        self.entries.push((host.to_string(), *key));
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Keypair;

    #[test]
    fn authorized_keys_parse() {
        let a = Keypair::generate().public;
        let text = format!("# clients\n\n{a} alice@x\n");
        let (keys, bad) = AuthorizedKeys::parse(&text);
        assert!(keys.contains(&a));
        assert!(bad.is_empty());
        assert!(!keys.contains(&Keypair::generate().public));
        assert_eq!(AuthorizedKeys::parse("hello\n").1, [1]);
    }

    /// Issue 39: `root=projects/alpha,read-only KEY` then `rate=1G KEY`
    /// let the key write anywhere. As sshd, the first line that matches
    /// applies; the other is named in a warning.
    #[test]
    fn the_first_line_of_a_key_applies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("authorized_keys");
        let a = Keypair::generate().public;
        fs::write(
            &path,
            format!("root=projects/alpha,read-only {a} alice\nrate=1G {a} alice-again\n{a}\n"),
        )
        .unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        let loaded = AuthorizedKeys::load(&path).unwrap();
        assert_eq!(
            loaded.keys.options(&a),
            Some("root=projects/alpha,read-only")
        );
        assert_eq!(loaded.keys.comment(&a), Some("alice"));
        assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
        assert!(loaded.warnings[0].contains("line 2: the key of line 1 again; line 1 applies"));
        assert!(loaded.warnings[1].contains("line 3:"));
    }

    /// sshd skips a bad line and logs it; so does haul, naming the line,
    /// and the keys on the other lines still get in.
    #[test]
    fn a_malformed_line_is_skipped_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("authorized_keys");
        let (a, b) = (Keypair::generate().public, Keypair::generate().public);
        fs::write(
            &path,
            format!("{a} alice\nssh-ed25519 AAAA bob\n\n{b} carol\nhaul-x25519 12\n"),
        )
        .unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        let loaded = AuthorizedKeys::load(&path).unwrap();
        assert!(loaded.keys.contains(&a) && loaded.keys.contains(&b));
        assert_eq!(loaded.keys.len(), 2);
        assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
        assert!(
            loaded.warnings[0].contains("line 2:"),
            "{}",
            loaded.warnings[0]
        );
        assert!(
            loaded.warnings[1].contains("line 5:"),
            "{}",
            loaded.warnings[1]
        );
        assert!(loaded.warnings[0].contains(&path.display().to_string()));
    }

    #[test]
    fn a_file_or_directory_others_may_write_is_warned_about() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("authorized_keys");
        fs::write(&path, "").unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        // Readable by all is fine: public keys only.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(writable_by_others(&path), None);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o664)).unwrap();
        let w = writable_by_others(&path).expect("group-writable file");
        assert!(w.contains("chmod go-w"), "{w}");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let w = writable_by_others(&path).expect("world-writable directory");
        assert!(w.contains("could replace"), "{w}");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(writable_by_others(&path), None, "sticky, like /tmp");
        let loaded = AuthorizedKeys::load(&path).unwrap();
        assert!(loaded.warnings.is_empty());
    }

    #[test]
    fn known_hosts_pin_and_detect_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        let k1 = Keypair::generate().public;
        let k2 = Keypair::generate().public;
        let mut kh = KnownHosts::load(&path).unwrap();
        assert_eq!(kh.check("h:1", &k1), HostKeyStatus::Unknown);
        kh.add("h:1", &k1).unwrap();
        let kh = KnownHosts::load(&path).unwrap();
        assert_eq!(kh.check("h:1", &k1), HostKeyStatus::Known);
        assert_eq!(
            kh.check("h:1", &k2),
            HostKeyStatus::Changed {
                pinned: k1,
                line: 1
            }
        );
        assert_eq!(kh.check("other:1", &k2), HostKeyStatus::Unknown);
    }
}
