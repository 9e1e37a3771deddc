//! Runs the sans-IO handshake of `secure` over a TCP connection: the
//! cleartext preamble with its version check (P-1, P-2), then Noise XX
//! (P-3), whose first two messages carry the client's wishes and the
//! server's answer (a UDP port opened a round trip sooner, P-23). Read
//! timeouts bound how long a silent or slow peer can hold us.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use secure::{ClientHandshake, Keypair, PublicKey, ServerHandshake, SessionKeys};
use wire::{
    ConnKind, ErrorCode, HandshakeAnswer, HandshakeWishes, Preamble, PreambleReply, PREAMBLE_LEN,
    PROTOCOL_VERSION,
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
    let pre = Preamble {
        version: PROTOCOL_VERSION,
        kind: ConnKind::Control,
        session: [0; 16],
        stream: 0,
    };
    let expected = PreambleReply {
        version: PROTOCOL_VERSION,
        accepted: true,
    };
    let greeting = [&pre.encode()[..], &expected.encode()[..]].concat();
    let (hs, m1) = ClientHandshake::start(identity, &greeting, &wishes.encode()).map_err(hs_err)?;
    let mut opening = pre.encode().to_vec();
    opening.extend_from_slice(&(m1.len() as u16).to_le_bytes());
    opening.extend_from_slice(&m1);
    Ok((hs, opening))
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

/// Server side, after [`read_preamble`] returned a control preamble.
/// `open_udp` is called when the client wishes for a UDP port; it returns
/// the port it opened, or 0.
pub fn server(
    stream: &mut TcpStream,
    pre: &Preamble,
    key: &Keypair,
    open_udp: impl FnOnce() -> u16,
) -> Result<Established, TransferError> {
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
    let m1 = read_raw(stream).map_err(io_err("handshaking"))?;
    let t0 = Instant::now();
    let greeting = [&pre.encode()[..], &reply.encode()[..]].concat();
    let (mut hs, wishes) = ServerHandshake::respond(key, &greeting, &m1).map_err(hs_err)?;
    let wishes = HandshakeWishes::decode(&wishes).map_err(|e| {
        TransferError::new(
            ErrorCode::Protocol,
            format!("the client's handshake wishes are malformed: {e}"),
        )
    })?;
    let udp_port = if wishes.udp_port { open_udp() } else { 0 };
    let m2 = hs
        .reply(&HandshakeAnswer { udp_port }.encode())
        .map_err(hs_err)?;
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
