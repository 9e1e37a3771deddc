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
use session::{ReceiverSession, SenderSession};
use store::{Destination, Root, Sink, Sources};
use wire::{ConnKind, ErrorCode, Msg, Op, Request, PROTOCOL_VERSION, TRANSPORT_UDP};

use connect::error::TransferError;
use connect::framed::FrameWriter;
use connect::handshake;
use connect::handshake::CONTROL_PROTECTION;
use connect::join::{join_accepted, keyed, Accepted, DataConn, DataPlan, Joins};
use connect::net::{self, Tuning};
use connect::progress::Progress;
use connect::sizing::{SEND_WINDOW, UDP_SEND_WINDOW};
use transfer::{run_receiver, run_sender, RecvPath, SendPath, Sending};

mod access;
mod admit;
pub mod bucket;
mod files;
mod gather;
use gather::gather;
mod datagrams;
mod greetings;
mod guards;
mod memory;
mod metrics;
mod record;
use greetings::{Greeting, Greetings, Refused};
pub use greetings::{GREETING_GRACE, MAX_GREETING, PER_SOURCE};
use guards::SessionGuard;
use memory::{MemoryPool, Reserved};
mod keyed;
mod keyring;
mod limits;
pub use keyed::Prekeyed;
use limits::check_request;
pub use limits::{
    check_policy, data_frame_max, parse_protection, protection_of, SessionBudget, DAEMON_MEMORY,
    SESSION_MEMORY,
};
pub use record::printable;

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
}

