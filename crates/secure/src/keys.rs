//! A host's long-term X25519 keypair, stored as two text files like ssh's:
//! `NAME` (secret, mode 0600) and `NAME.pub` (`haul-x25519 HEX COMMENT`).
//! The secret is wiped from memory when its [`Keypair`] is dropped, and so
//! is every copy this crate makes of it on the way (the key file's text,
//! `snow`'s generated keypair); P-39.

use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;
use zeroize::{Zeroize, Zeroizing};

const SECRET_TAG: &str = "haul-secret-x25519";
/// First word of a public key line.
pub const PUBLIC_TAG: &str = "haul-x25519";

#[derive(Debug, Error)]
pub enum KeyError {
    #[error("cannot read key file {path}: {source} (create one with `haul keygen`)")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write key file {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("key file {path} is malformed: {why}")]
    Malformed { path: PathBuf, why: String },
    #[error("key file {path} is readable by others (mode {mode:o}); run `chmod 600 {path}`")]
    TooOpen { path: PathBuf, mode: u32 },
    #[error("key file {0} already exists; remove it first or choose another path")]
    Exists(PathBuf),
}

/// A 32-byte X25519 public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(pub [u8; 32]);

impl PublicKey {
    /// Parses `haul-x25519 HEX [comment]` or a bare 64-digit hex string.
    pub fn parse(text: &str) -> Option<PublicKey> {
        let mut words = text.split_whitespace();
        let first = words.next()?;
        let hex = if first == PUBLIC_TAG {
            words.next()?
        } else {
            first
        };
        wire::hex::decode32(hex).map(PublicKey)
    }

    /// Short fingerprint shown to people: BLAKE3 of the key, first 16 bytes.
    pub fn fingerprint(&self) -> String {
        let h = blake3::hash(&self.0);
        format!("b3:{}", wire::hex::encode(&h.as_bytes()[..16]))
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PUBLIC_TAG} {}", wire::hex::encode(&self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.fingerprint())
    }
}

/// A static keypair. The secret never leaves this struct except into snow,
/// and is wiped when the keypair is dropped.
pub struct Keypair {
    pub public: PublicKey,
    secret: [u8; 32],
}

impl Drop for Keypair {
    fn drop(&mut self) {
        self.secret.zeroize();
    }
}

impl Keypair {
    pub fn generate() -> Keypair {
        let builder = snow::Builder::new(
            crate::noise_pattern::NOISE_PATTERN
                .parse()
                .expect("static pattern parses"),
        );
        let mut kp = builder
            .generate_keypair()
            .expect("x25519 key generation cannot fail with the default resolver");
        let mut public = [0u8; 32];
        public.copy_from_slice(&kp.public);
        let mut pair = Keypair {
            public: PublicKey(public),
            secret: [0u8; 32],
        };
        pair.secret.copy_from_slice(&kp.private);
        // snow's keypair does not wipe itself.
        kp.private.zeroize();
        pair
    }

    /// A second copy, for a client that opens several sessions under one
    /// one-time identity (`haul probe` over ssh). Deliberately not `Clone`:
    /// copies of a secret are made only where one is needed.
    pub fn duplicate(&self) -> Keypair {
        Keypair {
            public: self.public,
            secret: self.secret,
        }
    }

    /// The keypair of a secret given whole: a one-time grant's key, held
    /// by the daemon that runs a job (P-45 G-1).
    pub fn from_secret(secret: [u8; 32]) -> Keypair {
        let secret = Zeroizing::new(secret);
        Keypair {
            public: PublicKey(x25519_public(&secret)),
            secret: *secret,
        }
    }

    /// The secret as hex, wiped when dropped: only for a one-time key
    /// handed to the daemon that will use it (P-45 G-1).
    pub fn secret_hex(&self) -> Zeroizing<String> {
        Zeroizing::new(wire::hex::encode(&self.secret))
    }

    pub(crate) fn secret(&self) -> &[u8; 32] {
        &self.secret
    }

