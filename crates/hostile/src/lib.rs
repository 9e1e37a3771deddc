//! A hostile haul peer, for tests only.
//!
//! It is built from the project's own crates: the real preamble, the real
//! Noise XX handshake (`connect::handshake`) with a real key, the real
//! per-stream keys, sealing and framing (`connect::join`,
//! `connect::framed`), the real UDP set-up (`connect::datagram::setup`) and
//! the real encoders of `wire`. Everything that is not authentication
//! is then up to the test: it sends whatever manifests, blocks, datagrams
//! and tunnel frames it crafts, in any order, valid or not, and reads what
//! the other side answers.
//!
//! - [`Client`]: connects to a daemon (`haul serve`), authenticates with a
//!   key the daemon authorizes, sends a [`wire::Request`] and opens the
//!   data path the answer names (TCP data connections or the UDP
//!   channel). Then [`Client::send`] (control messages),
//!   [`Client::send_block`] (block frames), [`Client::send_raw`] (bytes
//!   as they are, for a frame's length alone), [`Client::datagram`]
//!   (sealed UDP chunks with any sequence number) and
//!   [`Client::finish`] (what the daemon answered, until its `Error` or
//!   `Done`).
//! - [`Server`]: a server that a real `haul cp HOST:PORT:path dst` pulls
//!   from: it accepts the client's handshake (the client pins its key on
//!   first use), reads the request, accepts it, joins the data
//!   connections, and hands the test a [`Served`] session to send a
//!   crafted manifest and blocks on.
//! - [`msgs`]: builders for manifest entries and blocks.
//! - [`stdio`]: starts `haul serve --stdio` as ssh would, swaps greetings,
//!   and connects a [`Client`] with the one-time key.
//! - [`lanes`]: tunnel frames on a tunnel session's lanes (P-37).
//! - [`play`]: hostile senders played against the receiving state
//!   machines, without sockets (P-40), for property tests and fuzzing.
//!
//! Every read has a timeout; nothing here waits without bound.

pub mod lanes;
pub mod msgs;
pub mod play;
pub mod stdio;

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use connect::datagram::{self, setup};
use connect::framed::{FrameError, FrameReader, FrameWriter, LEN_PREFIX};
use connect::handshake;
use connect::handshake::CONTROL_PROTECTION;
use connect::join::{client_join, keyed, server_join, DataConn};
use connect::{Progress, TransferError};
use endpoint::server::protection_of;
use secure::{DatagramKey, Keypair, Protection, SessionKeys};
use wire::datagram::ChunkHeader;
use wire::{
    BlockHeader, ConnKind, ErrorCode, HandshakeWishes, Msg, Request, Summary, BLOCK_HEADER_LEN,
    TRANSPORT_UDP,
};

pub use msgs::*;

/// How long a hostile peer waits for any one answer by default.
pub const WAIT: Duration = Duration::from_secs(20);

/// The `protection` code of a request for this host's best encrypting AEAD.
pub fn best_protection() -> u8 {
    Protection::best_encrypting().wire_code()
}

/// What the other side said before its control connection ended, or
/// before the test stopped listening.
#[derive(Debug, Default)]
pub struct Ended {
    /// Its `Error`, if it sent one.
    pub error: Option<(ErrorCode, String)>,
    /// Its `Done`, if it sent one.
    pub done: Option<Summary>,
    /// Every other message it sent, in order.
    pub msgs: Vec<Msg>,
    /// Why reading stopped: `closed` (a clean end of stream), `timed out`,
    /// or the read error.
    pub how: String,
}

impl Ended {
    /// The error code it ended with, if any.
    pub fn code(&self) -> Option<ErrorCode> {
        self.error.as_ref().map(|(c, _)| *c)
    }

    /// One line for a failed assertion.
    pub fn describe(&self) -> String {
        let shown: Vec<String> = self.msgs.iter().take(8).map(short).collect();
        format!(
            "error: {:?}, done: {:?}, reading ended: {}, other messages ({}): [{}]",
            self.error,
            self.done,
            self.how,
            self.msgs.len(),
            shown.join(", ")
        )
    }
}

/// A message, shortly.
fn short(m: &Msg) -> String {
    let s = format!("{m:?}");
    if s.chars().count() > 120 {
        format!("{}…", s.chars().take(120).collect::<String>())
    } else {
        s
    }
}

