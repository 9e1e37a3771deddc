//! The client: connects, authenticates the server against pinned keys,
//! asks to push or pull, opens the data streams and runs the engine (P-22).
//! The operations themselves (push, pull, probe, tunnel) are in `ops`.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use secure::{HostKeyStatus, Keypair, KnownHosts, Protection, PublicKey};
use wire::{
    ErrorCode, Msg, Op, Request, Summary, PROTECT_AES256GCM, PROTECT_CHACHA20POLY1305,
    PROTECT_INTEGRITY_ONLY, TRANSPORT_TCP, TRANSPORT_UDP,
};

use connect::datagram::{self, setup, UdpLink};
use connect::error::TransferError;
use connect::framed::{FrameReader, FrameWriter};
use connect::handshake;
use connect::handshake::CONTROL_PROTECTION;
use connect::join::{client_join, keyed, DataConn, DataPlan};
use connect::net::{self, BufferLimits, Tuning};
use connect::progress::Progress;
use connect::sizing::{size_udp_buffers, udp_buffer};

/// How long a push waits for a zero scan that has found nothing but zeros
/// so far, to send it without data connections (P-29): up to a round trip,
/// which it saves, within these bounds.
const ZERO_WAIT_MIN: Duration = Duration::from_millis(20);
const ZERO_WAIT_MAX: Duration = Duration::from_millis(200);

mod ops;

pub use ops::ProbeRun;

/// A callback that shows a one-line notice to the user.
pub type Notice = Box<dyn Fn(&str) + Send>;

/// How blocks travel (`--transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
    /// UDP on long paths, TCP otherwise: see [`choose_transport`].
    Auto,
}

impl Transport {
    /// The request's transport code; auto asks for TCP.
    fn wire(self) -> u8 {
        match self {
            Transport::Udp => TRANSPORT_UDP,
            _ => TRANSPORT_TCP,
        }
    }
}

/// Round trip from which `--transport auto` picks the UDP channel. At
/// 30 ms (100 Mbit/s, a 557 MB tree) TCP streams took 18.0-18.2 s in every
/// run, the UDP channel 18.1-27 s: one-way-delay noise from cores shared
/// with the receiver's file creation is a large share of the controller's
/// 10 ms congestion threshold there. TCP's window and loss-recovery costs
/// grow with the round trip; at 150 ms the UDP channel wins (P-23).
pub const AUTO_UDP_RTT: Duration = Duration::from_millis(50);

/// The `--transport auto` rule (documented in docs/PROTOCOL.md, P-23): the
/// UDP channel when the handshake's round trip is at least
/// [`AUTO_UDP_RTT`], where TCP's loss recovery and window limits cost the
/// most; TCP streams on short paths, where the kernel's TCP is cheaper
/// than user-space pacing. If the UDP channel cannot be set up (a
/// firewall), auto falls back to TCP and says so.
pub fn choose_transport(t: Transport, rtt: Duration) -> Transport {
    match t {
        Transport::Auto if rtt >= AUTO_UDP_RTT => Transport::Udp,
        Transport::Auto => Transport::Tcp,
        t => t,
    }
}

/// What the UDP channel did, for the summary.
#[derive(Debug, Clone, Copy, Default)]
pub struct UdpReport {
    pub payload: u64,
    pub sent: u64,
    pub resent: u64,
    pub lost: u64,
    pub received: u64,
    /// The sending rate at the end, bytes per second.
    pub final_rate: u64,
    /// Datagram bytes per second while data flowed (first to last datagram).
    pub average_rate: u64,
    pub drops: u64,
    pub buffer: u64,
    pub buffer_capped: bool,
}

/// What of `haul probe`'s recommendation a client applies (P-36).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Advice {
    pub transport: Transport,
    pub streams: u16,
    /// Bytes per second.
    pub rate: u64,
}

/// How the client decides whether the server's key is the right one.
#[derive(Debug, Clone)]
pub enum ServerTrust {
    /// Keys pinned on first use in this known-hosts file (a `haul serve`
    /// daemon).
    KnownHosts(PathBuf),
    /// Exactly this key: the one-time key a remote `haul serve --stdio`
    /// sent over ssh (P-27).
    Key(PublicKey),
}

