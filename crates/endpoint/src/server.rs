//! `haul serve`: accepts control connections, authenticates each client
//! against the authorized keys, answers its request inside the served root,
//! gathers the session's data connections, and runs the engine (P-21).
//! What a client may ask is bounded before anything is allocated for it:
//! its protection against the server's policy, its streams against the
//! memory a session may take, its tunnels against how many may run (P-39).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use secure::{Keypair, PublicKey};
use store::Root;
use wire::{ConnKind, Msg, Op, Request, PROTOCOL_VERSION, TRANSPORT_UDP};

use connect::error::TransferError;
use connect::framed::FrameWriter;
use connect::handshake;
use connect::handshake::CONTROL_PROTECTION;
use connect::join::{join_accepted, keyed, DataConn, Joins};
use connect::net::{self, Tuning};
use connect::progress::Progress;
use connect::sizing::{SEND_WINDOW, UDP_SEND_WINDOW};
use connect::warmup;

mod access;
mod admission;
pub mod admit;
pub mod bucket;
mod budget;
mod files;
mod gather;
mod grants;
mod job_run;
mod jobs;
use gather::gather;
mod datagrams;
mod greetings;
mod guards;
mod memory;
mod metrics;
mod pinned;
mod record;
mod replays;
mod sides;
mod steps;
use greetings::{Greeting, Greetings, Refused};
pub use greetings::{GREETING_GRACE, MAX_GREETING, PER_SOURCE};

use memory::{MemoryPool, Reserved};
mod keyed;
mod keyring;
mod limits;
pub mod log;
pub use keyed::Prekeyed;
pub use limits::{
    check_policy, data_frame_max, parse_protection, protection_of, SessionBudget, DAEMON_MEMORY,
    SESSION_MEMORY,
};
pub use log::printable;

/// Which client keys a server lets in.
#[derive(Debug, Clone)]
pub enum ClientKeys {
    /// The keys listed in this file, read again for every session so that
    /// added keys work without a restart (`haul serve`).
    File(PathBuf),
    /// Only this one-time key, sent by the client over ssh
    /// (`haul serve --stdio`, P-27).
    Only(PublicKey),
}

pub struct ServerConfig {
    pub root: Root,
    /// Where relative request paths start, inside `root` (`--stdio`
    /// without `--root`: the login directory, as scp and rsync do); `None`
    /// takes every path relative to the root (P-16).
    pub base: Option<PathBuf>,
    pub key: Keypair,
    pub client_keys: ClientKeys,
    pub listen: SocketAddr,
    pub tuning: Tuning,
    pub max_sessions: usize,
    /// Ports for the sessions' UDP data channels (`--data-ports`); `None`:
    /// any the OS picks.
    pub data_ports: Option<connect::ports::PortRange>,
    /// `--cache`: the chunk cache of pushes to this server (P-31), shared
    /// by its sessions.
    pub cache: Option<Arc<store::ChunkCache>>,
    /// Where clients may tunnel to (`--tunnel-to`, P-37).
    pub tunnel_to: tunnel_driver::TunnelTargets,
    /// `--require-encryption`: refuse a request for less than full
    /// encryption (P-39).
    pub require_encryption: bool,
    /// Most tunnel sessions at once (`--max-tunnels`, P-39); they count
    /// against `max_sessions` too.
    pub max_tunnels: usize,
    /// What the buffers of all sessions may take together (`--memory`,
    /// P-39).
    pub memory: u64,
    /// The session started over ssh, keyed in the greetings (P-27).
    pub prekeyed: Option<Prekeyed>,
    /// Objects served instead of files (`--root s3://...`), or reachable
    /// by `s3://` paths (over ssh).
    pub buckets: Option<Arc<bucket::Buckets>>,
    /// Each finished session's line on stderr (issue 29): a daemon's log.
    /// Off for a server started over ssh, whose stderr is the client's.
    pub transfer_log: TransferLog,
    /// `--metrics ADDR:PORT`: Prometheus metrics and the status page.
    pub metrics: Option<SocketAddr>,
    /// Names a request to the metrics listener may give in `Host`
    /// besides an address (`--metrics-host`, issue 39).
    pub metrics_hosts: Vec<String>,
    /// Most connections one address may have in their greeting at once
    /// (`--max-startups-per-source`, issue 39).
    pub max_startups_per_source: usize,
    /// Each message asks the server to read its authorized keys again
    /// (SIGHUP) and end the running sessions their key's line no longer
    /// allows (issue 39).
    pub reload: Option<std::sync::Mutex<mpsc::Receiver<()>>>,
    /// Where the daemon keeps its jobs and one-time grants (P-45);
    /// `None`: it takes neither.
    pub state: Option<PathBuf>,
    /// Told of every job's end, besides what each job names
    /// (`--notify-exec`, `--notify-url`).
    pub notify: ::jobs::spec::Notify,
    /// Most jobs running at once (`--max-jobs`).
    pub max_jobs: usize,
    /// Exit once no session has run and no job has been left unfinished
    /// for this long (`haul agent`, P-45 J-13).
    pub idle_exit: Option<Duration>,
}

