//! Data connections of a session (P-20). Each opens with a cleartext
//! preamble naming the session and a stream index, then a sealed join frame
//! that only a holder of the session keys can produce, so a data connection
//! is as authenticated as the control connection it belongs to. A client
//! dials them right behind its request; the server lists a session from
//! its handshake to its end ([`Joins`]), holds early joins until it
//! accepts, refuses an index outside the request's before deriving a key,
//! and ends the session when an index joins twice (a replayed join, P-39).

use std::collections::HashMap;
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use secure::{Direction, Opener, Protection, Sealer, SessionKeys};
use wire::{ConnKind, ErrorCode, Preamble, PROTOCOL_VERSION};

use crate::error::TransferError;
use crate::framed::{FrameReader, FrameWriter, LEN_PREFIX};
use crate::progress::Progress;

const JOIN: &[u8] = b"haul-join";
/// Longest frame read before a connection has joined: a join body is 25
/// bytes, so nobody without the keys makes the server hold more (P-39).
const JOIN_FRAME_MAX: u32 = 64;

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
    stream: TcpStream,
    keys: &SessionKeys,
    index: u16,
    protection: Protection,
    progress: &Arc<Progress>,
) -> Result<DataConn, TransferError> {
    open_joined(stream, keys, ConnKind::Data, index, protection, progress)
        .map_err(|e| TransferError::lost("opening a data stream", &e))
}

/// Client: opens the control connection of a session whose keys the ssh
/// greetings agreed (P-27): a `Keyed` preamble and a join frame on stream
/// 0, in place of a handshake.
pub fn client_keyed_control(
    stream: TcpStream,
    keys: &SessionKeys,
    progress: &Arc<Progress>,
) -> Result<DataConn, TransferError> {
    let protection = crate::handshake::CONTROL_PROTECTION;
    crate::net::tune_control(&stream);
    open_joined(stream, keys, ConnKind::Keyed, 0, protection, progress)
        .map_err(|e| TransferError::lost("opening the control connection", &e))
}

fn open_joined(
    mut stream: TcpStream,
    keys: &SessionKeys,
    kind: ConnKind,
    index: u16,
    protection: Protection,
    progress: &Arc<Progress>,
) -> std::io::Result<DataConn> {
    let session = keys.session_id();
    let pre = Preamble {
        version: PROTOCOL_VERSION,
        kind,
        session,
        stream: index,
    };
    stream.write_all(&pre.encode())?;
    let mut conn = keyed(stream, keys, index, protection, true, progress)
        .map_err(|e| std::io::Error::other(e.message))?;
    conn.writer.send_in_place(&mut join_body(&session))?;
    Ok(conn)
}

/// Server: checks the join frame of a data stream whose preamble named
/// this session and an index the session accepted (`1..=streams`, checked
/// before any key is derived); frames after the join may be
/// `accepted.frame_max` bytes long at most (P-39).
pub fn join_accepted(
    stream: TcpStream,
    keys: &SessionKeys,
    index: u16,
    accepted: &Accepted,
    progress: &Arc<Progress>,
) -> Result<DataConn, TransferError> {
    if !(1..=accepted.streams).contains(&index) {
        return Err(TransferError::new(
            ErrorCode::Protocol,
            format!(
                "data stream index {index} is outside the session's 1 to {}",
                accepted.streams
            ),
        ));
    }
    let mut conn = server_join(stream, keys, index, accepted.protection, progress)?;
    conn.reader.set_max_len(accepted.frame_max);
    Ok(conn)
}

/// Server: checks the join frame of a data stream whose preamble named
/// this session. A frame longer than a join is refused unread.
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
    conn.reader.set_max_len(JOIN_FRAME_MAX);
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
    conn.reader.set_max_len(wire::MAX_FRAME_LEN);
    Ok(conn)
}

/// The server's sessions that data connections may join (P-20). A session
/// is listed from its handshake on, so a client may dial its data
/// connections right behind its request; their joins wait until the
/// session has read the request (which names the protection their join
/// frame is sealed under and the stream count) and accepted it, and are
/// refused if it refuses. It stays listed until it ends, so that a second
/// join of an index, even one after the gathering, ends it (P-39).
#[derive(Default)]
pub struct Joins {
    sessions: Mutex<HashMap<[u8; 16], Joinable>>,
    changed: Condvar,
}