/// Reads control messages until an `Error` or `Done`, the end of the
/// connection, or `limit`.
fn read_until_end(r: &mut FrameReader, limit: Duration) -> Ended {
    let deadline = Instant::now() + limit;
    let mut ended = Ended::default();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            ended.how = "timed out".into();
            return ended;
        }
        r.get_ref()
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok();
        match r.read_msg() {
            Ok(Some(Msg::Error { code, message })) => {
                ended.error = Some((code, message));
                ended.how = "an Error".into();
                return ended;
            }
            Ok(Some(Msg::Done(s))) => {
                ended.done = Some(s);
                ended.how = "Done".into();
                return ended;
            }
            Ok(Some(m)) => ended.msgs.push(m),
            Ok(None) => {
                ended.how = "closed".into();
                return ended;
            }
            Err(FrameError::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                ended.how = "timed out".into();
                return ended;
            }
            Err(e) => {
                ended.how = format!("{:?}", e);
                return ended;
            }
        }
    }
}

/// Reads messages for up to `limit`, stopping early once `stop` says so
/// for one of them. Returns every message read, and how reading ended.
fn read_for(
    r: &mut FrameReader,
    limit: Duration,
    mut stop: impl FnMut(&Msg) -> bool,
) -> (Vec<Msg>, String) {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (got, "timed out".into());
        }
        r.get_ref()
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok();
        match r.read_msg() {
            Ok(Some(m)) => {
                let end = stop(&m) || matches!(m, Msg::Error { .. } | Msg::Done(_));
                got.push(m);
                if end {
                    return (got, "stopped".into());
                }
            }
            Ok(None) => return (got, "closed".into()),
            Err(FrameError::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return (got, "timed out".into())
            }
            Err(e) => return (got, format!("{e:?}")),
        }
    }
}

/// Writes one block frame: the header (`h`, whose `wire_len` is taken
/// as given) and `data` as they are, sealed like any block.
fn write_block(w: &mut FrameWriter, h: &BlockHeader, data: &[u8]) -> io::Result<()> {
    let mut buf = vec![0u8; LEN_PREFIX + BLOCK_HEADER_LEN];
    h.encode_into(&mut buf[LEN_PREFIX..]);
    buf.extend_from_slice(data);
    w.send_block_in_place(&mut buf)
}

/// What the daemon answered to a request.
#[derive(Debug, Clone, Copy)]
pub struct Accepted {
    pub session: [u8; 16],
    pub streams: u16,
    pub udp_port: u16,
    pub gated: bool,
}

/// The UDP channel, once set up: datagrams go out sealed with the
/// session's client-to-server datagram key.
pub struct Udp {
    pub channel: udp::UdpChannel,
    pub send_key: DatagramKey,
    pub recv_key: DatagramKey,
    /// Payload bytes per datagram that set-up found.
    pub payload: usize,
}

/// A hostile client of a daemon.
pub struct Client {
    pub ctrl_r: FrameReader,
    pub ctrl_w: FrameWriter,
    pub keys: SessionKeys,
    pub addr: SocketAddr,
    pub rtt: Duration,
    /// The UDP port the daemon named in handshake message two (0: none).
    pub udp_port: u16,
    /// Data connections `1..=streams`, in order, once accepted.
    pub data: Vec<DataConn>,
    pub udp: Option<Udp>,
    progress: Arc<Progress>,
}

impl Client {
    /// Connects and completes the handshake with `identity`, wishing for a
    /// UDP port if `wish_udp`. The daemon's key is taken as it is.
    pub fn connect(
        addr: SocketAddr,
        identity: &Keypair,
        wish_udp: bool,
    ) -> Result<Client, TransferError> {
        let mut stream = TcpStream::connect_timeout(&addr, WAIT)
            .map_err(|e| TransferError::new(ErrorCode::Connect, e.to_string()))?;
        stream.set_nodelay(true).ok();
        let wishes = HandshakeWishes { udp_port: wish_udp };
        let est = handshake::client(&mut stream, identity, wishes, |_| Ok(()))?;
        Client::over(stream, addr, est)
    }

    /// A client on a connection whose handshake is done.
    pub fn over(
        stream: TcpStream,
        addr: SocketAddr,
        est: handshake::Established,
    ) -> Result<Client, TransferError> {
        let progress = Arc::new(Progress::default());
        let control = keyed(stream, &est.keys, 0, CONTROL_PROTECTION, true, &progress)?;
        Ok(Client {
            ctrl_r: control.reader,
            ctrl_w: control.writer,
            keys: est.keys,
            addr,
            rtt: est.rtt,
            udp_port: est.udp_port,
            data: Vec::new(),
            udp: None,
            progress,
        })
    }