/// How a daemon logs each finished session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferLog {
    /// No line; a failed session is logged as a warning.
    Off,
    /// Nothing at all: the client in this process reports every session
    /// (a copy on one host).
    Silent,
    Text,
    /// One JSON object a line (`--log-format json`).
    Json,
}

struct Server {
    cfg: ServerConfig,
    /// Sessions data connections may join (P-20).
    joins: Joins,
    active: AtomicUsize,
    /// Tunnel sessions running.
    tunnels: AtomicUsize,
    /// What running sessions reserved of `cfg.memory`: their buffers, and
    /// their manifests' bookkeeping as it arrives (P-39, P-40 S-1).
    reserved: Arc<MemoryPool>,
    /// The authorized-keys file's warnings last logged, so that each is
    /// logged when it first shows, not for every session.
    key_warnings: std::sync::Mutex<Vec<String>>,
    /// Connections not yet past their handshake (or, for data
    /// connections, their join): how many, from where, for how long
    /// (issue 39).
    greetings: Arc<Greetings>,
    /// The session keyed in the ssh greetings, until its control
    /// connection joins (P-27).
    prekeyed: keyed::PrekeyedSlot,
    /// Sessions running and finished, for `--metrics`.
    metrics: Arc<metrics::Metrics>,
    /// Each key's running sessions, its pace and quota (issue 39).
    keyring: keyring::Keyring,
    /// One-time grants issued here (P-45), with a state directory.
    grants: Option<grants::Grants>,
    /// The jobs this daemon runs (P-45), with a state directory; set once
    /// the server is shared, as its runs need it.
    jobs: std::sync::OnceLock<Arc<jobs::Service>>,
    /// Message ones of pinned starts answered, against replays (P-48).
    replays: replays::Replays,
}

/// Binds and serves forever. `ready` is called with the bound address.
/// With `--metrics`, `ready` is told the metrics address too.
pub fn serve(
    cfg: ServerConfig,
    ready: impl FnOnce(SocketAddr, Option<SocketAddr>),
) -> std::io::Result<()> {
    let listener: TcpListener = net::listen(&cfg.listen, &cfg.tuning)?;
    let page =
        match cfg.metrics {
            Some(a) => Some(metrics::bind(a).map_err(|e| {
                std::io::Error::new(e.kind(), format!("the metrics address {a}: {e}"))
            })?),
            None => None,
        };
    let page_addr = page.as_ref().map(|l| l.local_addr()).transpose()?;
    ready(listener.local_addr()?, page_addr);
    serve_with(listener, cfg, page);
    Ok(())
}

/// Serves the connections of a bound listener, forever.
pub fn serve_on(listener: TcpListener, cfg: ServerConfig) {
    serve_with(listener, cfg, None)
}