pub struct ClientConfig {
    pub identity: Keypair,
    pub trust: ServerTrust,
    /// Host as the user wrote it (name or address).
    pub host: String,
    pub port: u16,
    /// Addresses to connect to instead of resolving `host`.
    pub dial: Vec<SocketAddr>,
    /// `None`: choose by the rule in [`auto_streams`].
    pub streams: Option<u16>,
    pub block_size: u32,
    pub protection: Protection,
    /// Bytes per second.
    pub rate: Option<u64>,
    pub transport: Transport,
    /// `-p`: keep modification times and exact modes (P-8).
    pub preserve: bool,
    /// `--compress`: how the sending side compresses blocks (P-30).
    pub compress: codec::Mode,
    /// Deduplication and sync (P-31, P-32); `gated` is decided here.
    pub sync: wire::SyncOptions,
    /// `--basis`: the basis of the one file sent, on the receiving side.
    pub basis: Option<String>,
    /// `--cache`: this side's chunk cache, when it receives (pull).
    pub cache: Option<Arc<store::ChunkCache>>,
    pub tuning: Tuning,
    pub connect_timeout: Duration,
    /// Shows the user a notice: a server key pinned for the first time, a
    /// fallback from UDP to TCP.
    pub notice: Option<Notice>,
    /// What `haul probe` advised for this host (P-36): used where the
    /// user left transport and streams automatic.
    pub advice: Option<Advice>,
}

/// How the client reached the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Route {
    /// A `haul serve` daemon.
    #[default]
    Daemon,
    /// A server started over ssh, data on direct connections (P-27).
    Ssh,
    /// A server started over ssh, data through the ssh channel (P-28).
    SshRelay,
}

/// What the CLI prints at the end.
#[derive(Debug, Clone)]
pub struct Report {
    pub route: Route,
    /// Bytes saved by compression: file bytes of compressed blocks less
    /// their bytes on the wire (P-30).
    pub compress_saved: u64,
    /// File bytes the receiver copied from what it held (P-31).
    pub dedup_saved: u64,
    /// File bytes a partial already held, not sent again (P-35).
    pub resumed: u64,
    /// Files found already in place and not sent (P-32), and their bytes.
    pub skipped_files: u64,
    pub skipped_bytes: u64,
    /// `--dry-run`: paths that would be sent, and their bytes.
    pub dry_run: bool,
    pub listed: Vec<String>,
    pub listed_bytes: u64,
    /// `--delete`: paths removed (or that would be).
    pub deleted: Vec<String>,
    /// What the receiver noted about files (P-41): why a partial could
    /// not be resumed from, above all.
    pub notes: Vec<(wire::NoteKind, String)>,
    /// File bytes in all-zero blocks, announced instead of sent (P-29).
    pub zero_bytes: u64,
    pub duration: Duration,
    pub summary: Summary,
    pub wire_bytes: u64,
    pub streams: u16,
    pub retransmitted: u64,
    /// Blocks a pushing sender sent a second time near the end because
    /// their first copy was slow to be acknowledged (P-13); 0 on a pull.
    pub endgame_copies: u64,
    pub rtt: Duration,
    pub protection: Protection,
    pub stream_window: u64,
    /// Present when the UDP channel carried the data.
    pub udp: Option<UdpReport>,
    /// Transport and streams followed `haul probe`'s advice (P-36).
    pub advised: bool,
}

/// What the report needs once the connection is consumed.
struct Tail {
    progress: Arc<Progress>,
    started: Instant,
    rtt: Duration,
    protection: Protection,
    dry_run: bool,
    advised: bool,
}

