//! `haul serve --stdio`: the remote side that a client starts over ssh
//! (P-27). It serves one client, known by the one-time key that client sent
//! over the ssh channel, on a fresh port; it relays that client's
//! connections through the ssh channel if asked (P-28), and exits when the
//! ssh channel closes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};

use secure::{Keypair, PublicKey};
use store::Root;
use wire::stdio::{Greeting, HsLine, MAX_GREETING_LEN};
use wire::{ErrorCode, PROTOCOL_VERSION};

use crate::relay::Mux;
use crate::release::RELEASE;
use connect::error::TransferError;
use connect::net::{self, Tuning};
use connect::ports::PortRange;
use endpoint::server::{serve_on, ClientKeys, Prekeyed, ServerConfig};
use tunnel_driver::TunnelTargets;

pub struct StdioOptions {
    /// Confine the client to this tree (paths relative to it, like a
    /// daemon); without it, paths are the login's own: absolute, or
    /// relative to the login directory, as scp and rsync take them.
    pub root: Option<Root>,
    /// Where to listen for the client's direct connections; default: the
    /// address the ssh connection came in on, a port the OS picks.
    pub listen: Option<SocketAddr>,
    /// Ports for the TCP listener (unless `listen` names one) and the UDP
    /// data channel (`--data-ports`).
    pub data_ports: Option<PortRange>,
    pub tuning: Tuning,
    /// `--cache`: the chunk cache of files pushed here (P-31).
    pub cache: Option<std::sync::Arc<store::ChunkCache>>,
    /// `--tunnel-to`: where tunnels may go. Without any, see
    /// [`TunnelTargets::for_stdio`].
    pub tunnel_to: Vec<String>,
    /// `--require-encryption` (P-39).
    pub require_encryption: bool,
    /// Objects: a root of `s3://...` (`gs://`, `az://`), or object-store
    /// paths the login's credentials reach.
    pub buckets: Option<std::sync::Arc<endpoint::server::bucket::Buckets>>,
}

/// Whether sshd runs this as a forced command (`command=` in
/// `authorized_keys`, or `ForceCommand`): it then keeps what the client
/// asked for in `SSH_ORIGINAL_COMMAND`.
fn forced_command() -> bool {
    std::env::var_os("SSH_ORIGINAL_COMMAND").is_some()
}

/// The address sshd took the connection on, from `SSH_CONNECTION`
/// ("client_ip client_port server_ip server_port").
fn ssh_server_ip() -> Option<IpAddr> {
    let v = std::env::var("SSH_CONNECTION").ok()?;
    v.split_ascii_whitespace().nth(2)?.parse().ok()
}

