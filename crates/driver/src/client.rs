//! The client: connects, authenticates the server against pinned keys,
//! asks to push or pull, opens the data streams and runs the engine (P-22).

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use secure::{HostKeyStatus, Keypair, KnownHosts, Protection};
use session::{ReceiverSession, SenderSession};
use store::{Sink, Sources, Walked};
use wire::{
    ErrorCode, Msg, Op, Request, Summary, PROTECT_AES256GCM, PROTECT_CHACHA20POLY1305,
    PROTECT_INTEGRITY_ONLY,
};

use crate::engine::{run_receiver, run_sender};
use crate::error::TransferError;
use crate::framed::{FrameReader, FrameWriter};
use crate::handshake;
use crate::join::{client_join, keyed, DataConn};
use crate::net::{self, BufferLimits, Tuning};
use crate::progress::Progress;
use crate::server::{CONTROL_PROTECTION, SEND_WINDOW};

/// A callback that shows a one-line notice to the user.
pub type Notice = Box<dyn Fn(&str) + Send>;

pub struct ClientConfig {
    pub identity: Keypair,
    pub known_hosts: PathBuf,
    /// Host as the user wrote it (name or address).
    pub host: String,
    pub port: u16,
    /// `None`: choose by the rule in [`auto_streams`].
    pub streams: Option<u16>,
    pub block_size: u32,
    pub protection: Protection,
    /// Bytes per second.
    pub rate: Option<u64>,
    pub tuning: Tuning,
    pub connect_timeout: Duration,
    /// Called when a server key is pinned for the first time.
    pub on_new_host_key: Option<Notice>,
}

/// What the CLI prints at the end.
#[derive(Debug, Clone)]
pub struct Report {
    pub duration: Duration,
    pub summary: Summary,
    pub wire_bytes: u64,
    pub streams: u16,
    pub retransmitted: u64,
    pub rtt: Duration,
    pub protection: Protection,
    pub stream_window: u64,
}

/// What the report needs once the connection is consumed.
struct Tail {
    progress: Arc<Progress>,
    started: Instant,
    rtt: Duration,
    protection: Protection,
}

impl Tail {
    fn report(&self, summary: Summary, streams: u16, retransmitted: u64, window: u64) -> Report {
        let p = &self.progress;
        Report {
            duration: self.started.elapsed(),
            summary,
            wire_bytes: Progress::get(&p.wire_tx) + Progress::get(&p.wire_rx),
            streams,
            retransmitted,
            rtt: self.rtt,
            protection: self.protection,
            stream_window: window,
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
    started: Instant,
    progress: Arc<Progress>,
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
    dial_with(addr, cfg, &cfg.tuning)
}

fn dial_with(
    addr: &SocketAddr,
    cfg: &ClientConfig,
    tuning: &Tuning,
) -> Result<TcpStream, TransferError> {
    net::connect(addr, tuning, cfg.connect_timeout).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::ConnectionRefused => {
                "connection refused (is `haul serve` running there, on that port?)".to_string()
            }
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                format!("no answer within {}s", cfg.connect_timeout.as_secs())
            }
            _ => e.to_string(),
        };
        TransferError::new(
            ErrorCode::Connect,
            format!(
                "cannot connect to {addr} ({}:{}): {why}",
                cfg.host, cfg.port
            ),
        )
    })
}

