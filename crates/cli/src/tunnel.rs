//! `haul tunnel`: carries local TCP connections through one haul session
//! to a service on the far side (P-37), and `haul tunnel --stats`, which
//! shows the running tunnels' figures from the files they keep in
//! `$HAUL_HOME/tunnels/`.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use connect::TransferError;
use endpoint::{ClientConfig, Transport};
use serde_json::json;
use tunnel::{ConnStats, Stats};
use wire::ErrorCode;

use crate::args::TunnelArgs;
use crate::reach::{usage, Peer, Reach};
use crate::{exit, home, report};

/// How often a running tunnel rewrites its statistics file.
const STATS_EVERY: Duration = Duration::from_secs(1);

pub fn run(a: TunnelArgs) -> i32 {
    crate::logging::init(a.common.verbose);
    let res = if a.stats { show_stats(&a) } else { tunnel(&a) };
    match res {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("haul: {}", e.message);
            exit::code(e.code)
        }
    }
}

/// `--listen`: a port alone is on loopback, like `ssh -L`.
fn parse_listen(s: &str) -> Result<SocketAddr, TransferError> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| {
        usage(format!(
            "--listen {s:?}: write PORT, or ADDR:PORT with a numeric address ([::1]:PORT for IPv6)"
        ))
    })
}

/// `--to`: HOST:PORT with a port the peer can connect to.
fn check_target(s: &str) -> Result<(), TransferError> {
    let ok = s
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
    if ok {
        Ok(())
    } else {
        Err(usage(format!("--to {s:?}: write HOST:PORT")))
    }
}

fn tunnels_dir() -> PathBuf {
    home::dir().join("tunnels")
}

fn tunnel(a: &TunnelArgs) -> Result<(), TransferError> {
    let (Some(listen), Some(to), Some(via)) = (&a.listen, &a.to, &a.via) else {
        return Err(usage("--listen, --to and --via are all needed"));
    };
    let listen = parse_listen(listen)?;
    check_target(to)?;
    let peer = Peer::parse(via)?;
    // Listen first: a port in use is found before any connection is made.
    let listener = TcpListener::bind(listen).map_err(|e| {
        TransferError::new(
            ErrorCode::BadRequest,
            format!("cannot listen on {listen}: {e}"),
        )
    })?;
    let listen = listener.local_addr().unwrap_or(listen);
    let reach = Reach::decide(&a.conn, peer)?;
    let mut dialer = reach.dialer(&a.conn, String::new())?;
    let cfg = ClientConfig {
        transport: Transport::Tcp,
        streams: a.streams,
        compress: a.compress,
        ..reach.config(&a.conn, crate::reach::protection(a.no_encrypt))?
    };
    let connected = dialer.connect(cfg)?;
    let rtt = connected.rtt();
    let session = Arc::new(connected.tunnel(to, !a.no_cache)?);
    eprintln!(
        "haul: tunnel {listen} -> {to} via {via}: {} lanes, round trip {:.1} ms; Ctrl-C stops it",
        session.lanes(),
        rtt.as_secs_f64() * 1e3
    );
    let accepting = session.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            if !accepting.running() {
                return;
            }
            match conn {
                Ok(s) => {
                    if let Err(e) = accepting.carry(s) {
                        eprintln!("haul: connection refused: {}", e.message);
                    }
                }
                Err(e) => tracing::warn!("accepting on {listen}: {e}"),
            }
        }
    });
    let file = tunnels_dir().join(format!("{}.json", listen.port()));
    let describe = json!({
        "pid": std::process::id(),
        "listen": listen.to_string(),
        "to": to,
        "via": via,
        "lanes": session.lanes(),
    });
    while session.running() {
        if let Err(e) = write_stats(&file, &describe, &session.stats(), session.saved()) {
            tracing::debug!("tunnel statistics not written: {e}");
        }
        std::thread::sleep(STATS_EVERY);
    }
    let _ = std::fs::remove_file(&file);
    dialer.finish(false);
    session.wait()?;
    Ok(())
}

fn conn_json(id: u32, s: &ConnStats, open: bool) -> serde_json::Value {
    json!({
        "id": id,
        "open": open,
        "sent_bytes": s.from_app,
        "received_bytes": s.to_app,
        "wire_sent_bytes": s.wire_out,
        "wire_received_bytes": s.wire_in,
    })
}

fn totals_json(s: &ConnStats, opened: u64, (cache, compress): (u64, u64)) -> serde_json::Value {
    let original = s.from_app + s.to_app;
    let wire = s.wire_out + s.wire_in;
    json!({
        "saved_cache_bytes": cache,
        "saved_compression_bytes": compress,
        "connections": opened,
        "sent_bytes": s.from_app,
        "received_bytes": s.to_app,
        "wire_sent_bytes": s.wire_out,
        "wire_received_bytes": s.wire_in,
        "original_bytes": original,
        "wire_bytes": wire,
        "saved_bytes": original as i64 - wire as i64,
    })
}