/// Runs until the ssh channel (standard input) closes.
pub fn serve_stdio(opts: StdioOptions) -> Result<(), TransferError> {
    let key = Keypair::generate();
    let ssh_ip = ssh_server_ip();
    let ip = opts
        .listen
        .map(|l| l.ip())
        .or(ssh_ip)
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let ports = match opts.listen {
        Some(l) if l.port() != 0 => Some(PortRange {
            lo: l.port(),
            hi: l.port(),
        }),
        _ => opts.data_ports,
    };
    let cannot = |e: std::io::Error| {
        let port = ports.map_or("a free port".to_string(), |p| format!("port {p}"));
        TransferError::new(
            ErrorCode::Connect,
            format!("cannot listen on {ip}, {port}, for the client's data connections: {e}"),
        )
    };
    let listener = PortRange::bind(ports, ip, |a| net::listen(&a, &opts.tuning)).map_err(cannot)?;
    let bound = listener.local_addr().map_err(cannot)?;
    let advertised = if bound.ip().is_unspecified() {
        ssh_ip
    } else {
        Some(bound.ip())
    };
    // Message one of the keyed start rides in our greeting, and a UDP
    // socket waits for that session's data channel (P-27): the greeting
    // goes at once, waiting for nothing.
    let start = secure::SshStartServer::start(PROTOCOL_VERSION, &key.public.0)
        .inspect_err(|e| tracing::warn!("cannot start the keyed start's handshake: {e}"))
        .ok();
    let (start, hs) = match start {
        Some((s, m1)) => (Some(s), Some(m1)),
        None => (None, None),
    };
    let udp_socket = start
        .as_ref()
        .and_then(|_| endpoint::server::open_data_socket(Ok(bound.ip()), opts.data_ports));
    let ours = Greeting {
        protocol: PROTOCOL_VERSION,
        release: RELEASE.to_string(),
        key: key.public.0,
        port: Some(bound.port()),
        addr: advertised.map(|a| a.to_string()),
        udp: udp_socket
            .as_ref()
            .and_then(|c| c.local_addr().ok())
            .map(|a| a.port()),
        hs,
        keyed: false,
    };
    let lost = |e: std::io::Error| TransferError::lost("greeting the client over ssh", &e);
    let mut stdout = std::io::stdout();
    stdout.write_all(ours.encode().as_bytes()).map_err(lost)?;
    stdout.flush().map_err(lost)?;

    let mut input = BufReader::new(std::io::stdin());
    let mut read_line = |what: &str| -> Result<String, TransferError> {
        let mut line = Vec::new();
        (&mut input)
            .take(MAX_GREETING_LEN as u64)
            .read_until(b'\n', &mut line)
            .map_err(|e| TransferError::lost(what, &e))?;
        Ok(String::from_utf8_lossy(&line).into_owned())
    };
    let line = read_line("reading the client's greeting")?;
    let theirs = Greeting::decode(&line).map_err(|e| {
        TransferError::new(
            ErrorCode::Protocol,
            format!("the client did not greet as haul does over ssh ({e})"),
        )
    })?;
    if theirs.protocol != PROTOCOL_VERSION {
        return Err(TransferError::new(
            ErrorCode::Protocol,
            format!(
                "the client is haul {} (protocol {}), this host has haul {RELEASE} (protocol {PROTOCOL_VERSION}); install the same release on both hosts",
                theirs.release, theirs.protocol
            ),
        ));
    }
    // A client that takes the keyed start answers on the next line.
    let prekeyed = match (start, theirs.keyed) {
        (Some(start), true) => {
            let line = read_line("reading the client's handshake")?;
            let keys = HsLine::decode(&line)
                .map_err(|e| e.to_string())
                .and_then(|l| start.finish(&l.0).map_err(|e| e.to_string()))
                .map_err(|e| {
                    TransferError::new(
                        ErrorCode::Protocol,
                        format!("the client answered the keyed start wrongly ({e})"),
                    )
                })?;
            Some(Prekeyed {
                keys,
                peer: PublicKey(theirs.key),
                udp: udp_socket,
            })
        }
        _ => None,
    };

    let tunnel_to =
        TunnelTargets::for_stdio(opts.tunnel_to, opts.root.is_some() || forced_command());
    let (root, base) = match opts.root {
        Some(r) => (r, None),
        None => {
            // The login's own files, links followed as scp follows them.
            let root = Root::new(std::path::Path::new("/")).map_err(TransferError::from)?;
            (root, std::env::current_dir().ok())
        }
    };
    let jobs_dir = std::env::temp_dir().join(format!("haul-stdio-jobs-{}", std::process::id()));
    let cfg = ServerConfig {
        transfer_log: endpoint::TransferLog::Off,
        metrics: None,
        root,
        base,
        key,
        client_keys: ClientKeys::Only(PublicKey(theirs.key)),
        listen: bound,
        tuning: opts.tuning,
        max_sessions: 4,
        metrics_hosts: Vec::new(),
        max_startups_per_source: endpoint::server::PER_SOURCE,
        data_ports: opts.data_ports,
        cache: opts.cache,
        tunnel_to,
        require_encryption: opts.require_encryption,
        max_tunnels: 4,
        memory: endpoint::server::DAEMON_MEMORY,
        prekeyed,
        buckets: opts.buckets,
        reload: None,
        // A transfer between two hosts runs here as a job this session
        // follows (P-45); its journal lives as long as the session.
        state: Some(jobs_dir.clone()),
        notify: Default::default(),
        max_jobs: 4,
        idle_exit: None,
    };
    std::thread::Builder::new()
        .name("stdio-serve".into())
        .spawn(move || serve_on(listener, cfg))
        .map_err(|e| TransferError::new(ErrorCode::Other, format!("cannot start: {e}")))?;

    // Standard input now carries relay frames, if the client cannot reach
    // us directly; its end is the end of the session either way.
    let local = match bound.ip() {
        IpAddr::V4(a) if a.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), bound.port())
        }
        IpAddr::V6(a) if a.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), bound.port())
        }
        _ => bound,
    };
    let mux = Mux::new(Box::new(std::io::stdout()));
    let res = mux.pump(input, |_| {
        let s = TcpStream::connect(local)?;
        s.set_nodelay(true)?;
        Ok(s)
    });
    mux.close();
    let _ = std::fs::remove_dir_all(&jobs_dir);
    res.map_err(|e| {
        TransferError::new(
            ErrorCode::Protocol,
            format!("the ssh channel carried something other than relay frames: {e}"),
        )
    })
}
