//! `haul agent` (P-45 J-13): a login's own daemon, started over ssh by a
//! client that hands a transfer between two hosts to it with `--detach`
//! where no `haul serve` runs. It serves the login's files as a side
//! started over ssh does (paths from the login's home), lets in only the
//! keys the client named (with `jobs`), keeps its key, jobs and grants in
//! `$HAUL_HOME/agent`, and exits once nothing has run for `--idle-exit`.
//! Started again while one runs, it says where that one listens.
//!
//! The first process (the one ssh runs) starts the agent as a process of
//! its own session, waits until it listens, prints one line,
//! `haul-agent PORT KEYHEX`, and exits, so that ssh ends.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use connect::net::Tuning;
use endpoint::{ClientKeys, ServerConfig};
use secure::{Keypair, PublicKey};
use store::Root;

use crate::args::AgentArgs;
use crate::home;

/// How long the first process waits for the agent to listen.
const STARTING: Duration = Duration::from_secs(15);

fn dir() -> PathBuf {
    home::dir().join("agent")
}

/// Where a running agent listens, as it writes it.
fn running() -> Option<(u32, u16, String)> {
    let text = std::fs::read_to_string(dir().join("agent")).ok()?;
    let mut w = text.split_whitespace();
    let (pid, port, key) = (w.next()?.parse().ok()?, w.next()?.parse().ok()?, w.next()?);
    Path::new(&format!("/proc/{pid}"))
        .exists()
        .then(|| (pid, port, key.to_string()))
}

pub fn run(a: AgentArgs) -> i32 {
    crate::logging::init(a.common.verbose);
    let keys: Vec<PublicKey> = match a.key.iter().map(|k| PublicKey::parse(k)).collect() {
        Some(k) => k,
        None => {
            eprintln!("haul agent: --key takes a client's public key as 64 hex digits");
            return crate::exit::code(wire::ErrorCode::BadRequest);
        }
    };
    let r = match a.run {
        true => serve(&keys, a.idle_exit),
        false => start(&keys, &a),
    };
    match r {
        Ok(()) => crate::exit::OK,
        Err(e) => {
            eprintln!("haul agent: {e}");
            crate::exit::code(wire::ErrorCode::Other)
        }
    }
}

/// Authorizes the keys, starts the agent unless one runs, and says where
/// it listens.
fn start(keys: &[PublicKey], a: &AgentArgs) -> Result<(), String> {
    let d = dir();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&d)
        .map_err(|e| format!("{}: {e}", d.display()))?;
    authorize(&d.join("authorized_keys"), keys)?;
    if running().is_none() {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(d.join("log"))
            .map_err(|e| format!("{}: {e}", d.join("log").display()))?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut c = Command::new(exe);
        c.arg("agent")
            .arg("--run")
            .args(["--idle-exit", &a.idle_exit.to_string()]);
        for k in &a.key {
            c.args(["--key", k]);
        }
        c.stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        // SAFETY: setsid only makes the child the leader of a new session,
        // so that ssh's end does not end it.
        unsafe {
            c.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        c.spawn()
            .map_err(|e| format!("cannot start the agent: {e}"))?;
        let t0 = Instant::now();
        while running().is_none() {
            if t0.elapsed() > STARTING {
                return Err(format!(
                    "the agent did not start; see {}",
                    d.join("log").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let (_, port, key) = running().ok_or("the agent stopped")?;
    println!("haul-agent {port} {key}");
    Ok(())
}

/// Adds each key, allowed to run jobs, where it is not listed yet.
fn authorize(path: &Path, keys: &[PublicKey]) -> Result<(), String> {
    let had = std::fs::read_to_string(path).unwrap_or_default();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    for k in keys {
        let hex = wire::hex::encode(&k.0);
        if !had.contains(&hex) {
            writeln!(f, "jobs {k} agent-client").map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// The agent itself: serves until idle.
fn serve(_keys: &[PublicKey], idle: u64) -> Result<(), String> {
    let d = dir();
    let key = Keypair::load_or_create(&d.join("server_x25519"), "haul agent")
        .map_err(|e| e.to_string())?;
    let ip = std::env::var("SSH_CONNECTION")
        .ok()
        .and_then(|v| v.split_ascii_whitespace().nth(2)?.parse().ok())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let root = Root::new(Path::new("/")).map_err(|e| e.message)?;
    let home_dir = std::env::var_os("HOME").map(PathBuf::from);
    let public = wire::hex::encode(&key.public.0);
    let cfg = ServerConfig {
        transfer_log: endpoint::TransferLog::Text,
        metrics: None,
        root,
        base: home_dir,
        key,
        client_keys: ClientKeys::File(d.join("authorized_keys")),
        listen: SocketAddr::new(ip, 0),
        tuning: Tuning::auto(None, Duration::from_secs(60)),
        max_sessions: 16,
        metrics_hosts: Vec::new(),
        max_startups_per_source: endpoint::server::PER_SOURCE,
        data_ports: None,
        cache: None,
        tunnel_to: tunnel_driver::TunnelTargets::listed(Vec::new()),
        require_encryption: false,
        max_tunnels: 1,
        memory: endpoint::server::DAEMON_MEMORY,
        prekeyed: None,
        buckets: None,
        reload: None,
        state: Some(d.join("state")),
        notify: Default::default(),
        max_jobs: 4,
        idle_exit: Some(Duration::from_secs(idle.max(1))),
    };
    endpoint::serve(cfg, |addr, _| {
        let tmp = d.join("agent.new");
        let line = format!("{} {} {public}\n", std::process::id(), addr.port());
        if std::fs::write(&tmp, line).is_ok() {
            let _ = std::fs::rename(&tmp, d.join("agent"));
        }
    })
    .map_err(|e| e.to_string())
}
