//! Runs the sans-IO handshake of `secure` over a TCP connection: the
//! cleartext preamble with its version check (P-1, P-2), then Noise XX
//! (P-3), whose first two messages carry the client's wishes and the
//! server's answer (a UDP port opened a round trip sooner, P-23). Read
//! timeouts bound how long a silent or slow peer can hold us.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use secure::{
    ClientHandshake, Keypair, PinnedClient, PinnedServer, PublicKey, ServerHandshake, SessionKeys,
};
use wire::{
    ConnKind, ErrorCode, HandshakeAnswer, HandshakeWishes, PinnedOpening, Preamble, PreambleReply,
    MAX_EARLY_REQUEST, PREAMBLE_LEN, PROTOCOL_VERSION,
};

use crate::error::TransferError;
use crate::framed::{read_raw, write_raw};

/// Protection of control frames: always encrypted, same cipher everywhere.
pub const CONTROL_PROTECTION: secure::Protection = secure::Protection::ChaCha20Poly1305;

/// How long each handshake step may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

pub struct Established {
    pub keys: SessionKeys,
    /// Time from sending message one (with the preamble, on the client)
    /// to receiving message two.
    pub rtt: Duration,
    pub peer: PublicKey,
    /// The UDP port the server opened for this session in message two,
    /// or 0 (P-23).
    pub udp_port: u16,
}

fn hs_err(e: impl std::fmt::Display) -> TransferError {
    TransferError::new(ErrorCode::Auth, format!("{e}"))
}

fn io_err(what: &str) -> impl Fn(std::io::Error) -> TransferError + '_ {
    move |e| {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            TransferError::new(
                ErrorCode::ConnectionLost,
                format!(
                    "peer did not answer within {}s while {what}",
                    HANDSHAKE_TIMEOUT.as_secs()
                ),
            )
        } else if e.kind() == std::io::ErrorKind::UnexpectedEof {
            TransferError::new(
                ErrorCode::Protocol,
                format!(
                    "peer closed the connection while {what} (not a haul peer, or it refused us)"
                ),
            )
        } else {
            TransferError::lost(what, &e)
        }
    }
}

/// What a client opens a control connection with: its preamble and Noise
/// message one, built on the only reply worth going on with (accepted,
/// our version): one round trip less (P-2). A server that answers
/// anything else has its reply read and reported before message two, and
/// the handshake goes no further.
pub fn opening(
    identity: &Keypair,
    wishes: HandshakeWishes,
) -> Result<(ClientHandshake, Vec<u8>), TransferError> {
    let greeting = Greeting::of(ConnKind::Control);
    let (hs, m1) =
        ClientHandshake::start(identity, &greeting.bound, &wishes.encode()).map_err(hs_err)?;
    Ok((hs, greeting.opening(&m1)))
}

/// A control preamble and the reply a client goes on with (accepted, its
/// version), as both are bound into the handshake (P-2, P-3).
struct Greeting {
    pre: Preamble,
    bound: Vec<u8>,
}

impl Greeting {
    fn of(kind: ConnKind) -> Greeting {
        let pre = Preamble {
            version: PROTOCOL_VERSION,
            kind,
            session: [0; 16],
            stream: 0,
        };
        let expected = PreambleReply {
            version: PROTOCOL_VERSION,
            accepted: true,
        };
        let bound = [&pre.encode()[..], &expected.encode()[..]].concat();
        Greeting { pre, bound }
    }

    /// The preamble and message one, framed, in one write's bytes.
    fn opening(&self, m1: &[u8]) -> Vec<u8> {
        let mut out = self.pre.encode().to_vec();
        out.extend_from_slice(&(m1.len() as u16).to_le_bytes());
        out.extend_from_slice(m1);
        out
    }
}

