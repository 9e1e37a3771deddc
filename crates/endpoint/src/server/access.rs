//! What one key may do (issue 29), from the options written before it in
//! `authorized_keys`, as sshd reads its own:
//!
//! ```text
//! root=projects/alpha,read-only haul-x25519 HEX alice@lab
//! ```
//!
//! - `root=DIR`: the key sees only DIR, below the served root: every path
//!   it names, sends, pulls, deletes or takes a basis from is resolved
//!   there, and nothing through a link leads out;
//! - `read-only`: it may pull, not push;
//! - `write-only`: a drop box: it may push, not pull, and nothing it
//!   does reads what is there (no dedup against existing files, no sync
//!   comparisons, no `--delete`, no dry runs, no `--basis`);
//! - `rate=RATE` (bits per second, as `--rate`): the server sends no
//!   faster, and a push must ask for no more (`--rate`);
//! - `tunnel-to=HOST:PORT`, repeatable: the only tunnels the key may open,
//!   and only where the daemon's `--tunnel-to` allows too;
//! - `sessions=N`: the most sessions the key may run at once (tunnels
//!   included); without it, half of `--max-sessions`.
//! - `jobs`: it may hand this daemon transfers to run on its own (P-45:
//!   a copy to another daemon, detached jobs), each run under this
//!   line's options as they are when it runs;
//! - `jobs-to=HOST:PORT`, repeatable: `jobs`, but its jobs may push only
//!   to these daemons, named as written (the daemon resolves the name);
//! - `operator`: it sees and manages every key's jobs, and may give a
//!   job a `--notify-exec` command (run on this host).
//!
//! A session keyed by a one-time grant (P-45 G-4) runs under the line of
//! the key that issued the grant, as it is now, narrowed to the grant: a
//! push of its one path, with no more than the options and bytes
//! granted, one session at a time.
//!
//! The server enforces each, whatever the client does (issue 39): the
//! root is opened by descriptor at every session, through no link; the
//! rate is one pace that every session of the key draws from, for every
//! byte the daemon sends or takes in (pushes, pulls, TCP, UDP, tunnels);
//! and a reload of the file ends at once the running sessions that the
//! key's new line no longer allows (`keyring`).
//!
//! A key with no options may do what the daemon allows, as before. A key
//! with any option and no `tunnel-to` opens no tunnels. An option haul does
//! not know refuses the key, as a typo must not widen what it may do.

use connect::error::TransferError;

/// The largest `sessions=` taken.
const MAX_QUOTA: usize = 100_000;
use store::Root;
use wire::{ErrorCode, Op, Request};

/// What a key's options allow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyOptions {
    pub root: Option<String>,
    pub read_only: bool,
    pub write_only: bool,
    /// Bytes per second.
    pub rate: Option<u64>,
    pub tunnel_to: Vec<String>,
    /// Most sessions at once (`sessions=`).
    pub sessions: Option<usize>,
    /// `jobs`: may submit managed transfers (P-45).
    pub jobs: bool,
    /// `jobs-to=`: the only daemons its jobs may push to; empty: any.
    pub jobs_to: Vec<String>,
    /// `operator`: sees every key's jobs.
    pub operator: bool,
    /// The session is keyed by a one-time grant: what it may do.
    pub grant: Option<GrantedPush>,
}

/// What a one-time grant allows its holder (P-45 G-4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GrantedPush {
    /// The grantee's key, naming the grant.
    pub key: [u8; 32],
    /// The one destination, as the issuer named it.
    pub path: String,
    /// The `SyncOptions` bits the push may ask for.
    pub sync: u8,
    pub recursive: bool,
    /// File bytes the push may bring, all its sessions together.
    pub budget: u64,
    /// Not consumed by the first success (`--every`).
    pub repeat: bool,
}