impl Tail {
    fn report(&self, summary: Summary, streams: u16, sent: (u64, u64), window: u64) -> Report {
        let (retransmitted, endgame_copies) = sent;
        let p = &self.progress;
        let get = Progress::get;
        let udp = (get(&p.udp_payload) > 0).then(|| UdpReport {
            payload: get(&p.udp_payload),
            sent: get(&p.dgrams_sent),
            resent: get(&p.dgrams_resent),
            lost: get(&p.dgrams_lost),
            received: get(&p.dgrams_received),
            final_rate: get(&p.udp_rate),
            average_rate: (get(&p.udp_bytes) as f64 * 1e6 / get(&p.udp_active_us).max(1) as f64)
                as u64,
            drops: get(&p.udp_drops),
            buffer: get(&p.udp_buffer),
            buffer_capped: get(&p.udp_buffer_capped) != 0,
        });
        Report {
            route: Route::Daemon,
            zero_bytes: get(&p.zero_bytes),
            compress_saved: get(&p.compressed_in).saturating_sub(get(&p.compressed_out)),
            dedup_saved: get(&p.dedup_bytes),
            resumed: get(&p.resumed_bytes),
            skipped_files: get(&p.skipped_files),
            skipped_bytes: get(&p.skipped_bytes),
            dry_run: self.dry_run,
            listed: std::mem::take(&mut *p.listed.lock().unwrap_or_else(|e| e.into_inner())),
            listed_bytes: get(&p.listed_bytes),
            deleted: std::mem::take(&mut *p.deleted.lock().unwrap_or_else(|e| e.into_inner())),
            notes: std::mem::take(&mut *p.notes.lock().unwrap_or_else(|e| e.into_inner())),
            udp,
            duration: self.started.elapsed(),
            summary,
            wire_bytes: Progress::get(&p.wire_tx) + Progress::get(&p.wire_rx),
            streams,
            retransmitted,
            endgame_copies,
            rtt: self.rtt,
            protection: self.protection,
            stream_window: window,
            advised: self.advised,
        }
    }
}

/// An authenticated control connection, ready for one request.
pub struct Connected {
    cfg: ClientConfig,
    addr: SocketAddr,
    ctrl_r: FrameReader,
    ctrl_w: FrameWriter,
    keys: secure::SessionKeys,
    rtt: Duration,
    /// The UDP port the server opened in the handshake, or 0 (P-23).
    udp_port: u16,
    started: Instant,
    progress: Arc<Progress>,
    /// `haul probe`: echo measurements to make once the UDP channel is set
    /// up, over this span, and what they showed (P-36).
    echo_span: Option<Duration>,
    echo: Option<datagram::echo::EchoReport>,
}

/// The client's UDP socket once its hello has gone (P-23), with the
/// session's datagram keys.
struct HelloSent {
    channel: udp::UdpChannel,
    hello: setup::Hello,
    send_key: secure::DatagramKey,
    recv_key: secure::DatagramKey,
}

/// Streams to open when the user gave no `--streams` (documented in
/// docs/ARCHITECTURE.md): enough that per-stream windows cover the
/// bandwidth-delay product of the rate we aim for (the `--rate` cap, else
/// 10 Gbit/s) at the measured RTT, at least one per core up to 4, at most 16.
pub fn auto_streams(rtt: Duration, rate: Option<u64>, stream_window: u64) -> u16 {
    let target = rate.unwrap_or(10_000_000_000 / 8) as f64;
    let need = (target * rtt.as_secs_f64() / stream_window.max(1) as f64).ceil() as u64;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as u64)
        .unwrap_or(1)
        .min(4);
    need.max(cores).clamp(1, 16) as u16
}

fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, TransferError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| TransferError::new(ErrorCode::Connect, format!("unknown host {host:?}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(TransferError::new(
            ErrorCode::Connect,
            format!("unknown host {host:?}: no addresses"),
        ));
    }
    Ok(addrs)
}

/// A forced socket buffer for one of `streams` data connections: twice its
/// share of the bandwidth-delay product at the target rate (the `--rate`
/// cap, else 10 Gbit/s), between 4 MiB and [`net::FORCED_BUFFER`].
pub fn stream_buffer(rtt: Duration, rate: Option<u64>, streams: u16) -> usize {
    let target = rate.unwrap_or(10_000_000_000 / 8) as f64;
    let share = 2.0 * target * rtt.as_secs_f64() / streams.max(1) as f64;
    (share as usize).clamp(4 << 20, net::FORCED_BUFFER)
}

fn dial(addr: &SocketAddr, cfg: &ClientConfig) -> Result<TcpStream, TransferError> {
    Dialer::new(cfg, cfg.tuning.clone()).connect(addr)
}

/// How to open a connection to the server, owned, so that each data
/// connection can be dialled on a thread of its own.
#[derive(Clone)]
struct Dialer {
    host: String,
    port: u16,
    timeout: Duration,
    tuning: Tuning,
}

impl Dialer {
    fn new(cfg: &ClientConfig, tuning: Tuning) -> Dialer {
        Dialer {
            host: cfg.host.clone(),
            port: cfg.port,
            timeout: cfg.connect_timeout,
            tuning,
        }
    }

