//! The hostile-key suite (issue 39), beside the hostile-peer suite of
//! P-38 … P-40 (`hostile.rs`): a key that may do less than everything, as
//! its `authorized_keys` line says, tries to do more, driven by the stock
//! client and by crafted clients (`crates/hostile`), against a real
//! daemon. The fifteen cases of the issue, each named `key_NN_…`, and the
//! classes they belong to: names swapped during a walk (a file, a
//! directory, a recursive pull, a `--basis`), floods of every answer a
//! pulling client may send, a key's rate across sessions, transports and
//! tunnels, revocation mid-transfer, and what unauthenticated clients can
//! hold.
//!
//! Every case ends with a clear error (an exit code of the README's table
//! and a `haul:` line, or the daemon's `Error`), nothing read or written
//! outside what the key may touch, and the daemon's memory within its
//! budget and still serving the next client (`harness::Daemon`).
//!
//! Loopback only; every process is started here and stopped by its PID;
//! every loop is bounded in count and time.

mod common;
#[path = "common/hostile.rs"]
mod harness;

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{random_bytes, write_file, Env, HAUL};
use harness::*;
use hostile::Client;
use secure::Keypair;
use wire::{ErrorCode, Msg, Op, Request, SyncOptions};

/// The daemon's peak memory in every case here: a small transfer takes a
/// few tens of MiB; what a flood makes it keep would go far past.
const BUDGET_KIB: u64 = 256 << 10;

/// A client key: its `HAUL_HOME` (for the stock client) and the pair (for
/// a crafted one).
struct Key {
    home: PathBuf,
    pair: Keypair,
    public: String,
}

