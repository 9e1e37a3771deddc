//! What the daemon keeps for each client key while its sessions run
//! (issue 39): the key's pace (`rate=`, one rate for all its sessions,
//! both directions, every transport and tunnels), how many sessions it
//! holds against its quota (`sessions=`), and each live session with what
//! it asked and was allowed, so that a reload of the authorized keys ends
//! at once the sessions that their key's new line no longer allows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use connect::control::Pace;
use connect::error::TransferError;
use connect::progress::Progress;
use secure::PublicKey;
use wire::{ErrorCode, Request};

use super::access::KeyOptions;

/// Every key with a session running.
#[derive(Default)]
pub(super) struct Keyring {
    keys: Mutex<HashMap<PublicKey, Arc<KeyEntry>>>,
}

/// One key's sessions.
struct KeyEntry {
    /// Its `rate=`, shared by all its sessions; made at its first session
    /// with a rate.
    pace: Mutex<Option<Arc<Pace>>>,
    live: Mutex<Vec<Arc<Live>>>,
}

/// A running session of a key: what its client asked, under which
/// options, and the handle that stops it.
pub(super) struct Live {
    /// The root it was admitted under (`root=`; `None`: the whole served
    /// root): its paths were resolved there.
    root: Option<String>,
    /// What it asked and what it was allowed, once its request is read.
    request: Mutex<Option<(Request, Request)>>,
    progress: Arc<Progress>,
}

/// A session counted against its key's quota, until dropped.
pub(super) struct KeySession<'a> {
    ring: &'a Keyring,
    key: PublicKey,
    entry: Arc<KeyEntry>,
    live: Arc<Live>,
}

/// What a reload did to one running session.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Its key's line allows it as it runs.
    Keeps,
    /// Ended, with the code and reason its client is told: `Auth` for a
    /// key removed, `Permission` for one whose options narrowed.
    Ended(ErrorCode, String),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Keyring {
    /// Counts a new session of `key` against `quota` (the key's
    /// `sessions=`, or its default share of `--max-sessions`); `None` if
    /// the key holds that many already.
    pub(super) fn enter(
        &self,
        key: PublicKey,
        opts: &KeyOptions,
        quota: usize,
        progress: Arc<Progress>,
    ) -> Option<KeySession<'_>> {
        let mut keys = lock(&self.keys);
        let entry = keys
            .entry(key)
            .or_insert_with(|| {
                Arc::new(KeyEntry {
                    pace: Mutex::new(None),
                    live: Mutex::new(Vec::new()),
                })
            })
            .clone();
        let mut live = lock(&entry.live);
        if live.len() >= quota {
            return None;
        }
        let session = Arc::new(Live {
            root: opts.root.clone(),
            request: Mutex::new(None),
            progress: progress.clone(),
        });
        live.push(session.clone());
        drop(live);
        if let Some(rate) = opts.rate {
            let mut pace = lock(&entry.pace);
            let pace = pace.get_or_insert_with(|| Arc::new(Pace::new(rate)));
            progress.control.set_pace(pace.clone());
        }
        Some(KeySession {
            ring: self,
            key,
            entry,
            live: session,
        })
    }

    /// Applies the authorized keys as just read again to every running
    /// session: `line(key)` is the key's options now (`None`: no longer
    /// authorized; `Err`: options haul refuses). A session its key's line
    /// no longer allows as it runs is stopped, told why; a lowered rate
    /// slows the key's running sessions at once. Returns each session's
    /// verdict, with its key, for the log.
    pub(super) fn reload(
        &self,
        line: impl Fn(&PublicKey) -> Option<Result<KeyOptions, String>>,
    ) -> Vec<(PublicKey, Verdict)> {
        let keys: Vec<(PublicKey, Arc<KeyEntry>)> = lock(&self.keys)
            .iter()
            .map(|(k, e)| (*k, e.clone()))
            .collect();
        let mut out = Vec::new();
        for (key, entry) in keys {
            let now = line(&key);
            if let Some(Ok(opts)) = &now {
                entry.narrow_rate(opts.rate);
            }
            for live in lock(&entry.live).iter() {
                let verdict = live.judge(now.as_ref());
                if let Verdict::Ended(code, why) = &verdict {
                    live.progress
                        .control
                        .stop(TransferError::new(*code, why.clone()));
                }
                out.push((key, verdict));
            }
        }
        out
    }
}