    fn connect(&self, addr: &SocketAddr) -> Result<TcpStream, TransferError> {
        net::connect(addr, &self.tuning, self.timeout).map_err(|e| {
            let why = match e.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    "connection refused (is `haul serve` running there, on that port?)".to_string()
                }
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                    format!("no answer within {}s", self.timeout.as_secs())
                }
                _ => e.to_string(),
            };
            TransferError::new(
                ErrorCode::Connect,
                format!(
                    "cannot connect to {addr} ({}:{}): {why}",
                    self.host, self.port
                ),
            )
        })
    }
}

/// Data connections being dialled and joined, each on its own thread.
type Joining = Vec<std::thread::JoinHandle<Result<DataConn, TransferError>>>;

/// Decides whether `key` is the server's (P-3, P-27).
fn check_server(cfg: &ClientConfig, key: &PublicKey) -> Result<(), TransferError> {
    let label = format!("{}:{}", cfg.host, cfg.port);
    let path = match &cfg.trust {
        ServerTrust::Key(expected) if expected == key => return Ok(()),
        ServerTrust::Key(expected) => {
            return Err(TransferError::new(
                ErrorCode::Auth,
                format!(
                    "the haul server at {label} showed key {} but the one started over ssh sent {}; another program answered on its port",
                    key.fingerprint(),
                    expected.fingerprint()
                ),
            ))
        }
        ServerTrust::KnownHosts(path) => path,
    };
    let mut known =
        KnownHosts::load(path).map_err(|e| TransferError::new(ErrorCode::Auth, e.to_string()))?;
    match known.check(&label, key) {
        HostKeyStatus::Known => Ok(()),
        HostKeyStatus::Unknown => {
            known
                .add(&label, key)
                .map_err(|e| TransferError::new(ErrorCode::Auth, e.to_string()))?;
            if let Some(f) = &cfg.notice {
                f(&format!(
                    "pinned the key of new server {label} ({}) in {}",
                    key.fingerprint(),
                    known.path().display()
                ));
            }
            Ok(())
        }
        HostKeyStatus::Changed { pinned, line } => Err(TransferError::new(
            ErrorCode::Auth,
            format!(
                "the key of server {label} CHANGED: pinned {} but it now shows {}. Someone may be intercepting the connection, or the server was re-keyed; if you know it was, delete line {line} of {}",
                pinned.fingerprint(),
                key.fingerprint(),
                known.path().display()
            ),
        )),
    }
}

impl Connected {
    pub fn connect(cfg: ClientConfig) -> Result<Connected, TransferError> {
        let started = Instant::now();
        let (addr, stream) = Connected::dial_first(&cfg)?;
        Connected::establish(cfg, addr, stream, started)
    }

    /// Connects to the first address of the server that answers. Fails
    /// with `Connect` (3) if none does.
    pub fn dial_first(cfg: &ClientConfig) -> Result<(SocketAddr, TcpStream), TransferError> {
        let addrs = if cfg.dial.is_empty() {
            resolve(&cfg.host, cfg.port)?
        } else {
            cfg.dial.clone()
        };
        let mut last = None;
        for a in &addrs {
            match dial(a, cfg) {
                Ok(s) => return Ok((*a, s)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            TransferError::new(
                ErrorCode::Connect,
                format!("no address to reach {}", cfg.host),
            )
        }))
    }

    /// Authenticates over a connection [`Connected::dial_first`] made.
    pub fn establish(
        cfg: ClientConfig,
        addr: SocketAddr,
        mut stream: TcpStream,
        started: Instant,
    ) -> Result<Connected, TransferError> {
        // Any transport but TCP may end on the UDP channel: ask for its
        // socket now, so the hello can ride behind the request (P-23).
        let wishes = wire::HandshakeWishes {
            udp_port: cfg.transport != Transport::Tcp,
        };
        let est = handshake::client(&mut stream, &cfg.identity, wishes, |key| {
            check_server(&cfg, key)
        })?;
        let progress = Arc::new(Progress::default());
        let control = keyed(stream, &est.keys, 0, CONTROL_PROTECTION, true, &progress)?;
        // The server's welcome (or refusal) is read after the request is
        // sent: the request rides right behind the handshake, one round
        // trip sooner (P-22).
        let (ctrl_r, ctrl_w) = (control.reader, control.writer);
        Ok(Connected {
            cfg,
            addr,
            ctrl_r,
            ctrl_w,
            keys: est.keys,
            rtt: est.rtt,
            udp_port: est.udp_port,
            started,
            progress,
            echo_span: None,
            echo: None,
        })
    }