impl KeyOptions {
    /// `opts` as written before a key (comma-separated).
    pub(crate) fn parse(opts: &str) -> Result<KeyOptions, String> {
        let mut k = KeyOptions::default();
        for o in opts.split(',').filter(|o| !o.is_empty()) {
            match o.split_once('=') {
                None if o == "read-only" => k.read_only = true,
                None if o == "write-only" => k.write_only = true,
                None if o == "jobs" => k.jobs = true,
                None if o == "operator" => k.operator = true,
                Some(("root", d)) => {
                    if d.is_empty() || d.split('/').any(|c| c == "..") {
                        return Err(format!("root={d}: name a directory below the served root"));
                    }
                    k.root = Some(d.to_string());
                }
                Some(("rate", r)) => {
                    k.rate = Some(rate::parse_rate(r).filter(|&b| b > 0).ok_or_else(|| {
                        format!("rate={r}: write it like 500M, 1.5G or 800k (bits per second)")
                    })?)
                }
                Some(("tunnel-to", t)) if t.contains(':') => k.tunnel_to.push(t.to_string()),
                Some(("jobs-to", t)) if t.contains(':') => {
                    k.jobs = true;
                    k.jobs_to.push(t.to_string())
                }
                Some(("sessions", n)) => {
                    k.sessions = Some(n.parse().ok().filter(|&n| (1..=MAX_QUOTA).contains(&n)).ok_or_else(|| {
                        format!("sessions={n}: give the most sessions at once, 1 to {MAX_QUOTA}")
                    })?)
                }
                _ => return Err(format!("{o:?} is not an option haul knows (root=DIR, read-only, write-only, rate=RATE, tunnel-to=HOST:PORT, sessions=N, jobs, jobs-to=HOST:PORT, operator)")),
            }
        }
        if k.read_only && k.write_only {
            return Err("read-only and write-only together allow nothing".into());
        }
        Ok(k)
    }

    /// Whether the line narrows what the key may do (`jobs` and
    /// `operator` widen it).
    fn restricted(&self) -> bool {
        KeyOptions {
            jobs: false,
            jobs_to: Vec::new(),
            operator: false,
            ..self.clone()
        } != KeyOptions::default()
    }

    /// How many sessions the key may run at once: its `sessions=`, or
    /// half of the daemon's `max` (at least one), never more than `max`.
    pub(crate) fn quota(&self, max: usize) -> usize {
        self.sessions
            .unwrap_or(max.div_ceil(2))
            .clamp(1, max.max(1))
    }

    /// The root this key sees: `root=` below the served root, opened from
    /// the served root's descriptor at every session, through no link
    /// (P-43): a link planted anywhere (`drop/box -> ../projects/beta`)
    /// neither leads a key out nor moves its root.
    pub(crate) fn root(&self, served: &Root) -> Result<Root, TransferError> {
        let Some(sub) = &self.root else {
            return Ok(served.clone());
        };
        served.sub_root(sub).map_err(|e| {
            let why = match e.kind {
                store::StoreErrorKind::OutsideRoot => "passes through a symbolic link",
                store::StoreErrorKind::NotFound => "does not exist",
                _ => "is not a directory",
            };
            TransferError::new(
                ErrorCode::Permission,
                format!("this key's root, {sub}, {why} on the server; ask its operator"),
            )
        })
    }

    /// The request as this key may make it: refused where it asks what
    /// the key may not do, narrowed where the server decides (the rate it
    /// sends at, a drop box's reads of what is there).
    pub(crate) fn allow(&self, mut req: Request) -> Result<Request, TransferError> {
        let deny = |why: String| Err(TransferError::new(ErrorCode::Permission, why));
        if let Some(g) = &self.grant {
            g.allows(&req)?;
        }
        match req.op {
            Op::Grant { .. } if self.read_only => {
                return deny("this key is read-only on this server: it may grant no pushes".into())
            }
            Op::Job if !(self.jobs || self.operator) => {
                return deny("this key may not hand this server transfers to run (add jobs to its line in the server's authorized keys)".into())
            }
            Op::Push if self.read_only => {
                return deny("this key is read-only on this server: it may pull, not push".into())
            }
            Op::Pull if self.write_only => return deny(
                "this key is write-only on this server (a drop box): it may push, not pull or list"
                    .into(),
            ),
            Op::Tunnel if self.restricted() && self.tunnel_to.is_empty() => {
                return deny(
                    "this key may open no tunnels on this server (no tunnel-to= in its options)"
                        .into(),
                )
            }
            Op::Tunnel if self.restricted() && !self.tunnel_to.contains(&req.paths[0]) => {
                return deny(format!(
                    "this key may tunnel only to {}, not to {}",
                    self.tunnel_to.join(", "),
                    req.paths[0]
                ))
            }
            _ => {}
        }
        if self.write_only {
            let s = &req.sync;
            if s.update || s.checksum || s.delete || s.dry_run || !req.basis.is_empty() {
                return deny("this key is write-only on this server (a drop box): what is there is not compared, listed or deleted, so sync, --delete, --dry-run and --basis are refused; use haul cp".into());
            }
            // Nothing of what is there is read: no chunks of it offered.
            req.sync.dedup = false;
        }
        if let Some(cap) = self.rate {
            match req.op {
                Op::Push if req.rate == 0 || req.rate > cap => {
                    return deny(format!(
                        "this key may send at most {} Mbit/s to this server: add --rate {}M",
                        cap * 8 / 1_000_000,
                        cap * 8 / 1_000_000
                    ))
                }
                Op::Pull | Op::Probe { .. } | Op::Tunnel if req.rate == 0 || req.rate > cap => {
                    req.rate = cap
                }
                _ => {}
            }
        }
        Ok(req)
    }
}

