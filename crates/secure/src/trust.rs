//! Which peers a host trusts.
//!
//! The server admits only clients whose public key is listed in its
//! authorized-keys file (one `haul-x25519 HEX comment` per line). The client
//! pins each server's key the first time it connects, in a known-hosts file
//! of `HOST haul-x25519 HEX` lines, and refuses a server whose key changed.

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::keys::{KeyError, PublicKey};

/// The set of client keys a server admits.
#[derive(Debug, Default, Clone)]
pub struct AuthorizedKeys {
    keys: HashSet<PublicKey>,
}

impl AuthorizedKeys {
    /// Reads an authorized-keys file; blank lines and `#` comments are skipped.
    pub fn load(path: &Path) -> Result<AuthorizedKeys, KeyError> {
        let text = fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).map_err(|line| KeyError::Malformed {
            path: path.to_path_buf(),
            why: format!("line {line} is not a haul public key"),
        })
    }

    /// Parses the file's text; `Err` holds the 1-based number of a bad line.
    pub fn parse(text: &str) -> Result<AuthorizedKeys, usize> {
        let mut keys = HashSet::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            keys.insert(PublicKey::parse(line).ok_or(i + 1)?);
        }
        Ok(AuthorizedKeys { keys })
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
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (host, key) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
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
        writeln!(f, "{host} {key}").map_err(werr)?;
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
        let keys = AuthorizedKeys::parse(&text).unwrap();
        assert!(keys.contains(&a));
        assert!(!keys.contains(&Keypair::generate().public));
        assert_eq!(AuthorizedKeys::parse("hello\n").unwrap_err(), 1);
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
