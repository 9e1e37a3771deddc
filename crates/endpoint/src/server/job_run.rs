//! One attempt of a job (P-45 J-4): the submitting key's line read
//! again (a key revoked or without `jobs` ends the job), its sources
//! walked and read beneath its root by descriptor as a pull of that key
//! would be, and pushed to the other daemon with the grant's one-time
//! key, trusting only that daemon's key. Resuming is the engine's: the
//! other end keeps the verified blocks of what an attempt left.

use std::time::Duration;

use connect::error::TransferError;
use jobs::{Outcome, Record};
use secure::{Keypair, Protection, PublicKey};
use wire::{ErrorCode, Op, Request};

use super::access::KeyOptions;
use super::jobs::{Attempt, Host};
use crate::client::{ClientConfig, Connected, ServerTrust, Transport};

/// How long an attempt waits for the other daemon to answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// A source that changed in this many attempts in a row ends the job.
const CHANGED_TRIES: usize = 3;

impl Host for super::Server {
    fn attempt(&self, rec: &Record, slot: &Attempt, changed_streak: usize) -> Outcome {
        attempt(self, rec, slot, changed_streak)
    }

    fn measure(
        &self,
        access: &KeyOptions,
        sources: &[String],
        options: &jobs::spec::Options,
    ) -> Result<(u64, u64), TransferError> {
        let req = access.allow(pull_request(sources, options))?;
        let (entries, _, bytes) = self.job_sources(access, &req)?;
        Ok((file_count(&entries), bytes))
    }

    fn notify(&self) -> jobs::spec::Notify {
        self.cfg.notify.clone()
    }
}

impl super::Server {
    /// A job's sources, as its key's pull would read them: objects where
    /// this daemon serves a bucket, else files walked beneath the key's
    /// root (P-43); with their bytes.
    fn job_sources(
        &self,
        access: &KeyOptions,
        req: &Request,
    ) -> Result<super::bucket::Objects, TransferError> {
        if let Some(b) = self
            .cfg
            .buckets
            .as_ref()
            .filter(|b| req.paths.iter().all(|p| b.serves(p)))
        {
            let select = transfer::selection(&req.select)?;
            return b.sources(&req.paths, req.recursive, &select);
        }
        let root = access.root(&self.cfg.root)?;
        let (walked, sources) = self.walk_request(&root, req)?;
        let bytes = walked.file_bytes();
        Ok((walked.entries, Box::new(sources), bytes))
    }
}

fn attempt(server: &super::Server, rec: &Record, slot: &Attempt, changed_streak: usize) -> Outcome {
    match run(server, rec, slot) {
        Ok(o) => o,
        Err(e) => {
            let changed = e.message.contains(store::source::CHANGED);
            let permanent = permanent(e.code) || (changed && changed_streak + 1 >= CHANGED_TRIES);
            let error = if changed && permanent {
                format!("{} in {CHANGED_TRIES} attempts in a row; run the job again once the source is still", e.message)
            } else {
                e.message
            };
            Outcome::Fault {
                code: e.code as u8,
                error,
                bytes: slot.sent(),
                wire: slot.wire(),
                permanent,
            }
        }
    }
}

/// Whether trying again cannot help: the request or the key is wrong,
/// not the moment. A network fault, a busy or restarting peer, a full
/// disk, a store's credentials or throttling may all pass.
fn permanent(code: ErrorCode) -> bool {
    use ErrorCode::*;
    matches!(
        code,
        BadRequest
            | Auth
            | Protocol
            | NotFound
            | Permission
            | OutsideRoot
            | Policy
            | Limit
            | ShardPlan
            | NoBucket
    )
}

