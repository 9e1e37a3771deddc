//! A real replication pair through `haul tunnel` across the emulator
//! (P-37): a PostgreSQL primary in namespace b, its streaming replica in
//! namespace a, the replica's base backup and WAL stream both carried by
//! the tunnel over a long, lossy link. Needs root, the emulator and
//! Debian's postgresql (CI installs it); skips with a printed reason
//! elsewhere.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::emu::serve_in_b_with;
use common::*;
use netem::testing::{check_program, program, require_emulator, unique_name};
use netem::{Emulator, EmulatorConfig, ADDR_B};
use netsim::LinkConfig;

const PRIMARY_PORT: u16 = 15432;
const TUNNEL_PORT: u16 = 25432;
const REPLICA_PORT: u16 = 35432;

/// PostgreSQL's programs, if installed.
fn pg_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").exists() && b.join("pg_basebackup").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn have_postgres_user() -> bool {
    program("id")
        .arg("postgres")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A PostgreSQL cluster: `pg_ctl stop` when dropped.
struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    ns: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = program("ip")
            .args(["netns", "exec", &self.ns, "runuser", "-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["stop", "-m", "immediate", "-w", "-D"])
            .arg(&self.data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs a PostgreSQL program as user postgres in namespace `ns`.
fn pg(bin: &Path, ns: &str, name: &str, args: &[&str], limit: Duration) -> Output {
    check_program(name);
    let mut c = program("ip");
    c.args(["netns", "exec", ns, "runuser", "-u", "postgres", "--"])
        .arg(bin.join(name))
        .args(args)
        .stdin(Stdio::null());
    output_within(c, limit)
}

fn pg_ok(bin: &Path, ns: &str, program: &str, args: &[&str]) -> String {
    let out = pg(bin, ns, program, args, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn sql(bin: &Path, ns: &str, port: u16, sock: &Path, query: &str) -> String {
    pg_ok(
        bin,
        ns,
        "psql",
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-Atc",
            query,
        ],
    )
    .replace(&sock.display().to_string(), "")
}

fn start(bin: &Path, ns: &str, data: &Path, port: u16, sock: &Path) -> Cluster {
    let opts = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c wal_keep_size=256MB",
        sock.display()
    );
    let log = data.with_extension("log");
    pg_ok(
        bin,
        ns,
        "pg_ctl",
        &[
            "start",
            "-w",
            "-t",
            "60",
            "-D",
            &data.display().to_string(),
            "-l",
            &log.display().to_string(),
            "-o",
            &opts,
        ],
    );
    Cluster {
        bin: bin.to_path_buf(),
        data: data.to_path_buf(),
        ns: ns.to_string(),
    }
}

#[test]
fn postgres_streaming_replication_converges_through_the_tunnel() {
    if !require_emulator("the replication-through-a-tunnel test") {
        return;
    }
    let (Some(bin), true) = (pg_bin(), have_postgres_user()) else {
        let why = "needs Debian's postgresql package (initdb, pg_basebackup, user postgres)";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("the replication test {why}, and CI installs it");
        }
        eprintln!("SKIPPED: the replication test {why}");
        return;
    };
    // 40 ms round trip, 100 Mbit/s, 0.1% loss each way.
    let link = LinkConfig {
        delay: Duration::from_millis(20),
        rate_bps: Some(100_000_000),
        loss: 0.001,
        ..Default::default()
    };
    let emu = Emulator::start(EmulatorConfig {
        name: unique_name("pg"),
        a2b: link.clone(),
        b2a: link,
        mtu: 1500,
        seed: 5,
        block_udp: false,
        only_tcp_ports: vec![],
        path_mtu: None,
    })
    .expect("emulator starts");
    let env = Env::new();
    // PostgreSQL runs as postgres, in a directory it owns.
    let pgdir = env.dir.path().join("pg");
    std::fs::create_dir_all(&pgdir).unwrap();
    let chown = program("chown")
        .args(["-R", "postgres:postgres"])
        .arg(&pgdir)
        .status()
        .unwrap();
    assert!(chown.success());
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(env.dir.path(), mode).unwrap();
    let (ns_a, ns_b) = (emu.ns_a(), emu.ns_b());
    let (primary, replica) = (pgdir.join("primary"), pgdir.join("replica"));

    pg_ok(
        &bin,
        &ns_b,
        "initdb",
        &[
            "-D",
            &primary.display().to_string(),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
        ],
    );
    let _primary = start(&bin, &ns_b, &primary, PRIMARY_PORT, &pgdir);

    let target = format!("127.0.0.1:{PRIMARY_PORT}");
    let _server = serve_in_b_with(&emu, &env, &["--tunnel-to", &target]);
    let mut tunnel = emu
        .command_a(HAUL)
        .args([
            "tunnel",
            "--listen",
            &TUNNEL_PORT.to_string(),
            "--to",
            &target,
        ])
        .args(["--via", &format!("{ADDR_B}:7050")])
        .env("HAUL_HOME", &env.home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let up = wait_until(Duration::from_secs(30), || {
        std::fs::read_dir(env.home.join("tunnels")).is_ok_and(|mut d| d.next().is_some())
    });
    assert!(up, "the tunnel started: {:?}", tunnel.try_wait());
    let tunnel = Kill(tunnel);

    // The replica's base backup and its WAL stream, through the tunnel.
    let t0 = Instant::now();
    pg_ok(
        &bin,
        &ns_a,
        "pg_basebackup",
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &TUNNEL_PORT.to_string(),
            "-U",
            "postgres",
            "-D",
            &replica.display().to_string(),
            "-R",
            "-X",
            "stream",
            "--checkpoint=fast",
            "--no-sync",
        ],
    );
    eprintln!(
        "base backup through the tunnel in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    let _replica = start(&bin, &ns_a, &replica, REPLICA_PORT, &pgdir);

    // Writes on the primary.
    let q = |ns: &str, port: u16, query: &str| sql(&bin, ns, port, &pgdir, query);
    q(
        &ns_b,
        PRIMARY_PORT,
        "CREATE TABLE t AS SELECT g, md5(g::text) AS h FROM generate_series(1, 200000) g",
    );
    q(
        &ns_b,
        PRIMARY_PORT,
        "UPDATE t SET h = md5(h) WHERE g % 3 = 0",
    );
    let want = q(
        &ns_b,
        PRIMARY_PORT,
        "SELECT count(*), sum(g), max(h) FROM t",
    );
    let lsn = q(&ns_b, PRIMARY_PORT, "SELECT pg_current_wal_lsn()");

    // The replica catches up: same rows, and it replayed past the
    // primary's position.
    let mut got = String::new();
    let converged = wait_until(Duration::from_secs(60), || {
        let caught_up = q(
            &ns_a,
            REPLICA_PORT,
            &format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn"),
        );
        if caught_up != "t" {
            return false;
        }
        got = q(
            &ns_a,
            REPLICA_PORT,
            "SELECT count(*), sum(g), max(h) FROM t",
        );
        true
    });
    assert!(converged, "the replica did not replay up to {lsn}");
    assert_eq!(got, want);
    let streaming = q(&ns_b, PRIMARY_PORT, "SELECT state FROM pg_stat_replication");
    assert_eq!(streaming, "streaming");

    // The tunnel counted it.
    let out = output_within(
        {
            let mut c = Command::new(HAUL);
            c.args(["tunnel", "--stats", "--json"])
                .env("HAUL_HOME", &env.home);
            c
        },
        Duration::from_secs(20),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let total = &v["tunnels"][0]["total"];
    assert!(total["connections"].as_u64() >= Some(2), "{v}");
    assert!(total["received_bytes"].as_u64() > Some(20 << 20), "{v}");
    eprintln!("tunnel totals: {total}");
    drop(tunnel);
}