/// Writes the figures under a temporary name and renames, so a reader
/// never sees half a file.
fn write_stats(
    file: &Path,
    describe: &serde_json::Value,
    stats: &Stats,
    saved: (u64, u64),
) -> std::io::Result<()> {
    let mut v = describe.clone();
    let conns: Vec<_> = stats
        .open
        .iter()
        .map(|(i, s)| conn_json(*i, s, true))
        .chain(stats.closed.iter().map(|(i, s)| conn_json(*i, s, false)))
        .collect();
    v["connections"] = json!(conns);
    v["total"] = totals_json(&stats.total, stats.opened, saved);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = file.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&v)?)?;
    std::fs::rename(&tmp, file)
}

/// Whether the process that wrote a statistics file still runs.
fn alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn show_stats(a: &TunnelArgs) -> Result<(), TransferError> {
    let only = match &a.listen {
        Some(l) => Some(parse_listen(l)?.port()),
        None => None,
    };
    let mut found = Vec::new();
    if let Ok(rd) = std::fs::read_dir(tunnels_dir()) {
        for e in rd.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            if !alive(v["pid"].as_u64().unwrap_or(0)) {
                // A tunnel that was killed left its file behind.
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let port = v["listen"]
                .as_str()
                .and_then(|l| l.parse::<SocketAddr>().ok())
                .map(|l| l.port());
            if only.is_none() || port == only {
                found.push(v);
            }
        }
    }
    found.sort_by_key(|v| v["listen"].as_str().unwrap_or_default().to_string());
    if found.is_empty() {
        return Err(TransferError::new(
            ErrorCode::NotFound,
            match only {
                Some(p) => format!("no haul tunnel is running on port {p}"),
                None => "no haul tunnel is running".to_string(),
            },
        ));
    }
    if a.json {
        println!("{}", json!({ "tunnels": found }));
        return Ok(());
    }
    for v in &found {
        print!("{}", stats_text(v));
    }
    Ok(())
}

fn stats_text(v: &serde_json::Value) -> String {
    let n = |x: &serde_json::Value| x.as_u64().unwrap_or(0);
    let t = &v["total"];
    let (original, wire) = (n(&t["original_bytes"]), n(&t["wire_bytes"]));
    let saving = if original > 0 {
        100.0 * (original as f64 - wire as f64) / original as f64
    } else {
        0.0
    };
    let mut out = format!(
        "tunnel {} -> {} via {} ({} lanes, pid {})\n  connections: {}\n  original bytes: {} (sent {}, received {})\n  on the wire: {}\n  saving: {:.1}% ({} by the byte cache, {} by compression)\n",
        v["listen"].as_str().unwrap_or("?"),
        v["to"].as_str().unwrap_or("?"),
        v["via"].as_str().unwrap_or("?"),
        n(&v["lanes"]),
        n(&v["pid"]),
        n(&t["connections"]),
        report::bytes(original),
        report::bytes(n(&t["sent_bytes"])),
        report::bytes(n(&t["received_bytes"])),
        report::bytes(wire),
        saving,
        report::bytes(n(&t["saved_cache_bytes"])),
        report::bytes(n(&t["saved_compression_bytes"])),
    );
    if let Some(conns) = v["connections"].as_array() {
        out.push_str("  id      state   sent        received    wire\n");
        for c in conns {
            out.push_str(&format!(
                "  {:<7} {:<7} {:<11} {:<11} {}\n",
                n(&c["id"]),
                if c["open"].as_bool() == Some(true) {
                    "open"
                } else {
                    "closed"
                },
                report::bytes(n(&c["sent_bytes"])),
                report::bytes(n(&c["received_bytes"])),
                report::bytes(n(&c["wire_sent_bytes"]) + n(&c["wire_received_bytes"])),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_and_target_forms() {
        assert_eq!(
            parse_listen("15432").unwrap(),
            "127.0.0.1:15432".parse().unwrap()
        );
        assert_eq!(
            parse_listen("0.0.0.0:3306").unwrap(),
            "0.0.0.0:3306".parse().unwrap()
        );
        assert!(parse_listen("[::1]:80").is_ok());
        assert!(parse_listen("localhost:80").is_err());
        assert!(check_target("db:5432").is_ok());
        assert!(check_target("[::1]:5432").is_ok());
        assert!(check_target("db").is_err());
        assert!(check_target(":5432").is_err());
        assert!(check_target("db:0").is_err());
    }
}