    pub fn rtt(&self) -> Duration {
        self.rtt
    }

    /// Reads the server's welcome: it accepted our key and has room.
    fn await_welcome(&mut self) -> Result<(), TransferError> {
        let r = &mut self.ctrl_r;
        r.get_ref()
            .set_read_timeout(Some(handshake::HANDSHAKE_TIMEOUT))
            .ok();
        let res = match r.read_msg() {
            Ok(Some(Msg::Welcome)) => Ok(()),
            Ok(Some(Msg::Error { code, message })) => Err(TransferError::new(
                code,
                format!("server refused: {message}"),
            )),
            Ok(Some(_)) => Err(TransferError::new(
                ErrorCode::Protocol,
                "server sent no welcome",
            )),
            Ok(None) => Err(TransferError::new(
                ErrorCode::Auth,
                "server closed the connection after the handshake (it did not accept our key)",
            )),
            Err(e) => Err(e.into_transfer("waiting for the server's welcome")),
        };
        r.get_ref().set_read_timeout(None).ok();
        res
    }

    fn streams(&self) -> (u16, u64) {
        let window = BufferLimits::read().stream_window(self.cfg.tuning.force_buffer.is_some());
        (
            self.cfg
                .streams
                .or(self.cfg.advice.map(|a| a.streams))
                .unwrap_or_else(|| auto_streams(self.rtt, self.cfg.rate, window)),
            window,
        )
    }

    /// A request for `op` on `paths` over `streams` data connections, with
    /// this client's settings; not recursive, no sources' options, not
    /// gated (callers set those they need).
    fn build_request(&self, op: Op, paths: Vec<String>, streams: u16) -> Request {
        let protection = match self.cfg.protection {
            Protection::Aes256Gcm => PROTECT_AES256GCM,
            Protection::ChaCha20Poly1305 => PROTECT_CHACHA20POLY1305,
            Protection::IntegrityOnly => PROTECT_INTEGRITY_ONLY,
        };
        Request {
            op,
            paths,
            recursive: false,
            many_sources: false,
            streams,
            block_size: self.cfg.block_size,
            protection,
            rate: self.cfg.rate.unwrap_or(0),
            transport: match (self.cfg.transport, self.cfg.advice) {
                (Transport::Auto, Some(a)) => a.transport,
                (t, _) => choose_transport(t, self.rtt),
            }
            .wire(),
            contents: false,
            preserve: self.cfg.preserve,
            compress: transfer::compress::mode_to_wire(self.cfg.compress).0,
            compress_level: transfer::compress::mode_to_wire(self.cfg.compress).1,
            sync: wire::SyncOptions {
                gated: false,
                ..self.cfg.sync
            },
            basis: match op {
                Op::Push => self.cfg.basis.clone().unwrap_or_default(),
                Op::Pull | Op::Probe { .. } | Op::Tunnel => String::new(),
            },
        }
    }