fn key(env: &Env, name: &str) -> Key {
    let home = env.dir.path().join(format!("home-{name}"));
    fs::create_dir_all(&home).unwrap();
    let out = std::process::Command::new(HAUL)
        .args(["keygen", "-f"])
        .arg(home.join("id_x25519"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let public = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let pair = Keypair::load_or_create(&home.join("id_x25519"), name).unwrap();
    Key { home, pair, public }
}

/// Writes the daemon's authorized keys: each key with its options, after
/// the harness's own client key (without options: the next client that
/// every case ends with).
fn authorize(env: &Env, lines: &[(&str, &Key)]) {
    let mut text = fs::read_to_string(env.home.join("id_x25519.pub")).unwrap();
    text = text.trim().to_string() + "\n";
    for (opts, k) in lines {
        text += format!("{opts} {}\n", k.public).trim_start();
    }
    fs::write(env.server_home.join("authorized_keys"), text).unwrap();
}

/// `haul cp ARGS` as `k`, bounded.
fn cp_as(env: &Env, k: &Key, args: &[&str]) -> Ran {
    let mut c = env.cp_cmd(args);
    c.env("HAUL_HOME", &k.home);
    run_client(c, CASE_LIMIT)
}

/// Starts `haul cp ARGS` as `k` without waiting.
fn spawn_cp(env: &Env, k: &Key, args: &[&str]) -> std::process::Child {
    let mut c = env.cp_cmd(args);
    c.env("HAUL_HOME", &k.home)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    c.spawn().unwrap()
}

fn finish(c: std::process::Child) -> (Option<i32>, String) {
    let out = c.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn hangup(d: &Daemon) {
    // SAFETY: kill(2) on the daemon this test started.
    assert_eq!(
        unsafe { libc::kill(d.pid() as libc::pid_t, libc::SIGHUP) },
        0
    );
}

fn log_has(d: &Daemon, what: &str) -> bool {
    common::wait_until(Duration::from_secs(10), || d.log_tail().contains(what))
}

/// A pull request for a crafted client.
fn pull(paths: &[&str], sync: SyncOptions) -> Request {
    Request {
        op: Op::Pull,
        paths: paths.iter().map(|p| p.to_string()).collect(),
        recursive: true,
        sync,
        ..hostile::push("x")
    }
}

/// Every regular file under `dir`, not through links.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let m = fs::symlink_metadata(e.path()).unwrap();
        if m.is_dir() {
            out.extend(files_under(&e.path()));
        } else if m.is_file() {
            out.push(e.path());
        }
    }
    out
}

/// The tree of the projects: `alpha` (a key's root) and `beta` (another's,
/// with its secret), and victims outside the served root.
fn projects(env: &Env) -> Outside {
    fs::create_dir_all(env.root.join("projects/alpha/d")).unwrap();
    fs::create_dir_all(env.root.join("projects/beta")).unwrap();
    write_file(
        &env.root.join("projects/alpha/x"),
        &random_bytes(100_000, 1),
    );
    write_file(
        &env.root.join("projects/alpha/d/f"),
        &random_bytes(50_000, 2),
    );
    write_file(&env.root.join("projects/beta/secret"), b"beta's secret\n");
    Outside::plant(env.dir.path())
}

/// Issue 39 #1: a pull checked its paths, then walked and opened them by
/// name; the same key swapped a link over a name meanwhile and received a
/// file from outside the served root, its window widened at will by
/// thirty paths 1,400 components deep behind the name. Now every pull
/// walks and reads beneath the key's root by descriptor, following no
/// link: whatever is swapped when, nothing from outside arrives.
#[test]
fn key_01_a_name_swapped_during_a_pull_never_leads_outside() {
    let case = "key 1: swaps during a walk";
    let env = Env::new();
    let outside = projects(&env);
    let alpha = key(&env, "alpha");
    authorize(&env, &[("root=projects/alpha", &alpha)]);
    let mut d = Daemon::start(&env, &[]);
    let base = env.root.join("projects/alpha");
    let x_bytes = fs::read(base.join("x")).unwrap();
    let secret = outside.secret();
    // The issue's window: `x`, then thirty files 1,400 directories deep.
    let deep = vec!["a"; 1400].join("/");
    fs::create_dir_all(base.join(&deep)).unwrap();
    let mut sources = vec![d.remote("x")];
    for i in 0..30 {
        write_file(&base.join(format!("{deep}/f{i}")), b"deep");
        sources.push(d.remote(&format!("{deep}/f{i}")));
    }
    let swap = |to_link: bool| {
        let _ = fs::remove_file(base.join("x.new"));
        if to_link {
            symlink(outside.path("secret.bin"), base.join("x.new")).unwrap();
        } else {
            fs::write(base.join("x.new"), &x_bytes).unwrap();
        }
        fs::rename(base.join("x.new"), base.join("x")).unwrap();
    };
    for round in 0..4 {
        let dst = env.local.join(format!("window-{round}"));
        fs::create_dir_all(&dst).unwrap();
        let mut args: Vec<&str> = sources.iter().map(String::as_str).collect();
        let dst_arg = format!("{}/", dst.display());
        args.push(&dst_arg);
        let pulling = spawn_cp(&env, &alpha, &args);
        // The name checked, the walk not yet done: the link goes in.
        std::thread::sleep(Duration::from_millis(150 + 100 * round as u64));
        swap(true);
        let (code, err) = finish(pulling);
        swap(false);
        assert!(
            matches!(code, Some(0) | Some(1) | Some(8)),
            "[{case}] round {round}: {code:?} {err}"
        );
        if let Ok(b) = fs::read(dst.join("x")) {
            assert!(
                b != secret,
                "[{case}] round {round}: the secret from outside arrived"
            );
            assert!(b == x_bytes, "[{case}] round {round}: x came mixed");
        }
    }
    // Faster swaps of a file and a directory, under three kinds of pull.
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, base, out) = (stop.clone(), base.clone(), outside.dir.clone());
        let x_bytes = x_bytes.clone();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(60) {
                let _ = fs::remove_file(base.join("x.l"));
                let _ = symlink(out.join("secret.bin"), base.join("x.l"));
                let _ = fs::rename(base.join("x.l"), base.join("x"));
                let _ = fs::rename(base.join("d"), base.join("d.real"));
                let _ = symlink(&out, base.join("d"));
                std::thread::yield_now();
                let _ = fs::write(base.join("x.f"), &x_bytes);
                let _ = fs::rename(base.join("x.f"), base.join("x"));
                let _ = fs::remove_file(base.join("d"));
                let _ = fs::rename(base.join("d.real"), base.join("d"));
            }
        })
    };
    let got = env.local.join("got");
    for round in 0..8 {
        let dst = |what: &str| {
            let p = got.join(format!("{round}-{what}"));
            fs::create_dir_all(&p).unwrap();
            format!("{}/", p.display())
        };
        for args in [
            vec![d.remote("x"), dst("x")],
            vec!["-r".into(), d.remote("d"), dst("d")],
            vec!["-r".into(), d.remote("d/"), dst("dc")],
        ] {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let ran = cp_as(&env, &alpha, &args);
            // Done, or refused for a name that changed under the walk.
            assert_refused_or_ok(&ran, &[1, 6, 8], case);
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    for f in files_under(&got) {
        let b = fs::read(&f).unwrap();
        assert!(
            b != secret && !b.windows(13).any(|w| w == b"beta's secret"),
            "[{case}] {} holds bytes from outside the key's root",
            f.display()
        );
    }
    // Left alone, the file comes whole.
    let last = env.local.join("last");
    let ran = cp_as(&env, &alpha, &[&d.remote("x"), last.to_str().unwrap()]);
    assert_eq!(ran.code, Some(0), "[{case}] {}", ran.describe());
    assert!(fs::read(&last).unwrap() == x_bytes);
    d.assert_healthy(&env, BUDGET_KIB, case);
}

/// The same walk cannot be widened: thirty paths 1,400 components deep
/// cost a lexical pass each, not a resolve of every prefix.
#[test]
fn key_01_deep_paths_cost_their_length_and_a_basis_is_opened_beneath() {
    let case = "key 1: deep paths and --basis";
    let env = Env::new();
    let outside = projects(&env);
    let alpha = key(&env, "alpha");
    authorize(&env, &[("root=projects/alpha", &alpha)]);
    let mut d = Daemon::start(&env, &[]);
    let mut c = Client::connect(d.addr(), &alpha.pair, false).unwrap();
    let deep = vec!["a"; 1400].join("/");
    let mut paths = vec!["x".to_string()];
    paths.extend((0..30).map(|i| format!("{deep}/{i}")));
    let t0 = Instant::now();
    let refused = c.request(Request {
        paths,
        ..pull(&[], SyncOptions::default())
    });
    let e = refused.expect_err("a pull of paths that are not there");
    assert_eq!(e.code, ErrorCode::NotFound, "[{case}] {e}");
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "[{case}] took {:?}",
        t0.elapsed()
    );
    // A --basis that is a link out of the root is refused, not followed.
    symlink(
        outside.path("secret.bin"),
        env.root.join("projects/alpha/b"),
    )
    .unwrap();
    let src = env.local.join("s.bin");
    write_file(&src, &random_bytes(300_000, 3));
    let ran = cp_as(
        &env,
        &alpha,
        &["--basis", "b", src.to_str().unwrap(), &d.remote("y")],
    );
    let err = assert_refused(&ran, &[8], case);
    assert!(err.contains("symbolic link"), "[{case}] {err}");
    d.assert_healthy(&env, BUDGET_KIB, case);
}