    /// Path of the public half of a key stored at `path`.
    pub fn public_path(path: &Path) -> PathBuf {
        let mut s = path.as_os_str().to_owned();
        s.push(".pub");
        PathBuf::from(s)
    }

    /// Writes `path` (mode 0600) and `path.pub`; refuses to overwrite.
    pub fn save(&self, path: &Path, comment: &str) -> Result<(), KeyError> {
        if path.exists() {
            return Err(KeyError::Exists(path.to_path_buf()));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|source| KeyError::Write {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let werr = |source| KeyError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(werr)?;
        let digits = Zeroizing::new(wire::hex::encode(&self.secret));
        writeln!(f, "{SECRET_TAG} {}", digits.as_str()).map_err(werr)?;
        let pub_path = Self::public_path(path);
        fs::write(&pub_path, format!("{} {comment}\n", self.public)).map_err(|source| {
            KeyError::Write {
                path: pub_path,
                source,
            }
        })?;
        Ok(())
    }

    /// Reads a key written by [`Keypair::save`]; refuses one others can read.
    pub fn load(path: &Path) -> Result<Keypair, KeyError> {
        let rerr = |source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        };
        let meta = fs::metadata(path).map_err(rerr)?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(KeyError::TooOpen {
                path: path.to_path_buf(),
                mode,
            });
        }
        let text = Zeroizing::new(fs::read_to_string(path).map_err(rerr)?);
        let malformed = |why: &str| KeyError::Malformed {
            path: path.to_path_buf(),
            why: why.to_string(),
        };
        let mut words = text.split_whitespace();
        if words.next() != Some(SECRET_TAG) {
            return Err(malformed("expected a haul secret key"));
        }
        let secret = Zeroizing::new(
            words
                .next()
                .and_then(wire::hex::decode32)
                .ok_or_else(|| malformed("bad key digits"))?,
        );
        Ok(Keypair {
            public: PublicKey(x25519_public(&secret)),
            secret: *secret,
        })
    }

    /// Loads the key at `path`, creating it first if it does not exist yet.
    pub fn load_or_create(path: &Path, comment: &str) -> Result<Keypair, KeyError> {
        if !path.exists() {
            Keypair::generate().save(path, comment)?;
        }
        Keypair::load(path)
    }
}

/// The X25519 public key of a secret scalar (`StaticSecret` wipes its copy).
fn x25519_public(secret: &[u8; 32]) -> [u8; 32] {
    x25519_dalek::PublicKey::from(&x25519_dalek::StaticSecret::from(*secret)).to_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_load_roundtrip_and_public_derivation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("id");
        let kp = Keypair::generate();
        kp.save(&path, "me@test").unwrap();
        let back = Keypair::load(&path).unwrap();
        assert_eq!(back.public, kp.public);
        let pub_text = fs::read_to_string(Keypair::public_path(&path)).unwrap();
        assert_eq!(PublicKey::parse(&pub_text), Some(kp.public));
        assert!(matches!(kp.save(&path, ""), Err(KeyError::Exists(_))));
    }

    #[test]
    fn refuses_world_readable_secret() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("id");
        Keypair::generate().save(&path, "").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            Keypair::load(&path),
            Err(KeyError::TooOpen { .. })
        ));
    }

    #[test]
    fn the_secret_is_wiped_when_dropped() {
        let mut kp = std::mem::ManuallyDrop::new(Keypair::generate());
        assert_ne!(kp.secret, [0; 32]);
        // SAFETY: dropped once and never again; the destructor leaves a
        // valid `[u8; 32]` behind, which is all that is read after.
        unsafe { std::mem::ManuallyDrop::drop(&mut kp) };
        assert_eq!(kp.secret, [0; 32]);
    }

    #[test]
    fn parse_rejects_garbage() {
        assert!(PublicKey::parse("ssh-ed25519 AAAA").is_none());
        assert!(PublicKey::parse("").is_none());
        assert!(PublicKey::parse(&"zz".repeat(32)).is_none());
    }
}
