//! Connecting: dials the server's addresses, runs the handshake, checks
//! the server's key, sends a request and opens what it needs (data
//! connections or the UDP channel). A [`Connected`] is ready for one
//! request; `ops` carries out each.

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use secure::{HostKeyStatus, KnownHosts, PublicKey, SessionKeys};
use wire::{ErrorCode, Msg, Op, Request, TRANSPORT_UDP};

use connect::datagram::{self, setup, UdpLink};
use connect::error::TransferError;
use connect::framed::{FrameReader, FrameWriter};
use connect::handshake;
use connect::handshake::CONTROL_PROTECTION;
use connect::join::{client_join, keyed, DataPlan};
use connect::net::BufferLimits;
use connect::progress::{Mark, Progress};
use connect::sizing::{size_udp_buffers, udp_buffer};
use connect::warmup;

use super::config::{choose_transport, ClientConfig, KnownPath, ServerTrust, Transport};
use super::dial::{
    addresses, auto_streams, dial, dial_among, stream_buffer, Dialer, EarlyStreams, Joining,
    Pending, Warm,
};
use super::report::Tail;
use super::route::SshRoute;

/// How long a push waits for a zero scan that has found nothing but zeros
/// so far, to send it without data connections (P-29): up to a round trip,
/// which it saves, within these bounds.
pub(super) const ZERO_WAIT_MIN: Duration = Duration::from_millis(20);
pub(super) const ZERO_WAIT_MAX: Duration = Duration::from_millis(200);

/// A control connection, ready for one request: authenticated, or dialled
/// to a server whose key is pinned and waiting to carry the request in its
/// pinned start (P-48).
pub struct Connected {
    pub(super) cfg: ClientConfig,
    pub(super) addr: SocketAddr,
    /// The keyed control connection; `None` while `pending`.
    pub(super) ctrl: Option<Control>,
    /// Dialled or being dialled, not yet keyed: the pinned start waits
    /// for the request.
    pub(super) pending: Option<Pending>,
    /// The request rode in the pinned start, and the server took it.
    pub(super) early: bool,
    /// The round trip the handshake measured; while `pending`, the known
    /// path's.
    pub(super) rtt: Duration,
    /// The UDP port the server opened in the handshake, or 0 (P-23).
    pub(super) udp_port: u16,
    pub(super) started: Instant,
    pub(super) progress: Arc<Progress>,
    /// `haul probe`: echo measurements to make once the UDP channel is set
    /// up, over this span, and what they showed (P-36).
    pub(super) echo_span: Option<Duration>,
    pub(super) echo: Option<datagram::echo::EchoReport>,
    /// A session keyed in the ssh greetings: where its data goes (P-27).
    pub(super) route: Option<SshRoute>,
    /// The daemon's key from the handshake.
    pub(super) server_key: Option<secure::PublicKey>,
}

/// The keyed control connection and the session's keys.
pub(super) struct Control {
    pub(super) r: FrameReader,
    pub(super) w: FrameWriter,
    pub(super) keys: SessionKeys,
}

/// The client's UDP socket once its hello has gone (P-23), with the
/// session's datagram keys.
pub(super) struct HelloSent {
    channel: udp::UdpChannel,
    hello: setup::Hello,
    session: [u8; 16],
    send_key: secure::DatagramKey,
    recv_key: secure::DatagramKey,
}

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

/// The key pinned for the server, where a pinned start may be made
/// (P-48): a daemon whose key is pinned, on a path measured before (its
/// round trip sizes the request), reached directly.
fn pinned_key(cfg: &ClientConfig) -> Option<PublicKey> {
    let ServerTrust::KnownHosts(path) = &cfg.trust else {
        return None;
    };
    if cfg.known_path.is_none() || cfg.relay.is_some() {
        return None;
    }
    KnownHosts::load(path)
        .ok()?
        .pinned(&format!("{}:{}", cfg.host, cfg.port))
}