fn serve_with(listener: TcpListener, mut cfg: ServerConfig, page: Option<TcpListener>) {
    share_one_arena();
    let memory = cfg.memory;
    let prekeyed = keyed::PrekeyedSlot::new(cfg.prekeyed.take());
    let reloads = cfg.reload.take();
    let greetings = Greetings::new(
        cfg.max_startups_per_source,
        cfg.data_ports.map(|r| (r.hi - r.lo) as usize + 1),
    );
    let grants = cfg.state.as_ref().and_then(|d| {
        grants::Grants::open(&d.join("grants"))
            .inspect_err(|e| tracing::warn!("{}: {e}; no grants are issued or taken", d.display()))
            .ok()
    });
    let server = Arc::new(Server {
        grants,
        jobs: std::sync::OnceLock::new(),
        cfg,
        joins: Joins::default(),
        active: AtomicUsize::new(0),
        tunnels: AtomicUsize::new(0),
        reserved: Arc::new(MemoryPool {
            used: std::sync::Mutex::new(0),
            limit: memory,
        }),
        key_warnings: std::sync::Mutex::new(Vec::new()),
        greetings,
        prekeyed,
        metrics: Arc::new(metrics::Metrics::new()),
        keyring: keyring::Keyring::default(),
        replays: replays::Replays::default(),
    });
    if let Some(rx) = reloads {
        let server = server.clone();
        std::thread::spawn(move || {
            for () in rx.into_inner().unwrap_or_else(|p| p.into_inner()) {
                server.reload();
            }
        });
    }
    if let Some(dir) = &server.cfg.state {
        let host: Arc<dyn jobs::Host> = server.clone();
        if let Some(svc) = jobs::start(host, dir, server.cfg.max_jobs) {
            let weak = Arc::downgrade(&svc);
            server.metrics.jobs(Box::new(move || {
                weak.upgrade()
                    .map_or(serde_json::Value::Null, |s| s.summary())
            }));
            let _ = server.jobs.set(svc);
        }
    }
    if let Some(idle) = server.cfg.idle_exit {
        let server = server.clone();
        std::thread::spawn(move || server.exit_when_idle(idle));
    }
    if let Some(l) = page {
        metrics::serve_http(l, server.metrics.clone(), server.cfg.metrics_hosts.clone());
    }
    let mut last_notice: Option<Instant> = None;
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let ip = match stream.peer_addr() {
            Ok(a) => a.ip(),
            Err(_) => continue,
        };
        let guard = match server.greetings.enter(&stream, ip) {
            Ok(g) => g,
            Err(why) => {
                if last_notice.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    let what = match why {
                        Refused::Full => format!("{MAX_GREETING} connections are in their greeting"),
                        Refused::EarlyDrop => format!("over {} connections are in their greeting; closing some new ones at random", greetings::EARLY_DROP_FROM),
                        Refused::Source => format!("{ip} has {} connections in their greeting (--max-startups-per-source)", server.cfg.max_startups_per_source),
                    };
                    tracing::warn!(
                        event = "greetings_full",
                        "{what}: closing new connections until they finish or their {}s are over",
                        GREETING_GRACE.as_secs()
                    );
                    last_notice = Some(Instant::now());
                }
                continue;
            }
        };
        let server = server.clone();
        std::thread::spawn(move || server.connection(stream, guard));
    }
}

