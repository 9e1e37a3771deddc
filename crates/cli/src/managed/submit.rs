//! `haul cp A:src B:dst` (and `sync`): a transfer between two hosts,
//! orchestrated from here while the data flow from A to B (P-45). Each
//! end is a daemon or a side ssh starts. The sources are measured on A;
//! B issues a one-time grant for a key made here, bound to the
//! destination, the options, a byte budget and a lifetime (over ssh, a
//! side started there for that key alone); the job, with that key's
//! secret and B's proven key, goes to A through this key's session
//! there. Without `--detach` it is followed
//! to its end (progress, summary, `--json`, exit code as any transfer);
//! with it, its id is printed at once.

use std::sync::Arc;

use connect::{Progress, TransferError};
use endpoint::{Connected, GrantAsk};
use jobs::call::{Answer, Call, View};
use jobs::spec::{Dest, Kind, Notify, Options, Retry, Spec};
use jobs::State;
use secure::Keypair;

use crate::args::{CpArgs, TransportArg};
use crate::reach::{usage, Peer, Reach};
use crate::report::{self, Bar};

/// The grant's lifetime when no deadline bounds it: a day, or 30 days
/// for a repeating job.
const GRANT_DAY: u64 = 24 * 3600;
const GRANT_REPEATS: u64 = 30 * GRANT_DAY;

/// Retries of a followed job that the user did not bound.
const ATTACHED_RETRIES: u32 = 2;

/// What the run says at its end: its JSON line, its text, the exit code
/// and, if it failed, why.
pub struct Ended {
    pub json: String,
    pub text: Option<String>,
    pub code: i32,
    pub error: String,
}

/// The transfer from `from`'s `sources` to `to`'s `dest`; a job that
/// failed is the error, with its code and reason.
pub fn third_party(
    a: &CpArgs,
    kind: Kind,
    (from, sources): (Peer, Vec<String>),
    (to, dest): (Peer, String),
) -> Result<Ended, TransferError> {
    check(a)?;
    let reach_a = agent(a, Reach::decide(&a.conn, from.clone())?)?;
    let reach_b = agent(a, Reach::decide(&a.conn, to.clone())?)?;
    check_routes(a, &reach_a)?;
    let mut options = options(a, &sources);
    if a.managed.through_client {
        // Relayed connections are TCP, each a stream of its own.
        options.transport = 0;
        options.streams = Some(options.streams.unwrap_or(8).min(32));
    }
    // A: its daemon, or the side ssh starts there, kept while the job runs.
    let protection = crate::reach::protection(a.no_encrypt);
    let mut dialer_a = reach_a.dialer(&a.conn, String::new())?;
    let mut on_a = dialer_a
        .connect(reach_a.config(&a.conn, protection)?)?
        .jobs()?;
    let (files, bytes) = measure(&mut on_a, &sources, &options)?;
    let m = &a.managed;
    let every = m.every.map(|d| d.as_secs());
    let budget = m.grant_bytes.unwrap_or_else(|| {
        let room = bytes + bytes / 10 + (64 << 20);
        if every.is_some() {
            room.saturating_mul(4)
        } else {
            room
        }
    });
    let lifetime = m
        .grant_lifetime
        .or(m.deadline)
        .map(|d| d.as_secs())
        .unwrap_or(if every.is_some() {
            GRANT_REPEATS
        } else {
            GRANT_DAY
        })
        .clamp(60, wire::MAX_GRANT_LIFETIME as u64);
    let one_time = Keypair::generate();
    let ask = GrantAsk {
        key: one_time.public.0,
        path: dest.clone(),
        recursive: a.recursive,
        contents: options.contents,
        many_sources: options.many_sources,
        sync: wire::SyncOptions::from_bits(options.sync).unwrap_or_default(),
        budget,
        lifetime: lifetime as u32,
        repeat: every.is_some(),
    };
    let far = destination(a, &reach_b, &ask)?;
    let spec = Spec {
        kind,
        sources,
        dest: Dest {
            host: far.host.clone(),
            port: far.port,
            addrs: far.addrs.clone(),
            server_key: wire::hex::encode(&far.server_key.0),
            grant_secret: one_time.secret_hex().to_string(),
            path: dest,
            grant_expires: far.expires,
        },
        options,
        retry: Retry {
            deadline_secs: m.deadline.map(|d| d.as_secs()),
            max_retries: m.max_retries.or((!m.detach).then_some(ATTACHED_RETRIES)),
        },
        notify: Notify {
            exec: m.notify_exec.clone(),
            url: m.notify_url.clone(),
        },
        every_secs: every,
        attached: !m.detach,
        label: label(a, kind),
        relay: m.through_client,
    };
    spec.check().map_err(usage)?;
    let view = first(call(
        &mut on_a,
        &Call::Submit {
            spec: Box::new(spec),
        },
    )?)?;
    let id = view.id;
    if !reach_a.ssh {
        super::registry::add(&id, &reach_a.peer);
    }
    tracing::info!(
        "job {id} on {}: {files} file(s), {bytes} bytes, grant of {budget} bytes until {}",
        from.host,
        far.expires
    );
    if m.detach {
        let json = serde_json::json!({
            "ok": true,
            "job": id.hex(),
            "host": from.host,
            "state": view.state.name(),
            "files": files,
            "file_bytes": bytes,
        });
        let text = format!(
            "job {id} submitted to {}: {files} file(s), {}; follow it with `haul jobs show {id}`",
            from.host,
            report::bytes(bytes)
        );
        return Ok(Ended {
            json: json.to_string(),
            text: Some(text),
            code: 0,
            error: String::new(),
        });
    }
    let _relay = match m.through_client {
        true => {
            let a_port = reach_a.peer.port.unwrap_or(endpoint::DEFAULT_PORT);
            let (a_at, b_at) = ((&reach_a.peer.host[..], a_port), (&far.host[..], far.port));
            Some(super::relay::start(id, a_at, b_at)?)
        }
        false => None,
    };
    let ended = follow(a, &mut on_a, id);
    if let Some(link) = far.link {
        link.finish();
    }
    drop(dialer_a);
    let ended = ended?;
    match ended.code {
        0 => Ok(ended),
        c => Err(TransferError::new(
            wire::ErrorCode::from_u8(c as u8),
            ended.error,
        )),
    }
}