impl Connected {
    /// Connects to the server. A pinned start to a host of one address
    /// only starts dialling it: its request's data connections are
    /// dialled beside it (P-49), and a failure to connect is reported
    /// with the request.
    pub fn connect(cfg: ClientConfig) -> Result<Connected, TransferError> {
        let started = Instant::now();
        let pinned = pinned_key(&cfg);
        if pinned.is_none() {
            let (addr, stream) = Connected::dial_first(&cfg)?;
            return Connected::establish(cfg, addr, stream, started);
        }
        let addrs = addresses(&cfg)?;
        if let [addr] = addrs[..] {
            let dialer = Dialer::new(&cfg, cfg.tuning.clone());
            let dialling = std::thread::spawn(move || dialer.connect(&addr));
            let mut c = Connected::unkeyed(cfg, addr, started, pinned);
            c.pending = Some(Pending::Dialling(dialling));
            return Ok(c);
        }
        let (addr, stream) = dial_among(&cfg, &addrs)?;
        Connected::establish(cfg, addr, stream, started)
    }

    /// Connects to the first address of the server that answers. Fails
    /// with `Connect` (3) if none does.
    pub fn dial_first(cfg: &ClientConfig) -> Result<(SocketAddr, TcpStream), TransferError> {
        if cfg.relay.is_some() {
            // Relayed: the address is the client's to know.
            let addr = SocketAddr::from(([0, 0, 0, 0], cfg.port));
            return Ok((addr, dial(&addr, cfg)?));
        }
        dial_among(cfg, &addresses(cfg)?)
    }

    /// Authenticates over a connection [`Connected::dial_first`] made; to a
    /// server whose key is pinned, on a path already measured, the
    /// handshake waits for the request, to carry it (P-48).
    pub fn establish(
        cfg: ClientConfig,
        addr: SocketAddr,
        stream: TcpStream,
        started: Instant,
    ) -> Result<Connected, TransferError> {
        let pinned = pinned_key(&cfg);
        let mut c = Connected::unkeyed(cfg, addr, started, pinned);
        c.progress.timeline.mark(Mark::Connected);
        match pinned {
            Some(_) => c.pending = Some(Pending::Ready(stream)),
            None => c.handshake(stream)?,
        }
        Ok(c)
    }

    /// A client of `addr` with no control connection yet.
    fn unkeyed(
        cfg: ClientConfig,
        addr: SocketAddr,
        started: Instant,
        pinned: Option<PublicKey>,
    ) -> Connected {
        Connected {
            rtt: cfg.known_path.map_or(Duration::ZERO, |k| k.rtt),
            cfg,
            addr,
            ctrl: None,
            pending: None,
            early: false,
            udp_port: 0,
            started,
            progress: Arc::new(Progress::default()),
            echo_span: None,
            echo: None,
            route: None,
            server_key: pinned,
        }
    }

    /// What the client wishes for in its handshake: any transport but TCP
    /// may end on the UDP channel, so its socket is asked for now, and the
    /// hello can ride behind the request (P-23).
    fn wishes(&self) -> wire::HandshakeWishes {
        wire::HandshakeWishes {
            udp_port: self.cfg.transport != Transport::Tcp,
        }
    }

    /// Noise XX, which checks the server's key against the pins.
    fn handshake(&mut self, mut stream: TcpStream) -> Result<(), TransferError> {
        let cfg = &self.cfg;
        let est = handshake::client(&mut stream, &cfg.identity, self.wishes(), |key| {
            check_server(cfg, key)
        })?;
        self.keyed_by(stream, est)
    }

    /// The pinned start (P-48), carrying `request` (an encoded request, or
    /// nothing). Returns whether the server took the request. A server
    /// that cannot read it (its key changed) is dialled again for XX,
    /// whose check says so.
    fn pinned_start(
        &mut self,
        mut stream: TcpStream,
        request: &[u8],
    ) -> Result<bool, TransferError> {
        let Some(key) = self.server_key else {
            self.handshake(stream)?;
            return Ok(false);
        };
        let wishes = self.wishes();
        match handshake::client_pinned(&mut stream, &self.cfg.identity, &key, wishes, request)? {
            Some((est, early)) => {
                self.keyed_by(stream, est)?;
                Ok(early)
            }
            None => {
                tracing::info!("the pinned start was not answered; handshaking in full");
                let stream = dial(&self.addr, &self.cfg)?;
                self.handshake(stream)?;
                Ok(false)
            }
        }
    }