/// Issue 39 #2: on a pull the daemon is the sender, and kept what the
/// client answered without bound; a read-only key's crafted client made
/// it abort. Now each answer is taken only where the session asked for it
/// and charged to its budget: the session ends with `Limit` or
/// `Protocol`, the daemon's memory stays small, and it serves on.
#[test]
fn key_02_a_pulling_key_cannot_make_the_daemon_hold_what_it_answers() {
    let case = "key 2: floods of answers";
    let env = Env::new();
    write_file(&env.root.join("big"), &random_bytes(4 << 20, 4));
    let reader = key(&env, "reader");
    authorize(&env, &[("read-only", &reader)]);
    // 64 MiB for every session: a quarter, 16 MiB, for one.
    let mut d = Daemon::start(&env, &["--memory", "64M"]);
    let gated = |dedup, delete| SyncOptions {
        gated: true,
        dedup,
        delete,
        ..Default::default()
    };
    let session = |sync: SyncOptions| {
        let mut c = Client::connect(d.addr(), &reader.pair, false).unwrap();
        c.request(pull(&["big"], sync)).unwrap();
        c
    };
    let flood = |c: &mut Client, make: &dyn Fn(u32) -> Msg, most: u32| -> hostile::Ended {
        for i in 0..most {
            if c.send_one(&make(i)).is_err() {
                break;
            }
        }
        c.finish(Duration::from_secs(20))
    };
    let chunks = |i: u32| Msg::Chunks {
        file: wire::CACHE_FILE,
        chunks: (0..5000u32)
            .map(|j| {
                let mut h = [0u8; 16];
                h[..4].copy_from_slice(&i.to_le_bytes());
                h[4..8].copy_from_slice(&j.to_le_bytes());
                (h, 65536)
            })
            .collect(),
    };
    // Chunks without dedup: not this session's to take.
    let mut c = session(gated(false, false));
    assert_error(&flood(&mut c, &chunks, 1), &[ErrorCode::Protocol], case);
    // Chunks with dedup, past the session's 16 MiB: 100 KiB each.
    let mut c = session(gated(true, false));
    assert_error(&flood(&mut c, &chunks, 2000), &[ErrorCode::Limit], case);
    // Held blocks, the same ones again and again.
    let have = |_| Msg::Have {
        file: 0,
        blocks: (0..wire::HAVE_PER_MESSAGE as u32)
            .map(|i| (i % 64, [7; 32]))
            .collect(),
    };
    let mut c = session(gated(false, false));
    assert_error(&flood(&mut c, &have, 2000), &[ErrorCode::Limit], case);
    // Deleted paths without --delete; with it, 256 MiB of them are
    // counted, not kept.
    let deleted = |_| Msg::Deleted(vec![vec![b'p'; 4000]; wire::DELETED_PER_MESSAGE]);
    let mut c = session(gated(false, false));
    assert_error(&flood(&mut c, &deleted, 1), &[ErrorCode::Protocol], case);
    let mut c = session(gated(false, true));
    for i in 0..64 {
        c.send_one(&deleted(i)).unwrap();
    }
    d.assert_alive(case);
    c.close();
    // Every kind it does not take in a pull.
    for m in [
        hostile::file(0, "f", 10),
        Msg::Kept(vec![(0, 0)]),
        Msg::Zeros(vec![(0, 0)]),
        Msg::Welcome,
    ] {
        let mut c = session(gated(false, false));
        let _ = c.send_one(&m);
        assert_error(
            &c.finish(Duration::from_secs(20)),
            &[ErrorCode::Protocol],
            case,
        );
    }
    eprintln!(
        "[{case}] the daemon's peak memory: {} MiB",
        d.peak_kib().unwrap_or(0) >> 10
    );
    d.assert_healthy(&env, BUDGET_KIB, case);
}