/// The other end as the job reaches it: where, its key, until when.
struct Far {
    host: String,
    port: u16,
    addrs: Vec<String>,
    server_key: secure::PublicKey,
    expires: u64,
    /// The side ssh started there, kept while the job runs.
    link: Option<ssh::SshLink>,
}

/// B: a daemon's one-time grant; or, over ssh, a side started there for
/// the one-time key alone (the login's own, so no grant is needed: it
/// takes that key's sessions and ends with this command).
fn destination(a: &CpArgs, reach: &Reach, ask: &GrantAsk) -> Result<Far, TransferError> {
    if reach.ssh {
        let dialer = reach.dialer(&a.conn, String::new())?;
        let spec = dialer
            .ssh_spec()
            .ok_or_else(|| usage("no ssh command for the destination"))?;
        let link = ssh::SshLink::start(spec, &secure::PublicKey(ask.key))?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        return Ok(Far {
            host: reach.peer.host.clone(),
            port: link.port,
            addrs: link.direct.iter().map(|a| a.to_string()).collect(),
            server_key: link.server_key,
            expires: now + ask.lifetime as u64,
            link: Some(link),
        });
    }
    let cfg = reach.config(&a.conn, crate::reach::protection(a.no_encrypt))?;
    let (host, port) = (cfg.host.clone(), cfg.port);
    let b = Connected::connect(cfg)?;
    let server_key = b
        .server_key()
        .ok_or_else(|| usage("the destination's key is not known"))?;
    let expires = b.grant(ask)?;
    Ok(Far {
        host,
        port,
        addrs: Vec::new(),
        server_key,
        expires,
        link: None,
    })
}