    /// Sends `req`, reads the welcome and the answer, then opens the data
    /// path: the UDP channel for `transport = 1` (set up as the real
    /// client does, then confirmed with `UseTransport`), else the
    /// accepted number of TCP data connections, joined. A refusal is the
    /// daemon's `Error`, as `TransferError`.
    pub fn request(&mut self, req: Request) -> Result<Accepted, TransferError> {
        let udp = req.transport == TRANSPORT_UDP;
        let protection = protection_of(req.protection);
        let requested = req.streams;
        // The hello goes right before the request to the port message two
        // named, or, where it named none, after `Accept` names one (P-23).
        let hello = (udp && self.udp_port != 0)
            .then(|| self.hello(protection))
            .transpose()?;
        self.ctrl_w
            .send_msg(&Msg::Request(req))
            .map_err(|e| TransferError::lost("sending the request", &e))?;
        let mut answers = Vec::new();
        for _ in 0..2 {
            let (mut got, how) = read_for(&mut self.ctrl_r, WAIT, |_| true);
            match got.pop() {
                Some(m) => answers.push(m),
                None => {
                    return Err(TransferError::new(
                        ErrorCode::ConnectionLost,
                        format!("no answer to the request ({how})"),
                    ))
                }
            }
            if matches!(answers.last(), Some(Msg::Error { .. })) {
                break;
            }
        }
        let accepted = match answers.as_slice() {
            [Msg::Welcome, Msg::Accept {
                session,
                streams,
                udp_port,
                gated,
            }] => Accepted {
                session: *session,
                streams: *streams,
                udp_port: *udp_port,
                gated: *gated,
            },
            [.., Msg::Error { code, message }] => {
                return Err(TransferError::new(*code, message.clone()))
            }
            other => {
                return Err(TransferError::new(
                    ErrorCode::Protocol,
                    format!("unexpected answer: {other:?}"),
                ))
            }
        };
        let hello = match hello {
            None if udp && accepted.udp_port != 0 => {
                self.udp_port = accepted.udp_port;
                Some(self.hello(protection)?)
            }
            None if udp => {
                return Err(TransferError::new(
                    ErrorCode::Connect,
                    "the daemon offered no UDP port",
                ))
            }
            h => h,
        };
        if let Some((mut channel, hello, send_key, recv_key)) = hello {
            let payload = setup::client(
                &mut channel,
                hello,
                self.keys.session_id(),
                &send_key,
                &recv_key,
                self.rtt,
            )
            .map_err(|e| TransferError::new(ErrorCode::Connect, e.0))?
            .payload;
            self.ctrl_w
                .send_msg(&Msg::UseTransport {
                    udp_payload: payload as u16,
                    path_rate: 0,
                })
                .map_err(|e| TransferError::lost("confirming the UDP channel", &e))?;
            self.udp = Some(Udp {
                channel,
                send_key,
                recv_key,
                payload,
            });
            return Ok(accepted);
        }
        let streams = accepted.streams.min(requested);
        for i in 1..=streams {
            let s = TcpStream::connect_timeout(&self.addr, WAIT)
                .map_err(|e| TransferError::new(ErrorCode::Connect, e.to_string()))?;
            s.set_nodelay(true).ok();
            self.data
                .push(client_join(s, &self.keys, i, protection, &self.progress)?);
        }
        Ok(accepted)
    }

    /// Opens a UDP socket and sends the hello to the daemon's port.
    #[allow(clippy::type_complexity)]
    fn hello(
        &self,
        protection: Protection,
    ) -> Result<(udp::UdpChannel, setup::Hello, DatagramKey, DatagramKey), TransferError> {
        let mut channel = udp::UdpChannel::bind("127.0.0.1:0".parse().expect("literal"))
            .map_err(|e| TransferError::new(ErrorCode::Connect, e.to_string()))?;
        let (send_key, recv_key) = datagram::keys(&self.keys, protection, true);
        let server = SocketAddr::new(self.addr.ip(), self.udp_port);
        let hello = setup::client_hello(&mut channel, server, self.keys.session_id(), &send_key)
            .map_err(|e| TransferError::new(ErrorCode::Connect, e.0))?;
        Ok((channel, hello, send_key, recv_key))
    }