    /// Sends `req`, reads the welcome and the answer, and opens the data
    /// path the answer names.
    fn request(&mut self, req: Request) -> Result<(DataPlan, bool), TransferError> {
        let requested = req.streams;
        let asked_udp = req.transport == TRANSPORT_UDP;
        let sent = self.ctrl_w.send_msg(&Msg::Request(req));
        // The hello rides right behind the request, to the port message two
        // named; the server answers it once it accepts (P-23).
        let hello = asked_udp.then(|| self.udp_hello());
        // So do the data connections, all at once: the server holds their
        // joins until it accepts (P-20), so their round trip overlaps the
        // answer's instead of following it, one per connection.
        let joining =
            (!asked_udp && requested > 0 && sent.is_ok()).then(|| self.dial_streams(requested));
        // A refusal (unknown key, busy) explains a failed send better.
        self.await_welcome()?;
        sent.map_err(|e| TransferError::lost("sending the request", &e))?;
        let (session, streams, udp_port, server_gated) = match self.ctrl_r.read_msg() {
            Ok(Some(Msg::Accept {
                session,
                streams,
                udp_port,
                gated,
            })) => (session, streams, udp_port, gated),
            Ok(Some(Msg::Error { code, message })) => {
                return Err(TransferError::new(code, format!("server: {message}")))
            }
            Ok(_) => {
                return Err(TransferError::new(
                    ErrorCode::Protocol,
                    "server answered the request with something else",
                ))
            }
            Err(e) => return Err(e.into_transfer("waiting for the server's answer")),
        };
        let refusal = if session != self.keys.session_id() {
            Some("server named another session".to_string())
        } else if streams == 0 || streams > requested {
            Some(format!(
                "server asked for {streams} streams where {requested} were offered"
            ))
        } else if asked_udp && udp_port != self.udp_port {
            Some(format!(
                "server named UDP port {udp_port} in its answer but {} in the handshake",
                self.udp_port
            ))
        } else {
            None
        };
        if let Some(message) = refusal {
            // Tell the server, so it stops waiting for data connections.
            let _ = self.ctrl_w.send_msg(&Msg::Error {
                code: ErrorCode::Protocol,
                message: message.clone(),
            });
            return Err(TransferError::new(ErrorCode::Protocol, message));
        }
        let progress = self.progress();
        if let Some(hello) = hello {
            match hello.and_then(|h| self.udp_setup(h)) {
                Ok(link) => {
                    if let Some(span) = self.echo_span {
                        self.echo = Some(datagram::echo::measure(
                            &link.channel,
                            &link.send_key,
                            &link.recv_key,
                            self.rtt,
                            link.payload,
                            span,
                        ));
                    }
                    self.ctrl_w
                        .send_msg(&Msg::UseTransport {
                            udp_payload: link.payload as u16,
                        })
                        .map_err(|e| TransferError::lost("confirming the UDP channel", &e))?;
                    return Ok((DataPlan::Udp(Box::new(link)), server_gated));
                }
                Err(why) if self.cfg.transport == Transport::Udp => {
                    let message = format!("UDP data channel failed: {why}; try --transport tcp");
                    let _ = self.ctrl_w.send_msg(&Msg::Error {
                        code: ErrorCode::Connect,
                        message: message.clone(),
                    });
                    return Err(TransferError::new(ErrorCode::Connect, message));
                }
                Err(why) => {
                    if let Some(f) = &self.cfg.notice {
                        f(&format!(
                            "UDP data channel unavailable ({why}); using TCP streams"
                        ));
                    }
                    tracing::info!("UDP data channel unavailable ({why}); using TCP streams");
                    self.ctrl_w
                        .send_msg(&Msg::UseTransport { udp_payload: 0 })
                        .map_err(|e| TransferError::lost("falling back to TCP", &e))?;
                }
            }
        }
        Progress::set(&progress.streams, streams as u64);
        let mut joining = joining.unwrap_or_else(|| self.dial_streams(streams));
        // Connections beyond those accepted are closed (no server asks
        // for fewer today).
        joining.truncate(streams as usize);
        joining
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(TransferError::new(
                        ErrorCode::Connect,
                        "opening a data connection failed (its thread panicked)",
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|c| (DataPlan::Tcp(c), server_gated))
    }

    /// Dials data connections `1..=streams` and joins them to the session
    /// (P-20), each on its own thread.
    fn dial_streams(&self, streams: u16) -> Joining {
        // The RTT is known now: where buffers can be forced, size each data
        // connection's to its share of the path's BDP instead of the maximum.
        let mut tuning = self.cfg.tuning.clone();
        if tuning.force_buffer.is_some() {
            tuning.force_buffer = Some(stream_buffer(self.rtt, self.cfg.rate, streams));
        }
        let dialer = Dialer::new(&self.cfg, tuning);
        (1..=streams)
            .map(|i| {
                let (dialer, addr, keys) = (dialer.clone(), self.addr, self.keys.clone());
                let (protection, progress) = (self.cfg.protection, self.progress());
                std::thread::spawn(move || {
                    let s = dialer.connect(&addr)?;
                    client_join(s, &keys, i, protection, &progress)
                })
            })
            .collect()
    }

    /// Opens the client's UDP socket and sends the hello to the port the
    /// server opened in the handshake (P-23).
    fn udp_hello(&self) -> Result<HelloSent, String> {
        if self.udp_port == 0 {
            return Err("the server offered no UDP port".into());
        }
        let server = SocketAddr::new(self.addr.ip(), self.udp_port);
        let local: SocketAddr = if server.is_ipv6() {
            "[::]:0".parse().expect("literal")
        } else {
            "0.0.0.0:0".parse().expect("literal")
        };
        let mut channel = udp::UdpChannel::bind(local).map_err(|e| e.to_string())?;
        let (send_key, recv_key) = datagram::keys(&self.keys, self.cfg.protection, true);
        let hello = setup::client_hello(&mut channel, server, self.keys.session_id(), &send_key)
            .map_err(|e| e.0)?;
        Ok(HelloSent {
            channel,
            hello,
            send_key,
            recv_key,
        })
    }

    /// Sets up the UDP channel once the server accepted: the hello's
    /// answer, path-MTU probes, buffers sized to the path.
    fn udp_setup(&self, sent: HelloSent) -> Result<UdpLink, String> {
        let HelloSent {
            mut channel,
            hello,
            send_key,
            recv_key,
        } = sent;
        let payload = setup::client(
            &mut channel,
            hello,
            self.keys.session_id(),
            &send_key,
            &recv_key,
            self.rtt,
        )
        .map_err(|e| e.0)?;
        let want = udp_buffer(self.rtt, self.cfg.rate);
        size_udp_buffers(&channel, want, &self.cfg.tuning, &self.progress);
        Ok(UdpLink {
            channel,
            send_key,
            recv_key,
            payload,
            rtt: self.rtt,
            workers: datagram::workers(),
            backlog: Vec::new(),
            silence: self.cfg.tuning.timeout,
        })
    }

    /// The counters of this connection, for a progress display.
    pub fn progress(&self) -> Arc<Progress> {
        self.progress.clone()
    }

    fn tail(&self) -> Tail {
        Tail {
            progress: self.progress.clone(),
            started: self.started,
            rtt: self.rtt,
            protection: self.cfg.protection,
            dry_run: self.cfg.sync.dry_run,
            advised: self.cfg.advice.is_some()
                && self.cfg.transport == Transport::Auto
                && self.cfg.streams.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_transport_takes_udp_on_long_paths_only() {
        let ms = Duration::from_millis;
        assert_eq!(choose_transport(Transport::Auto, ms(0)), Transport::Tcp);
        assert_eq!(choose_transport(Transport::Auto, ms(30)), Transport::Tcp);
        assert_eq!(choose_transport(Transport::Auto, ms(49)), Transport::Tcp);
        assert_eq!(choose_transport(Transport::Auto, ms(50)), Transport::Udp);
        assert_eq!(choose_transport(Transport::Auto, ms(150)), Transport::Udp);
        assert_eq!(choose_transport(Transport::Tcp, ms(150)), Transport::Tcp);
        assert_eq!(choose_transport(Transport::Udp, ms(0)), Transport::Udp);
    }

    #[test]
    fn stream_rules() {
        let ms = Duration::from_millis;
        // Loopback: one per core (up to 4).
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(4) as u16;
        assert_eq!(auto_streams(ms(0), None, 4 << 20), cores.max(1));
        // 150 ms with 2.7 MB windows: capped at 16.
        assert_eq!(auto_streams(ms(150), None, 2_800_000), 16);
        // 150 ms with 32 MiB windows, 10 Gbit/s target: 6.
        assert_eq!(auto_streams(ms(150), None, 32 << 20), 6.max(cores));
        // A 500 Mbit/s cap needs fewer.
        assert_eq!(
            auto_streams(ms(150), Some(62_500_000), 32 << 20),
            1.max(cores)
        );
        assert_eq!(stream_buffer(ms(150), None, 6), 62_500_000);
        assert_eq!(stream_buffer(ms(1), None, 6), 4 << 20);
        assert_eq!(stream_buffer(ms(600), None, 2), net::FORCED_BUFFER);
        // UDP buffers: a BDP at the target rate, within bounds.
        use connect::sizing::{UDP_BUFFER_MAX, UDP_BUFFER_MIN};
        assert_eq!(udp_buffer(ms(1), None), UDP_BUFFER_MIN);
        assert_eq!(udp_buffer(ms(150), None), UDP_BUFFER_MAX);
        assert_eq!(udp_buffer(ms(150), Some(125_000_000)), 18_750_000);
    }
}
