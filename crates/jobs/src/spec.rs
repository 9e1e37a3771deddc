//! What a job runs (P-45): the sources on the daemon that holds it, the
//! other end with the one-time grant to use there, the transfer's
//! options, and how it retries, notifies and repeats. Carried as JSON in
//! a `Job` call and kept as JSON in the job's directory; every count and
//! size is bounded before it is used ([`Spec::check`]).

use serde::{Deserialize, Serialize};

/// Most bytes of a job call or of a job's record on disk.
pub const MAX_SPEC_BYTES: usize = 256 << 10;
/// Most sources one job names.
pub const MAX_SOURCES: usize = 1024;
/// Most selection rules (as P-44's `MAX_RULES`).
pub const MAX_RULES: usize = 4096;
/// Longest path, rule, command or URL.
pub const MAX_TEXT: usize = 4096;
/// Most addresses of the other end.
pub const MAX_ADDRS: usize = 16;
/// Shortest `--every`: a minute.
pub const MIN_EVERY_SECS: u64 = 60;
/// Longest deadline or `--every`: a year.
pub const MAX_SECS: u64 = 366 * 24 * 3600;
/// Most retries a job may ask for.
pub const MAX_RETRIES: u32 = 100_000;

/// A job's id: 16 random bytes, as 32 hex digits. Unguessable, so that
/// knowing one is not a way in; a job is shown only to its submitter's
/// key and an operator's anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id(pub [u8; 16]);

impl Id {
    pub fn random() -> Id {
        let mut b = [0u8; 16];
        getrandom::fill(&mut b).expect("the OS's random numbers");
        Id(b)
    }

    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn parse(s: &str) -> Option<Id> {
        if s.len() != 32 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        let mut b = [0u8; 16];
        for (i, o) in b.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Id(b))
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.hex())
    }
}

impl Serialize for Id {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.hex())
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        let s = String::deserialize(d)?;
        Id::parse(&s).ok_or_else(|| serde::de::Error::custom("a job id is 32 hex digits"))
    }
}

/// `cp` or `sync` (which only sets the options; kept for the listing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Cp,
    Sync,
}

/// What a submitter describes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    pub kind: Kind,
    /// Paths on the daemon that runs the job, below its submitter's root.
    pub sources: Vec<String>,
    pub dest: Dest,
    pub options: Options,
    #[serde(default)]
    pub retry: Retry,
    #[serde(default)]
    pub notify: Notify,
    /// `--every`: run again this many seconds after each run started;
    /// each run is a job of its own.
    #[serde(default)]
    pub every_secs: Option<u64>,
    /// The submitter waits for it (`haul cp A:x B:y` without
    /// `--detach`): it is cancelled when the submitter goes.
    #[serde(default)]
    pub attached: bool,
    /// What the submitter calls it (the command line), for the listing.
    #[serde(default)]
    pub label: String,
    /// `--through-client`: the daemon reaches the other end only through
    /// connections its client relays (P-45 J-11); needs `attached`.
    #[serde(default)]
    pub relay: bool,
}

/// The other end: a daemon, its key, and the one-time grant it issued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dest {
    /// As the submitter wrote it (shown, and the name dialled without
    /// `addrs`).
    pub host: String,
    pub port: u16,
    /// Addresses to dial, as the submitter resolved them.
    #[serde(default)]
    pub addrs: Vec<String>,
    /// The daemon's public key, hex: the only key it may answer with.
    pub server_key: String,
    /// The grant's one-time secret key, hex (P-45 G-1).
    pub grant_secret: String,
    /// The destination path there, as granted.
    pub path: String,
    /// When the grant expires, seconds since the epoch.
    pub grant_expires: u64,
}