    /// Sends control messages (packed as the real peer packs them).
    pub fn send(&mut self, msgs: &[Msg]) -> io::Result<()> {
        self.ctrl_w.send_msgs(msgs)
    }

    /// Sends one message in a frame of its own.
    pub fn send_one(&mut self, msg: &Msg) -> io::Result<()> {
        let mut buf = vec![0u8; LEN_PREFIX];
        buf.extend_from_slice(&msg.encode());
        self.ctrl_w.send_in_place(&mut buf)
    }

    /// Sends a block frame on data stream `stream` (0-based in
    /// [`Client::data`]).
    pub fn send_block(&mut self, stream: usize, h: &BlockHeader, data: &[u8]) -> io::Result<()> {
        write_block(&mut self.data[stream].writer, h, data)
    }

    /// Writes `bytes` on data stream `stream` as they are, unsealed: a
    /// frame's length alone, say.
    pub fn send_raw(&mut self, stream: usize, bytes: &[u8]) -> io::Result<()> {
        let mut s = self.data[stream].writer.get_ref();
        s.write_all(bytes)
    }

    /// Sends one sealed data datagram with sequence number `seq`.
    pub fn datagram(&self, seq: u64, h: &ChunkHeader, data: &[u8]) -> io::Result<()> {
        let u = self
            .udp
            .as_ref()
            .ok_or_else(|| io::Error::other("no UDP channel"))?;
        let mut out = Vec::with_capacity(u.payload);
        let n = datagram::seal_chunk(&u.send_key, seq, h, data, false, &mut out);
        u.channel.send(&out, n, Duration::from_millis(500))
    }

    /// Reads what the daemon says until its `Error` or `Done`, the end of
    /// the control connection, or `limit`.
    pub fn finish(&mut self, limit: Duration) -> Ended {
        read_until_end(&mut self.ctrl_r, limit)
    }

    /// Reads for up to `limit`, stopping early at a message `stop` picks
    /// (or an `Error` or `Done`).
    pub fn read_for(
        &mut self,
        limit: Duration,
        stop: impl FnMut(&Msg) -> bool,
    ) -> (Vec<Msg>, String) {
        read_for(&mut self.ctrl_r, limit, stop)
    }

    /// Ends every connection of the session at once.
    pub fn close(self) {
        let _ = self.ctrl_w.get_ref().shutdown(std::net::Shutdown::Both);
        for d in &self.data {
            let _ = d.writer.get_ref().shutdown(std::net::Shutdown::Both);
        }
    }
}

/// A hostile server that a real `haul cp` pulls from.
pub struct Server {
    listener: TcpListener,
    key: Keypair,
}

/// One accepted session of a [`Server`].
pub struct Served {
    pub ctrl_r: FrameReader,
    pub ctrl_w: FrameWriter,
    pub keys: SessionKeys,
    /// What the client asked for.
    pub request: Request,
    /// Data connections, index `i` is stream `i + 1`.
    pub data: Vec<DataConn>,
}

impl Server {
    /// Listens on an ephemeral loopback port with a fresh key.
    pub fn bind() -> io::Result<Server> {
        Ok(Server {
            listener: TcpListener::bind("127.0.0.1:0")?,
            key: Keypair::generate(),
        })
    }

    pub fn port(&self) -> u16 {
        self.listener.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    fn accept_one(&self, deadline: Instant) -> Result<TcpStream, TransferError> {
        self.listener.set_nonblocking(true).ok();
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).ok();
                    s.set_nodelay(true).ok();
                    return Ok(s);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(TransferError::new(
                            ErrorCode::ConnectionLost,
                            "no client came",
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(TransferError::lost("accepting", &e)),
            }
        }
    }