impl Server {
    fn connection(&self, mut stream: TcpStream, greeting: Greeting) {
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        net::tune_accepted(&stream, &self.cfg.tuning);
        // A client started over ssh tries a direct connection while its
        // request travels through ssh, and closes it unused when the
        // session takes the UDP channel (P-27): not worth a log line.
        stream
            .set_read_timeout(Some(handshake::HANDSHAKE_TIMEOUT))
            .ok();
        match stream.peek(&mut [0u8; 1]) {
            Ok(0) => {
                tracing::debug!("{peer}: closed before a word (a reachability check)");
                return;
            }
            Err(e) => {
                tracing::info!(
                    "{peer}: dropped: nothing said within {}s ({e})",
                    handshake::HANDSHAKE_TIMEOUT.as_secs()
                );
                return;
            }
            Ok(_) => {}
        }
        let pre = match handshake::read_preamble(&mut stream).and_then(|p| match p.kind {
            ConnKind::Warmup => warmup::past_warmups(&mut stream, p, handshake::HANDSHAKE_TIMEOUT),
            _ => Ok(p),
        }) {
            Ok(p) => p,
            Err(e) => {
                tracing::info!("{peer}: dropped: {e}");
                return;
            }
        };
        match pre.kind {
            ConnKind::Data => {
                if pre.version != PROTOCOL_VERSION {
                    tracing::info!(
                        "{peer}: data connection of protocol version {}; dropped",
                        pre.version
                    );
                    return;
                }
                // A client dials its data connections right behind its
                // request: this one waits for its session to accept it.
                // Naming an authenticated session, it is that session's to
                // bound from now on (issue 39).
                let mut greeting = greeting;
                if self.joins.is_listed(&pre.session) {
                    greeting.joined_session();
                }
                let slot = self.joins.wait(&pre.session, handshake::HANDSHAKE_TIMEOUT);
                let Some((j, accepted)) = slot.and_then(|j| Some((j.clone(), j.accepted?))) else {
                    tracing::info!("{peer}: data connection for no session; dropped");
                    return;
                };
                // The join is checked here, on this connection's own thread,
                // so a forged or silent connection that copied the
                // cleartext session id costs the session nothing (P-20).
                let joined = join_accepted(stream, &j.keys, pre.stream, &accepted, &j.progress);
                drop(greeting);
                match joined {
                    Ok(conn) => {
                        if !self.joins.hand_over(&pre.session, pre.stream, conn) {
                            tracing::warn!(
                                "{peer}: data stream {} joined its session a second time (a replayed connection?); the session is ended",
                                pre.stream
                            );
                        }
                    }
                    Err(e) => tracing::warn!("{peer}: data connection refused: {e}"),
                }
            }
            ConnKind::Relay => {
                // A connection a job's client relays to the job's other
                // end (P-45 J-11), named by the job's id: kept for the
                // job's attempts, which check that end's key themselves.
                drop(greeting);
                let _ = stream.set_read_timeout(None);
                let kept = pre.version == PROTOCOL_VERSION
                    && self
                        .jobs
                        .get()
                        .is_some_and(|j| j.relayed(pre.session, stream));
                if !kept {
                    tracing::info!(
                        "{peer}: relayed connection for no relayed job running here; dropped"
                    );
                }
            }
            // Never: past its warm-ups a connection is a data connection.
            ConnKind::Warmup => {}
            ConnKind::Control | ConnKind::Keyed | ConnKind::Pinned => {
                let started = Instant::now();
                let rec = Arc::new(record::Record::new(peer.clone()));
                let id = self.metrics.begin(rec.clone());
                let run = match pre.kind {
                    ConnKind::Keyed => self.keyed_session(stream, &pre, greeting, &rec),
                    ConnKind::Pinned => self.pinned_session(stream, &pre, greeting, &rec),
                    _ => self.session(stream, &pre, greeting, &rec),
                };
                // One line per session that asked for something (issue 29).
                self.metrics.end(id, &run, started.elapsed());
                let json = self.cfg.transfer_log == TransferLog::Json;
                match rec.line(&run, started.elapsed(), json) {
                    Some(line)
                        if matches!(
                            self.cfg.transfer_log,
                            TransferLog::Text | TransferLog::Json
                        ) =>
                    {
                        // One write, so lines of sessions ending at once
                        // never mix.
                        let prefix = if json { "" } else { "haul serve: " };
                        let _ = std::io::Write::write_all(
                            &mut std::io::stderr(),
                            format!("{prefix}{line}\n").as_bytes(),
                        );
                    }
                    _ if self.cfg.transfer_log == TransferLog::Silent => {}
                    _ => {
                        if let Err(e) = &run {
                            let event = match e.code {
                                wire::ErrorCode::Auth | wire::ErrorCode::Policy => "refused",
                                _ => "session_failed",
                            };
                            tracing::warn!(event, "{peer}: {e}");
                        }
                    }
                }
                if let Ok(line) = run {
                    tracing::info!("{peer}: {line} in {:.2}s", started.elapsed().as_secs_f64())
                }
            }
        }
    }

