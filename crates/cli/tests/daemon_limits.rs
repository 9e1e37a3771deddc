//! The server's policies and limits through the binary (P-39): a daemon
//! that requires encryption refuses `--no-encrypt` with exit 14 and goes
//! on serving; one bad line of `authorized_keys` is skipped and named, not
//! a lock-out; streams past a session's memory are cut, not refused;
//! tunnel sessions past `--max-tunnels` are told the server is busy; and
//! `haul serve --stdio` confined by `--root` or a forced command forwards
//! only where `--tunnel-to` says. Everything runs on loopback; the ssh
//! stand-in runs the forced command locally.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::tunnel::{echo_through, service, tunnel};
use common::*;

/// `haul tunnel ARGS` run to its end (a refused one ends at once).
fn tunnel_output(env: &Env, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(HAUL);
    c.args(["tunnel", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("HAUL_HOME", &env.home)
        .stdin(Stdio::null());
    output_within(c, Duration::from_secs(60))
}

#[test]
fn a_server_that_requires_encryption_refuses_no_encrypt_exit_14() {
    let env = Env::new();
    write_file(&env.root.join("f"), &random_bytes(300_000, 1));
    let server = env.serve_with(&["--require-encryption"]);
    let remote = env.remote(&server, "f");
    let err = fails(&env.cp(&["--no-encrypt", &remote, "/dev/null"]), 14);
    assert!(err.contains("requires encryption"), "{err}");
    assert!(err.contains("--no-encrypt"), "{err}");
    // A push is refused alike, and nothing is left behind.
    let src = env.local.join("up");
    write_file(&src, &random_bytes(100_000, 2));
    let dest = env.remote(&server, "up");
    fails(&env.cp(&["--no-encrypt", src.to_str().unwrap(), &dest]), 14);
    assert!(!env.root.join("up").exists());
    // The daemon goes on serving, and encrypted transfers pass.
    ok(&env.cp(&[&remote, env.local.join("f").to_str().unwrap()]));
    assert_eq!(
        fs::read(env.local.join("f")).unwrap(),
        fs::read(env.root.join("f")).unwrap()
    );
    ok(&env.cp(&[src.to_str().unwrap(), &dest]));
    let log = server.log.lock().unwrap().clone();
    assert!(log.contains("encryption required"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

/// sshd skips an `authorized_keys` line it cannot read and logs it; so
/// does haul, naming the line, and the keys on other lines still get in.
#[test]
fn a_malformed_authorized_keys_line_is_skipped_and_named() {
    let env = Env::new();
    let keys = env.server_home.join("authorized_keys");
    let good = fs::read_to_string(&keys).unwrap();
    fs::write(
        &keys,
        format!("# clients\nssh-ed25519 AAAAC3Nz alice@laptop\n{good}"),
    )
    .unwrap();
    fs::set_permissions(&keys, fs::Permissions::from_mode(0o600)).unwrap();
    write_file(&env.root.join("f"), b"hello\n");
    let server = env.serve();
    let log = server.log.lock().unwrap().clone();
    assert!(log.contains("line 2: not a haul public key"), "{log}");
    assert!(log.contains("1 authorized client key(s)"), "{log}");
    ok(&env.cp(&[&env.remote(&server, "f"), "/dev/null"]));
}

#[test]
fn an_authorized_keys_file_others_may_write_is_warned_about() {
    let env = Env::new();
    let keys = env.server_home.join("authorized_keys");
    fs::set_permissions(&keys, fs::Permissions::from_mode(0o666)).unwrap();
    let server = env.serve();
    let log = server.log.lock().unwrap().clone();
    assert!(log.contains("may be written by others"), "{log}");
    assert!(log.contains("chmod go-w"), "{log}");
}

/// 64 streams of 16 MiB blocks would take 2 GiB of buffers: the daemon
/// gives a session a quarter of its 1 GiB (`--memory`), 7 such streams,
/// and the pull runs on those; with `--memory 4G`, 31, all one session
/// may have (P-39).
#[test]
fn streams_past_a_sessions_memory_are_cut_to_what_fits() {
    let env = Env::new();
    write_file(&env.root.join("f"), &random_bytes(3_000_000, 3));
    for (memory, streams) in [("1G", 7), ("4G", 31)] {
        let server = env.serve_with(&["--memory", memory]);
        let out = env.cp(&[
            "--json",
            "--streams",
            "64",
            "--block-size",
            "16M",
            &env.remote(&server, "f"),
            env.local.join("f").to_str().unwrap(),
        ]);
        ok(&out);
        let json = String::from_utf8_lossy(&out.stdout);
        assert!(
            json.contains(&format!("\"streams\":{streams}")),
            "{memory}: {json}"
        );
        assert_eq!(
            fs::read(env.local.join("f")).unwrap(),
            fs::read(env.root.join("f")).unwrap()
        );
    }
}

/// What is left of the daemon's memory bounds a session too: past it, a
/// client is told the server is busy, and the daemon goes on serving.
#[test]
fn sessions_past_the_daemons_memory_are_told_it_is_busy() {
    let env = Env::new();
    write_file(&env.root.join("f"), &random_bytes(100_000, 7));
    let target = format!("127.0.0.1:{}", service());
    // Room for a tunnel's lane (2.25 MiB) and then not for a transfer's
    // stream (8.25 MiB).
    let server = env.serve_with(&["--memory", "10M", "--tunnel-to", &target]);
    let via = format!("127.0.0.1:{}", server.port);
    let remote = env.remote(&server, "f");
    let t = tunnel(&env, &["--to", &target, "--via", &via, "--streams", "1"])
        .unwrap_or_else(|log| panic!("tunnel did not start: {log}"));
    let err = fails(&env.cp(&[&remote, "/dev/null"]), 12);
    assert!(err.contains("--memory"), "{err}");
    drop(t);
    // Once the tunnel is gone, its memory is given back.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let out = env.cp(&[&remote, "/dev/null"]);
        if out.status.success() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still busy");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn tunnels_past_max_tunnels_are_told_the_server_is_busy() {
    let env = Env::new();
    let target = format!("127.0.0.1:{}", service());
    let server = env.serve_with(&["--tunnel-to", &target, "--max-tunnels", "1"]);
    let via = format!("127.0.0.1:{}", server.port);
    let first = tunnel(&env, &["--to", &target, "--via", &via])
        .unwrap_or_else(|log| panic!("tunnel did not start: {log}"));
    let err = fails(&tunnel_output(&env, &["--to", &target, "--via", &via]), 12);
    assert!(err.contains("--max-tunnels"), "{err}");
    // The first goes on.
    let data = random_bytes(200_000, 4);
    assert!(echo_through(first.port, data.clone()) == data);
}

/// A stand-in for ssh: whatever it is asked to run, it runs `forced`, as
/// sshd does for a key with `command="…"`, and tells it what was asked in
/// `SSH_ORIGINAL_COMMAND`; with `forced` empty it runs what was asked.
fn fake_ssh(dir: &Path, name: &str, forced: &str) -> PathBuf {
    let path = dir.join(name);
    let body = if forced.is_empty() {
        "for last; do :; done\nexec sh -c \"$last\"\n".to_string()
    } else {
        format!("for last; do :; done\nSSH_ORIGINAL_COMMAND=\"$last\" exec {forced}\n")
    };
    fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `haul serve --stdio` honours `--tunnel-to`; without it, a login
/// confined by `--root` or by a forced command forwards nowhere, as a
/// daemon without `--tunnel-to` does, and an unconfined one anywhere, as
/// `ssh -L` would (P-39).
#[test]
fn a_confined_stdio_server_forwards_only_where_tunnel_to_says() {
    let env = Env::new();
    let target = format!("127.0.0.1:{}", service());
    let root = env.root.to_str().unwrap();
    let over = |rsh: &Path| {
        vec![
            "--to".to_string(),
            target.clone(),
            "--via".to_string(),
            "127.0.0.1".to_string(),
            "--ssh".to_string(),
            "-e".to_string(),
            rsh.to_str().unwrap().to_string(),
        ]
    };
    let refused = [
        fake_ssh(
            env.dir.path(),
            "rooted",
            &format!("{HAUL} serve --stdio --root {root}"),
        ),
        fake_ssh(env.dir.path(), "forced", &format!("{HAUL} serve --stdio")),
    ];
    for rsh in &refused {
        let args = over(rsh);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let err = fails(&tunnel_output(&env, &args), 7);
        assert!(
            err.contains("forwards no tunnels"),
            "{}: {err}",
            rsh.display()
        );
        assert!(err.contains(&format!("--tunnel-to {target}")), "{err}");
    }
    let other = format!("127.0.0.1:{}", service());
    let allowed = [
        fake_ssh(
            env.dir.path(),
            "listed",
            &format!("{HAUL} serve --stdio --root {root} --tunnel-to {target} --tunnel-to {other}"),
        ),
        fake_ssh(env.dir.path(), "unconfined", ""),
    ];
    for rsh in &allowed {
        let mut args = over(rsh);
        args.extend(["--remote-haul".to_string(), HAUL.to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let t = tunnel(&env, &args)
            .unwrap_or_else(|log| panic!("{}: tunnel did not start: {log}", rsh.display()));
        let data = random_bytes(300_000, 5);
        assert!(
            echo_through(t.port, data.clone()) == data,
            "{}",
            rsh.display()
        );
    }
    // Listed targets only: another is refused.
    let third = format!("127.0.0.1:{}", service());
    let mut args = over(&allowed[0]);
    args[1] = third.clone();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let err = fails(&tunnel_output(&env, &args), 7);
    assert!(
        err.contains(&format!("does not forward to {third}")),
        "{err}"
    );
}

/// Over ssh too: a forced `haul serve --stdio --require-encryption`
/// refuses `--no-encrypt` with exit 14, and serves an encrypted copy.
#[test]
fn a_stdio_server_that_requires_encryption_refuses_no_encrypt() {
    let env = Env::new();
    let file = env.root.join("f");
    write_file(&file, &random_bytes(100_000, 6));
    let rsh = fake_ssh(
        env.dir.path(),
        "strict",
        &format!("{HAUL} serve --stdio --require-encryption"),
    );
    let from = format!("127.0.0.1:{}", file.display());
    let rsh = rsh.to_str().unwrap();
    let err = fails(
        &env.cp(&["--ssh", "-e", rsh, "--no-encrypt", &from, "/dev/null"]),
        14,
    );
    assert!(err.contains("requires encryption"), "{err}");
    ok(&env.cp(&["--ssh", "-e", rsh, &from, "/dev/null"]));
}

/// A chunk cache inside the served root would let clients read or plant
/// another key's cache files: the daemon refuses to start with one.
#[test]
fn a_chunk_cache_inside_the_served_root_is_refused() {
    let env = Env::new();
    let out = Command::new(HAUL)
        .args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(&env.root)
        .arg("--cache")
        .arg(env.root.join("cache"))
        .env("HAUL_HOME", &env.server_home)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("inside the served root"), "{err}");
    assert!(!env.root.join("cache").exists(), "nothing made");
}