/// Issue 39 #3, #5, #6: `rate=` was the request's: a tunnel went
/// uncapped, a crafted pusher sent at 3.2 Gbit/s, and eight pulls each
/// took the whole rate. Now one pace per key, on every byte the daemon
/// sends or takes in, shared by all its sessions.
#[test]
fn key_03_05_06_a_keys_rate_holds_across_sessions_transports_and_tunnels() {
    let case = "keys 3, 5, 6: rate=";
    let env = Env::new();
    write_file(&env.root.join("one.bin"), &random_bytes(1 << 20, 5));
    let target = format!("127.0.0.1:{}", common::tunnel::service());
    let capped = key(&env, "capped");
    // 8 Mbit/s: 1 MB/s.
    authorize(
        &env,
        &[(&format!("rate=8M,tunnel-to={target},sessions=8"), &capped)],
    );
    let mut d = Daemon::start(&env, &["--tunnel-to", &target]);
    // #6: four pulls at once share it: 4 MiB take about 4 s, not 1.
    let t0 = Instant::now();
    let pulls: Vec<_> = (0..4)
        .map(|i| {
            let dst = env.local.join(format!("p{i}"));
            spawn_cp(
                &env,
                &capped,
                &[&d.remote("one.bin"), dst.to_str().unwrap()],
            )
        })
        .collect();
    for p in pulls {
        let (code, err) = finish(p);
        assert_eq!(code, Some(0), "[{case}] {err}");
    }
    let four = t0.elapsed();
    eprintln!("[{case}] four pulls of 1 MiB at rate=8M: {four:?}");
    assert!(
        four > Duration::from_millis(3300),
        "[{case}] 4 pulls in {four:?}"
    );
    // Over the UDP channel too: 1 MiB in about a second.
    let t0 = Instant::now();
    let ran = cp_as(
        &env,
        &capped,
        &[
            "--transport",
            "udp",
            &d.remote("one.bin"),
            env.local.join("u").to_str().unwrap(),
        ],
    );
    assert_eq!(ran.code, Some(0), "[{case}] {}", ran.describe());
    eprintln!("[{case}] 1 MiB over UDP at rate=8M: {:?}", t0.elapsed());
    assert!(
        t0.elapsed() > Duration::from_millis(800),
        "[{case}] UDP {:?}",
        t0.elapsed()
    );
    // #5: a crafted pusher that promised 1 MB/s and sends as fast as it
    // can is slowed by the daemon reading no faster: 2 MiB, 2 s.
    let mut c = Client::connect(d.addr(), &capped.pair, false).unwrap();
    c.request(Request {
        rate: 1_000_000,
        ..hostile::push("pushed.bin")
    })
    .unwrap();
    let data = random_bytes(2 << 20, 6);
    let (blocks, end) = hostile::blocks_of(0, hostile::BLOCK, &data);
    c.send(&[
        hostile::file(0, "pushed.bin", data.len() as u64),
        hostile::end(1, data.len() as u64),
    ])
    .unwrap();
    let t0 = Instant::now();
    for (h, b) in &blocks {
        c.send_block(0, h, b).unwrap();
    }
    c.send(&[end.unwrap()]).unwrap();
    let ended = c.finish(Duration::from_secs(30));
    assert!(ended.done.is_some(), "[{case}] {}", ended.describe());
    let took = t0.elapsed();
    eprintln!("[{case}] 2 MiB pushed flat out by a crafted client at rate=8M: {took:?}");
    assert!(
        took > Duration::from_millis(1700),
        "[{case}] the push took {took:?}"
    );
    assert!(fs::read(env.root.join("pushed.bin")).unwrap() == data);
    // #3: a tunnel: 1 MB each way through the echo, about 2 s.
    let home_env = Env {
        home: capped.home.clone(),
        ..Env::new()
    };
    let via = format!("127.0.0.1:{}", d.port);
    let t = common::tunnel::tunnel(&home_env, &["--to", &target, "--via", &via, "--daemon"])
        .expect("the tunnel starts");
    let t0 = Instant::now();
    let bytes = random_bytes(1_000_000, 7);
    assert!(common::tunnel::echo_through(t.port, bytes.clone()) == bytes);
    let took = t0.elapsed();
    eprintln!("[{case}] 1 MB each way through a tunnel at rate=8M: {took:?}");
    assert!(
        took > Duration::from_millis(1500),
        "[{case}] the tunnel echoed 2 MB in {took:?}"
    );
    drop(t);
    d.assert_healthy(&env, BUDGET_KIB, case);
}