/// What a session accepted, which its data connections must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The request's protection: the join frame is sealed under it.
    pub protection: Protection,
    /// Indices `1..=streams` may join.
    pub streams: u16,
    /// Longest frame a joined connection may carry (P-39).
    pub frame_max: u32,
}

/// What a data connection hands its session.
pub enum Joined {
    /// Joined on this stream index.
    Conn(u16, Box<DataConn>),
    /// A connection joined on an index already taken: someone replayed a
    /// genuine join (P-39). The session ends.
    Again(u16),
}

/// What a data connection needs to join a session.
#[derive(Clone)]
pub struct Joinable {
    pub keys: SessionKeys,
    /// The request, once the session accepted it.
    pub accepted: Option<Accepted>,
    pub progress: Arc<Progress>,
    pub joined: mpsc::Sender<Joined>,
    /// Indices joined so far.
    taken: Vec<bool>,
    /// The session's control connection, shut if an index joins twice
    /// after the session stopped gathering.
    control: Option<Arc<TcpStream>>,
    /// Whether the session still reads `joined`.
    gathering: bool,
}

/// A session's place in [`Joins`], from its handshake to its end;
/// dropping it unlists the session.
pub struct Listed<'a> {
    joins: &'a Joins,
    session: [u8; 16],
}

impl Joins {
    fn lock(&self) -> MutexGuard<'_, HashMap<[u8; 16], Joinable>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists a session whose handshake is done; its joins wait for
    /// [`Listed::open`]. `control` is its control connection (a clone).
    pub fn list(
        &self,
        keys: &SessionKeys,
        progress: &Arc<Progress>,
        joined: mpsc::Sender<Joined>,
        control: Option<TcpStream>,
    ) -> Listed<'_> {
        let session = keys.session_id();
        let entry = Joinable {
            keys: keys.clone(),
            accepted: None,
            progress: progress.clone(),
            joined,
            taken: Vec::new(),
            control: control.map(Arc::new),
            gathering: true,
        };
        self.lock().insert(session, entry);
        self.changed.notify_all();
        Listed {
            joins: self,
            session,
        }
    }

    /// Whether `session` is listed: its client is authenticated.
    pub fn is_listed(&self, session: &[u8; 16]) -> bool {
        self.lock().contains_key(session)
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
                Some(j) if j.accepted.is_some() => return Some(j.clone()),
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

    /// Hands a connection that joined `session` on `index` to the session.
    /// An index that joined before ends the session: while it gathers, by
    /// telling it ([`Joined::Again`]); after, by shutting its control
    /// connection. Returns false if the index was taken.
    pub fn hand_over(&self, session: &[u8; 16], index: u16, conn: DataConn) -> bool {
        let mut map = self.lock();
        let Some(j) = map.get_mut(session) else {
            return true;
        };
        let slot = index as usize;
        if j.taken.len() <= slot {
            j.taken.resize(slot + 1, false);
        }
        if !j.taken[slot] {
            j.taken[slot] = true;
            let _ = j.joined.send(Joined::Conn(index, Box::new(conn)));
            return true;
        }
        if j.gathering {
            let _ = j.joined.send(Joined::Again(index));
        } else if let Some(c) = &j.control {
            let _ = c.shutdown(Shutdown::Both);
        }
        for c in [conn.reader.get_ref(), conn.writer.get_ref()] {
            let _ = c.shutdown(Shutdown::Both);
        }
        false
    }
}