    fn session(
        &self,
        mut stream: TcpStream,
        pre: &wire::Preamble,
        greeting: Greeting,
        rec: &record::Record,
    ) -> Result<String, TransferError> {
        // A client that may take the UDP channel wishes for its socket in
        // message one: it is opened on the address the client reached us
        // at, and its port named in message two, so the client's hello
        // rides behind message three (P-23).
        let local = stream.local_addr();
        let mut udp = None;
        // Before authentication a socket is opened only while the peer's
        // address holds no other and few are held so (issue 39);
        // otherwise it is opened for the request, and named in `Accept`.
        let ip = stream.peer_addr().map(|a| a.ip());
        let early = ip.ok().and_then(|ip| self.greetings.early_udp(ip));
        let est = handshake::server(&mut stream, pre, &self.cfg.key, || {
            if early.is_some() {
                udp = self.open_udp(local);
            }
            udp.as_ref()
                .and_then(|c: &udp::UdpChannel| c.local_addr().ok())
                .map_or(0, |a| a.port())
        });
        drop((greeting, early));
        let est = est?;
        let progress = Arc::new(Progress::default());
        let control = keyed(stream, &est.keys, 0, CONTROL_PROTECTION, false, &progress)?;
        self.run_session(control, est, udp, progress, rec, None)
    }

    /// The control connection of the session whose keys the ssh greetings
    /// agreed (P-27): it joins with them, once, instead of a handshake.
    fn keyed_session(
        &self,
        stream: TcpStream,
        pre: &wire::Preamble,
        greeting: Greeting,
        rec: &record::Record,
    ) -> Result<String, TransferError> {
        let (control, est, udp, progress) = self.prekeyed.join(stream, pre)?;
        drop(greeting);
        self.run_session(control, est, udp, progress, rec, None)
    }

    /// A session from the moment its control connection is keyed: the
    /// key admitted (`enter`), the request read and admitted (`grant`),
    /// the side built, the data path joined (`accept`), and the transfer.
    /// `early`: the request a pinned start carried in message one (P-48).
    fn run_session(
        &self,
        control: DataConn,
        mut est: handshake::Established,
        udp: Option<udp::UdpChannel>,
        progress: Arc<Progress>,
        rec: &record::Record,
        early: Option<Request>,
    ) -> Result<String, TransferError> {
        let (mut ctrl_r, mut ctrl_w) = (control.reader, control.writer);
        // Listed from now on, so data connections dialled right behind the
        // request find their session; they join once it is accepted.
        let (tx, rx) = mpsc::channel();
        let control = ctrl_r.get_ref().try_clone().ok();
        let listed = self.joins.list(&est.keys, &progress, tx, control);
        let refuse = |w: &mut FrameWriter, e: TransferError| {
            let _ = w.send_msg(&Msg::Error {
                code: e.code,
                message: progress.control.shown(&e.message),
            });
            drain_and_close(w.get_ref());
            Err(e)
        };
        let (access, entered) = match self.enter(&est.peer, ctrl_r.get_ref(), &progress, rec) {
            Ok(e) => e,
            Err(e) => return refuse(&mut ctrl_w, e),
        };
        ctrl_w
            .send_msg(&Msg::Welcome)
            .map_err(|e| TransferError::lost("welcoming the client", &e))?;
        let req = match self.read_request(&mut ctrl_r, early) {
            Ok(req) => req,
            Err((e, true)) => return refuse(&mut ctrl_w, e),
            Err((e, false)) => return Err(e),
        };
        rec.request(&req.op, &req.paths, &progress);
        let granted = match self.grant(&access, req, &entered.key, &progress) {
            Ok(g) => g,
            Err(e) => return refuse(&mut ctrl_w, e),
        };
        let req = &granted.req;
        // Grants and job calls move no files: a conversation on the
        // control connection (P-45).
        match req.op {
            Op::Grant { .. } => {
                return self
                    .issue_grant(&est.peer, req, &granted.root, &mut ctrl_w)
                    .or_else(|e| refuse(&mut ctrl_w, e))
            }
            Op::Job => {
                let Some(svc) = self.jobs.get() else {
                    let e = TransferError::new(
                        wire::ErrorCode::BadRequest,
                        "this server takes no jobs: it was started without a state directory (haul serve --state DIR)",
                    );
                    return refuse(&mut ctrl_w, e);
                };
                let name = entered.comment.clone();
                let ctrl = (&mut ctrl_r, &mut ctrl_w);
                return svc
                    .converse(self, &est.peer, name, &access, ctrl)
                    .or_else(|e| refuse(&mut ctrl_w, e));
            }
            _ => {}
        }
        // The side this server plays, prepared before accepting, so
        // errors come first; a push through a grant within its budget.
        let budget = access.grant.as_ref().map(|g| g.budget);
        let side =
            match self.build_side(req, &granted.root, &est.peer, (granted.adding_only, budget)) {
                Ok(side) => side,
                Err(e) => return refuse(&mut ctrl_w, e),
            };
        let gated = side.gated(req.streams);
        let protection = granted.protection;
        let accepted_at = Instant::now();
        let joined = self.accept(
            (&mut est, udp, &listed, &rx),
            (&mut ctrl_r, &mut ctrl_w),
            &granted,
            gated,
            &progress,
        );
        // The session stays listed to its end: a second join of an index
        // now shuts its control connection (P-39).
        listed.gathered();
        if let Err(e) = &joined {
            let _ = ctrl_w.send_msg(&Msg::Error {
                code: e.code,
                message: e.message.clone(),
            });
        }
        let plan = joined?;
        if est.rtt.is_zero() {
            est.rtt = accepted_at.elapsed();
        }
        let how = (est.rtt, gated, protection);
        let run = self.run_side(side, plan, (ctrl_r, ctrl_w), req, how, progress, rec);
        // A grant is spent by the push it allowed, once that succeeds
        // (P-45 G-5); a repeating sync's stays live until it expires.
        if let (Ok(_), Some(g), Some(grants)) = (&run, &access.grant, &self.grants) {
            if !g.repeat {
                grants.spend(&g.key);
            }
        }
        run
    }