impl KeyEntry {
    /// A lower rate, or a rate where there was none, applies to the
    /// running sessions at once; a higher one to the sessions that start
    /// from now on (a running session keeps the cap it asked for).
    fn narrow_rate(&self, rate: Option<u64>) {
        let mut pace = lock(&self.pace);
        match (pace.as_ref(), rate) {
            (Some(p), Some(r)) => p.set_rate(r),
            (Some(p), None) => p.set_rate(u64::MAX / 4),
            (None, Some(r)) => {
                let p = Arc::new(Pace::new(r));
                for live in lock(&self.live).iter() {
                    live.progress.control.set_pace(p.clone());
                }
                *pace = Some(p);
            }
            (None, None) => {}
        }
    }
}

impl Live {
    /// Whether the key's line now (`now`) still allows this session as it
    /// runs: the same request allowed the same way, under the same root or
    /// one that holds it. A rate is not judged here (see
    /// [`KeyEntry::narrow_rate`]); nor is the quota (it bounds new
    /// sessions).
    fn judge(&self, now: Option<&Result<KeyOptions, String>>) -> Verdict {
        let new = match now {
            None => {
                return Verdict::Ended(
                    ErrorCode::Auth,
                    "this key was removed from the server's authorized keys (revoked); the session is ended".into(),
                )
            }
            Some(Err(e)) => {
                return Verdict::Ended(
                    ErrorCode::Auth,
                    format!("this key's options on the server changed to ones haul refuses ({e}); the session is ended"),
                )
            }
            Some(Ok(o)) => o,
        };
        if !root_holds(new.root.as_deref(), self.root.as_deref()) {
            return Verdict::Ended(
                ErrorCode::Permission,
                format!(
                    "this key's root on the server changed to {}; the session is ended",
                    new.root.as_deref().unwrap_or("the whole served root")
                ),
            );
        }
        if let Some((asked, allowed)) = &*lock(&self.request) {
            let unpaced = |r: &Request| Request {
                rate: 0,
                ..r.clone()
            };
            match new.allow(asked.clone()) {
                Err(e) => {
                    return Verdict::Ended(
                        ErrorCode::Permission,
                        format!(
                            "this key's options on the server changed: {}; the session is ended",
                            e.message
                        ),
                    )
                }
                Ok(r) if unpaced(&r) != unpaced(allowed) => {
                    return Verdict::Ended(
                        ErrorCode::Permission,
                        "this key's options on the server changed, and no longer allow this session as it runs; the session is ended".into(),
                    )
                }
                Ok(_) => {}
            }
        }
        Verdict::Keeps
    }
}

/// Whether a key confined to `new` still sees all of `old` (`None`: the
/// whole served root): `old` is `new` or below it, component by component.
fn root_holds(new: Option<&str>, old: Option<&str>) -> bool {
    let parts = |r: Option<&str>| -> Vec<String> {
        r.unwrap_or("")
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(str::to_string)
            .collect()
    };
    let (new, old) = (parts(new), parts(old));
    old.starts_with(&new)
}

impl KeySession<'_> {
    /// The request as the client asked it and as the key's options
    /// allowed it: what a reload judges again.
    pub(super) fn asked(&self, asked: Request, allowed: Request) {
        *lock(&self.live.request) = Some((asked, allowed));
    }
}

