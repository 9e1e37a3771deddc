//! The server's side of a tunnel session (P-37): which targets it may
//! reach, and a connection to the target for every connection the client
//! opens.

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;

use tunnel::{Event, MuxConfig, Role};
use wire::ErrorCode;

use crate::options::{window_for, Options, TARGET_CONNECT_TIMEOUT};
use crate::session::Session;
use crate::shared::Shared;
use crate::socket;
use connect::error::TransferError;
use connect::framed::{FrameReader, FrameWriter};
use connect::join::DataConn;
use connect::progress::Progress;

/// Where a server forwards tunnels (`serve --tunnel-to`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TunnelTargets {
    /// Nowhere: a daemon without `--tunnel-to`.
    #[default]
    None,
    /// Exactly these `HOST:PORT`s, as written.
    Only(Vec<String>),
    /// Anywhere the host reaches: a server started over ssh, whose user
    /// could run any program there anyway (like `ssh -L`).
    Any,
}

impl TunnelTargets {
    /// A daemon's: the targets `--tunnel-to` lists, or none.
    pub fn listed(targets: Vec<String>) -> TunnelTargets {
        if targets.is_empty() {
            TunnelTargets::None
        } else {
            TunnelTargets::Only(targets)
        }
    }

    /// A server started over ssh (P-27, P-39): the targets `--tunnel-to`
    /// lists. Without any, anywhere for an unconfined login, whose user
    /// could run any program there anyway (like `ssh -L`); but nowhere,
    /// as a daemon, for one that is `confined` (by `--root`, or by a
    /// forced command in `authorized_keys`, which may well mean
    /// `no-port-forwarding`).
    pub fn for_stdio(targets: Vec<String>, confined: bool) -> TunnelTargets {
        if targets.is_empty() && !confined {
            TunnelTargets::Any
        } else {
            TunnelTargets::listed(targets)
        }
    }

    /// Whether a client may tunnel to `target`; the refusal says how to
    /// allow it.
    pub fn check(&self, target: &str) -> Result<(), TransferError> {
        let refuse = |why: String| Err(TransferError::new(ErrorCode::Permission, why));
        match self {
            TunnelTargets::Any => Ok(()),
            TunnelTargets::Only(list) if list.iter().any(|t| t == target) => Ok(()),
            TunnelTargets::Only(list) => refuse(format!(
                "this server does not forward to {target}; it forwards to {} (add `--tunnel-to {target}` to `haul serve`)",
                list.join(", ")
            )),
            TunnelTargets::None => refuse(format!(
                "this server forwards no tunnels: its `haul serve` has no --tunnel-to (over ssh: none when confined by --root or a forced command); add `--tunnel-to {target}` to allow this one"
            )),
        }
    }
}

/// Runs an accepted tunnel session until the client goes: every
/// connection the client opens is connected to `target`. Returns a line for
/// the log.
pub fn serve(
    target: &str,
    req: &wire::Request,
    conns: Vec<DataConn>,
    (ctrl_r, ctrl_w): (FrameReader, FrameWriter),
    rtt: std::time::Duration,
    progress: Arc<Progress>,
) -> Result<String, TransferError> {
    let lanes = conns.len();
    let opts = Options {
        mux: MuxConfig {
            window: window_for(rtt),
            ..MuxConfig::default()
        },
        cache: req.sync.dedup,
        compress: codec::Mode::from_wire(req.compress, req.compress_level),
    };
    let session = Session::start(Role::Server, opts, conns, progress);
    session.watch(ctrl_r, ctrl_w);
    let shared = session.shared.clone();
    loop {
        let opened = {
            let mut mux = shared.lock();
            loop {
                if let Some(Event::Opened(id)) = mux.poll_event() {
                    break Some(id);
                }
                if shared.stopped() {
                    break None;
                }
                // The key was revoked (issue 39): the session ends, and
                // the client is told why.
                if let Some(e) = shared.progress.control.stopped() {
                    drop(mux);
                    shared.fail_ours(e);
                    break None;
                }
                mux = shared.wait(mux);
            }
        };
        let Some(id) = opened else { break };
        let (s, target) = (shared.clone(), target.to_string());
        std::thread::spawn(move || connect_target(&s, id, &target));
    }
    let stats = session.stats();
    let (cache, compress) = session.saved();
    // The session ends when the client goes: that is its normal end.
    let ended = session.wait();
    let line = format!(
        "tunnel to {target} over {lanes} lanes: {} connections, {} bytes to the target, {} from it; {} bytes on the lanes, {cache} saved by the byte cache, {compress} by compression",
        stats.opened, stats.total.to_app, stats.total.from_app, stats.total.wire_in + stats.total.wire_out
    );
    match ended {
        Err(e) if e.code == ErrorCode::ConnectionLost => Ok(line),
        Err(e) => Err(e),
        Ok(()) => Ok(line),
    }
}

/// Connects connection `id` to the target, or resets it with the reason.
fn connect_target(shared: &Arc<Shared>, id: u32, target: &str) {
    match dial(target) {
        Ok(stream) => socket::pump(shared, id, stream),
        Err(why) => {
            tracing::info!("tunnel connection {id}: {why}");
            shared.lock().reset(id, &why);
            shared.cv.notify_all();
        }
    }
}

fn dial(target: &str) -> Result<TcpStream, String> {
    let addrs = target
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {target}: {e}"))?;
    let mut last = format!("{target} has no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, TARGET_CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("cannot connect to {target} ({a}): {e}"),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_allowed_only_as_listed() {
        assert!(TunnelTargets::Any.check("db:5432").is_ok());
        let only = TunnelTargets::Only(vec!["127.0.0.1:5432".into()]);
        assert!(only.check("127.0.0.1:5432").is_ok());
        let e = only.check("127.0.0.1:22").unwrap_err();
        assert_eq!(e.code, ErrorCode::Permission);
        assert!(
            e.message.contains("--tunnel-to 127.0.0.1:22"),
            "{}",
            e.message
        );
        let e = TunnelTargets::None.check("x:1").unwrap_err();
        assert!(e.message.contains("forwards no tunnels"), "{}", e.message);
        assert!(e.message.contains("--tunnel-to x:1"), "{}", e.message);
    }

    /// Over ssh, `--tunnel-to` is honoured; without it a confined login
    /// (`--root`, a forced command) forwards nowhere, as a daemon does,
    /// and an unconfined one anywhere, as `ssh -L` would (P-39).
    #[test]
    fn a_server_started_over_ssh_forwards_as_confined() {
        let listed = vec!["127.0.0.1:5432".to_string()];
        for confined in [false, true] {
            assert_eq!(
                TunnelTargets::for_stdio(listed.clone(), confined),
                TunnelTargets::Only(listed.clone())
            );
        }
        assert_eq!(TunnelTargets::for_stdio(vec![], true), TunnelTargets::None);
        assert_eq!(TunnelTargets::for_stdio(vec![], false), TunnelTargets::Any);
        assert_eq!(TunnelTargets::listed(vec![]), TunnelTargets::None);
    }
}