/// The transfer's options (what `haul cp` would send in its request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    pub recursive: bool,
    pub many_sources: bool,
    pub contents: bool,
    pub preserve: bool,
    /// `wire::SyncOptions` bits.
    pub sync: u8,
    pub protection: u8,
    /// 0 TCP, 1 UDP, 2 auto.
    pub transport: u8,
    #[serde(default)]
    pub streams: Option<u16>,
    pub block_size: u32,
    /// Bytes per second; 0 none.
    #[serde(default)]
    pub rate: u64,
    /// `wire::COMPRESS_*` and its level.
    pub compress: u8,
    #[serde(default)]
    pub compress_level: u8,
    #[serde(default)]
    pub rules: Vec<String>,
    #[serde(default)]
    pub min_size: u64,
    #[serde(default)]
    pub max_size: u64,
    #[serde(default)]
    pub not_before: i64,
    /// How the transfer shares its path (`--fair`, `--background`;
    /// P-46), as a request's `share`: 0 fair, 1 background, 2 off. Every
    /// attempt runs under it.
    #[serde(default)]
    pub share: u8,
}

/// The largest share policy code (`wire::SHARE_OFF`).
const SHARE_MAX: u8 = 2;

/// When a job stops retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    /// Seconds from submission after which no new attempt starts
    /// (`--deadline`); `None`: the grant's expiry bounds it.
    #[serde(default)]
    pub deadline_secs: Option<u64>,
    /// Most retries after the first attempt (`--max-retries`); `None`:
    /// until the deadline.
    #[serde(default)]
    pub max_retries: Option<u32>,
}

/// Who is told when the job ends.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Notify {
    /// Run with the job's JSON on its standard input (`sh -c`).
    #[serde(default)]
    pub exec: Option<String>,
    /// POSTed the job's JSON, retried.
    #[serde(default)]
    pub url: Option<String>,
}

/// A job as its daemon keeps it: the spec, whose it is, and where it
/// came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub id: Id,
    /// The submitting key, hex: only it (and an operator key) sees the job.
    pub owner: String,
    /// The submitting key's comment in the authorized keys, if any.
    #[serde(default)]
    pub owner_name: String,
    /// Milliseconds since the epoch.
    pub created_ms: u64,
    /// The job whose repeat this is (`--every`).
    #[serde(default)]
    pub parent: Option<Id>,
    /// A repeat starts no sooner than this, milliseconds since the epoch.
    #[serde(default)]
    pub not_before_ms: Option<u64>,
    pub spec: Spec,
}

impl Spec {
    /// Parses a spec a peer sent, bounded before it is parsed.
    pub fn decode(bytes: &[u8]) -> Result<Spec, String> {
        if bytes.len() > MAX_SPEC_BYTES {
            return Err(format!(
                "a job of {} bytes; at most {MAX_SPEC_BYTES}",
                bytes.len()
            ));
        }
        let s: Spec = serde_json::from_slice(bytes).map_err(|e| format!("a job: {e}"))?;
        s.check()?;
        Ok(s)
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a spec serializes")
    }