    /// Accepts a client within `limit`: the handshake (no UDP port is
    /// offered), `Welcome`, its request, `Accept` with the streams it
    /// asked for (not gated), and its data connections, joined.
    pub fn accept(&self, limit: Duration) -> Result<Served, TransferError> {
        let deadline = Instant::now() + limit;
        let mut stream = self.accept_one(deadline)?;
        let pre = handshake::read_preamble(&mut stream)?;
        if pre.kind != ConnKind::Control {
            return Err(TransferError::new(
                ErrorCode::Protocol,
                "the first connection was not a control connection",
            ));
        }
        let est = handshake::server(&mut stream, &pre, &self.key, || 0)?;
        let progress = Arc::new(Progress::default());
        let control = keyed(stream, &est.keys, 0, CONTROL_PROTECTION, false, &progress)?;
        let (mut ctrl_r, mut ctrl_w) = (control.reader, control.writer);
        ctrl_w
            .send_msg(&Msg::Welcome)
            .map_err(|e| TransferError::lost("welcoming", &e))?;
        let (mut got, how) = read_for(&mut ctrl_r, WAIT, |_| true);
        let request = match got.pop() {
            Some(Msg::Request(r)) => r,
            other => {
                return Err(TransferError::new(
                    ErrorCode::Protocol,
                    format!("no request: {other:?} ({how})"),
                ))
            }
        };
        let protection = protection_of(request.protection);
        ctrl_w
            .send_msg(&Msg::Accept {
                session: est.keys.session_id(),
                streams: request.streams,
                udp_port: 0,
                gated: false,
            })
            .map_err(|e| TransferError::lost("accepting", &e))?;
        if request.transport == TRANSPORT_UDP {
            // No port was offered: the client falls back to TCP, and says
            // so first.
            let (got, how) = read_for(&mut ctrl_r, WAIT, |m| matches!(m, Msg::UseTransport { .. }));
            if !matches!(got.last(), Some(Msg::UseTransport { udp_payload: 0, .. })) {
                return Err(TransferError::new(
                    ErrorCode::Protocol,
                    format!("no fallback to TCP: {got:?} ({how})"),
                ));
            }
        }
        let mut slots: Vec<Option<DataConn>> = (0..request.streams).map(|_| None).collect();
        while slots.iter().any(Option::is_none) {
            let mut s = self.accept_one(deadline)?;
            let pre = handshake::read_preamble(&mut s)?;
            let i = pre.stream as usize;
            if pre.kind != ConnKind::Data || i == 0 || i > slots.len() {
                continue;
            }
            let conn = server_join(s, &est.keys, pre.stream, protection, &progress)?;
            slots[i - 1] = Some(conn);
        }
        Ok(Served {
            ctrl_r,
            ctrl_w,
            keys: est.keys,
            request,
            data: slots.into_iter().flatten().collect(),
        })
    }
}

impl Served {
    pub fn send(&mut self, msgs: &[Msg]) -> io::Result<()> {
        self.ctrl_w.send_msgs(msgs)
    }

    pub fn send_block(&mut self, stream: usize, h: &BlockHeader, data: &[u8]) -> io::Result<()> {
        write_block(&mut self.data[stream].writer, h, data)
    }

    /// Reads what the client says until its `Error` or `Done`, the end of
    /// the control connection, or `limit`.
    pub fn finish(&mut self, limit: Duration) -> Ended {
        read_until_end(&mut self.ctrl_r, limit)
    }

    pub fn read_for(
        &mut self,
        limit: Duration,
        stop: impl FnMut(&Msg) -> bool,
    ) -> (Vec<Msg>, String) {
        read_for(&mut self.ctrl_r, limit, stop)
    }

    pub fn close(self) {
        let _ = self.ctrl_w.get_ref().shutdown(std::net::Shutdown::Both);
        for d in &self.data {
            let _ = d.writer.get_ref().shutdown(std::net::Shutdown::Both);
        }
    }
}

/// A handshake left half done (issue 39): the preamble and Noise message
/// one, wishing for a UDP port if `wish_udp`, then message two read, and
/// nothing more. Returns the connection, still open, and the UDP port the
/// daemon named in message two (0: none).
pub fn half_open(
    addr: SocketAddr,
    identity: &Keypair,
    wish_udp: bool,
) -> io::Result<(TcpStream, u16)> {
    use std::io::Read;
    use wire::{HandshakeAnswer, PreambleReply};
    let mut s = TcpStream::connect_timeout(&addr, WAIT)?;
    s.set_read_timeout(Some(WAIT))?;
    let (mut hs, opening) = handshake::opening(identity, HandshakeWishes { udp_port: wish_udp })
        .map_err(|e| io::Error::other(e.message))?;
    s.write_all(&opening)?;
    let mut reply = [0u8; PreambleReply::LEN];
    s.read_exact(&mut reply)?;
    let m2 = connect::framed::read_raw(&mut s)?;
    let (_, answer) = hs
        .read_reply(&m2)
        .map_err(|e| io::Error::other(e.to_string()))?;
    let port = HandshakeAnswer::decode(&answer)
        .map_err(|e| io::Error::other(e.to_string()))?
        .udp_port;
    Ok((s, port))
}