/// Client side. `check` decides whether the server's key is trusted;
/// `wishes` go in message one.
pub fn client(
    stream: &mut TcpStream,
    identity: &Keypair,
    wishes: HandshakeWishes,
    check: impl FnOnce(&PublicKey) -> Result<(), TransferError>,
) -> Result<Established, TransferError> {
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).ok();
    crate::net::tune_control(stream);
    let (mut hs, opening) = opening(identity, wishes)?;
    let t0 = Instant::now();
    stream
        .write_all(&opening)
        .map_err(io_err("greeting the server"))?;
    read_reply(stream)?;
    let m2 = read_raw(stream).map_err(io_err("handshaking"))?;
    let rtt = t0.elapsed();
    let (server_key, answer) = hs.read_reply(&m2).map_err(hs_err)?;
    check(&server_key)?;
    let answer = HandshakeAnswer::decode(&answer).map_err(|e| {
        TransferError::new(
            ErrorCode::Protocol,
            format!("the server's handshake answer is malformed: {e}"),
        )
    })?;
    if answer.udp_port != 0 && !wishes.udp_port {
        return Err(TransferError::new(
            ErrorCode::Protocol,
            "the server offered a UDP port nobody asked for",
        ));
    }
    let (m3, keys) = hs.finish().map_err(hs_err)?;
    write_raw(stream, &m3).map_err(io_err("handshaking"))?;
    stream.set_read_timeout(None).ok();
    Ok(Established {
        keys,
        rtt,
        peer: server_key,
        udp_port: answer.udp_port,
    })
}

/// Reads the server's preamble reply: its version must be ours.
fn read_reply(stream: &mut TcpStream) -> Result<(), TransferError> {
    let mut reply = [0u8; PreambleReply::LEN];
    stream.read_exact(&mut reply).map_err(|e| {
        // A daemon closes new connections at once while too many from
        // everywhere, or from this address, are unauthenticated (as
        // sshd's MaxStartups): worth trying again.
        let mut e = io_err("reading the server's greeting")(e);
        if e.code == ErrorCode::Protocol {
            e.message += "; a haul daemon also closes new connections at once while too many unauthenticated ones are open (from everywhere, or from this address): try again in a moment";
        }
        e
    })?;
    let reply = PreambleReply::decode(&reply).map_err(|_| {
        let shown = String::from_utf8_lossy(&reply).trim().to_string();
        TransferError::new(
            ErrorCode::Protocol,
            format!("the server is not a haul server (it answered {shown:?})"),
        )
    })?;
    if !reply.accepted || reply.version != PROTOCOL_VERSION {
        return Err(TransferError::new(
            ErrorCode::Protocol,
            format!(
                "the server speaks haul protocol version {}, this client speaks version {PROTOCOL_VERSION}; install the same haul release on both hosts",
                reply.version
            ),
        ));
    }
    Ok(())
}

/// Reads the preamble a client opens with.
pub fn read_preamble(stream: &mut TcpStream) -> Result<Preamble, TransferError> {
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).ok();
    let mut b = [0u8; PREAMBLE_LEN];
    stream
        .read_exact(&mut b)
        .map_err(io_err("reading the client's greeting"))?;
    Preamble::decode(&b)
        .map_err(|e| TransferError::new(ErrorCode::Protocol, format!("not a haul client: {e}")))
}

/// Answers a control preamble (P-2); returns the greeting both sides bind
/// into the handshake.
fn send_reply(stream: &mut TcpStream, pre: &Preamble) -> Result<Vec<u8>, TransferError> {
    crate::net::tune_control(stream);
    let accepted = pre.version == PROTOCOL_VERSION;
    let reply = PreambleReply {
        version: PROTOCOL_VERSION,
        accepted,
    };
    stream
        .write_all(&reply.encode())
        .map_err(io_err("greeting the client"))?;
    if !accepted {
        return Err(TransferError::new(
            ErrorCode::Protocol,
            format!(
                "client speaks protocol version {}, this server speaks {PROTOCOL_VERSION}",
                pre.version
            ),
        ));
    }
    Ok([&pre.encode()[..], &reply.encode()[..]].concat())
}