/// How a daemon logs each finished session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferLog {
    Off,
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
    let server = Arc::new(Server {
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
    });
    if let Some(rx) = reloads {
        let server = server.clone();
        std::thread::spawn(move || {
            for () in rx.into_inner().unwrap_or_else(|p| p.into_inner()) {
                server.reload();
            }
        });
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
        let pre = match handshake::read_preamble(&mut stream) {
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
            ConnKind::Control | ConnKind::Keyed => {
                let started = Instant::now();
                let rec = Arc::new(record::Record::new(peer.clone()));
                let id = self.metrics.begin(rec.clone());
                let run = if pre.kind == ConnKind::Keyed {
                    self.keyed_session(stream, &pre, greeting, &rec)
                } else {
                    self.session(stream, &pre, greeting, &rec)
                };
                // One line per session that asked for something (issue 29).
                self.metrics.end(id, &run, started.elapsed());
                let json = self.cfg.transfer_log == TransferLog::Json;
                match rec.line(&run, started.elapsed(), json) {
                    Some(line) if self.cfg.transfer_log != TransferLog::Off => {
                        // One write, so lines of sessions ending at once
                        // never mix.
                        let prefix = if json { "" } else { "haul serve: " };
                        let _ = std::io::Write::write_all(
                            &mut std::io::stderr(),
                            format!("{prefix}{line}\n").as_bytes(),
                        );
                    }
                    _ => {
                        if let Err(e) = &run {
                            tracing::warn!("{peer}: {e}");
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
        self.run_session(control, est, udp, progress, rec)
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
        self.run_session(control, est, udp, progress, rec)
    }

    /// A session from the moment its control connection is keyed: admission,
    /// the request, the data path and the transfer.
    fn run_session(
        &self,
        control: DataConn,
        mut est: handshake::Established,
        udp: Option<udp::UdpChannel>,
        progress: Arc<Progress>,
        rec: &record::Record,
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

        let access = match self.admit(&est.peer) {
            Ok((comment, access)) => {
                rec.key(est.peer.fingerprint(), comment);
                access
            }
            Err(msg) => return refuse(&mut ctrl_w, TransferError::new(ErrorCode::Auth, msg)),
        };
        // Its address's data connections are this session's to bound.
        let _trusted = ctrl_r
            .get_ref()
            .peer_addr()
            .ok()
            .map(|a| self.greetings.trust(a.ip()));
        let _guard =
            match SessionGuard::enter(&self.active, self.cfg.max_sessions, release_freed_memory) {
                Some(g) => g,
                None => {
                    let msg = format!(
                        "server busy: {} sessions already running; try again later",
                        self.cfg.max_sessions
                    );
                    return refuse(&mut ctrl_w, TransferError::new(ErrorCode::Busy, msg));
                }
            };
        // Each key within its share of the sessions (issue 39).
        let quota = match &self.cfg.client_keys {
            ClientKeys::File(_) => access.quota(self.cfg.max_sessions),
            ClientKeys::Only(_) => self.cfg.max_sessions,
        };
        let Some(key_session) = self
            .keyring
            .enter(est.peer, &access, quota, progress.clone())
        else {
            let msg = format!(
                "server busy: your key already runs {quota} sessions, as many as it may at once (sessions= in its line of the authorized keys, or half of --max-sessions); try again when one ends"
            );
            return refuse(&mut ctrl_w, TransferError::new(ErrorCode::Busy, msg));
        };
        ctrl_w
            .send_msg(&Msg::Welcome)
            .map_err(|e| TransferError::lost("welcoming the client", &e))?;

        ctrl_r
            .get_ref()
            .set_read_timeout(Some(handshake::HANDSHAKE_TIMEOUT))
            .ok();
        let req = match ctrl_r.read_msg() {
            Ok(Some(Msg::Request(r))) => r,
            Ok(_) => {
                return Err(TransferError::new(
                    ErrorCode::Protocol,
                    "client sent no request",
                ))
            }
            Err(e) => {
                let ours = !matches!(e, connect::framed::FrameError::Io(_));
                let e = e.into_transfer("reading the request");
                return if ours { refuse(&mut ctrl_w, e) } else { Err(e) };
            }
        };
        ctrl_r.get_ref().set_read_timeout(None).ok();
        rec.request(&req.op, &req.paths, &progress);
        if let Err(e) = check_request(&req) {
            return refuse(&mut ctrl_w, e);
        }
        // What this key may do (issue 29): the request narrowed or refused,
        // and the part of the root it sees.
        let on_bucket = access.root.is_some() && self.cfg.buckets.is_some();
        let asked = req.clone();
        let allowed = match on_bucket {
            true => Err(TransferError::new(
                ErrorCode::Permission,
                "root= confines a key to a directory; this server serves a bucket",
            )),
            false => access
                .allow(req)
                .and_then(|r| access.root(&self.cfg.root).map(|root| (r, root))),
        };
        let (req, root) = match allowed {
            Ok(x) => x,
            Err(e) => return refuse(&mut ctrl_w, e),
        };
        key_session.asked(asked, req.clone());
        // What the client reads names paths below the root it sees, never
        // the server's own (issue 39).
        let (shown_root, served) = (root.clone(), self.cfg.root.clone());
        progress
            .control
            .set_hide(Arc::new(move |m| served.hide(&shown_root.hide(m))));
        let protection = match parse_protection(req.protection)
            .and_then(|p| check_policy(p, self.cfg.require_encryption).map(|()| p))
        {
            Ok(p) => p,
            Err(e) => return refuse(&mut ctrl_w, e),
        };
        // Fewer streams than asked if that many would take more memory
        // than a session may, or than the daemon has left (P-39); the
        // client uses those accepted.
        let (budget, _reserved) = match self.reserve(SessionBudget::of(&req)) {
            Some(r) => r,
            None => {
                let msg = format!(
                    "server busy: the running sessions hold the {} MiB of buffers it gives them (--memory); try again later",
                    self.cfg.memory >> 20
                );
                return refuse(&mut ctrl_w, TransferError::new(ErrorCode::Busy, msg));
            }
        };
        if budget.streams < req.streams {
            tracing::info!(
                "the client asked for {} streams; {} fit ({} MiB per session, {} MiB for all, frames of {} bytes)",
                req.streams,
                budget.streams,
                session_share(self.cfg.memory) >> 20,
                self.cfg.memory >> 20,
                budget.frame_max
            );
        }
        let _tunnel_guard = match req.op {
            Op::Tunnel => {
                match SessionGuard::enter(&self.tunnels, self.cfg.max_tunnels, release_freed_memory)
                {
                    Some(g) => Some(g),
                    None => {
                        let msg = format!(
                        "server busy: {} tunnel sessions already running (--max-tunnels), each of which may hold {} MiB; try again later",
                        self.cfg.max_tunnels,
                        tunnel_driver::SESSION_HELD >> 20
                    );
                        return refuse(&mut ctrl_w, TransferError::new(ErrorCode::Busy, msg));
                    }
                }
            }
            _ => None,
        };

        // Prepare the side we play before accepting, so errors come first.
        enum Side {
            Send(Box<SenderSession>, Box<dyn store::BlockSource>, u64),
            Receive(Box<dyn store::BlockSink>, transfer::ReceiveOptions),
            Tunnel(String),
        }
        let buckets = self.cfg.buckets.clone();
        let objects = |p: &String| buckets.as_ref().filter(|b| b.serves(p));
        // Files or objects, the two sides are made alike.
        let sending = |entries: Vec<wire::Entry>,
                       sources: Box<dyn store::BlockSource>,
                       bytes: u64|
         -> Result<Side, TransferError> {
            let mut session = SenderSession::new(entries, req.block_size, send_window(&req));
            // What the client may answer, and what the session may hold,
            // the sources' own bookkeeping included (P-43 R-1 … R-4).
            session.expect(&req.sync);
            session.admit(session_share(self.cfg.memory), Some(self.reserved.clone()))?;
            if req.sync.gated {
                transfer::gate_sender(&mut session, &req.sync, &*sources, req.block_size)?;
            }
            Ok(Side::Send(Box::new(session), sources, bytes))
        };
        let receiving = |basis| transfer::ReceiveOptions {
            sync: req.sync,
            basis,
            cache: self
                .cfg
                .cache
                .as_ref()
                .and_then(|c| c.for_peer(&est.peer.fingerprint())),
            contents: req.contents,
        };
        let side = match req.op {
            Op::Tunnel => match self.cfg.tunnel_to.check(&req.paths[0]) {
                Ok(()) => Side::Tunnel(req.paths[0].clone()),
                Err(e) => return refuse(&mut ctrl_w, e),
            },
            Op::Pull if req.paths.iter().any(|p| objects(p).is_some()) => {
                let Some(b) = objects(&req.paths[0])
                    .filter(|_| req.paths.iter().all(|p| objects(p).is_some()))
                else {
                    let e = TransferError::new(
                        ErrorCode::BadRequest,
                        "pull either s3:// locations or files, not both at once",
                    );
                    return refuse(&mut ctrl_w, e);
                };
                let side = b
                    .sources(&req.paths, req.recursive)
                    .and_then(|(entries, sources, bytes)| sending(entries, sources, bytes));
                match side {
                    Ok(side) => side,
                    Err(e) => return refuse(&mut ctrl_w, e),
                }
            }
            Op::Pull => {
                let (walked, sources) = match self.walk_request(&root, &req) {
                    Ok(w) => w,
                    Err(e) => return refuse(&mut ctrl_w, e),
                };
                let bytes = walked.file_bytes();
                match sending(walked.entries, Box::new(sources), bytes) {
                    Ok(side) => side,
                    Err(e) => return refuse(&mut ctrl_w, e),
                }
            }
            Op::Probe { bytes } => {
                // One file of generated data, verified and discarded by the
                // client: the network and both hosts' CPUs, no disks (P-36).
                let probe = wire::Entry {
                    id: 0,
                    path: b"probe".to_vec(),
                    kind: wire::EntryKind::File {
                        size: bytes,
                        mode: 0o600,
                        mtime: 0,
                        mtime_nsec: 0,
                    },
                    target: Vec::new(),
                };
                let session = SenderSession::new(vec![probe], req.block_size, send_window(&req));
                Side::Send(Box::new(session), Box::new(Sources::generated()), bytes)
            }
            Op::Push if objects(&req.paths[0]).is_some() => {
                let b = objects(&req.paths[0]).expect("checked");
                let why = if !req.basis.is_empty() {
                    Some("--basis names a file, and this destination is an object store's")
                } else if req.shard.is_some() {
                    Some("a split transfer's shards fill files in a shared file system; into an object store, run it as one transfer")
                } else {
                    None
                };
                if let Some(why) = why {
                    return refuse(&mut ctrl_w, TransferError::new(ErrorCode::BadRequest, why));
                }
                match b.sink(&req.paths[0], req.many_sources, req.contents) {
                    Ok(sink) => Side::Receive(sink, receiving(None)),
                    Err(e) => return refuse(&mut ctrl_w, e),
                }
            }
            Op::Push => {
                let dest = &req.paths[0];
                let dest_res = self.resolve(&root, dest).and_then(|p| {
                    Destination::for_path(
                        &p,
                        dest.ends_with('/'),
                        req.many_sources,
                        req.contents,
                        root.clone(),
                    )
                    .map_err(Into::into)
                });
                let basis = self.open_basis(&root, &req.basis);
                let sink = dest_res.and_then(|d| {
                    self.receiving_sink(Sink::new(d, req.preserve), req.shard.as_ref())
                });
                match sink.and_then(|s| basis.map(|b| (s, b))) {
                    Ok((sink, basis)) => Side::Receive(sink, receiving(basis)),
                    Err(e) => return refuse(&mut ctrl_w, e),
                }
            }
        };

        let gated = match &side {
            // A push of nothing but zeros is not gated: its manifest and
            // announcements are on their way already (P-29).
            Side::Receive(..) if req.streams == 0 => false,
            Side::Receive(sink, opts) => opts.gated(sink.destination_exists()),
            Side::Send(..) | Side::Tunnel(_) => false,
        };
        let session_id = est.keys.session_id();
        // The socket opened in the handshake serves a UDP request only;
        // one not opened then is opened now that the client is known, and
        // named in `Accept` (P-23, issue 39).
        let udp = match udp {
            None if req.transport == TRANSPORT_UDP && est.udp_port == 0 => {
                self.open_udp(ctrl_r.get_ref().local_addr())
            }
            u => u.filter(|_| req.transport == TRANSPORT_UDP),
        };
        let udp_port = udp
            .as_ref()
            .and_then(|c| c.local_addr().ok())
            .map_or(0, |a| a.port());
        let streams = budget.streams;
        listed.open(Accepted {
            protection,
            streams,
            frame_max: budget.frame_max,
        });
        let accepted_at = Instant::now();
        let joined = ctrl_w
            .send_msg(&Msg::Accept {
                session: session_id,
                streams,
                udp_port,
                gated,
            })
            .map_err(|e| TransferError::lost("accepting the request", &e))
            .and_then(|()| match req.transport {
                TRANSPORT_UDP => self.udp_or_streams(
                    udp,
                    &mut est,
                    accepted_at,
                    protection,
                    &mut ctrl_r,
                    &rx,
                    streams,
                    &req,
                    &progress,
                ),
                _ => gather(&rx, streams).map(DataPlan::Tcp),
            });
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
        if let Side::Tunnel(target) = &side {
            let DataPlan::Tcp(conns) = plan else {
                return Err(TransferError::new(
                    ErrorCode::Protocol,
                    "a tunnel travels on TCP streams",
                ));
            };
            let ctrl = (ctrl_r, ctrl_w);
            return tunnel_driver::serve(target, &req, conns, ctrl, est.rtt, progress);
        }
        let (send_path, recv_path, how) = match plan {
            DataPlan::Tcp(conns) => {
                Progress::set(&progress.streams, conns.len() as u64);
                let how = format!("{} streams", conns.len());
                let (readers, writers): (Vec<_>, Vec<_>) =
                    conns.into_iter().map(|c| (c.reader, c.writer)).unzip();
                (SendPath::Tcp(writers), RecvPath::Tcp(readers), how)
            }
            DataPlan::Udp(link) => {
                let how = format!("UDP, {}-byte datagrams", link.payload);
                // Only one of the two is used; the link moves into it.
                match side {
                    Side::Send(..) | Side::Tunnel(_) => {
                        (SendPath::Udp(link), RecvPath::Tcp(vec![]), how)
                    }
                    Side::Receive(..) => (SendPath::Tcp(vec![]), RecvPath::Udp(link), how),
                }
            }
        };

        match side {
            Side::Send(session, sources, bytes) => {
                let r = run_sender(
                    ctrl_r,
                    ctrl_w,
                    send_path,
                    *session,
                    &*sources,
                    Sending {
                        rate: rate_of(&req),
                        compress: codec::Mode::from_wire(req.compress, req.compress_level),
                        start_rate: None,
                        known_rate: None,
                        answer: None,
                    },
                    &progress,
                )?;
                rec.moved(r.summary.files, bytes);
                Ok(format!(
                    "sent {} files, {bytes} bytes, over {how} ({})",
                    r.summary.files,
                    protection.name()
                ))
            }
            // Served above, before the data path was split.
            Side::Tunnel(_) => Err(TransferError::new(ErrorCode::Other, "tunnel served twice")),
            Side::Receive(sink, opts) => {
                let mut session = ReceiverSession::new(req.block_size);
                // A manifest's bookkeeping comes out of the daemon's memory
                // too, a session's share at most (P-40 S-1).
                session.set_budget(session_share(self.cfg.memory));
                session.set_pool(self.reserved.clone());
                if gated {
                    transfer::gate_receiver(&mut session, &opts);
                }
                let s = run_receiver(ctrl_r, ctrl_w, recv_path, session, &*sink, &opts, &progress)?;
                rec.moved(s.files, s.file_bytes);
                Ok(format!(
                    "received {} files, {} bytes, over {how} ({})",
                    s.files,
                    s.file_bytes,
                    protection.name()
                ))
            }
        }
    }
}

impl Server {
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
}

/// Hands the memory a session freed back to the OS (`malloc_trim` on the
/// one arena, see [`share_one_arena`]), so an idle server is small again.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
