//! No-daemon transfers: the client starts `haul serve --stdio` on the
//! remote host through the user's own ssh (so `~/.ssh/config`, agents and
//! jump hosts all work), swaps one-time keys over the ssh channel, and then
//! connects directly; if it cannot, the data goes through the ssh channel
//! (P-27, P-28).
//!
//! - [`launch`]: the client's side: runs ssh, reads the remote greeting.
//! - [`remote`]: `haul serve --stdio`, the side ssh starts.
//! - [`relay`]: TCP connections carried as frames over the ssh pipes.

pub mod launch;
pub mod relay;
pub mod remote;

use std::time::{Duration, Instant};

use secure::Keypair;
use wire::ErrorCode;

pub use launch::{SshLink, SshSpec};
pub use remote::{serve_stdio, StdioOptions};

use crate::client::{ClientConfig, Connected, ServerTrust, Transport};
use crate::error::TransferError;

/// This build's release, as both sides' greetings show it.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// How long a direct connection may take before the data goes through
/// the ssh channel instead: a firewall that drops packets answers with
/// silence, never with a refusal.
pub const DIRECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts the remote side over ssh and connects to it: directly if the
/// hosts can reach each other (unless `through_ssh`), else through the ssh
/// channel, on one stream. `cfg`'s identity, trust and addresses are
/// replaced by the one-time ones; the link must outlive the transfer.
pub fn connect(
    mut cfg: ClientConfig,
    spec: &SshSpec,
    through_ssh: bool,
) -> Result<(Connected, SshLink), TransferError> {
    let started = Instant::now();
    let identity = Keypair::generate();
    let mut link = SshLink::start(spec, &identity.public)?;
    cfg.identity = identity;
    cfg.trust = ServerTrust::Key(link.server_key);
    cfg.port = link.port;
    if !through_ssh && !link.direct.is_empty() {
        cfg.dial = link.direct.clone();
        let timeout = cfg.connect_timeout;
        cfg.connect_timeout = timeout.min(DIRECT_TIMEOUT);
        match Connected::dial_first(&cfg) {
            Ok((addr, stream)) => {
                cfg.connect_timeout = timeout;
                return Ok((Connected::establish(cfg, addr, stream, started)?, link));
            }
            Err(e) if e.code == ErrorCode::Connect => {
                if let Some(f) = &cfg.notice {
                    f(&format!(
                        "no direct connection to {} ({}); carrying the data through the ssh channel instead (one stream, at ssh's speed: open the port range or run `haul serve` there for full speed)",
                        spec.host, e.message
                    ));
                }
            }
            Err(e) => return Err(e),
        }
        cfg.connect_timeout = timeout;
    }
    cfg.dial = vec![link.relay()?];
    cfg.streams = Some(1);
    cfg.transport = Transport::Tcp;
    // Buffers of a loopback connection need no forcing.
    cfg.tuning.force_buffer = None;
    let (addr, stream) = Connected::dial_first(&cfg)?;
    Ok((Connected::establish(cfg, addr, stream, started)?, link))
}
