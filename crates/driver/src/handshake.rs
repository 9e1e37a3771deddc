//! Runs the sans-IO handshake of `secure` over a TCP connection: the
//! cleartext preamble with its version check (P-1, P-2), then Noise XX
//! (P-3). Read timeouts bound how long a silent or slow peer can hold us.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use secure::{ClientHandshake, Keypair, PublicKey, ServerHandshake, SessionKeys};
use wire::{ConnKind, ErrorCode, Preamble, PreambleReply, PREAMBLE_LEN, PROTOCOL_VERSION};

use crate::error::TransferError;
use crate::framed::{read_raw, write_raw};

/// How long each handshake step may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

pub struct Established {
    pub keys: SessionKeys,
    /// Time from sending message one (with the preamble, on the client)
    /// to receiving message two.
    pub rtt: Duration,
    pub peer: PublicKey,
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

/// Client side. `check` decides whether the server's key is trusted.
pub fn client(
    stream: &mut TcpStream,
    identity: &Keypair,
    check: impl FnOnce(&PublicKey) -> Result<(), TransferError>,
) -> Result<Established, TransferError> {
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).ok();
    let pre = Preamble {
        version: PROTOCOL_VERSION,
        kind: ConnKind::Control,
        session: [0; 16],
        stream: 0,
    };
    // Message one goes with the preamble, built on the only reply worth
    // going on with (accepted, our version): one round trip less (P-2). A
    // server that answers anything else has its reply read and reported
    // below, before message two, and the handshake goes no further.
    let expected = PreambleReply {
        version: PROTOCOL_VERSION,
        accepted: true,
    };
    let greeting = [&pre.encode()[..], &expected.encode()[..]].concat();
    let (mut hs, m1) = ClientHandshake::start(identity, &greeting).map_err(hs_err)?;
    let mut opening = pre.encode().to_vec();
    opening.extend_from_slice(&(m1.len() as u16).to_le_bytes());
    opening.extend_from_slice(&m1);
    let t0 = Instant::now();
    stream
        .write_all(&opening)
        .map_err(io_err("greeting the server"))?;
    let mut reply = [0u8; PreambleReply::LEN];
    stream
        .read_exact(&mut reply)
        .map_err(io_err("reading the server's greeting"))?;
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
    let server_key = hs.read_reply(&m2).map_err(hs_err)?;
    check(&server_key)?;
    let (m3, keys) = hs.finish().map_err(hs_err)?;
    write_raw(stream, &m3).map_err(io_err("handshaking"))?;
    stream.set_read_timeout(None).ok();
    Ok(Established {
        keys,
        rtt,
        peer: server_key,
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
pub fn server(
    stream: &mut TcpStream,
    pre: &Preamble,
    key: &Keypair,
) -> Result<Established, TransferError> {
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
    let (hs, m2) = ServerHandshake::respond(key, &greeting, &m1).map_err(hs_err)?;
    write_raw(stream, &m2).map_err(io_err("handshaking"))?;
    let m3 = read_raw(stream).map_err(io_err("handshaking"))?;
    let rtt = t0.elapsed();
    let (peer, keys) = hs.finish(&m3).map_err(hs_err)?;
    stream.set_read_timeout(None).ok();
    Ok(Established { keys, rtt, peer })
}
