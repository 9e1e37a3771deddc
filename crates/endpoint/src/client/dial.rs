//! Reaching the server: its addresses, the dialer each connection is
//! made with, how many data connections a transfer opens and their
//! buffers, and what a pinned start dials before it has keys: its control
//! connection on a thread, and data connections that warm up while the
//! keys come (P-48, P-49).

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use secure::SessionKeys;
use wire::ErrorCode;

use connect::error::TransferError;
use connect::join::DataConn;
use connect::net::{self, Tuning};
use connect::progress::{Mark, Progress};
use connect::race;
use connect::warmup;

use super::config::ClientConfig;

/// Streams to open when the user gave no `--streams` (documented in
/// docs/ARCHITECTURE.md): enough that per-stream windows cover the
/// bandwidth-delay product of the rate we aim for (the `--rate` cap, else
/// 10 Gbit/s) at the measured RTT, at least the host's share of cores for a
/// transfer (`connect::sizing::core_share`: one per core up to 4, half of a
/// larger host's), at most 16.
pub fn auto_streams(rtt: Duration, rate: Option<u64>, stream_window: u64) -> u16 {
    let target = rate.unwrap_or(10_000_000_000 / 8) as f64;
    let need = (target * rtt.as_secs_f64() / stream_window.max(1) as f64).ceil() as u64;
    let cores = connect::sizing::host_core_share() as u64;
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

pub(super) fn dial(addr: &SocketAddr, cfg: &ClientConfig) -> Result<TcpStream, TransferError> {
    Dialer::new(cfg, cfg.tuning.clone()).connect(addr)
}

/// How to open a connection to the server, owned, so that each data
/// connection can be dialled on a thread of its own.
#[derive(Clone)]
pub(super) struct Dialer {
    host: String,
    port: u16,
    timeout: Duration,
    tuning: Tuning,
    relay: Option<super::config::Relay>,
    /// Dial again after this long without a connection (a SYN or its
    /// answer lost, P-22): two round trips of the path, where known.
    pub(super) again: Option<Duration>,
}

impl Dialer {
    pub(super) fn new(cfg: &ClientConfig, tuning: Tuning) -> Dialer {
        Dialer {
            host: cfg.host.clone(),
            port: cfg.port,
            timeout: cfg.connect_timeout,
            tuning,
            relay: cfg.relay.clone(),
            again: cfg.known_path.map(|k| race::redial_after(k.rtt)),
        }
    }

    /// Tunes a connection made before the data path was sized.
    pub(super) fn tune(&self, s: &TcpStream) {
        net::tune_accepted(s, &self.tuning);
    }

    pub(super) fn connect(&self, addr: &SocketAddr) -> Result<TcpStream, TransferError> {
        if let Some(relay) = &self.relay {
            return relay(self.timeout).map_err(|e| {
                TransferError::new(
                    ErrorCode::Connect,
                    format!(
                        "no connection to {}:{} through the job's client: {e}",
                        self.host, self.port
                    ),
                )
            });
        }
        race::connect(addr, &self.tuning, self.timeout, self.again).map_err(|e| {
            let why = match e.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    "connection refused (is `haul serve` running there, on that port?)".to_string()
                }
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                    format!("no answer within {}s", self.timeout.as_secs())
                }
                _ => e.to_string(),
            };
            TransferError::new(
                ErrorCode::Connect,
                format!(
                    "cannot connect to {addr} ({}:{}): {why}",
                    self.host, self.port
                ),
            )
        })
    }
}

/// Data connections being dialled and joined, each on its own thread.
pub(super) type Joining = Vec<std::thread::JoinHandle<Result<DataConn, TransferError>>>;

/// What a data connection dialled before its session's keys does while
/// they come (P-49).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Warm {
    Not,
    /// Fills its first window with warm-ups: it will send the data.
    Send,
    /// Asks the server for warm-ups back: the server will send the data.
    Ask,
}

impl Warm {
    /// Warms `s` up; whether the server was asked for warm-ups back. A
    /// connection that cannot write its warm-up fails its join, which
    /// says so.
    pub(super) fn meanwhile(self, s: &TcpStream) -> bool {
        match self {
            Warm::Not => false,
            Warm::Send => {
                let _ = warmup::warm_up(s);
                false
            }
            Warm::Ask => warmup::ask_warm_up(s).is_ok(),
        }
    }
}

/// Data connections dialled before the session's keys exist (a pinned
/// start's, P-48): each waits for its keys to join.
pub(super) struct EarlyStreams {
    pub(super) joining: Joining,
    pub(super) keys: Vec<std::sync::mpsc::Sender<SessionKeys>>,
}

impl EarlyStreams {
    /// Hands each connection the session's keys: it joins as soon as it
    /// is connected.
    pub(super) fn join_with(self, keys: &SessionKeys) -> Joining {
        for tx in self.keys {
            // A connection whose dial failed has gone; its error waits
            // in its handle.
            let _ = tx.send(keys.clone());
        }
        self.joining
    }
}

/// A pinned start's control connection before its handshake (P-48).
pub(super) enum Pending {
    Ready(TcpStream),
    /// Still being dialled on a thread of its own, so that the request's
    /// data connections can be dialled beside it and warmed up while the
    /// handshake runs (P-49).
    Dialling(std::thread::JoinHandle<Result<TcpStream, TransferError>>),
}

impl Pending {
    /// The connection, once it is made.
    pub(super) fn connected(self, progress: &Progress) -> Result<TcpStream, TransferError> {
        match self {
            Pending::Ready(s) => Ok(s),
            Pending::Dialling(dialling) => {
                let s = dialling.join().unwrap_or_else(|_| {
                    Err(TransferError::new(
                        ErrorCode::Connect,
                        "the thread dialling the server stopped",
                    ))
                })?;
                progress.timeline.mark(Mark::Connected);
                Ok(s)
            }
        }
    }
}

/// The server's addresses: those given, or its name's.
pub(super) fn addresses(cfg: &ClientConfig) -> Result<Vec<SocketAddr>, TransferError> {
    match cfg.dial.is_empty() {
        true => resolve(&cfg.host, cfg.port),
        false => Ok(cfg.dial.clone()),
    }
}

/// Connects to the first of `addrs` that answers. Fails with `Connect`
/// (3) if none does.
pub(super) fn dial_among(
    cfg: &ClientConfig,
    addrs: &[SocketAddr],
) -> Result<(SocketAddr, TcpStream), TransferError> {
    let mut last = None;
    for a in addrs {
        match dial(a, cfg) {
            Ok(s) => return Ok((*a, s)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        TransferError::new(
            ErrorCode::Connect,
            format!("no address to reach {}", cfg.host),
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_rules() {
        let ms = Duration::from_millis;
        // Loopback: the host's share of cores.
        let cores = connect::sizing::host_core_share() as u16;
        assert_eq!(auto_streams(ms(0), None, 4 << 20), cores.clamp(1, 16));
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