/// Issue 39 #4: removing a key (SIGHUP) refused its next session but let
/// its running ones go on, a tunnel taking new connections for as long as
/// it stayed up. Now a reload ends at once the sessions whose key was
/// removed or no longer allows them, telling their clients why.
#[test]
fn key_04_revocation_ends_running_sessions_and_tunnels_at_once() {
    let case = "key 4: revocation";
    let env = Env::new();
    write_file(&env.root.join("slow.bin"), &random_bytes(6 << 20, 8));
    let target = format!("127.0.0.1:{}", common::tunnel::service());
    let (puller, tunneler, pusher) = (
        key(&env, "puller"),
        key(&env, "tunneler"),
        key(&env, "pusher"),
    );
    let tunnel_line = format!("tunnel-to={target}");
    let lines = |with_puller: bool, with_tunneler: bool, pusher_opts: &str| {
        let mut v: Vec<(String, &Key)> = vec![(pusher_opts.to_string(), &pusher)];
        if with_puller {
            v.push(("rate=16M".into(), &puller));
        }
        if with_tunneler {
            v.push((tunnel_line.clone(), &tunneler));
        }
        let v: Vec<(&str, &Key)> = v.iter().map(|(o, k)| (o.as_str(), *k)).collect();
        authorize(&env, &v);
    };
    lines(true, true, "rate=16M");
    let mut d = Daemon::start(&env, &["--tunnel-to", &target]);
    // A pull (3 s at 16 Mbit/s), a push, and a tunnel, all running.
    let pulling = spawn_cp(
        &env,
        &puller,
        &[&d.remote("slow.bin"), env.local.join("p").to_str().unwrap()],
    );
    let src = env.local.join("up.bin");
    write_file(&src, &random_bytes(6 << 20, 9));
    let pushing = spawn_cp(
        &env,
        &pusher,
        &["--rate", "16M", src.to_str().unwrap(), &d.remote("up.bin")],
    );
    let home_env = Env {
        home: tunneler.home.clone(),
        ..Env::new()
    };
    let via = format!("127.0.0.1:{}", d.port);
    let t = common::tunnel::tunnel(&home_env, &["--to", &target, "--via", &via, "--daemon"])
        .expect("the tunnel starts");
    let hello = random_bytes(1000, 1);
    assert!(common::tunnel::echo_through(t.port, hello.clone()) == hello);
    std::thread::sleep(Duration::from_millis(600));
    // The puller and the tunneler go; the pusher becomes read-only.
    lines(false, false, "read-only");
    let t0 = Instant::now();
    hangup(&d);
    let (code, err) = finish(pulling);
    assert_eq!(code, Some(4), "[{case}] the pull: {err}");
    assert!(err.contains("revoked"), "[{case}] {err}");
    let (code, err) = finish(pushing);
    assert_eq!(code, Some(7), "[{case}] the push: {err}");
    assert!(err.contains("read-only"), "[{case}] {err}");
    eprintln!(
        "[{case}] a pull and a push ended {:?} after SIGHUP",
        t0.elapsed()
    );
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "[{case}] {:?}",
        t0.elapsed()
    );
    assert!(
        !env.root.join("up.bin").exists(),
        "[{case}] the push was placed"
    );
    // The tunnel takes no new connection through.
    let through = common::wait_until(Duration::from_secs(5), || {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", t.port)) else {
            return true;
        };
        s.set_read_timeout(Some(Duration::from_secs(2))).ok();
        let mut b = [0u8; 6];
        s.read_exact(&mut b).is_err()
    });
    assert!(
        through,
        "[{case}] the revoked tunnel still carries new connections"
    );
    assert!(
        log_has(&d, "2 ended") || log_has(&d, "3 ended"),
        "[{case}] {}",
        d.log_tail()
    );
    drop(t);
    lines(true, false, "");
    d.assert_healthy(&env, BUDGET_KIB, case);
}

