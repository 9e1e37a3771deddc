//! One-time grants (P-45 G-1 … G-6): what a key holder lets another
//! daemon push here on its behalf, for a third-party copy. A grant names
//! the grantee's one-time public key, the key that issued it, the one
//! path, the options and bytes allowed and when it expires; it is kept in
//! the daemon's state directory (so that a job's retries survive this
//! daemon restarting), private, one file a grant named by the grantee's
//! key; spent once used (unless it repeats), and removed once expired
//! or when its issuer's key is no longer authorized. A spent grant lets
//! no one in: it only tells its key that its push ended verified, for a
//! job whose daemon stopped before it heard so. Nothing in it lets
//! anyone in but the holder of the one-time secret.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use secure::PublicKey;
use serde::{Deserialize, Serialize};

use wire::{ErrorCode, TransferError};

use super::access::GrantedPush;

/// One grant as kept on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantFile {
    /// The issuing key, hex.
    issuer: String,
    path: String,
    sync: u8,
    recursive: bool,
    budget: u64,
    /// Seconds since the epoch.
    expires: u64,
    repeat: bool,
    /// When a push through it ended verified (seconds since the epoch):
    /// it lets no one in since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spent: Option<u64>,
}

/// A grant found for a key: who issued it and what it allows.
pub(crate) struct Found {
    pub issuer: PublicKey,
    pub push: GrantedPush,
}

/// The grants of one daemon.
pub(crate) struct Grants {
    dir: PathBuf,
}

/// Most grants a daemon keeps at once: a key holder cannot fill its disk.
pub const MAX_GRANTS: usize = 10_000;

pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Grants {
    pub(crate) fn open(dir: &Path) -> std::io::Result<Grants> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let g = Grants {
            dir: dir.to_path_buf(),
        };
        g.sweep();
        Ok(g)
    }

    fn file(&self, key: &[u8; 32]) -> PathBuf {
        self.dir.join(wire::hex::encode(key))
    }

    /// Removes expired grants and leftovers of interrupted writes.
    fn sweep(&self) {
        let now = now_secs();
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let stale = name.ends_with(".new") || read(&e.path()).is_none_or(|g| g.expires <= now);
            if stale {
                let _ = fs::remove_file(e.path());
            }
        }
    }

    /// Issues a grant for `push` from `issuer`, for `lifetime` seconds;
    /// returns when it expires. A grantee key is granted once.
    pub(crate) fn issue(
        &self,
        issuer: &PublicKey,
        push: &GrantedPush,
        lifetime: u32,
    ) -> Result<u64, String> {
        self.sweep();
        let held = fs::read_dir(&self.dir).map_or(0, |d| d.count());
        if held >= MAX_GRANTS {
            return Err(format!(
                "this server holds {MAX_GRANTS} grants already; try again when some expire"
            ));
        }
        let path = self.file(&push.key);
        if path.exists() {
            return Err("that one-time key has a grant already; make a new key".into());
        }
        let expires = now_secs() + lifetime as u64;
        let g = GrantFile {
            issuer: wire::hex::encode(&issuer.0),
            path: push.path.clone(),
            sync: push.sync,
            recursive: push.recursive,
            budget: push.budget,
            expires,
            repeat: push.repeat,
            spent: None,
        };
        self.write(&path, &g)
            .map_err(|e| format!("cannot keep the grant in {}: {e}", self.dir.display()))?;
        Ok(expires)
    }

    /// Writes `g` to `path` whole: a private file beside it, synced, then
    /// renamed over it.
    fn write(&self, path: &Path, g: &GrantFile) -> std::io::Result<()> {
        let tmp = path.with_extension("new");
        let write = || -> std::io::Result<()> {
            let mut f = fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&serde_json::to_vec(g).expect("a grant serializes"))?;
            f.sync_all()?;
            fs::rename(&tmp, path)?;
            fs::File::open(&self.dir)?.sync_all()
        };
        write().inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })
    }

    /// The live grant for `key`, if any; an expired one is removed and
    /// said so (`Auth`), a spent one said so (`GrantSpent`).
    pub(crate) fn find(&self, key: &PublicKey) -> Result<Option<Found>, TransferError> {
        let path = self.file(&key.0);
        let Some(g) = read(&path) else {
            return Ok(None);
        };
        if g.expires <= now_secs() {
            let _ = fs::remove_file(&path);
            return Err(TransferError::new(
                ErrorCode::Auth,
                format!(
                    "the one-time grant of key {} has expired; the grant's issuer must grant again",
                    key.fingerprint()
                ),
            ));
        }
        if let Some(at) = g.spent {
            return Err(TransferError::new(
                ErrorCode::GrantSpent,
                format!(
                    "the one-time grant of key {} was used up {} s ago by a push that ended verified here; nothing more comes in through it",
                    key.fingerprint(),
                    now_secs().saturating_sub(at)
                ),
            ));
        }
        let issuer = PublicKey::parse(&g.issuer)
            .ok_or_else(|| TransferError::new(ErrorCode::Auth, "a grant with a bad issuer"))?;
        Ok(Some(Found {
            issuer,
            push: GrantedPush {
                key: key.0,
                path: g.path,
                sync: g.sync,
                recursive: g.recursive,
                budget: g.budget,
                repeat: g.repeat,
            },
        }))
    }

    /// A push through the grant ended verified: its key no longer gets
    /// in, and hears so until the grant would have expired (G-5). Where
    /// the mark cannot be kept, the grant goes.
    pub(crate) fn spend(&self, key: &[u8; 32]) {
        let path = self.file(key);
        let Some(mut g) = read(&path) else {
            return;
        };
        g.spent = Some(now_secs());
        if self.write(&path, &g).is_err() {
            self.consume(key);
        }
    }

    /// The grant's issuer is no longer authorized, or it could not be
    /// marked spent: it is gone, and its key no longer gets in (G-5).
    pub(crate) fn consume(&self, key: &[u8; 32]) {
        let _ = fs::remove_file(self.file(key));
        if let Ok(d) = fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
    }
}

fn read(path: &Path) -> Option<GrantFile> {
    use std::io::Read;
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .ok()?;
    let mut b = Vec::new();
    f.take(64 << 10).read_to_end(&mut b).ok()?;
    serde_json::from_slice(&b).ok()
}