impl Listed<'_> {
    /// The session accepted its request: its data connections may join.
    pub fn open(&self, accepted: Accepted) {
        if let Some(j) = self.joins.lock().get_mut(&self.session) {
            j.accepted = Some(accepted);
        }
        self.joins.changed.notify_all();
    }

    /// The session has its data connections (or the UDP channel): a join
    /// now can only be a second one, and ends it through its control
    /// connection.
    pub fn gathered(&self) {
        if let Some(j) = self.joins.lock().get_mut(&self.session) {
            j.gathering = false;
        }
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
    use std::io::Read;
    use std::net::TcpListener;

    const SHORT: Duration = Duration::from_millis(50);

    fn accepted(protection: Protection, streams: u16) -> Accepted {
        Accepted {
            protection,
            streams,
            frame_max: 1 << 20,
        }
    }

    fn listed(joins: &Joins) -> (SessionKeys, Listed<'_>, mpsc::Receiver<Joined>) {
        let keys = crate::handshake::tests::session_keys();
        let (tx, rx) = mpsc::channel();
        let l = joins.list(&keys, &Arc::new(Progress::default()), tx, None);
        (keys, l, rx)
    }

    /// A connected pair of sockets on loopback: (client end, server end).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
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
            l.open(accepted(Protection::Aes256Gcm, 4));
            let j = waiting.join().unwrap().expect("joinable once accepted");
            assert_eq!(j.accepted, Some(accepted(Protection::Aes256Gcm, 4)));
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
            let l = joins.list(&keys, &Arc::new(Progress::default()), tx, None);
            l.open(accepted(Protection::IntegrityOnly, 1));
            assert!(waiting.join().unwrap().is_some());
        });
    }

    /// Index 0 (control) and indices past the request's count are refused
    /// before any key is derived, so they cost no more than a preamble.
    #[test]
    fn indices_outside_the_request_are_refused_before_the_join() {
        let keys = crate::handshake::tests::session_keys();
        let p = Arc::new(Progress::default());
        for index in [0, 5, u16::MAX] {
            let (_c, s) = pair();
            let e = join_accepted(s, &keys, index, &accepted(Protection::Aes256Gcm, 4), &p)
                .err()
                .expect("refused");
            assert_eq!(e.code, ErrorCode::Protocol);
            assert!(e.message.contains("outside"), "{}", e.message);
        }
    }

    /// Before it has joined, a connection may send no frame longer than a
    /// join: a copied session id cannot make the server hold 16 MiB.
    #[test]
    fn a_long_frame_before_the_join_is_refused_unread() {
        let keys = crate::handshake::tests::session_keys();
        let (mut c, s) = pair();
        c.write_all(&(16u32 << 20).to_le_bytes()).unwrap();
        let p = Arc::new(Progress::default());
        let e = join_accepted(s, &keys, 1, &accepted(Protection::Aes256Gcm, 1), &p)
            .err()
            .expect("refused");
        assert_eq!(e.code, ErrorCode::Protocol);
    }

    /// A second join of one index, a replay of a genuine connection, ends
    /// the session: while it gathers it is told; after, its control
    /// connection is shut.
    #[test]
    fn an_index_that_joins_twice_ends_the_session() {
        let joins = Joins::default();
        let keys = crate::handshake::tests::session_keys();
        let id = keys.session_id();
        let (ctrl_client, ctrl_server) = pair();
        let (tx, rx) = mpsc::channel();
        let p = Arc::new(Progress::default());
        let l = joins.list(&keys, &p, tx, Some(ctrl_server));
        let acc = accepted(Protection::Aes256Gcm, 2);
        l.open(acc);
        let join = |index| {
            let (c, mut s) = pair();
            let client = client_join(c, &keys, index, acc.protection, &p).unwrap();
            let pre = crate::handshake::read_preamble(&mut s).unwrap();
            assert_eq!(pre.stream, index);
            (client, join_accepted(s, &keys, index, &acc, &p).unwrap())
        };
        let (_c1, first) = join(1);
        assert!(joins.hand_over(&id, 1, first));
        assert!(matches!(rx.try_recv(), Ok(Joined::Conn(1, _))));
        let (_c1b, again) = join(1);
        assert!(!joins.hand_over(&id, 1, again));
        assert!(matches!(rx.try_recv(), Ok(Joined::Again(1))));
        // After the gathering: the control connection is shut.
        l.gathered();
        let (_c2, second) = join(2);
        assert!(joins.hand_over(&id, 2, second));
        let (_c2b, again) = join(2);
        assert!(!joins.hand_over(&id, 2, again));
        ctrl_client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut b = [0u8; 1];
        assert_eq!((&ctrl_client).read(&mut b).unwrap(), 0, "control shut");
    }
}