fn run(server: &super::Server, rec: &Record, slot: &Attempt) -> Result<Outcome, TransferError> {
    let spec = &rec.spec;
    let o = &spec.options;
    let owner = PublicKey::parse(&rec.owner)
        .ok_or_else(|| TransferError::new(ErrorCode::Auth, "the job's owner key is malformed"))?;
    let (_, opts) = server.admit(&owner).map_err(|e| {
        TransferError::new(
            ErrorCode::Auth,
            format!(
                "the key that submitted this job is no longer authorized on this server: {}",
                e.message
            ),
        )
    })?;
    if !(opts.jobs || opts.operator) {
        return Err(TransferError::new(
            ErrorCode::Permission,
            "the line of the key that submitted this job no longer has jobs",
        ));
    }
    let d = &spec.dest;
    opts.may_push_to(&d.host, d.port, &d.addrs)?;
    let req = opts.allow(pull_request(&rec.spec.sources, &rec.spec.options))?;
    let (entries, sources, bytes) = server.job_sources(&opts, &req)?;
    let files = file_count(&entries);
    let cfg = client_config(server, rec, (req.rate, slot.relay.clone()))?;
    let pushed = Connected::connect(cfg).and_then(|connected| {
        slot.connected(connected.progress())?;
        connected.push_from(
            entries,
            sources,
            &spec.dest.path,
            (o.recursive, o.many_sources, o.contents),
        )
    });
    let report = match pushed {
        Ok(report) => report,
        // An earlier attempt's push ended verified at B, and this daemon
        // stopped (or lost the link) before it heard so (P-45 G-5, J-5).
        Err(e) if e.code == ErrorCode::GrantSpent => {
            tracing::info!("job {}: {}", rec.id, e.message);
            return Ok(Outcome::Done {
                files,
                bytes,
                sent: slot.sent(),
                wire: slot.wire(),
                secs: 1e-6,
                rate_bps: 0,
            });
        }
        Err(e) => return Err(e),
    };
    let secs = report.duration.as_secs_f64().max(1e-6);
    Ok(Outcome::Done {
        files: report.summary.files,
        bytes: report.summary.file_bytes,
        sent: slot.sent(),
        wire: slot.wire(),
        secs,
        rate_bps: (report.summary.file_bytes as f64 * 8.0 / secs) as u64,
    })
}

fn file_count(entries: &[wire::Entry]) -> u64 {
    entries
        .iter()
        .filter(|e| matches!(e.kind, wire::EntryKind::File { .. }))
        .count() as u64
}

/// The job's sources as the submitting key's pull would name them: its
/// `allow` narrows the rate and refuses a key that may not read.
fn pull_request(sources: &[String], o: &jobs::spec::Options) -> Request {
    Request {
        op: Op::Pull,
        paths: sources.to_vec(),
        recursive: o.recursive,
        many_sources: o.many_sources,
        streams: 1,
        block_size: o.block_size,
        protection: o.protection,
        rate: o.rate,
        transport: wire::TRANSPORT_TCP,
        contents: o.contents,
        preserve: o.preserve,
        compress: o.compress,
        compress_level: o.compress_level,
        sync: wire::SyncOptions::default(),
        basis: String::new(),
        shard: None,
        select: selection(o),
        itemize: false,
        share: o.share,
    }
}

fn selection(o: &jobs::spec::Options) -> wire::Selection {
    wire::Selection {
        rules: o.rules.clone(),
        min_size: o.min_size,
        max_size: o.max_size,
        not_before: o.not_before,
    }
}

/// The push to the other daemon: the grant's one-time key, that
/// daemon's key and nothing else trusted, the job's options, at most the
/// key's rate.
fn client_config(
    server: &super::Server,
    rec: &Record,
    (rate, relay): (u64, Option<crate::client::Relay>),
) -> Result<ClientConfig, TransferError> {
    let d = &rec.spec.dest;
    let o = &rec.spec.options;
    let bad = |what: &str| {
        TransferError::new(
            ErrorCode::BadRequest,
            format!("the job's {what} is malformed"),
        )
    };
    let secret = wire::hex::decode32(&d.grant_secret).ok_or_else(|| bad("grant key"))?;
    let server_key = wire::hex::decode32(&d.server_key).ok_or_else(|| bad("server key"))?;
    let dial = d
        .addrs
        .iter()
        .map(|a| a.parse().map_err(|_| bad("address")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ClientConfig {
        identity: Keypair::from_secret(secret),
        trust: ServerTrust::Key(PublicKey(server_key)),
        host: d.host.clone(),
        port: d.port,
        dial,
        streams: o.streams,
        block_size: o.block_size,
        protection: Protection::from_wire(o.protection).ok_or_else(|| bad("protection"))?,
        rate: (rate > 0).then_some(rate),
        transport: match o.transport {
            _ if relay.is_some() => Transport::Tcp,
            0 => Transport::Tcp,
            1 => Transport::Udp,
            _ => Transport::Auto,
        },
        preserve: o.preserve,
        compress: codec::Mode::from_wire(o.compress, o.compress_level),
        sync: wire::SyncOptions::from_bits(o.sync).map_err(|_| bad("sync options"))?,
        basis: None,
        cache: None,
        tuning: server.cfg.tuning.clone(),
        connect_timeout: CONNECT_TIMEOUT,
        notice: None,
        advice: None,
        known_path: None,
        udp_blocked: false,
        shard: None,
        select: selection(o),
        itemize: false,
        relay,
        share: transfer::Sending::share_of(o.share),
    })
}