/// Issue 39 #7 and #15: idle connections filled every greeting slot, a
/// byte every 10 s kept one, and half-open handshakes held every UDP port
/// of a small `--data-ports`. Now one address holds 32, each greeting has
/// 20 s, and a UDP socket goes to an unauthenticated client only while
/// plenty are left.
#[test]
fn key_07_15_unauthenticated_clients_cannot_lock_anyone_out() {
    let case = "keys 7, 15: lock-out";
    let env = Env::new();
    write_file(&env.root.join("f"), &random_bytes(300_000, 10));
    let user = key(&env, "user");
    authorize(&env, &[("", &user)]);
    let base = free_udp_ports(4);
    let ports = format!("{base}-{}", base + 3);
    let mut d = Daemon::start(&env, &["--data-ports", &ports]);
    // A byte every 3 s: closed within the grace time, not held.
    let trickle = {
        let addr = d.addr();
        std::thread::spawn(move || {
            let mut s = from(addr, [127, 0, 0, 3]);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(40) {
                if s.write_all(&[0x48]).is_err() {
                    break;
                }
                s.set_read_timeout(Some(Duration::from_secs(3))).ok();
                match s.read(&mut [0u8; 64]) {
                    Ok(0) => break,
                    Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => break,
                    _ => {}
                }
            }
            t0.elapsed()
        })
    };
    // 520 idle connections from one address: 32 are held, the rest closed.
    let idle: Vec<TcpStream> = (0..520).map(|_| from(d.addr(), [127, 0, 0, 2])).collect();
    std::thread::sleep(Duration::from_millis(500));
    let open = idle
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).ok();
            matches!(s.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        })
        .count();
    eprintln!("[{case}] of 520 idle connections from one address, {open} held");
    assert!(open <= 40, "[{case}] {open} idle connections held");
    // Half-open handshakes that wished for UDP: one socket at most.
    let half: Vec<(TcpStream, u16)> = (0..10)
        .map(|_| hostile::half_open(d.addr(), &Keypair::generate(), true).unwrap())
        .collect();
    let held = half.iter().filter(|(_, p)| *p != 0).count();
    eprintln!("[{case}] UDP ports named to 10 half-open handshakes: {held}");
    assert!(
        held <= 1,
        "[{case}] {held} UDP ports held before authentication"
    );
    // An authorized client still gets in, over TCP and over UDP.
    for transport in ["tcp", "udp"] {
        let ran = cp_as(
            &env,
            &user,
            &[
                "--transport",
                transport,
                &d.remote("f"),
                env.local.join(transport).to_str().unwrap(),
            ],
        );
        assert_eq!(
            ran.code,
            Some(0),
            "[{case}] {transport}: {}",
            ran.describe()
        );
    }
    drop((idle, half));
    let took = trickle.join().unwrap();
    eprintln!("[{case}] a connection sending a byte every 3 s was closed after {took:?}");
    assert!(
        took < Duration::from_secs(30),
        "[{case}] a trickling connection was held {took:?}"
    );
    d.assert_healthy(&env, BUDGET_KIB, case);
}

/// A connection to `addr` from the loopback address `src`.
fn from(addr: SocketAddr, src: [u8; 4]) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from((src, 0)).into()).unwrap();
    s.connect_timeout(&addr.into(), Duration::from_secs(5))
        .unwrap();
    s.into()
}

/// `n` consecutive UDP ports free on loopback now.
fn free_udp_ports(n: u16) -> u16 {
    for base in (41_000u16..60_000).step_by(97) {
        let all = (base..base + n).all(|p| std::net::UdpSocket::bind(("0.0.0.0", p)).is_ok());
        if all {
            return base;
        }
    }
    panic!("no {n} free UDP ports");
}

