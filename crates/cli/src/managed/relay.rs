//! `--through-client` (P-45 J-11): where daemon A cannot reach daemon B,
//! this host relays: it keeps a couple of connections open to A, each
//! named by the job's id; when A's attempt takes one and speaks (its
//! handshake with B), this host connects to B and copies bytes both ways
//! until either side closes. What it copies is A's session with B,
//! sealed end to end: this host reads none of it, and A still checks B's
//! key. Like `scp -3`, the data cross this host's links.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use connect::TransferError;
use wire::{ConnKind, Preamble, PROTOCOL_VERSION};

/// Connections held open to A, unused, at any time.
const SPARES: usize = 2;
/// Relayed connections at once, at most.
const MAX_LIVE: usize = 64;
const CONNECT: Duration = Duration::from_secs(10);

/// The relay, running until dropped.
pub struct Relay {
    stop: Arc<AtomicBool>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, TransferError> {
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            TransferError::new(
                wire::ErrorCode::Connect,
                format!("cannot resolve {host}:{port} to relay the job"),
            )
        })
}

/// Relays job `id` from A (`a`) to B (`b`), each a host and port.
pub fn start(id: jobs::Id, a: (&str, u16), b: (&str, u16)) -> Result<Relay, TransferError> {
    let (a, b) = (resolve(a.0, a.1)?, resolve(b.0, b.1)?);
    let stop = Arc::new(AtomicBool::new(false));
    let (idle, live) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let s = stop.clone();
    std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            if idle.load(Ordering::Relaxed) < SPARES && live.load(Ordering::Relaxed) < MAX_LIVE {
                idle.fetch_add(1, Ordering::Relaxed);
                live.fetch_add(1, Ordering::Relaxed);
                let (s, idle, live) = (s.clone(), idle.clone(), live.clone());
                std::thread::spawn(move || {
                    if let Err(e) = one(id, a, b, &s, &idle) {
                        tracing::debug!("a relayed connection of job {id}: {e}");
                    }
                    live.fetch_sub(1, Ordering::Relaxed);
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    Ok(Relay { stop })
}

/// One relayed connection: opened to A, held until A speaks on it, then
/// joined to a new connection to B. `idle` counts it until A speaks.
fn one(
    id: jobs::Id,
    a: SocketAddr,
    b: SocketAddr,
    stop: &AtomicBool,
    idle: &AtomicUsize,
) -> std::io::Result<()> {
    let mut unused = Some(idle);
    let result = (|| {
        let mut to_a = TcpStream::connect_timeout(&a, CONNECT)?;
        let pre = Preamble {
            version: PROTOCOL_VERSION,
            kind: ConnKind::Relay,
            session: id.0,
            stream: 0,
        };
        to_a.write_all(&pre.encode())?;
        to_a.set_read_timeout(Some(Duration::from_secs(1)))?;
        loop {
            match to_a.peek(&mut [0u8; 1]) {
                Ok(0) => return Ok(()),
                Ok(_) => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(i) = unused.take() {
            i.fetch_sub(1, Ordering::Relaxed);
        }
        to_a.set_read_timeout(None)?;
        let to_b = TcpStream::connect_timeout(&b, CONNECT)?;
        let _ = to_a.set_nodelay(true);
        let _ = to_b.set_nodelay(true);
        splice(to_a, to_b)
    })();
    if let Some(i) = unused {
        i.fetch_sub(1, Ordering::Relaxed);
    }
    result
}

/// Copies both ways until each side has closed its half.
fn splice(a: TcpStream, b: TcpStream) -> std::io::Result<()> {
    let (a2, b2) = (a.try_clone()?, b.try_clone()?);
    let back = std::thread::spawn(move || copy(b2, a2));
    let r = copy(a, b);
    let _ = back.join();
    r
}

fn copy(mut from: TcpStream, mut to: TcpStream) -> std::io::Result<()> {
    let mut buf = vec![0u8; 256 << 10];
    let r = loop {
        match from.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                if let Err(e) = to.write_all(&buf[..n]) {
                    break Err(e);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
    r
}
