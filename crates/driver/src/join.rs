//! Data connections of a session (P-20). Each opens with a cleartext
//! preamble naming the session and a stream index, then a sealed join frame
//! that only a holder of the session keys can produce, so a data connection
//! is as authenticated as the control connection it belongs to.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;

use secure::{Direction, Opener, Protection, Sealer, SessionKeys};
use wire::{ConnKind, ErrorCode, Preamble, PROTOCOL_VERSION};

use crate::error::TransferError;
use crate::framed::{FrameReader, FrameWriter, LEN_PREFIX};
use crate::progress::Progress;

const JOIN: &[u8] = b"haul-join";

fn join_body(session: &[u8; 16]) -> Vec<u8> {
    let mut b = vec![0u8; LEN_PREFIX];
    b.extend_from_slice(JOIN);
    b.extend_from_slice(session);
    b
}

/// How a session's data travels once client and server have agreed: its
/// TCP data connections, or the UDP channel (P-23).
pub enum DataPlan {
    Tcp(Vec<DataConn>),
    Udp(Box<crate::datagram::UdpLink>),
}

/// Both halves of one data connection, keyed for its stream.
pub struct DataConn {
    pub reader: FrameReader,
    pub writer: FrameWriter,
}

/// Splits a connection into reader and writer keyed for stream `index`
/// (0 is control) in this side's directions (P-5).
pub fn keyed(
    stream: TcpStream,
    keys: &SessionKeys,
    index: u16,
    protection: Protection,
    client: bool,
    progress: &Arc<Progress>,
) -> Result<DataConn, TransferError> {
    let (send_dir, recv_dir) = if client {
        (Direction::ClientToServer, Direction::ServerToClient)
    } else {
        (Direction::ServerToClient, Direction::ClientToServer)
    };
    let read_half = stream
        .try_clone()
        .map_err(|e| TransferError::lost("setting up a connection", &e))?;
    Ok(DataConn {
        reader: FrameReader::new(
            read_half,
            Opener::new(protection, &keys.stream_key(index, recv_dir)),
            progress.clone(),
        ),
        writer: FrameWriter::new(
            stream,
            Sealer::new(protection, &keys.stream_key(index, send_dir)),
            progress.clone(),
        ),
    })
}

/// Client: greets and joins on a freshly connected data stream.
pub fn client_join(
    mut stream: TcpStream,
    keys: &SessionKeys,
    index: u16,
    protection: Protection,
    progress: &Arc<Progress>,
) -> Result<DataConn, TransferError> {
    let session = keys.session_id();
    let pre = Preamble {
        version: PROTOCOL_VERSION,
        kind: ConnKind::Data,
        session,
        stream: index,
    };
    stream
        .write_all(&pre.encode())
        .map_err(|e| TransferError::lost("opening a data stream", &e))?;
    let mut conn = keyed(stream, keys, index, protection, true, progress)?;
    conn.writer
        .send_in_place(&mut join_body(&session))
        .map_err(|e| TransferError::lost("opening a data stream", &e))?;
    Ok(conn)
}

/// Server: checks the join frame of a data stream whose preamble named
/// this session.
pub fn server_join(
    stream: TcpStream,
    keys: &SessionKeys,
    index: u16,
    protection: Protection,
    progress: &Arc<Progress>,
) -> Result<DataConn, TransferError> {
    stream
        .set_read_timeout(Some(crate::handshake::HANDSHAKE_TIMEOUT))
        .ok();
    let mut conn = keyed(stream, keys, index, protection, false, progress)?;
    let expected = join_body(&keys.session_id());
    let body = conn
        .reader
        .read_body()
        .map_err(|e| e.into_transfer("joining a data stream"))?;
    if body.map(|b| &b[..]) != Some(&expected[LEN_PREFIX..]) {
        return Err(TransferError::new(
            ErrorCode::Auth,
            "data stream failed to join its session",
        ));
    }
    conn.reader.get_ref().set_read_timeout(None).ok();
    Ok(conn)
}