/// Issue 39 #8: a later `--push-haul` ran the cached remote binary by
/// its name: one planted by another user ran as the victim. Now its hash,
/// owner and mode are checked before every start.
#[test]
fn key_08_push_haul_runs_only_this_haul_from_the_logins_own_cache() {
    if !common::sshd::sshd_available("key_08_push_haul") {
        return;
    }
    let case = "key 8: --push-haul";
    let env = Env::new();
    let sshd = common::sshd::Sshd::start(env.dir.path());
    let rsh = sshd.rsh();
    let src = env.local.join("f.bin");
    write_file(&src, &random_bytes(100_000, 11));
    let dest = format!("127.0.0.1:{}", env.root.join("f.bin").display());
    let run = || env.cp(&["-e", &rsh, "--push-haul", src.to_str().unwrap(), &dest]);
    common::ok(&run());
    let bin = sshd.login_cache().join("haul/bin");
    let cached = fs::read_dir(&bin).unwrap().next().unwrap().unwrap().path();
    // A planted program under the copy's name, the login's own, 0700:
    // another build, not run; a fresh copy is.
    let marker = env.dir.path().join("planted-ran");
    fs::write(
        &cached,
        format!("#!/bin/sh\ntouch {}\nexit 1\n", marker.display()),
    )
    .unwrap();
    fs::set_permissions(&cached, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    fs::remove_file(env.root.join("f.bin")).unwrap();
    let said = common::ok(&run());
    assert!(said.contains("copied this haul"), "[{case}] {said}");
    assert!(!marker.exists(), "[{case}] the planted program ran");
    // The cache writable by others: refused, saying why, nothing run.
    fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = run();
    assert_ne!(
        out.status.code(),
        Some(0),
        "[{case}] ran from a cache others may write"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing"), "[{case}] {err}");
    fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    // The copy owned by another user: refused.
    std::os::unix::fs::chown(&cached, Some(65534), None).unwrap();
    let out = run();
    assert_ne!(
        out.status.code(),
        Some(0),
        "[{case}] ran another user's copy"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing"));
    assert!(!marker.exists());
}

/// Issue 39 #9 and #10: the last of a key's lines applied, so a second
/// line widened it; and a drop box key's link moved another key's root.
/// Now the first line applies (the others are warned about), and a root
/// is opened through no link.
#[test]
fn key_09_10_the_first_line_applies_and_no_link_moves_a_root() {
    let case = "keys 9, 10: first line, roots";
    let env = Env::new();
    let _outside = projects(&env);
    fs::create_dir_all(env.root.join("drop")).unwrap();
    let (alpha, dropper, boxed) = (key(&env, "alpha"), key(&env, "dropper"), key(&env, "boxed"));
    authorize(
        &env,
        &[
            ("root=projects/alpha,read-only", &alpha),
            ("rate=1G", &alpha),
            ("write-only,root=drop", &dropper),
            ("read-only,root=drop/box", &boxed),
        ],
    );
    let mut d = Daemon::start(&env, &[]);
    let src = env.local.join("f");
    write_file(&src, b"pushed");
    let ran = cp_as(
        &env,
        &alpha,
        &[src.to_str().unwrap(), &d.remote("/../beta/f")],
    );
    let err = assert_refused(&ran, &[7, 8], case);
    assert!(
        err.contains("read-only") || err.contains("outside"),
        "[{case}] {err}"
    );
    assert!(!env.root.join("projects/beta/f").exists());
    // Line 1 is the harness's own key.
    assert!(
        log_has(&d, "line 3: the key of line 2 again"),
        "[{case}] {}",
        d.log_tail()
    );
    // The drop box plants `box -> ../projects/beta`.
    let payload = env.local.join("payload");
    fs::create_dir_all(&payload).unwrap();
    symlink("../projects/beta", payload.join("box")).unwrap();
    let ran = cp_as(
        &env,
        &dropper,
        &["-r", &format!("{}/", payload.display()), &d.remote("/")],
    );
    assert_eq!(ran.code, Some(0), "[{case}] {}", ran.describe());
    assert!(fs::symlink_metadata(env.root.join("drop/box"))
        .unwrap()
        .is_symlink());
    let back = env.local.join("stolen");
    let ran = cp_as(&env, &boxed, &[&d.remote("secret"), back.to_str().unwrap()]);
    let err = assert_refused(&ran, &[7], case);
    assert!(err.contains("symbolic link"), "[{case}] {err}");
    assert!(!back.exists());
    d.assert_healthy(&env, BUDGET_KIB, case);
}

/// Issue 39 #11, #12: a newline in a path forged a line of the daemon's
/// log, and errors showed a confined key the server's own paths.
#[test]
fn key_11_12_logs_escape_peer_text_and_errors_name_paths_below_the_root() {
    let case = "keys 11, 12: logs and messages";
    let env = Env::new();
    let _outside = projects(&env);
    let alpha = key(&env, "alpha");
    authorize(&env, &[("root=projects/alpha", &alpha)]);
    let mut d = Daemon::start(&env, &[]);
    let forged = "nope\nhaul serve: transfer: forged (b3:00) from 10.0.0.1 push: ok";
    let ran = cp_as(
        &env,
        &alpha,
        &[&d.remote(forged), env.local.join("o").to_str().unwrap()],
    );
    assert_refused(&ran, &[6], case);
    assert!(log_has(&d, "nope\\n"), "[{case}] {}", d.log_tail());
    assert!(
        !d.log_tail()
            .lines()
            .any(|l| l.starts_with("haul serve: transfer: forged")),
        "[{case}] a forged line: {}",
        d.log_tail()
    );
    let root = env.root.display().to_string();
    let src = env.local.join("f");
    write_file(&src, b"x");
    for args in [
        vec![
            d.remote("missing/f"),
            env.local.join("o").display().to_string(),
        ],
        vec![src.display().to_string(), d.remote("nowhere/deeper/f")],
        vec![src.display().to_string(), d.remote("x/f")],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let err = assert_refused(&cp_as(&env, &alpha, &args), &[2, 6, 8], case);
        assert!(
            !err.contains(&root),
            "[{case}] the server's path shows: {err}"
        );
    }
    d.assert_healthy(&env, BUDGET_KIB, case);
}

/// Issue 39 #13: 16 slow clients took every slot of the metrics listener,
/// and any `Host` was answered (DNS rebinding).
#[test]
fn key_13_the_metrics_answer_their_own_hosts_and_outlast_slow_clients() {
    let case = "key 13: metrics";
    let env = Env::new();
    let mut d = Daemon::start(
        &env,
        &["--metrics", "127.0.0.1:0", "--metrics-host", "dtn1.test"],
    );
    assert!(
        log_has(&d, "metrics on http://"),
        "[{case}] {}",
        d.log_tail()
    );
    let addr: SocketAddr = d
        .log_tail()
        .split("metrics on http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap()
        .parse()
        .unwrap();
    let get = |host: &str| -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "GET /status.json HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    assert!(
        get("attacker.example:80").starts_with("HTTP/1.1 421"),
        "[{case}]"
    );
    assert!(
        get(&addr.to_string()).starts_with("HTTP/1.1 200"),
        "[{case}]"
    );
    assert!(
        get("dtn1.test:9750").starts_with("HTTP/1.1 200"),
        "[{case}]"
    );
    // A hundred clients that never finish their request.
    let slow: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            let _ = s.write_all(b"GET / HTTP/1.1\r\n");
            s
        })
        .collect();
    let t0 = Instant::now();
    assert!(
        get(&addr.to_string()).starts_with("HTTP/1.1 200"),
        "[{case}] under slow clients"
    );
    eprintln!(
        "[{case}] a scrape under 100 slow clients: {:?}",
        t0.elapsed()
    );
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "[{case}] {:?}",
        t0.elapsed()
    );
    drop(slow);
    d.assert_healthy(&env, BUDGET_KIB, case);
}

