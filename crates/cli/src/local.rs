//! Copies on one host (`haul cp a b`, `haul cp dir s3://bkt/`, `haul cp
//! s3://a/x gs://b/x`): both ends of the transfer in this process. The
//! receiving end is the server `haul serve --stdio` runs, on a thread of
//! its own, listening on loopback for this client's one-time key alone;
//! the sending end is the usual client. So a local copy has every check
//! of a transfer between hosts (each block's hash, the file's digest
//! before its final name, resume from the journal, `sync`'s rules,
//! progress, `--json`, exit codes) and no daemon between the two.
//!
//! Nothing leaves the host: frames are authenticated, not encrypted
//! (`--encrypt` would only spend cores), and nothing is compressed unless
//! asked for.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use connect::net::{self, Tuning};
use connect::TransferError;
use endpoint::server::bucket::Buckets;
use endpoint::server::{serve_on, ClientKeys, ServerConfig};
use endpoint::{ClientConfig, ServerTrust, Transport};
use secure::{Keypair, Protection};
use store::Root;
use wire::ErrorCode;

/// What the receiving end needs from the command line.
pub struct Receiving {
    /// Credentials and endpoints for object-store destinations.
    pub settings: backends::Settings,
    /// `--cache`: the chunk cache of what this copy writes.
    pub cache: Option<Arc<store::ChunkCache>>,
}

/// Starts the receiving end and points `cfg` at it: a one-time key each,
/// the server's pinned, its loopback address dialled directly, TCP.
pub fn start(cfg: &mut ClientConfig, r: Receiving) -> Result<(), TransferError> {
    let cannot = |what: &str, e: &dyn std::fmt::Display| {
        TransferError::new(
            ErrorCode::Other,
            format!("cannot start this copy's receiving side ({what}): {e}"),
        )
    };
    let tuning = Tuning {
        force_buffer: None,
        ..cfg.tuning.clone()
    };
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let listener =
        net::listen(&loopback, &tuning).map_err(|e| cannot("listening on loopback", &e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| cannot("listening on loopback", &e))?;
    let key = Keypair::generate();
    let identity = Keypair::generate();
    cfg.trust = ServerTrust::Key(key.public);
    cfg.host = "localhost".into();
    cfg.port = addr.port();
    cfg.dial = vec![addr];
    cfg.transport = Transport::Tcp;
    cfg.protection = Protection::IntegrityOnly;
    if cfg.compress == codec::Mode::Auto {
        cfg.compress = codec::Mode::Fixed(codec::Codec::None);
    }
    cfg.tuning.force_buffer = None;
    let server = ServerConfig {
        transfer_log: endpoint::TransferLog::Silent,
        metrics: None,
        // The user's own files, as they name them: absolute, or
        // relative to the working directory.
        root: Root::new(std::path::Path::new("/")).map_err(TransferError::from)?,
        base: std::env::current_dir().ok(),
        key,
        client_keys: ClientKeys::Only(identity.public),
        listen: addr,
        tuning,
        max_sessions: 2,
        metrics_hosts: Vec::new(),
        max_startups_per_source: endpoint::server::PER_SOURCE,
        data_ports: None,
        cache: r.cache,
        tunnel_to: tunnel_driver::TunnelTargets::for_stdio(Vec::new(), true),
        require_encryption: false,
        max_tunnels: 0,
        memory: endpoint::server::DAEMON_MEMORY,
        prekeyed: None,
        buckets: Some(Arc::new(Buckets::Named(r.settings))),
        reload: None,
        state: None,
        notify: Default::default(),
        max_jobs: 1,
        idle_exit: None,
    };
    cfg.identity = identity;
    std::thread::Builder::new()
        .name("local-receiver".into())
        .spawn(move || serve_on(listener, server))
        .map_err(|e| cannot("a thread", &e))?;
    Ok(())
}
