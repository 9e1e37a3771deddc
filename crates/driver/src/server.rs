//! `haul serve`: accepts control connections, authenticates each client
//! against the authorized keys, answers its request inside the served root,
//! gathers the session's data connections, and runs the engine (P-21).

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use secure::{AuthorizedKeys, Keypair, Protection, SessionKeys};
use session::{ReceiverSession, SenderSession};
use store::{walk, Destination, Root, Sink, Sources};
use wire::{
    ConnKind, ErrorCode, Msg, Op, Request, PROTECT_AES256GCM, PROTECT_CHACHA20POLY1305,
    PROTOCOL_VERSION,
};

use crate::engine::{run_receiver, run_sender};
use crate::error::TransferError;
use crate::framed::FrameWriter;
use crate::handshake;
use crate::join::{keyed, server_join, DataConn};
use crate::net::{self, Tuning};
use crate::progress::Progress;

/// In-flight window the sending side allows (unacknowledged bytes).
pub const SEND_WINDOW: u64 = 512 << 20;
const JOIN_TIMEOUT: Duration = Duration::from_secs(30);

pub struct ServerConfig {
    pub root: Root,
    pub key: Keypair,
    /// Read again for every session, so added keys work without a restart.
    pub authorized_keys: PathBuf,
    pub listen: SocketAddr,
    pub tuning: Tuning,
    pub max_sessions: usize,
}

/// What a data connection needs to join a session waiting for streams.
#[derive(Clone)]
struct Joinable {
    keys: SessionKeys,
    protection: Protection,
    progress: Arc<Progress>,
    joined: mpsc::Sender<(u16, DataConn)>,
}

type Registry = Mutex<HashMap<[u8; 16], Joinable>>;

struct Server {
    cfg: ServerConfig,
    sessions: Registry,
    active: AtomicUsize,
}

/// Binds and serves forever. `ready` is called with the bound address.
pub fn serve(cfg: ServerConfig, ready: impl FnOnce(SocketAddr)) -> std::io::Result<()> {
    let listener: TcpListener = net::listen(&cfg.listen, &cfg.tuning)?;
    ready(listener.local_addr()?);
    let server = Arc::new(Server {
        cfg,
        sessions: Mutex::new(HashMap::new()),
        active: AtomicUsize::new(0),
    });
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let server = server.clone();
        std::thread::spawn(move || server.connection(stream));
    }
    Ok(())
}

/// Protection of control frames: always encrypted, same cipher everywhere.
pub const CONTROL_PROTECTION: Protection = Protection::ChaCha20Poly1305;

pub fn protection_of(code: u8) -> Protection {
    match code {
        PROTECT_AES256GCM => Protection::Aes256Gcm,
        PROTECT_CHACHA20POLY1305 => Protection::ChaCha20Poly1305,
        _ => Protection::IntegrityOnly,
    }
}

