//! No-daemon transfers: the client starts `haul serve --stdio` on the
//! remote host through the user's own ssh (so `~/.ssh/config`, agents and
//! jump hosts all work), swaps one-time keys over the ssh channel, and then
//! connects directly; if it cannot, the data goes through the ssh channel
//! (P-27, P-28).
//!
//! - [`launch`]: the client's side: runs ssh, reads the remote greeting.
//! - [`remote`]: `haul serve --stdio`, the side ssh starts.
//! - [`relay`]: TCP connections carried as frames over the ssh pipes.
//!
//! It owns the ssh process, the greetings and the relay; it must not
//! touch blocks or the handshake: once the greeting is swapped, the
//! client and server of `endpoint` run the session as they do with a
//! daemon.

pub mod install;
pub mod launch;
pub mod relay;
pub mod release;
pub mod remote;

use std::time::{Duration, Instant};

use secure::Keypair;

pub use launch::{PushHaul, SshLink, SshSpec};
pub use release::RELEASE;
pub use remote::{serve_stdio, StdioOptions};

use connect::error::TransferError;
use endpoint::client::{ClientConfig, Connected, ServerTrust, Transport};

/// How long a direct connection may take before the data goes through
/// the ssh channel instead: a firewall that drops packets answers with
/// silence, never with a refusal.
pub const DIRECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Tries the direct addresses in turn within [`DIRECT_TIMEOUT`] in all;
/// `Err` says what each did.
fn dial_direct(
    candidates: &[std::net::SocketAddr],
    tuning: &connect::net::Tuning,
    timeout: Duration,
) -> Result<(std::net::SocketAddr, std::net::TcpStream), String> {
    if candidates.is_empty() {
        return Err("the remote side named no address this host can resolve".into());
    }
    let deadline = Instant::now() + DIRECT_TIMEOUT.min(timeout);
    let mut reasons = Vec::new();
    for addr in candidates {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            reasons.push(format!("{addr}: not tried, time is up"));
            continue;
        }
        match connect::net::connect(addr, tuning, left) {
            Ok(s) => return Ok((*addr, s)),
            Err(e) => reasons.push(match e.kind() {
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                    format!("{addr}: no answer within {:.0} s", left.as_secs_f64())
                }
                std::io::ErrorKind::ConnectionRefused => format!("{addr}: refused"),
                _ => format!("{addr}: {e}"),
            }),
        }
    }
    Err(reasons.join("; "))
}

/// Starts the remote side over ssh and connects to it: directly if the
/// hosts can reach each other (unless `through_ssh`), else through the ssh
/// channel, on one stream. `cfg`'s identity, trust and addresses are
/// replaced by the one-time ones; the link must outlive the transfer.
///
/// With `fast` (a copy), a remote side that answered the greetings'
/// handshake gets a keyed session: its control connection through the ssh
/// channel at once, its data directly where a direct connection answers
/// (tried meanwhile), through the channel where none does (P-27).
pub fn connect(
    mut cfg: ClientConfig,
    spec: &SshSpec,
    through_ssh: bool,
    fast: bool,
) -> Result<(Connected, SshLink), TransferError> {
    let started = Instant::now();
    let identity = Keypair::generate();
    let mut link = match SshLink::start(spec, &identity.public) {
        // No haul of this protocol there: this one, copied over (issue 29).
        // Only where haul was left to the PATH or may be pushed: a haul
        // the user named with --remote-haul keeps its own error.
        Err(e) if install::missing(&e) && install::may_offer(spec) => {
            let pushed = SshSpec {
                remote_haul: install::push(spec, spec.push_haul, &e)?,
                ..spec.clone()
            };
            SshLink::start(&pushed, &identity.public)?
        }
        r => r?,
    };
    tracing::info!(
        "remote haul {} answered over ssh in {:.2}s; its port {}",
        link.remote_release,
        started.elapsed().as_secs_f64(),
        link.port
    );
    link.identity = Some(identity.duplicate());
    cfg.identity = identity;
    cfg.trust = ServerTrust::Key(link.server_key);
    cfg.port = link.port;
    let keys = link.keys.take();
    if let (true, false, Some(keys), Some(&direct)) = (fast, through_ssh, keys, link.direct.first())
    {
        return keyed(cfg, link, keys, direct, started);
    }
    if !through_ssh {
        match dial_direct(&link.direct, &cfg.tuning, cfg.connect_timeout) {
            Ok((addr, stream)) => {
                tracing::info!(
                    "connected directly to {addr} at {:.2}s",
                    started.elapsed().as_secs_f64()
                );
                link.reached = Some(addr);
                return Ok((Connected::establish(cfg, addr, stream, started)?, link));
            }
            Err(why) => {
                if let Some(f) = &cfg.notice {
                    f(&format!(
                        "no direct connection to {} ({why}); carrying the data through the ssh channel instead (one stream, at ssh's speed; for full speed, open a port range in the firewall and name it with --remote-ports, or run `haul serve` there)",
                        spec.host
                    ));
                }
            }
        }
    }
    if cfg.transport == Transport::Udp {
        return Err(TransferError::new(
            wire::ErrorCode::Connect,
            format!(
                "--transport udp needs a direct path to {}, and the ssh channel carries only TCP; drop --transport udp to let the data go through ssh",
                spec.host
            ),
        ));
    }
    let relay = link.relay()?;
    link.reached = Some(relay);
    link.data_relayed
        .store(true, std::sync::atomic::Ordering::Relaxed);
    through_relay(&mut cfg, relay);
    let (addr, stream) = Connected::dial_first(&cfg)?;
    Ok((Connected::establish(cfg, addr, stream, started)?, link))
}

