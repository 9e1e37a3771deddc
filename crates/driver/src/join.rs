//! Data connections of a session (P-20). Each opens with a cleartext
//! preamble naming the session and a stream index, then a sealed join frame
//! that only a holder of the session keys can produce, so a data connection
//! is as authenticated as the control connection it belongs to. A client
//! dials them right behind its request; the server lists a session from
//! its handshake on ([`Joins`]) and holds early joins until it accepts.

use std::collections::HashMap;
use std::io::Write;
use std::net::TcpStream;
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// The server's sessions that data connections may join (P-20). A session
/// is listed from its handshake on, so a client may dial its data
/// connections right behind its request; their joins wait until the
/// session has read the request (which names the protection their join
/// frame is sealed under) and accepted it, and are refused if it refuses.
#[derive(Default)]
pub struct Joins {
    sessions: Mutex<HashMap<[u8; 16], Joinable>>,
    changed: Condvar,
}

/// What a data connection needs to join a session.
#[derive(Clone)]
pub struct Joinable {
    pub keys: SessionKeys,
    /// The request's protection, once the session accepted it.
    pub protection: Option<Protection>,
    pub progress: Arc<Progress>,
    pub joined: mpsc::Sender<(u16, DataConn)>,
}

/// A session's place in [`Joins`], from its handshake until it has
/// gathered its data connections; dropping it unlists the session.
pub struct Listed<'a> {
    joins: &'a Joins,
    session: [u8; 16],
}

impl Joins {
    fn lock(&self) -> MutexGuard<'_, HashMap<[u8; 16], Joinable>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists a session whose handshake is done; its joins wait for
    /// [`Listed::open`].
    pub fn list(
        &self,
        keys: &SessionKeys,
        progress: &Arc<Progress>,
        joined: mpsc::Sender<(u16, DataConn)>,
    ) -> Listed<'_> {
        let session = keys.session_id();
        let entry = Joinable {
            keys: keys.clone(),
            protection: None,
            progress: progress.clone(),
            joined,
        };
        self.lock().insert(session, entry);
        self.changed.notify_all();
        Listed {
            joins: self,
            session,
        }
    }

    /// Waits until `session` has accepted its request, and returns what a
    /// connection needs to join it. `None` if the session ends first, or
    /// if no such session is listed within `unknown` (a preamble may
    /// arrive before its session's handshake has been read, on a host
    /// whose threads are slow to run).
    pub fn wait(&self, session: &[u8; 16], unknown: Duration) -> Option<Joinable> {
        let deadline = Instant::now() + unknown;
        let mut seen = false;
        let mut map = self.lock();
        loop {
            match map.get(session) {
                Some(j) if j.protection.is_some() => return Some(j.clone()),
                Some(_) => seen = true,
                None if seen => return None,
                None => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if !seen && left.is_zero() {
                return None;
            }
            // A listed session always ends (its request is read within
            // the handshake timeout, then accepted or refused); still,
            // look again now and then.
            let step = if seen { Duration::from_secs(1) } else { left };
            map = self
                .changed
                .wait_timeout(map, step)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Listed<'_> {
    /// The session accepted its request: its data connections may join,
    /// under `protection`.
    pub fn open(&self, protection: Protection) {
        if let Some(j) = self.joins.lock().get_mut(&self.session) {
            j.protection = Some(protection);
        }
        self.joins.changed.notify_all();
    }
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.joins.lock().remove(&self.session);
        self.joins.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHORT: Duration = Duration::from_millis(50);

    fn listed(joins: &Joins) -> (SessionKeys, Listed<'_>, mpsc::Receiver<(u16, DataConn)>) {
        let keys = crate::handshake::tests::session_keys();
        let (tx, rx) = mpsc::channel();
        let l = joins.list(&keys, &Arc::new(Progress::default()), tx);
        (keys, l, rx)
    }

    #[test]
    fn an_early_join_waits_for_its_session_to_accept() {
        let joins = Joins::default();
        let (keys, l, _rx) = listed(&joins);
        let id = keys.session_id();
        std::thread::scope(|s| {
            let waiting = s.spawn(|| joins.wait(&id, SHORT));
            std::thread::sleep(SHORT * 2);
            assert!(!waiting.is_finished(), "a listed session is waited for");
            l.open(Protection::Aes256Gcm);
            let j = waiting.join().unwrap().expect("joinable once accepted");
            assert_eq!(j.protection, Some(Protection::Aes256Gcm));
            assert_eq!(j.keys.session_id(), id);
        });
        // Once accepted, at once.
        assert!(joins.wait(&id, Duration::ZERO).is_some());
        drop(l);
        assert!(joins.wait(&id, Duration::ZERO).is_none(), "unlisted");
    }

    #[test]
    fn a_session_that_ends_before_accepting_turns_its_joins_away() {
        let joins = Joins::default();
        let (keys, l, _rx) = listed(&joins);
        let id = keys.session_id();
        std::thread::scope(|s| {
            let waiting = s.spawn(|| joins.wait(&id, SHORT));
            std::thread::sleep(SHORT * 2);
            drop(l);
            assert!(waiting.join().unwrap().is_none());
        });
    }

    #[test]
    fn a_preamble_may_overtake_its_session_but_not_by_long() {
        let joins = Joins::default();
        assert!(joins.wait(&[7; 16], SHORT).is_none(), "never listed");
        let keys = crate::handshake::tests::session_keys();
        let id = keys.session_id();
        std::thread::scope(|s| {
            let waiting = s.spawn(|| joins.wait(&id, Duration::from_secs(10)));
            std::thread::sleep(SHORT);
            let (tx, _rx) = mpsc::channel();
            let l = joins.list(&keys, &Arc::new(Progress::default()), tx);
            l.open(Protection::IntegrityOnly);
            assert!(waiting.join().unwrap().is_some());
        });
    }
}