impl KeyOptions {
    /// Whether this key's jobs may push to `host:port` (`jobs-to=`): as
    /// written there, and dialled by this daemon's own resolving, not by
    /// addresses the job names.
    pub(crate) fn may_push_to(
        &self,
        host: &str,
        port: u16,
        addrs: &[String],
    ) -> Result<(), TransferError> {
        let target = format!("{host}:{port}");
        if self.jobs_to.is_empty() || (addrs.is_empty() && self.jobs_to.contains(&target)) {
            return Ok(());
        }
        Err(TransferError::new(
            ErrorCode::Permission,
            format!(
                "this key's jobs may push only to {} (jobs-to= in its line on this server), not to {target}",
                self.jobs_to.join(", ")
            ),
        ))
    }
}

impl GrantedPush {
    /// Refuses what the grant does not allow: anything but a push into
    /// its one path, or options past those granted (P-45 G-4).
    fn allows(&self, req: &Request) -> Result<(), TransferError> {
        let deny = |why: String| {
            Err(TransferError::new(
                ErrorCode::Permission,
                format!("this one-time grant {why}"),
            ))
        };
        let asked = req.sync.bits() & !wire::SyncOptions::HARMLESS;
        if req.op != Op::Push {
            deny("allows a push only".into())
        } else if req.paths.first() != Some(&self.path) {
            deny(format!("is for {:?} only", self.path))
        } else if asked & !self.sync != 0 {
            deny("does not allow these options (--delete, --checksum, --dry-run and the like must be granted)".into())
        } else if req.recursive && !self.recursive {
            deny("does not allow a recursive copy".into())
        } else if !req.basis.is_empty() || req.shard.is_some() {
            deny("does not allow --basis or shards".into())
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_a_typo_is_refused() {
        let k =
            KeyOptions::parse("root=projects/alpha,read-only,rate=500M,tunnel-to=db:5432").unwrap();
        assert_eq!(k.root.as_deref(), Some("projects/alpha"));
        assert!(k.read_only && !k.write_only);
        assert_eq!(k.rate, Some(62_500_000));
        assert_eq!(k.tunnel_to, ["db:5432"]);
        assert_eq!(KeyOptions::parse("").unwrap(), KeyOptions::default());
        assert_eq!(KeyOptions::parse("sessions=3").unwrap().quota(64), 3);
        assert_eq!(KeyOptions::default().quota(64), 32);
        assert_eq!(KeyOptions::default().quota(1), 1);
        assert_eq!(KeyOptions::parse("sessions=99").unwrap().quota(8), 8);
        let j = KeyOptions::parse("jobs-to=b.example:7050").unwrap();
        assert!(j.jobs && !j.restricted());
        assert!(j.may_push_to("b.example", 7050, &[]).is_ok());
        assert!(j.may_push_to("c.example", 7050, &[]).is_err());
        assert!(j
            .may_push_to("b.example", 7050, &["10.0.0.9:7050".into()])
            .is_err());
        assert!(KeyOptions::parse("jobs")
            .unwrap()
            .may_push_to("any", 1, &[])
            .is_ok());
        for bad in [
            "jobs-to=nowhere",
            "readonly",
            "root=../x",
            "root=",
            "rate=fast",
            "read-only,write-only",
            "tunnel-to=db",
            "sessions=0",
            "sessions=many",
        ] {
            assert!(KeyOptions::parse(bad).is_err(), "{bad}");
        }
    }
}