    /// Issues a one-time grant (P-45 G-1 … G-3): the path resolved
    /// beneath the key's root now, so that a grant for a path the key may
    /// not reach is refused here, not when it is used.
    fn issue_grant(
        &self,
        issuer: &PublicKey,
        req: &Request,
        root: &Root,
        w: &mut FrameWriter,
    ) -> Result<String, TransferError> {
        let Op::Grant {
            key,
            budget,
            lifetime,
            repeat,
        } = req.op
        else {
            unreachable!("called for grants")
        };
        let Some(grants) = &self.grants else {
            return Err(TransferError::new(
                wire::ErrorCode::BadRequest,
                "this server issues no grants: it was started without a state directory (haul serve --state DIR)",
            ));
        };
        let path = &req.paths[0];
        self.resolve(root, path)?;
        let push = access::GrantedPush {
            key,
            path: path.clone(),
            sync: req.sync.bits(),
            recursive: req.recursive,
            budget,
            repeat,
        };
        let expires = grants
            .issue(issuer, &push, lifetime)
            .map_err(|e| TransferError::new(wire::ErrorCode::Other, e))?;
        w.send_msg(&Msg::Granted { expires })
            .map_err(|e| TransferError::lost("sending the grant", &e))?;
        Ok(format!(
            "granted one-time key {} a push into {path:?} of at most {budget} bytes for {lifetime}s",
            PublicKey(key).fingerprint()
        ))
    }
}

impl Server {
    /// Ends the process once nothing has run for `idle`: no session, no
    /// job left unfinished (an agent started over ssh, J-13).
    fn exit_when_idle(&self, idle: Duration) {
        let mut since = Instant::now();
        loop {
            std::thread::sleep(Duration::from_secs(2).min(idle));
            let busy = self.active.load(std::sync::atomic::Ordering::Relaxed) > 0
                || self.jobs.get().is_some_and(|j| j.unfinished() > 0);
            if busy {
                since = Instant::now();
            } else if since.elapsed() >= idle {
                log::say(
                    log::Level::Info,
                    "idle",
                    &format!("nothing to do for {}s: exiting", idle.as_secs()),
                );
                std::process::exit(0);
            }
        }
    }