/// Server side, after [`read_preamble`] returned a control preamble.
/// `open_udp` is called when the client wishes for a UDP port; it returns
/// the port it opened, or 0.
pub fn server(
    stream: &mut TcpStream,
    pre: &Preamble,
    key: &Keypair,
    open_udp: impl FnOnce() -> u16,
) -> Result<Established, TransferError> {
    let greeting = send_reply(stream, pre)?;
    let m1 = read_raw(stream).map_err(io_err("handshaking"))?;
    let t0 = Instant::now();
    let (mut hs, wishes) = ServerHandshake::respond(key, &greeting, &m1).map_err(hs_err)?;
    let wishes = HandshakeWishes::decode(&wishes).map_err(|e| {
        TransferError::new(
            ErrorCode::Protocol,
            format!("the client's handshake wishes are malformed: {e}"),
        )
    })?;
    let udp_port = if wishes.udp_port { open_udp() } else { 0 };
    let answer = HandshakeAnswer {
        udp_port,
        early: false,
    };
    let m2 = hs.reply(&answer.encode()).map_err(hs_err)?;
    write_raw(stream, &m2).map_err(io_err("handshaking"))?;
    let m3 = read_raw(stream).map_err(io_err("handshaking"))?;
    let rtt = t0.elapsed();
    let (peer, keys) = hs.finish(&m3).map_err(hs_err)?;
    stream.set_read_timeout(None).ok();
    Ok(Established {
        keys,
        rtt,
        peer,
        udp_port,
    })
}

/// A pinned start as the client ends it: the session, and whether the
/// server took the request from message one.
pub type PinnedAnswered = (Established, bool);
/// A pinned start as the server ends it: the session, and the request
/// from message one if it took it.
pub type PinnedServed = (Established, Option<Vec<u8>>);

/// A pinned start's message one (P-48), written by [`client_pinned`].
fn pinned_opening(
    identity: &Keypair,
    server: &PublicKey,
    wishes: HandshakeWishes,
    request: &[u8],
) -> Result<(PinnedClient, Vec<u8>), TransferError> {
    let greeting = Greeting::of(ConnKind::Pinned);
    let opening = PinnedOpening {
        wishes,
        time: unix_now(),
        request: request.to_vec(),
    };
    let (hs, m1) = PinnedClient::start(identity, server, &greeting.bound, &opening.encode())
        .map_err(hs_err)?;
    Ok((hs, greeting.opening(&m1)))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Client side of a pinned start (P-48): Noise IK to `server`, the key
/// pinned for it, with `request` (an encoded `Msg::Request`, or empty)
/// in message one. Returns the session and whether the server took the
/// request; `None` when the server closed instead of answering, as one
/// whose key changed does: the caller starts over with [`client`], whose
/// check names the change.
pub fn client_pinned(
    stream: &mut TcpStream,
    identity: &Keypair,
    server: &PublicKey,
    wishes: HandshakeWishes,
    request: &[u8],
) -> Result<Option<PinnedAnswered>, TransferError> {
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).ok();
    crate::net::tune_control(stream);
    let request = if request.len() <= MAX_EARLY_REQUEST {
        request
    } else {
        &[]
    };
    let (hs, opening) = pinned_opening(identity, server, wishes, request)?;
    let t0 = Instant::now();
    stream
        .write_all(&opening)
        .map_err(io_err("greeting the server"))?;
    read_reply(stream)?;
    let m2 = match read_raw(stream) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(io_err("handshaking")(e)),
    };
    let rtt = t0.elapsed();
    let (answer, keys) = hs.finish(&m2).map_err(hs_err)?;
    let answer = HandshakeAnswer::decode(&answer).map_err(|e| {
        TransferError::new(
            ErrorCode::Protocol,
            format!("the server's handshake answer is malformed: {e}"),
        )
    })?;
    if (answer.udp_port != 0 && !wishes.udp_port) || (answer.early && request.is_empty()) {
        return Err(TransferError::new(
            ErrorCode::Protocol,
            "the server's handshake answer names what nobody asked for",
        ));
    }
    stream.set_read_timeout(None).ok();
    let est = Established {
        keys,
        rtt,
        peer: *server,
        udp_port: answer.udp_port,
    };
    Ok(Some((est, answer.early)))
}