/// An end reached over ssh, for a detached job: the login's own daemon
/// there (`haul agent`, J-13), started over ssh unless one runs, letting
/// in this user's key; its key pinned as the agent said it.
fn agent(a: &CpArgs, reach: Reach) -> Result<Reach, TransferError> {
    if !(a.managed.detach && reach.ssh) {
        return Ok(reach);
    }
    let me = Reach {
        peer: reach.peer.clone(),
        ssh: false,
    }
    .config(&a.conn, crate::reach::protection(a.no_encrypt))?
    .identity
    .public;
    let dialer = reach.dialer(&a.conn, String::new())?;
    let spec = dialer
        .ssh_spec()
        .ok_or_else(|| usage("no ssh command for that host"))?;
    let remote = format!(
        "{} agent --key {}",
        spec.remote_haul,
        wire::hex::encode(&me.0)
    );
    let out = spec
        .command_for(&remote)?
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| TransferError::new(wire::ErrorCode::Ssh, format!("cannot run ssh: {e}")))?;
    let said = String::from_utf8_lossy(&out.stdout);
    let mut w = said.split_whitespace();
    let (port, key) = match (w.next(), w.next(), w.next()) {
        (Some("haul-agent"), Some(p), Some(k)) => {
            (p.parse::<u16>().ok(), secure::PublicKey::parse(k))
        }
        _ => (None, None),
    };
    let (Some(port), Some(key)) = (port, key) else {
        return Err(TransferError::new(
            wire::ErrorCode::Ssh,
            format!(
                "could not start haul agent on {} over ssh: {}",
                reach.peer.host,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    };
    let label = format!("{}:{port}", reach.peer.host);
    let auth = |e: secure::KeyError| TransferError::new(wire::ErrorCode::Auth, e.to_string());
    let mut known = secure::KnownHosts::load(&crate::reach::known_hosts(&a.conn)).map_err(auth)?;
    match known.check(&label, &key) {
        secure::HostKeyStatus::Known => {}
        secure::HostKeyStatus::Unknown => known.add(&label, &key).map_err(auth)?,
        secure::HostKeyStatus::Changed { line, .. } => {
            return Err(TransferError::new(
                wire::ErrorCode::Auth,
                format!(
                "the agent on {label} showed another key than the one pinned on line {line} of {}",
                known.path().display()
            ),
            ))
        }
    }
    Ok(Reach {
        peer: Peer {
            port: Some(port),
            ..reach.peer
        },
        ssh: false,
    })
}

/// What an end reached over ssh allows: no relay to a source reached
/// over ssh (a detached job's ends are agents by now).
fn check_routes(a: &CpArgs, from: &Reach) -> Result<(), TransferError> {
    let m = &a.managed;
    if m.through_client && from.ssh {
        return Err(usage("--through-client relays to the source's daemon (haul serve), and this source is reached over ssh; run haul on one of the hosts"));
    }
    Ok(())
}

/// Options that do not apply between two daemons.
fn check(a: &CpArgs) -> Result<(), TransferError> {
    let why = if a.conn.through_ssh {
        Some("--through-ssh carries data through this host's ssh channel; between two remote hosts the data go from one to the other (or, with --through-client, through this host)")
    } else if a.files_from.is_some() {
        Some("--files-from names local files; between two remote hosts, name the sources")
    } else if a.shard.is_some() || a.basis.is_some() || a.cache.cache.is_some() {
        Some("--shard, --basis and --cache are for transfers from or to this host")
    } else if a.delete && !a.recursive {
        Some("--delete removes files from directories, so it needs -r (or haul sync)")
    } else {
        None
    };
    match why {
        Some(w) => Err(usage(w)),
        None => Ok(()),
    }
}

fn options(a: &CpArgs, sources: &[String]) -> Options {
    let sel = a.select.wire();
    let sync = a.sync_options();
    let (compress, compress_level) = a.compress.to_wire();
    Options {
        recursive: a.recursive,
        many_sources: sources.len() > 1,
        contents: sources.iter().any(|s| store::names_contents(s.as_bytes())),
        preserve: a.preserve,
        sync: sync.bits(),
        protection: crate::reach::protection(a.no_encrypt).wire_code(),
        transport: match a.transport {
            TransportArg::Tcp => 0,
            TransportArg::Udp => 1,
            TransportArg::Auto => 2,
        },
        streams: a.streams,
        block_size: a.block_size,
        rate: a.rate.unwrap_or(0),
        compress,
        compress_level,
        rules: sel.rules,
        min_size: sel.min_size,
        max_size: sel.max_size,
        not_before: sel.not_before,
        share: transfer::Sending::share_code(a.share.share()),
    }
}

/// The command line, for the job's listing (no secrets are on it).
fn label(a: &CpArgs, kind: Kind) -> String {
    let verb = match kind {
        Kind::Cp if a.recursive => "cp -r",
        Kind::Cp => "cp",
        Kind::Sync => "sync",
    };
    format!("haul {verb} {}", a.paths.join(" "))
}

pub(super) fn call(s: &mut endpoint::JobSession, c: &Call) -> Result<Answer, TransferError> {
    s.call(&serde_json::to_vec(c).expect("a call serializes"))?;
    answer(s)
}

pub(super) fn answer(s: &mut endpoint::JobSession) -> Result<Answer, TransferError> {
    serde_json::from_slice(&s.answer()?).map_err(|e| {
        TransferError::new(
            wire::ErrorCode::Protocol,
            format!("the server's answer about jobs: {e}"),
        )
    })
}

pub(super) fn first(a: Answer) -> Result<View, TransferError> {
    a.jobs.into_iter().next().ok_or_else(|| {
        TransferError::new(wire::ErrorCode::Protocol, "the server answered with no job")
    })
}

fn measure(
    s: &mut endpoint::JobSession,
    sources: &[String],
    options: &Options,
) -> Result<(u64, u64), TransferError> {
    let c = Call::Measure {
        sources: sources.to_vec(),
        options: Box::new(options.clone()),
    };
    call(s, &c)?
        .measured
        .ok_or_else(|| TransferError::new(wire::ErrorCode::Protocol, "the server measured nothing"))
}

/// Follows the job to its end, drawing progress as a transfer would.
fn follow(a: &CpArgs, s: &mut endpoint::JobSession, id: jobs::Id) -> Result<Ended, TransferError> {
    s.call(&serde_json::to_vec(&Call::Follow { id }).expect("a call serializes"))?;
    let progress = Arc::new(Progress::default());
    let bar = Bar::start(
        progress.clone(),
        report::Show::of(a.quiet, a.json, a.progress),
    );
    let last = loop {
        let v = first(answer(s)?)?;
        let set = |c: &std::sync::atomic::AtomicU64, n: u64| {
            c.store(n, std::sync::atomic::Ordering::Relaxed)
        };
        set(&progress.total_bytes, v.bytes_total);
        set(&progress.done_bytes, v.bytes_done);
        if v.state.is_final() {
            break v;
        }
    };
    bar.finish();
    Ok(ended(&last, a.quiet))
}

/// What a followed job's end says.
pub(super) fn ended(v: &View, quiet: bool) -> Ended {
    let (files, secs, sent) = v
        .events
        .iter()
        .rev()
        .find_map(|e| match e {
            jobs::Event::Succeeded {
                files, secs, sent, ..
            } => Some((*files, *secs, *sent)),
            _ => None,
        })
        .unwrap_or_default();
    let code = match v.state {
        State::Succeeded => 0,
        _ => v.exit_code.unwrap_or(1),
    };
    let json = serde_json::json!({
        "ok": code == 0,
        "route": "third-party",
        "job": v.id.hex(),
        "state": v.state.name(),
        "files": files,
        "file_bytes": v.bytes_done,
        "seconds": secs,
        "goodput_bps": v.rate_bps,
        "attempts": v.attempts,
        "wire_bytes_sent": sent,
        "exit_code": code,
        "error": v.reason,
    });
    let text = match v.state {
        State::Succeeded => Some(format!(
            "{files} file(s), {} from {} in {secs:.1}s ({}), verified, job {} after {} attempt(s)",
            report::bytes(v.bytes_done),
            v.sources.join(" "),
            report::bits_per_sec(v.rate_bps as f64),
            v.id,
            v.attempts
        )),
        _ => None,
    };
    let text = text.filter(|_| !quiet);
    Ended {
        json: json.to_string(),
        text,
        code,
        error: v.reason.clone().unwrap_or_else(|| "the job failed".into()),
    }
}