    /// Reserves a session's buffers from the daemon's memory, with fewer
    /// streams if its share (a quarter, so that four sessions at their
    /// largest run at once) or the rest will not hold them all, but one
    /// if the rest holds one; `None` if it holds not even that (P-39).
    fn reserve(&self, budget: SessionBudget) -> Option<(SessionBudget, Reserved<'_>)> {
        let mut reserved = self.reserved.lock();
        let left = self.cfg.memory.saturating_sub(*reserved);
        let mut granted = budget.within(left.min(session_share(self.cfg.memory)));
        // The share bounds how many streams, never whether one: a stream
        // the rest holds is given.
        if granted.streams == 0 && left >= budget.per_stream {
            granted = budget.within(budget.per_stream);
        }
        if granted.streams == 0 && budget.streams > 0 {
            return None;
        }
        *reserved += granted.bytes();
        let guard = Reserved {
            pool: &self.reserved,
            bytes: granted.bytes(),
        };
        Some((granted, guard))
    }
}

/// A UDP socket for a session's data channel on `ip`, inside `ports` if
/// given (P-23); `None`, logged, if none opens.
pub fn open_data_socket(
    ip: std::io::Result<std::net::IpAddr>,
    ports: Option<connect::ports::PortRange>,
) -> Option<udp::UdpChannel> {
    ip.and_then(|ip| connect::ports::PortRange::bind(ports, ip, udp::UdpChannel::bind))
        .inspect_err(|e| tracing::warn!("cannot open a UDP socket for the data channel: {e}"))
        .ok()
}

/// The request's rate cap in bytes per second, if it has one.
fn rate_of(req: &Request) -> Option<u64> {
    (req.rate > 0).then_some(req.rate)
}

/// The sender's in-flight window for the request's transport.
fn send_window(req: &Request) -> u64 {
    if req.transport == TRANSPORT_UDP {
        UDP_SEND_WINDOW
    } else {
        SEND_WINDOW
    }
}

/// Ends a refused control connection with a FIN rather than a reset: the
/// client sends its request right behind the handshake (P-22), and closing
/// with that request unread would reset the connection, which can destroy
/// the refusal on its way. Bounded to 2 s and 1 MiB.
fn drain_and_close(s: &TcpStream) {
    use std::io::Read;
    let _ = s.shutdown(std::net::Shutdown::Write);
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut buf = [0u8; 4096];
    let mut total = 0usize;
    while total < 1 << 20 {
        match (&*s).read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
}

/// The most of the daemon's `memory` one session's buffers may take: a
/// quarter, and at most [`SESSION_MEMORY`].
pub fn session_share(memory: u64) -> u64 {
    (memory / 4).min(SESSION_MEMORY)
}

/// A long-running server allocates from one glibc arena. With one per
/// thread (up to 8 per core), each kept what its sessions freed: after
/// rounds of 100 clients on 2 cores a server held 190 MB it never used
/// again, since `malloc_trim` cannot shrink the other arenas' tops. Block
/// buffers are few and large, and small allocations come from per-thread
/// caches, so one arena costs no measurable speed (loopback pulls of
/// 1 GiB: 6 052 against 5 657 Mbit/s, within noise).
fn share_one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a parameter of the allocator.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    map_large_buffers();
}

/// Buffers of 4 MiB and more (an upload's parts) are mapped for
/// themselves and unmapped when freed. glibc otherwise raises its
/// threshold after the first such free, and parts of 8 MiB then come from
/// the heap between the 1 MiB blocks, which fragments it: a 1 GiB upload
/// to a bucket held 150-200 MB where 126-140 do with this (issue 41),
/// at the same speed. Blocks stay below it, reused from the heap.
///
/// Setting the threshold also fixes glibc's trim threshold at 128 KiB,
/// below one block: each free at the heap's top then gave the pages back
/// and the next block faulted them in again. A tree of 20,000 small files
/// took 744,000 page faults (37 a file) on loopback, and 81,000 with
/// [`KEEP_FREED`] kept (4.1 to 4.6-4.9 Gbit/s). What a session freed is
/// still returned when it ends (`release_freed_memory`).
pub fn map_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets parameters of the allocator.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEEP_FREED);
    }
}

/// Free memory at the top of a heap that is kept for the next blocks
/// rather than handed back at once.
const KEEP_FREED: libc::c_int = 64 << 20;

/// Hands the memory a session freed back to the OS (`malloc_trim` on the
/// one arena, see [`share_one_arena`]), so an idle server is small again.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