    fn keyed_by(
        &mut self,
        stream: TcpStream,
        est: handshake::Established,
    ) -> Result<(), TransferError> {
        self.progress.timeline.mark(Mark::Authenticated);
        let control = keyed(
            stream,
            &est.keys,
            0,
            CONTROL_PROTECTION,
            true,
            &self.progress,
        )?;
        self.ctrl = Some(Control {
            r: control.reader,
            w: control.writer,
            keys: est.keys,
        });
        self.rtt = est.rtt;
        self.udp_port = est.udp_port;
        self.server_key = Some(est.peer);
        Ok(())
    }

    /// The keyed control connection; a pending one is keyed now, with no
    /// request to carry.
    pub(super) fn ctrl(&mut self) -> Result<&mut Control, TransferError> {
        if let Some(pending) = self.pending.take() {
            let stream = pending.connected(&self.progress)?;
            self.pinned_start(stream, &[])?;
        }
        self.ctrl.as_mut().ok_or_else(|| {
            TransferError::new(
                ErrorCode::Protocol,
                "the control connection was never keyed",
            )
        })
    }

    /// The keyed control connection, taken for the engine.
    pub(super) fn take_ctrl(&mut self) -> Result<Control, TransferError> {
        self.ctrl()?;
        self.ctrl.take().ok_or_else(|| {
            TransferError::new(
                ErrorCode::Protocol,
                "the control connection was never keyed",
            )
        })
    }

    /// Sends `req`: in the pinned start where one is pending (P-48), else
    /// as the first control message. The outer error is the handshake's;
    /// the inner one, the send's, is reported after the server's welcome
    /// or refusal, which explains it better.
    pub(super) fn send_request(
        &mut self,
        req: &Request,
    ) -> Result<std::io::Result<()>, TransferError> {
        let msg = Msg::Request(req.clone());
        if let Some(pending) = self.pending.take() {
            let stream = pending.connected(&self.progress)?;
            if self.pinned_start(stream, &msg.encode())? {
                self.early = true;
                return Ok(Ok(()));
            }
        }
        Ok(self.ctrl()?.w.send_msg(&msg))
    }

    /// The daemon's key, as its handshake proved it; `None` for a session
    /// keyed over ssh.
    pub fn server_key(&self) -> Option<secure::PublicKey> {
        self.server_key
    }