impl Drop for KeySession<'_> {
    fn drop(&mut self) {
        let mut keys = lock(&self.ring.keys);
        let mut live = lock(&self.entry.live);
        live.retain(|l| !Arc::ptr_eq(l, &self.live));
        if live.is_empty() {
            drop(live);
            keys.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secure::Keypair;

    fn opts(s: &str) -> KeyOptions {
        KeyOptions::parse(s).unwrap()
    }

    fn pull(paths: &[&str]) -> Request {
        Request {
            paths: paths.iter().map(|p| p.to_string()).collect(),
            ..super::super::limits::tests::request(wire::Op::Pull, 1, 1 << 20)
        }
    }

    #[test]
    fn a_quota_counts_a_keys_sessions_and_frees_them() {
        let ring = Keyring::default();
        let k = Keypair::generate().public;
        let p = || Arc::new(Progress::default());
        let a = ring.enter(k, &opts(""), 2, p()).unwrap();
        let _b = ring.enter(k, &opts(""), 2, p()).unwrap();
        assert!(ring.enter(k, &opts(""), 2, p()).is_none());
        // Another key has its own.
        let other = Keypair::generate().public;
        assert!(ring.enter(other, &opts(""), 1, p()).is_some());
        drop(a);
        assert!(ring.enter(k, &opts(""), 2, p()).is_some());
    }

    #[test]
    fn a_reload_ends_what_the_new_line_does_not_allow() {
        let ring = Keyring::default();
        let k = Keypair::generate().public;
        let start = |o: &str, req: Request| {
            let p = Arc::new(Progress::default());
            let s = ring.enter(k, &opts(o), 8, p.clone()).unwrap();
            let allowed = opts(o).allow(req.clone()).unwrap();
            s.asked(req, allowed);
            (s, p)
        };
        let (_s1, p1) = start("root=projects/alpha", pull(&["x"]));
        let (_s2, p2) = start("root=projects/alpha", pull(&["y"]));
        // The same line, or a wider root: both go on.
        let v = ring.reload(|_| Some(Ok(opts("root=projects"))));
        assert!(v.iter().all(|(_, v)| *v == Verdict::Keeps), "{v:?}");
        // Write-only now: a pull is no longer allowed.
        let v = ring.reload(|_| Some(Ok(opts("write-only,root=projects/alpha"))));
        assert!(
            matches!(&v[0].1, Verdict::Ended(ErrorCode::Permission, w) if w.contains("write-only")),
            "{v:?}"
        );
        assert!(p1.control.stopped().is_some() && p2.control.stopped().is_some());
        // Removed: ended.
        let (_s3, p3) = start("", pull(&["z"]));
        let v = ring.reload(|_| None);
        assert!(v.iter().all(
            |(_, v)| matches!(v, Verdict::Ended(ErrorCode::Auth, w) if w.contains("revoked"))
        ));
        assert!(p3.control.stopped().unwrap().message.contains("revoked"));
    }

    #[test]
    fn a_keys_sessions_share_one_pace_and_a_lower_rate_applies_at_once() {
        let ring = Keyring::default();
        let k = Keypair::generate().public;
        let (pa, pb) = (Arc::new(Progress::default()), Arc::new(Progress::default()));
        let _a = ring.enter(k, &opts("rate=8M"), 8, pa.clone()).unwrap();
        let _b = ring.enter(k, &opts("rate=8M"), 8, pb.clone()).unwrap();
        let entry = lock(&ring.keys)[&k].clone();
        let pace = lock(&entry.pace).clone().unwrap();
        assert_eq!(pace.rate(), 1_000_000);
        ring.reload(|_| Some(Ok(opts("rate=4M"))));
        assert_eq!(pace.rate(), 500_000);
        assert!(
            pa.control.stopped().is_none(),
            "a rate slows, it does not end"
        );
        // A rate where there was none paces the running sessions too:
        // 3 MiB at 1 MB/s.
        let other = Keypair::generate().public;
        let pc = Arc::new(Progress::default());
        let _c = ring.enter(other, &opts(""), 8, pc.clone()).unwrap();
        ring.reload(|k| Some(Ok(opts(if *k == other { "rate=8M" } else { "rate=4M" }))));
        let t0 = std::time::Instant::now();
        pc.control.pace(3 << 20);
        pc.control.pace(1);
        assert!(
            t0.elapsed() > std::time::Duration::from_secs(2),
            "{:?}",
            t0.elapsed()
        );
        assert!(root_holds(None, Some("a/b")) && root_holds(Some("a"), Some("a/b")));
        assert!(!root_holds(Some("a/b"), Some("a")) && !root_holds(Some("ab"), Some("a/b")));
    }
}