impl Connected {
    pub fn connect(cfg: ClientConfig) -> Result<Connected, TransferError> {
        let started = Instant::now();
        let addrs = resolve(&cfg.host, cfg.port)?;
        let mut last = None;
        let mut found = None;
        for a in &addrs {
            match dial(a, &cfg) {
                Ok(s) => {
                    found = Some((*a, s));
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some((addr, mut stream)) = found else {
            return Err(last.expect("at least one address was tried"));
        };
        let label = format!("{}:{}", cfg.host, cfg.port);
        let mut known = KnownHosts::load(&cfg.known_hosts)
            .map_err(|e| TransferError::new(ErrorCode::Auth, e.to_string()))?;
        let est = handshake::client(&mut stream, &cfg.identity, |key| {
            match known.check(&label, key) {
            HostKeyStatus::Known => Ok(()),
            HostKeyStatus::Unknown => {
                known.add(&label, key).map_err(|e| TransferError::new(ErrorCode::Auth, e.to_string()))?;
                if let Some(f) = &cfg.on_new_host_key {
                    f(&format!("pinned the key of new server {label} ({}) in {}", key.fingerprint(), known.path().display()));
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
        })?;
        let progress = Arc::new(Progress::default());
        let control = keyed(stream, &est.keys, 0, CONTROL_PROTECTION, true, &progress)?;
        let (mut ctrl_r, ctrl_w) = (control.reader, control.writer);
        ctrl_r
            .get_ref()
            .set_read_timeout(Some(handshake::HANDSHAKE_TIMEOUT))
            .ok();
        match ctrl_r.read_msg() {
            Ok(Some(Msg::Welcome)) => {}
            Ok(Some(Msg::Error { code, message })) => {
                return Err(TransferError::new(
                    code,
                    format!("server refused: {message}"),
                ))
            }
            Ok(Some(_)) => {
                return Err(TransferError::new(
                    ErrorCode::Protocol,
                    "server sent no welcome",
                ))
            }
            Ok(None) => {
                return Err(TransferError::new(
                    ErrorCode::Auth,
                    "server closed the connection after the handshake (it did not accept our key)",
                ))
            }
            Err(e) => return Err(e.into_transfer("waiting for the server's welcome")),
        }
        ctrl_r.get_ref().set_read_timeout(None).ok();
        Ok(Connected {
            cfg,
            addr,
            ctrl_r,
            ctrl_w,
            keys: est.keys,
            rtt: est.rtt,
            started,
            progress,
        })
    }

    pub fn rtt(&self) -> Duration {
        self.rtt
    }

    fn streams(&self) -> (u16, u64) {
        let window = BufferLimits::read().stream_window(self.cfg.tuning.force_buffer.is_some());
        (
            self.cfg
                .streams
                .unwrap_or_else(|| auto_streams(self.rtt, self.cfg.rate, window)),
            window,
        )
    }

    fn request(
        &mut self,
        op: Op,
        paths: Vec<String>,
        recursive: bool,
        many_sources: bool,
        streams: u16,
    ) -> Result<Vec<DataConn>, TransferError> {
        let protection = match self.cfg.protection {
            Protection::Aes256Gcm => PROTECT_AES256GCM,
            Protection::ChaCha20Poly1305 => PROTECT_CHACHA20POLY1305,
            Protection::IntegrityOnly => PROTECT_INTEGRITY_ONLY,
        };
        let requested = streams;
        let req = Request {
            op,
            paths,
            recursive,
            many_sources,
            streams,
            block_size: self.cfg.block_size,
            protection,
            rate: self.cfg.rate.unwrap_or(0),
        };
        self.ctrl_w
            .send_msg(&Msg::Request(req))
            .map_err(|e| TransferError::lost("sending the request", &e))?;
        let (session, streams) = match self.ctrl_r.read_msg() {
            Ok(Some(Msg::Accept { session, streams })) => (session, streams),
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
        Progress::set(&progress.streams, streams as u64);
        // The RTT is known now: where buffers can be forced, size each data
        // connection's to its share of the path's BDP instead of the maximum.
        let mut tuning = self.cfg.tuning.clone();
        if tuning.force_buffer.is_some() {
            tuning.force_buffer = Some(stream_buffer(self.rtt, self.cfg.rate, streams));
        }
        (1..=streams)
            .map(|i| {
                let s = dial_with(&self.addr, &self.cfg, &tuning)?;
                client_join(s, &self.keys, i, self.cfg.protection, &progress)
            })
            .collect()
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
        }
    }

    /// Sends local sources to `dest` on the server.
    pub fn push(
        mut self,
        walked: Walked,
        dest: &str,
        recursive: bool,
        many_sources: bool,
    ) -> Result<Report, TransferError> {
        let (streams, window) = self.streams();
        // No more streams than blocks: a small transfer needs few.
        let blocks: u64 = walked
            .entries
            .iter()
            .map(|e| match e.kind {
                wire::EntryKind::File { size, .. } => {
                    session::block_count(size, self.cfg.block_size).max(1)
                }
                _ => 0,
            })
            .sum();
        let streams = streams.min(blocks.max(1).min(u16::MAX as u64) as u16);
        Progress::set(&self.progress.total_bytes, walked.file_bytes());
        Progress::set(
            &self.progress.total_files,
            walked
                .entries
                .iter()
                .filter(|e| matches!(e.kind, wire::EntryKind::File { .. }))
                .count() as u64,
        );
        let conns = self.request(
            Op::Push,
            vec![dest.to_string()],
            recursive,
            many_sources,
            streams,
        )?;
        let streams = conns.len() as u16;
        let sources = Sources::new(walked.paths);
        let session = SenderSession::new(walked.entries, self.cfg.block_size, SEND_WINDOW);
        let writers = conns.into_iter().map(|c| c.writer).collect();
        let (rate, progress, tail) = (self.cfg.rate, self.progress.clone(), self.tail());
        let r = run_sender(
            self.ctrl_r,
            self.ctrl_w,
            writers,
            session,
            &sources,
            rate,
            &progress,
        )?;
        Ok(tail.report(r.summary, streams, r.retransmitted, window))
    }

    /// Fetches `sources` from the server into `sink`.
    pub fn pull(
        mut self,
        sources: Vec<String>,
        recursive: bool,
        sink: &Sink,
    ) -> Result<Report, TransferError> {
        let (streams, window) = self.streams();
        let conns = self.request(Op::Pull, sources, recursive, false, streams)?;
        let streams = conns.len() as u16;
        let readers = conns.into_iter().map(|c| c.reader).collect();
        let (block_size, progress, tail) =
            (self.cfg.block_size, self.progress.clone(), self.tail());
        let summary = run_receiver(
            self.ctrl_r,
            self.ctrl_w,
            readers,
            ReceiverSession::new(block_size),
            sink,
            &progress,
        )?;
        Ok(tail.report(summary, streams, 0, window))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