/// What the server decides from a pinned start's message one before it
/// answers (P-48): whether the client's key may come in at all, whether
/// an admitted key's message is fresh (recent, and never seen before: a
/// replay is closed with nothing sent), whether the request it carries may be acted
/// on before the client's next flight, and the UDP port to name.
pub trait PinnedPolicy {
    fn fresh(&mut self, ephemeral: &[u8; 32], time: u64) -> bool;
    fn admits(&mut self, client: &PublicKey) -> bool;
    fn takes_early(&mut self, request: &[u8]) -> bool;
    fn open_udp(&mut self) -> u16;
}

/// Server side of a pinned start, after [`read_preamble`] returned a
/// pinned preamble. Returns the session and the request message one
/// carried, if the server took it (it is answered behind message two).
pub fn server_pinned(
    stream: &mut TcpStream,
    pre: &Preamble,
    key: &Keypair,
    policy: &mut impl PinnedPolicy,
) -> Result<PinnedServed, TransferError> {
    let greeting = send_reply(stream, pre)?;
    let m1 = read_raw(stream).map_err(io_err("handshaking"))?;
    let (hs, opened) = PinnedServer::respond(key, &greeting, &m1).map_err(|e| {
        TransferError::new(
            ErrorCode::Auth,
            format!("a pinned start this server cannot read (the client pinned another key for it, or sent garbage): {e}"),
        )
    })?;
    let opening = PinnedOpening::decode(&opened.opening).map_err(|e| {
        TransferError::new(
            ErrorCode::Protocol,
            format!("the client's pinned opening is malformed: {e}"),
        )
    })?;
    // An unknown key is refused as in XX: after the handshake, in words
    // (`run_session`); it only never gets its request taken early.
    let admitted = policy.admits(&opened.client);
    // A replayed message one, or one whose clock is far from ours, gets
    // no session: the client starts over with XX, as after a key change.
    if admitted && !policy.fresh(&opened.ephemeral, opening.time) {
        return Err(TransferError::new(
            ErrorCode::Auth,
            "a pinned start seen before or stamped too far from this host's clock (a replay, or a skewed clock); closed so the client handshakes in full",
        ));
    }
    let early = admitted && !opening.request.is_empty() && policy.takes_early(&opening.request);
    let udp_port = if opening.wishes.udp_port && admitted {
        policy.open_udp()
    } else {
        0
    };
    let answer = HandshakeAnswer { udp_port, early };
    let (m2, keys) = hs.finish(&answer.encode()).map_err(hs_err)?;
    write_raw(stream, &m2).map_err(io_err("handshaking"))?;
    stream.set_read_timeout(None).ok();
    let est = Established {
        keys,
        rtt: Duration::ZERO,
        peer: opened.client,
        udp_port,
    };
    Ok((est, early.then_some(opening.request)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Runs both sides over loopback; the server opens "port" 4242 when
    /// asked. Returns what each side ended with, and whether it opened.
    fn run(wish: bool) -> (Established, Established, bool) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (client_key, server_key) = (Keypair::generate(), Keypair::generate());
        std::thread::scope(|scope| {
            let server = scope.spawn(|| {
                let (mut s, _) = listener.accept().unwrap();
                let pre = read_preamble(&mut s).unwrap();
                let mut opened = false;
                let est = server(&mut s, &pre, &server_key, || {
                    opened = true;
                    4242
                })
                .unwrap();
                (est, opened)
            });
            let mut c = TcpStream::connect(addr).unwrap();
            let wishes = HandshakeWishes { udp_port: wish };
            let est = client(&mut c, &client_key, wishes, |_| Ok(())).unwrap();
            let (server_est, opened) = server.join().unwrap();
            (est, server_est, opened)
        })
    }

    struct Takes(bool, u16);

    impl PinnedPolicy for Takes {
        fn fresh(&mut self, _: &[u8; 32], time: u64) -> bool {
            time.abs_diff(unix_now()) < 60
        }
        fn admits(&mut self, _: &PublicKey) -> bool {
            true
        }
        fn takes_early(&mut self, request: &[u8]) -> bool {
            assert_eq!(request, b"request");
            self.0
        }
        fn open_udp(&mut self) -> u16 {
            self.1
        }
    }

    /// A pinned start over loopback to a server holding `served`; the
    /// client pinned `pinned`. Returns what each side ended with.
    fn run_pinned(
        pinned: &Keypair,
        served: &Keypair,
        policy: &mut (impl PinnedPolicy + Send),
    ) -> (Option<PinnedAnswered>, Result<PinnedServed, TransferError>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client_key = Keypair::generate();
        std::thread::scope(|scope| {
            let server = scope.spawn(|| {
                let (mut s, _) = listener.accept().unwrap();
                let pre = read_preamble(&mut s).unwrap();
                assert_eq!(pre.kind, ConnKind::Pinned);
                server_pinned(&mut s, &pre, served, policy)
            });
            let mut c = TcpStream::connect(addr).unwrap();
            let wishes = HandshakeWishes { udp_port: true };
            let got = client_pinned(&mut c, &client_key, &pinned.public, wishes, b"request");
            let served = server.join().unwrap();
            drop(c);
            (got.unwrap(), served)
        })
    }

    #[test]
    fn a_pinned_start_carries_the_request_in_one_round_trip() {
        let server_key = Keypair::generate();
        let (c, s) = run_pinned(&server_key, &server_key, &mut Takes(true, 4242));
        let (c, early) = c.expect("answered");
        let (s, request) = s.unwrap();
        assert!(early);
        assert_eq!(request.as_deref(), Some(&b"request"[..]));
        assert_eq!(c.keys.session_id(), s.keys.session_id());
        assert_eq!((c.udp_port, s.udp_port), (4242, 4242));
        assert_eq!(c.peer, server_key.public);
        // Not taken early (a request that acts by itself): asked for again.
        let (c, s) = run_pinned(&server_key, &server_key, &mut Takes(false, 4242));
        assert!(!c.unwrap().1);
        assert_eq!(s.unwrap().1, None);
    }

    #[test]
    fn a_replayed_message_one_is_closed_and_the_client_starts_over() {
        struct Seen;
        impl PinnedPolicy for Seen {
            fn fresh(&mut self, _: &[u8; 32], _: u64) -> bool {
                false
            }
            fn admits(&mut self, _: &PublicKey) -> bool {
                true
            }
            fn takes_early(&mut self, _: &[u8]) -> bool {
                true
            }
            fn open_udp(&mut self) -> u16 {
                panic!("a replay opens nothing")
            }
        }
        let server_key = Keypair::generate();
        let (c, s) = run_pinned(&server_key, &server_key, &mut Seen);
        assert!(c.is_none(), "closed: the client starts over");
        assert!(matches!(s, Err(e) if e.code == ErrorCode::Auth));
    }

    #[test]
    fn a_server_whose_key_changed_closes_and_the_client_starts_over() {
        let (pinned, now) = (Keypair::generate(), Keypair::generate());
        let (c, s) = run_pinned(&pinned, &now, &mut Takes(true, 4242));
        assert!(c.is_none(), "the client is told to handshake in full");
        assert!(matches!(s, Err(e) if e.code == ErrorCode::Auth));
    }

    /// The keys of a session, from a real handshake over loopback.
    pub(crate) fn session_keys() -> secure::SessionKeys {
        run(false).1.keys
    }

    #[test]
    fn the_udp_port_is_opened_and_named_in_message_two_only_when_wished_for() {
        let (c, s, opened) = run(true);
        assert!(opened);
        assert_eq!((c.udp_port, s.udp_port), (4242, 4242));
        assert_eq!(c.keys.session_id(), s.keys.session_id());
        let (c, s, opened) = run(false);
        assert!(!opened, "a TCP-only client holds no port of the server's");
        assert_eq!((c.udp_port, s.udp_port), (0, 0));
    }
}