    /// Every count and size within its bound, and the fields that must be
    /// there, there.
    pub fn check(&self) -> Result<(), String> {
        let text = |what: &str, s: &str| {
            if s.len() > MAX_TEXT || s.contains('\0') {
                Err(format!("{what} is over {MAX_TEXT} bytes or holds a NUL"))
            } else {
                Ok(())
            }
        };
        if self.sources.is_empty() || self.sources.len() > MAX_SOURCES {
            return Err(format!("a job names 1 to {MAX_SOURCES} sources"));
        }
        for s in &self.sources {
            text("a source", s)?;
        }
        let d = &self.dest;
        text("the destination", &d.path)?;
        text("the host", &d.host)?;
        if d.addrs.len() > MAX_ADDRS {
            return Err(format!("at most {MAX_ADDRS} addresses"));
        }
        for a in &d.addrs {
            a.parse::<std::net::SocketAddr>()
                .map_err(|_| format!("{a:?} is not an address and port"))?;
        }
        if d.server_key.len() != 64 || d.grant_secret.len() != 64 {
            return Err("the destination's key and the grant's are 32 bytes of hex".into());
        }
        let o = &self.options;
        if o.rules.len() > MAX_RULES {
            return Err(format!("at most {MAX_RULES} selection rules"));
        }
        for r in &o.rules {
            text("a rule", r)?;
        }
        if o.share > SHARE_MAX {
            return Err(format!(
                "the share policy is 0 (fair), 1 (background) or 2 (off), not {}",
                o.share
            ));
        }
        text("the label", &self.label)?;
        if let Some(e) = &self.notify.exec {
            text("--notify-exec", e)?;
        }
        if let Some(u) = &self.notify.url {
            text("--notify-url", u)?;
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(format!("--notify-url {u}: give an http:// or https:// URL"));
            }
        }
        if let Some(e) = self.every_secs {
            if !(MIN_EVERY_SECS..=MAX_SECS).contains(&e) {
                return Err(format!(
                    "--every is from {MIN_EVERY_SECS} seconds to a year"
                ));
            }
            if self.attached {
                return Err("--every needs --detach: a repeat outlives the command".into());
            }
        }
        if self.relay && !self.attached {
            return Err("--through-client relays the data through this host, which must stay: it does not go with --detach".into());
        }
        if self.retry.deadline_secs.is_some_and(|s| s > MAX_SECS) {
            return Err("--deadline is at most a year".into());
        }
        if self.retry.max_retries.is_some_and(|n| n > MAX_RETRIES) {
            return Err(format!("--max-retries is at most {MAX_RETRIES}"));
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn spec() -> Spec {
        Spec {
            kind: Kind::Cp,
            sources: vec!["data/".into()],
            dest: Dest {
                host: "b.example".into(),
                port: 7373,
                addrs: vec!["10.0.0.2:7373".into()],
                server_key: "ab".repeat(32),
                grant_secret: "cd".repeat(32),
                path: "in/".into(),
                grant_expires: 2_000_000_000,
            },
            options: Options {
                recursive: true,
                many_sources: false,
                contents: true,
                preserve: true,
                sync: 0,
                protection: 0,
                transport: 2,
                streams: None,
                block_size: 1 << 20,
                rate: 0,
                compress: 0,
                compress_level: 0,
                rules: vec!["- *.tmp".into()],
                min_size: 0,
                max_size: 0,
                not_before: 0,
                share: 0,
            },
            retry: Retry::default(),
            notify: Notify::default(),
            every_secs: None,
            attached: false,
            label: "haul cp -r a:data/ b:in/".into(),
            relay: false,
        }
    }

    #[test]
    fn a_spec_round_trips_and_its_bounds_hold() {
        let s = spec();
        assert_eq!(Spec::decode(&s.encode()).unwrap(), s);
        let bad = |f: &dyn Fn(&mut Spec)| {
            let mut s = spec();
            f(&mut s);
            Spec::decode(&s.encode()).unwrap_err()
        };
        bad(&|s| s.sources.clear());
        bad(&|s| s.sources = vec!["x".into(); MAX_SOURCES + 1]);
        bad(&|s| s.dest.path = "x".repeat(MAX_TEXT + 1));
        bad(&|s| s.dest.addrs = vec!["nowhere".into()]);
        bad(&|s| s.dest.server_key = "ab".into());
        bad(&|s| s.every_secs = Some(5));
        bad(&|s| s.notify.url = Some("file:///etc/passwd".into()));
        bad(&|s| s.retry.deadline_secs = Some(MAX_SECS + 1));
        bad(&|s| s.options.share = SHARE_MAX + 1);
        assert!(Spec::decode(&vec![b' '; MAX_SPEC_BYTES + 1]).is_err());
        assert!(Spec::decode(b"{\"kind\":\"cp\",\"evil\":1}").is_err());
        let id = Id::random();
        assert_eq!(Id::parse(&id.hex()), Some(id));
        assert_eq!(Id::parse("zz"), None);
    }

    /// A job keeps its sharing policy (`--background`, `--fair off`);
    /// a record kept before it had one runs fair.
    #[test]
    fn the_share_policy_is_kept_and_defaults_to_fair() {
        let mut s = spec();
        s.options.share = 1;
        assert_eq!(Spec::decode(&s.encode()).unwrap().options.share, 1);
        let mut v: serde_json::Value = serde_json::from_slice(&s.encode()).unwrap();
        v["options"].as_object_mut().unwrap().remove("share");
        let old = Spec::decode(&serde_json::to_vec(&v).unwrap()).unwrap();
        assert_eq!(old.options.share, 0);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_or_are_refused(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = Spec::decode(&b);
        }
    }
}