/// A session keyed in the greetings: control through the relay now, data
/// where the direct check (run meanwhile) says.
fn keyed(
    cfg: ClientConfig,
    mut link: SshLink,
    keys: secure::SessionKeys,
    direct: std::net::SocketAddr,
    started: Instant,
) -> Result<(Connected, SshLink), TransferError> {
    let (candidates, tuning, timeout) =
        (link.direct.clone(), cfg.tuning.clone(), cfg.connect_timeout);
    let check = std::thread::Builder::new()
        .name("direct-check".into())
        .spawn(move || dial_direct(&candidates, &tuning, timeout))
        .map_err(|e| TransferError::new(wire::ErrorCode::Other, format!("cannot start: {e}")))?;
    let relay = link.relay()?;
    let stream = std::net::TcpStream::connect(relay)
        .map_err(|e| TransferError::lost("connecting to the ssh relay", &e))?;
    let route = endpoint::client::SshRoute::new(direct, check, relay, link.data_relayed.clone());
    let udp_port = link.udp_port.unwrap_or(0);
    let conn = Connected::keyed(cfg, stream, keys, udp_port, route, started)?;
    tracing::info!(
        "session keyed over ssh; control through the ssh channel at {:.2}s",
        started.elapsed().as_secs_f64()
    );
    Ok((conn, link))
}

/// One stream of TCP through the relay's local address.
fn through_relay(cfg: &mut ClientConfig, relay: std::net::SocketAddr) {
    cfg.dial = vec![relay];
    cfg.streams = Some(1);
    cfg.transport = Transport::Tcp;
    // Buffers of a loopback connection need no forcing.
    cfg.tuning.force_buffer = None;
}

/// Another session with the remote side `connect` started, by the route the
/// first one took (`haul probe` runs several).
pub fn reconnect(mut cfg: ClientConfig, link: &SshLink) -> Result<Connected, TransferError> {
    let started = Instant::now();
    let Some(identity) = &link.identity else {
        return Err(TransferError::new(
            wire::ErrorCode::Other,
            "no session was made over this ssh link yet",
        ));
    };
    // A keyed first session (P-27) left no address: its route decides.
    let reached = match (link.reached, link.relay_addr()) {
        (Some(r), _) => r,
        (None, Some(relay)) if link.relayed() => relay,
        (None, _) => dial_direct(&link.direct, &cfg.tuning, cfg.connect_timeout)
            .map(|(a, _)| a)
            .map_err(|why| {
                TransferError::new(
                    wire::ErrorCode::Connect,
                    format!("no direct connection to {} any more: {why}", cfg.host),
                )
            })?,
    };
    if link.relayed() {
        if cfg.transport == Transport::Udp {
            return Err(TransferError::new(
                wire::ErrorCode::Connect,
                "the ssh channel carries only TCP; the UDP channel needs a direct path",
            ));
        }
        through_relay(&mut cfg, reached);
    }
    cfg.identity = identity.duplicate();
    cfg.trust = ServerTrust::Key(link.server_key);
    cfg.port = link.port;
    cfg.dial = vec![reached];
    let (addr, stream) = Connected::dial_first(&cfg)?;
    Connected::establish(cfg, addr, stream, started)
}