    /// The address the control connection reached.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn rtt(&self) -> Duration {
        self.rtt
    }

    /// Reads the server's welcome: it accepted our key and has room.
    pub(super) fn await_welcome(&mut self) -> Result<(), TransferError> {
        let r = &mut self.ctrl()?.r;
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

    pub(super) fn streams(&self) -> (u16, u64) {
        let window = BufferLimits::read().stream_window(self.cfg.tuning.force_buffer.is_some());
        (
            self.cfg
                .streams
                .or(self.cfg.advice.map(|a| a.streams))
                .unwrap_or_else(|| auto_streams(self.rtt, self.target_rate(), window)),
            window,
        )
    }

    /// The rate the TCP streams are sized for: the `--rate` cap, else a
    /// quarter more than the last transfer to this host measured (at a
    /// similar round trip), else none (10 Gbit/s is assumed). Sized for
    /// 10 Gbit/s where buffers can be forced, a 1 Gbit/s path at 150 ms
    /// got 6 streams, whose BBR flows overfilled its queue: 635 Mbit/s for
    /// 1 GiB where 2 streams moved 742 (0.1% loss: 579 against 737; 1%:
    /// 452 against 685).
    pub(super) fn target_rate(&self) -> Option<u64> {
        self.cfg.rate.or_else(|| {
            let k = self.cfg.known_path.filter(|k| k.fits(self.rtt))?;
            let rate = k.rate.max(k.tcp_rate);
            (rate > 0).then_some(rate.saturating_mul(5) / 4)
        })
    }

    /// A request for `op` on `paths` over `streams` data connections, with
    /// this client's settings; not recursive, no sources' options, not
    /// gated (callers set those they need).
    pub(super) fn build_request(&self, op: Op, paths: Vec<String>, streams: u16) -> Request {
        let protection = self.cfg.protection.wire_code();
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
                // The last try within a day got no UDP channel (P-23).
                (Transport::Auto, None) if self.cfg.udp_blocked => Transport::Tcp,
                (t, _) => choose_transport(t, self.rtt),
            }
            .wire(),
            contents: false,
            preserve: self.cfg.preserve,
            compress: self.cfg.compress.to_wire().0,
            compress_level: self.cfg.compress.to_wire().1,
            sync: wire::SyncOptions {
                gated: false,
                ..self.cfg.sync
            },
            basis: match op {
                Op::Push => self.cfg.basis.clone().unwrap_or_default(),
                _ => String::new(),
            },
            shard: match op {
                Op::Push => self.cfg.shard.clone(),
                _ => None,
            },
            itemize: self.cfg.itemize && op == Op::Push,
            share: transfer::Sending::share_code(self.cfg.share),
            select: match op {
                Op::Push | Op::Pull => self.cfg.select.clone(),
                _ => wire::Selection::default(),
            },
        }
    }

    /// Sends `req`, reads the welcome and the answer, and opens the data
    /// path the answer names.
    pub(super) fn request(&mut self, req: Request) -> Result<(DataPlan, bool), TransferError> {
        let requested = req.streams;
        let asked_udp = req.transport == TRANSPORT_UDP;
        let asked_at = Instant::now();
        // The hello goes right before the request, to the port message two
        // named; the server answers it once it accepts (P-23). Before, not
        // behind: its packet train then crosses the path while the server
        // is idle, not while it reads the request and sets the session up.
        // A server that named none there opens its socket once it knows
        // the client, and names it in `Accept`: the hello then follows that.
        // A pinned start carries the request in its first message: the
        // hello follows the answer that names the port (P-48).
        let pinned = self.pending.is_some();
        // The data connections are dialled all at once, right behind the
        // request: the server holds their joins until it accepts (P-20),
        // so their round trip overlaps the answer's instead of following
        // it. A pinned start dials them with its message one: they join as
        // its answer brings the keys, and data leaves as `Accept` arrives.
        // A keyed session's streams wait for its direct check, so that
        // none joins twice by two routes. A push's streams warm up while
        // they wait for the keys (P-49).
        let streams_now = !asked_udp && requested > 0 && self.route.is_none();
        let warm = match req.op {
            Op::Push => Warm::Send,
            Op::Pull => Warm::Ask,
            _ => Warm::Not,
        };
        let early = (pinned && streams_now)
            .then(|| self.dial_streams_early(requested, warm, warm == Warm::Ask));
        let mut sent = match pinned {
            true => self.send_request(&req)?,
            false => Ok(()),
        };
        let late_udp = asked_udp && self.udp_port == 0;
        let hello = (asked_udp && !late_udp).then(|| self.udp_hello());
        if !pinned {
            sent = self.send_request(&req)?;
        }
        let joining = match early {
            Some(early) if sent.is_ok() => Some(early.join_with(&self.ctrl()?.keys)),
            _ => (streams_now && sent.is_ok())
                .then(|| self.dial_streams(requested, warm == Warm::Ask))
                .transpose()?,
        };
        // A refusal (unknown key, busy) explains a failed send better.
        self.await_welcome()?;
        sent.map_err(|e| TransferError::lost("sending the request", &e))?;
        let (session, streams, udp_port, server_gated) = match self.ctrl()?.r.read_msg() {
            Ok(Some(Msg::Accept {
                session,
                streams,
                udp_port,
                gated,
            })) => (session, streams, udp_port, gated),
            Ok(Some(Msg::Error { code, message })) => {
                return Err(TransferError::new(code, format!("server: {message}")))
            }
            // A server that stops (restarting, killed) closes before it
            // answers: the connection was lost, not the protocol broken.
            Ok(None) => {
                return Err(TransferError::new(
                    ErrorCode::ConnectionLost,
                    "the server closed the connection before answering the request",
                ))
            }
            Ok(_) => {
                return Err(TransferError::new(
                    ErrorCode::Protocol,
                    "server answered the request with something else",
                ))
            }
            Err(e) => return Err(e.into_transfer("waiting for the server's answer")),
        };
        self.progress.timeline.mark(Mark::Accepted);
        let mut hello = hello;
        if late_udp {
            self.udp_port = udp_port;
            hello = Some(self.udp_hello());
        }
        if self.route.is_some() {
            // No handshake timed the path: the answer did, through the ssh
            // channel (which adds its own little time to it).
            self.rtt = asked_at.elapsed();
            hello = self.settle_route(hello)?;
        }
        let refusal = if session != self.ctrl()?.keys.session_id() {
            Some("server named another session".to_string())
        } else if streams == 0 || streams > requested {
            Some(format!(
                "server asked for {streams} streams where {requested} were offered"
            ))
        } else if asked_udp && !late_udp && udp_port != self.udp_port {
            Some(format!(
                "server named UDP port {udp_port} in its answer but {} in the handshake",
                self.udp_port
            ))
        } else {
            None
        };
        if let Some(message) = refusal {
            // Tell the server, so it stops waiting for data connections.
            let _ = self.ctrl()?.w.send_msg(&Msg::Error {
                code: ErrorCode::Protocol,
                message: message.clone(),
            });
            return Err(TransferError::new(ErrorCode::Protocol, message));
        }
        let progress = self.progress();
        if let Some(hello) = hello {
            let known = self.known_udp(pinned);
            match hello.and_then(|h| match known {
                Some(k) => self.udp_known(h, k),
                None => self.udp_setup(h),
            }) {
                Ok((link, from_server)) => {
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
                    self.ctrl()?
                        .w
                        .send_msg(&Msg::UseTransport {
                            udp_payload: link.payload as u16,
                            path_rate: from_server,
                        })
                        .map_err(|e| TransferError::lost("confirming the UDP channel", &e))?;
                    progress.timeline.mark(Mark::DataPath);
                    return Ok((DataPlan::Udp(Box::new(link)), server_gated));
                }
                Err(why) if self.cfg.transport == Transport::Udp => {
                    let message = format!("UDP data channel failed: {why}; try --transport tcp");
                    let _ = self.ctrl()?.w.send_msg(&Msg::Error {
                        code: ErrorCode::Connect,
                        message: message.clone(),
                    });
                    return Err(TransferError::new(ErrorCode::Connect, message));
                }
                Err(why) => {
                    Progress::set(&progress.udp_failed, 1);
                    if let Some(f) = &self.cfg.notice {
                        f(&format!(
                            "UDP data channel unavailable ({why}); using TCP streams"
                        ));
                    }
                    tracing::info!("UDP data channel unavailable ({why}); using TCP streams");
                    self.ctrl()?
                        .w
                        .send_msg(&Msg::UseTransport {
                            udp_payload: 0,
                            path_rate: 0,
                        })
                        .map_err(|e| TransferError::lost("falling back to TCP", &e))?;
                }
            }
        }
        Progress::set(&progress.streams, streams as u64);
        let mut joining = match joining {
            Some(j) => j,
            None => self.dial_streams(streams, warm == Warm::Ask)?,
        };
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
            .map(|c| {
                progress.timeline.mark(Mark::DataPath);
                (DataPlan::Tcp(c), server_gated)
            })
    }

    /// Dials data connections `1..=streams` and joins them to the session
    /// (P-20), each on its own thread; `receiving` where the server sends.
    fn dial_streams(&mut self, streams: u16, receiving: bool) -> Result<Joining, TransferError> {
        let keys = self.ctrl()?.keys.clone();
        Ok(self
            .dial_streams_early(streams, Warm::Not, receiving)
            .join_with(&keys))
    }

    /// Dials data connections `1..=streams` now, each on its own thread,
    /// before the session has keys: each joins (P-20) once
    /// [`EarlyStreams::join_with`] hands it them, and is closed if it
    /// never does. One that is connected before its keys come warms up
    /// meanwhile as `warm` says (P-49); `receiving` where the server sends.
    /// The RTT must be known (measured,
    /// or a known path's).
    fn dial_streams_early(&mut self, streams: u16, warm: Warm, receiving: bool) -> EarlyStreams {
        // Where buffers can be forced, size each data connection's to its
        // share of the path's BDP instead of the maximum. Not from a known
        // rate where this side receives: the window must cover a standing
        // queue too (a pull's, sized so, held 6 streams to 776 Mbit/s on
        // a 1 Gbit/s, 150 ms path where a first pull's moved 800).
        let mut tuning = self.cfg.tuning.clone();
        if tuning.force_buffer.is_some() {
            let rate = match receiving {
                true => self.cfg.rate,
                false => self.target_rate(),
            };
            tuning.force_buffer = Some(stream_buffer(self.rtt, rate, streams));
        }
        let mut dialer = Dialer::new(&self.cfg, tuning);
        dialer.again = Some(connect::race::redial_after(self.rtt));
        // A keyed session's direct check left a connection: stream 1.
        let mut spare = self.route.as_mut().and_then(|r| r.spare.take());
        let (mut joining, mut keys) = (Vec::new(), Vec::new());
        for i in 1..=streams {
            let (dialer, addr) = (dialer.clone(), self.data_addr());
            let (protection, progress) = (self.cfg.protection, self.progress());
            let ready = spare.take();
            let (tx, rx) = std::sync::mpsc::channel::<SessionKeys>();
            keys.push(tx);
            joining.push(std::thread::spawn(move || {
                let s = match ready {
                    Some(s) => {
                        dialer.tune(&s);
                        s
                    }
                    None => dialer.connect(&addr)?,
                };
                let (keys, asked) = match rx.try_recv() {
                    Ok(keys) => (Ok(keys), false),
                    Err(_) => {
                        let asked = warm.meanwhile(&s);
                        (rx.recv(), asked)
                    }
                };
                let keys = keys.map_err(|_| {
                    TransferError::new(
                        ErrorCode::Connect,
                        "the session ended before its data connections could join",
                    )
                })?;
                let mut s = s;
                if asked {
                    warmup::past_answer(&mut s, handshake::HANDSHAKE_TIMEOUT)?;
                }
                client_join(s, &keys, i, protection, &progress)
            }));
        }
        EarlyStreams { joining, keys }
    }

    /// Opens the client's UDP socket and sends the hello to the port the
    /// server opened in the handshake (P-23).
    pub(super) fn udp_hello(&mut self) -> Result<HelloSent, String> {
        if self.udp_port == 0 {
            return Err("the server offered no UDP port".into());
        }
        let keys = self.ctrl().map_err(|e| e.message)?.keys.clone();
        let server = SocketAddr::new(self.data_addr().ip(), self.udp_port);
        let local: SocketAddr = if server.is_ipv6() {
            "[::]:0".parse().expect("literal")
        } else {
            "0.0.0.0:0".parse().expect("literal")
        };
        let mut channel = udp::UdpChannel::bind(local).map_err(|e| e.to_string())?;
        let (send_key, recv_key) = datagram::keys(&keys, self.cfg.protection, true);
        let hello = setup::client_hello(&mut channel, server, keys.session_id(), &send_key)
            .map_err(|e| e.0)?;
        Ok(HelloSent {
            channel,
            hello,
            session: keys.session_id(),
            send_key,
            recv_key,
        })
    }

    /// Sets up the UDP channel once the server accepted: the hello's
    /// answer, path-MTU probes, buffers sized to the path. With the link,
    /// the rate the server's train reached this host at (0: unmeasured),
    /// for `UseTransport`.
    fn udp_setup(&self, sent: HelloSent) -> Result<(UdpLink, u64), String> {
        let HelloSent {
            mut channel,
            hello,
            session,
            send_key,
            recv_key,
        } = sent;
        let found = setup::client(&mut channel, hello, session, &send_key, &recv_key, self.rtt)
            .map_err(|e| e.0)?;
        tracing::debug!(
            "UDP set-up: {} B datagrams; trains crossed at {:?} B/s to the server, {:?} B/s from it",
            found.payload,
            found.to_server,
            found.from_server
        );
        let link = self.udp_link(
            channel,
            (send_key, recv_key),
            found.payload,
            found.to_server,
        );
        Ok((link, found.from_server.unwrap_or(0)))
    }

    /// The link over a set-up channel, its buffers sized to the path.
    fn udp_link(
        &self,
        channel: udp::UdpChannel,
        (send_key, recv_key): (secure::DatagramKey, secure::DatagramKey),
        payload: usize,
        path_rate: Option<u64>,
    ) -> UdpLink {
        let want = udp_buffer(self.rtt, self.cfg.rate);
        size_udp_buffers(&channel, want, &self.cfg.tuning, &self.progress);
        UdpLink {
            channel,
            send_key,
            recv_key,
            payload,
            rtt: self.rtt,
            path_rate,
            workers: datagram::workers(),
            backlog: Vec::new(),
            silence: self.cfg.tuning.timeout,
        }
    }

    /// The datagram size and rate of the known path, where a pinned start
    /// may send data right behind its hello (P-48): the path measured
    /// both, at about this round trip, and its datagrams fit this host's
    /// route. `haul probe` always sets the channel up, to measure it.
    fn known_udp(&self, pinned: bool) -> Option<KnownPath> {
        let k = self.cfg.known_path?;
        (pinned && self.echo_span.is_none() && k.udp_payload > 0 && k.fits(self.rtt)).then_some(k)
    }

    /// The UDP channel of a known path, without set-up's round trip: the
    /// hello has gone, and the data follows it at once (P-48). The server
    /// keeps what arrives before the client's choice. With the link, the
    /// known rate, for `UseTransport` (a pull's server starts at it).
    fn udp_known(&self, sent: HelloSent, k: KnownPath) -> Result<(UdpLink, u64), String> {
        let payload = k.udp_payload as usize;
        if payload > sent.hello.largest() || payload < wire::datagram::MIN_PAYLOAD as usize {
            return self.udp_setup(sent);
        }
        tracing::debug!("UDP: the known path's {payload} B datagrams, no set-up");
        let keys = (sent.send_key, sent.recv_key);
        Ok((self.udp_link(sent.channel, keys, payload, None), k.rate))
    }

    /// The counters of this connection, for a progress display.
    pub fn progress(&self) -> Arc<Progress> {
        self.progress.clone()
    }

    pub(super) fn tail(&self) -> Tail {
        Tail {
            progress: self.progress.clone(),
            started: self.started,
            rtt: self.rtt,
            early: self.early,
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
    fn udp_buffer_rules() {
        let ms = Duration::from_millis;
        // UDP buffers: a BDP at the target rate, within bounds.
        use connect::sizing::{UDP_BUFFER_MAX, UDP_BUFFER_MIN};
        assert_eq!(udp_buffer(ms(1), None), UDP_BUFFER_MIN);
        assert_eq!(udp_buffer(ms(150), None), UDP_BUFFER_MAX);
        assert_eq!(udp_buffer(ms(150), Some(125_000_000)), 18_750_000);
    }
}