impl Server {
    fn connection(&self, mut stream: TcpStream) {
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        net::tune_accepted(&stream, &self.cfg.tuning);
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
                let slot = self
                    .sessions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&pre.session)
                    .cloned();
                let Some(j) = slot else {
                    tracing::info!("{peer}: data connection for no session; dropped");
                    return;
                };
                // The join is checked here, on this connection's own thread,
                // so a forged or silent connection that copied the
                // cleartext session id costs the session nothing (P-20).
                match server_join(stream, &j.keys, pre.stream, j.protection, &j.progress) {
                    Ok(conn) => {
                        let _ = j.joined.send((pre.stream, conn));
                    }
                    Err(e) => tracing::warn!("{peer}: data connection refused: {e}"),
                }
            }
            ConnKind::Control => {
                let started = Instant::now();
                match self.session(stream, &pre) {
                    Ok(line) => {
                        tracing::info!("{peer}: {line} in {:.2}s", started.elapsed().as_secs_f64())
                    }
                    Err(e) => tracing::warn!("{peer}: {e}"),
                }
            }
        }
    }

    fn session(
        &self,
        mut stream: TcpStream,
        pre: &wire::Preamble,
    ) -> Result<String, TransferError> {
        let est = handshake::server(&mut stream, pre, &self.cfg.key)?;
        let progress = Arc::new(Progress::default());
        let control = keyed(stream, &est.keys, 0, CONTROL_PROTECTION, false, &progress)?;
        let (mut ctrl_r, mut ctrl_w) = (control.reader, control.writer);
        let refuse = |w: &mut FrameWriter, e: TransferError| {
            let _ = w.send_msg(&Msg::Error {
                code: e.code,
                message: e.message.clone(),
            });
            Err(e)
        };

        let authorized = AuthorizedKeys::load(&self.cfg.authorized_keys).unwrap_or_default();
        if !authorized.contains(&est.peer) {
            let msg = format!(
                "the server does not know your key {} ({}); add this line to {} on the server: {}",
                est.peer.fingerprint(),
                "client key",
                self.cfg.authorized_keys.display(),
                est.peer
            );
            return refuse(&mut ctrl_w, TransferError::new(ErrorCode::Auth, msg));
        }
        let _guard = match SessionGuard::enter(&self.active, self.cfg.max_sessions) {
            Some(g) => g,
            None => {
                let msg = format!(
                    "server busy: {} sessions already running; try again later",
                    self.cfg.max_sessions
                );
                return refuse(&mut ctrl_w, TransferError::new(ErrorCode::Busy, msg));
            }
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
                let ours = !matches!(e, crate::framed::FrameError::Io(_));
                let e = e.into_transfer("reading the request");
                return if ours { refuse(&mut ctrl_w, e) } else { Err(e) };
            }
        };
        ctrl_r.get_ref().set_read_timeout(None).ok();
        if let Err(e) = check_request(&req) {
            return refuse(&mut ctrl_w, e);
        }
        let protection = protection_of(req.protection);

        // Prepare the side we play before accepting, so errors come first.
        enum Side {
            Send(Box<SenderSession>, Sources, u64),
            Receive(Sink),
        }
        let side = match req.op {
            Op::Pull => {
                let paths: Result<Vec<_>, _> =
                    req.paths.iter().map(|p| self.cfg.root.resolve(p)).collect();
                let walked = match paths
                    .map_err(TransferError::from)
                    .and_then(|p| walk(&p, req.recursive).map_err(Into::into))
                {
                    Ok(w) => w,
                    Err(e) => return refuse(&mut ctrl_w, e),
                };
                let bytes = walked.file_bytes();
                let session = SenderSession::new(walked.entries, req.block_size, SEND_WINDOW);
                Side::Send(Box::new(session), Sources::new(walked.paths), bytes)
            }
            Op::Push => {
                let dest = &req.paths[0];
                let dest_res = self
                    .cfg
                    .root
                    .resolve(dest)
                    .map_err(TransferError::from)
                    .and_then(|p| {
                        Destination::for_path(
                            &p,
                            dest.ends_with('/'),
                            req.many_sources,
                            self.cfg.root.clone(),
                        )
                        .map_err(Into::into)
                    });
                match dest_res {
                    Ok(d) => Side::Receive(Sink::new(d)),
                    Err(e) => return refuse(&mut ctrl_w, e),
                }
            }
        };

        let session_id = est.keys.session_id();
        let (tx, rx) = mpsc::channel();
        let joinable = Joinable {
            keys: est.keys.clone(),
            protection,
            progress: progress.clone(),
            joined: tx,
        };
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session_id, joinable);
        let joined = ctrl_w
            .send_msg(&Msg::Accept {
                session: session_id,
                streams: req.streams,
            })
            .map_err(|e| TransferError::lost("accepting the request", &e))
            .and_then(|()| gather(&rx, req.streams));
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&session_id);
        if let Err(e) = &joined {
            let _ = ctrl_w.send_msg(&Msg::Error {
                code: e.code,
                message: e.message.clone(),
            });
        }
        let conns = joined?;
        Progress::set(&progress.streams, conns.len() as u64);

        match side {
            Side::Send(session, sources, bytes) => {
                let writers = conns.into_iter().map(|c| c.writer).collect();
                let r = run_sender(
                    ctrl_r,
                    ctrl_w,
                    writers,
                    *session,
                    &sources,
                    rate_of(&req),
                    &progress,
                )?;
                Ok(format!(
                    "sent {} files, {bytes} bytes, over {} streams ({})",
                    r.summary.files,
                    req.streams,
                    protection.name()
                ))
            }
            Side::Receive(sink) => {
                let readers = conns.into_iter().map(|c| c.reader).collect();
                let s = run_receiver(
                    ctrl_r,
                    ctrl_w,
                    readers,
                    ReceiverSession::new(req.block_size),
                    &sink,
                    &progress,
                )?;
                Ok(format!(
                    "received {} files, {} bytes, over {} streams ({})",
                    s.files,
                    s.file_bytes,
                    req.streams,
                    protection.name()
                ))
            }
        }
    }
}

fn rate_of(req: &Request) -> Option<u64> {
    (req.rate > 0).then_some(req.rate)
}

fn check_request(req: &Request) -> Result<(), TransferError> {
    let bad = |m: &str| Err(TransferError::new(ErrorCode::BadRequest, m.to_string()));
    if req.streams == 0 || req.streams > 256 {
        return bad("stream count must be 1 to 256");
    }
    if !(wire::MIN_BLOCK_SIZE..=wire::MAX_BLOCK_SIZE).contains(&req.block_size) {
        return bad("block size must be 64 KiB to 16 MiB");
    }
    if req.paths.is_empty() || (req.op == Op::Push && req.paths.len() != 1) {
        return bad("request names no path");
    }
    Ok(())
}

/// Waits for the session's data connections, already joined, one per
/// stream index; a second connection for an index is dropped.
fn gather(
    rx: &mpsc::Receiver<(u16, DataConn)>,
    streams: u16,
) -> Result<Vec<DataConn>, TransferError> {
    let deadline = Instant::now() + JOIN_TIMEOUT;
    let mut slots: Vec<Option<DataConn>> = (0..streams).map(|_| None).collect();
    let mut got = 0;
    while got < streams {
        let left = deadline.saturating_duration_since(Instant::now());
        let (index, conn) = rx.recv_timeout(left).map_err(|_| {
            TransferError::new(
                ErrorCode::ConnectionLost,
                format!("only {got} of {streams} data connections joined within {}s (a firewall between the hosts?)", JOIN_TIMEOUT.as_secs()),
            )
        })?;
        let slot = index.checked_sub(1).and_then(|i| slots.get_mut(i as usize));
        let Some(slot) = slot.filter(|s| s.is_none()) else {
            tracing::warn!("data connection with unexpected stream index {index}; dropped");
            continue;
        };
        *slot = Some(conn);
        got += 1;
    }
    Ok(slots.into_iter().flatten().collect())
}

struct SessionGuard<'a>(&'a AtomicUsize);

impl<'a> SessionGuard<'a> {
    fn enter(active: &'a AtomicUsize, max: usize) -> Option<SessionGuard<'a>> {
        let prev = active.fetch_add(1, Ordering::AcqRel);
        if prev >= max {
            active.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(SessionGuard(active))
    }
}

impl Drop for SessionGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