/// Issue 39 #14: one restricted key could hold every session of the
/// daemon. Now `sessions=N`, and without it half of `--max-sessions`.
#[test]
fn key_14_a_key_runs_at_most_its_share_of_sessions() {
    let case = "key 14: sessions=";
    let env = Env::new();
    write_file(&env.root.join("slow.bin"), &random_bytes(2 << 20, 12));
    let (two, plain) = (key(&env, "two"), key(&env, "plain"));
    authorize(&env, &[("sessions=2,rate=16M", &two), ("rate=16M", &plain)]);
    let mut d = Daemon::start(&env, &["--max-sessions", "6"]);
    for (k, share) in [(&two, 2), (&plain, 3)] {
        let running: Vec<_> = (0..share)
            .map(|i| {
                let dst = env.local.join(format!("s{share}-{i}"));
                spawn_cp(&env, k, &[&d.remote("slow.bin"), dst.to_str().unwrap()])
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let extra = env.local.join(format!("extra{share}"));
        let ran = cp_as(&env, k, &[&d.remote("slow.bin"), extra.to_str().unwrap()]);
        let err = assert_refused(&ran, &[12], case);
        assert!(err.contains("your key already runs"), "[{case}] {err}");
        for r in running {
            let (code, err) = finish(r);
            assert_eq!(code, Some(0), "[{case}] {err}");
        }
    }
    d.assert_healthy(&env, BUDGET_KIB, case);
}
