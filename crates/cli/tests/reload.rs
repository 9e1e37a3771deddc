//! A daemon's authorized keys change while it runs: SIGHUP (a service
//! manager's reload) reads them again and logs them, a key added is let
//! in, and a key removed is kept out: its next session is refused, and
//! its running transfer ends at once with a clear error, nothing of it
//! placed (issue 39).

mod common;

use std::fs;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

fn hangup(server: &common::Server) {
    // SAFETY: kill(2) on the daemon this test started.
    let r = unsafe { libc::kill(server.pid() as libc::pid_t, libc::SIGHUP) };
    assert_eq!(r, 0);
}

#[test]
fn keys_change_under_a_running_daemon_and_a_revoked_key_is_cut_off() {
    let env = Env::new();
    let server = env.serve();
    let src = env.local.join("slow.bin");
    let data = random_bytes(12 << 20, 9);
    write_file(&src, &data);
    // A second client, not yet authorized.
    let home_b = env.dir.path().join("home_b");
    fs::create_dir_all(&home_b).unwrap();
    let kb = Command::new(HAUL)
        .args(["keygen", "-f"])
        .arg(home_b.join("id_x25519"))
        .output()
        .unwrap();
    let b_key = String::from_utf8(kb.stdout).unwrap();
    let small = env.local.join("small.txt");
    write_file(&small, b"hello");
    let as_b = |dest: &str| {
        let mut c = Command::new(HAUL);
        c.args(["cp", small.to_str().unwrap(), &env.remote(&server, dest)])
            .env("HAUL_HOME", &home_b)
            .stdin(Stdio::null());
        output_within(c, CP_LIMIT)
    };
    fails(&as_b("b0.txt"), 4);

    // A's transfer runs for seconds (capped at 16 Mbit/s) meanwhile.
    let a = env
        .cp_cmd(&[
            "--rate",
            "16M",
            src.to_str().unwrap(),
            &env.remote(&server, "slow.bin"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let keys = env.server_home.join("authorized_keys");
    let a_key = fs::read_to_string(&keys).unwrap();
    fs::write(&keys, format!("{a_key}{b_key}")).unwrap();
    hangup(&server);
    assert!(
        wait_until(Duration::from_secs(10), || server
            .log
            .lock()
            .unwrap()
            .contains("SIGHUP: 2 authorized client key(s)")),
        "no reload logged: {}",
        server.log.lock().unwrap()
    );
    ok(&as_b("b1.txt"));
    // A's key goes: its running transfer ends at once, told why, and
    // nothing of it is placed; its next is refused.
    fs::write(&keys, &b_key).unwrap();
    hangup(&server);
    let out = a.wait_with_output().unwrap();
    let err = fails(&out, 4);
    assert!(err.contains("revoked"), "{err}");
    assert!(!env.root.join("slow.bin").exists());
    assert!(
        wait_until(Duration::from_secs(10), || server
            .log
            .lock()
            .unwrap()
            .contains("1 ended (their key removed")),
        "no revocation logged: {}",
        server.log.lock().unwrap()
    );
    fails(
        &env.cp(&[small.to_str().unwrap(), &env.remote(&server, "a2.txt")]),
        4,
    );
    ok(&as_b("b2.txt"));
    // A line whose options haul refuses is warned about when it is read,
    // not only when that client connects (issue 41).
    fs::write(&keys, format!("colour=blue {b_key}")).unwrap();
    hangup(&server);
    assert!(
        wait_until(Duration::from_secs(10), || server
            .log
            .lock()
            .unwrap()
            .contains("has options haul refuses")),
        "no warning for an unknown option: {}",
        server.log.lock().unwrap()
    );
}

/// The unit file a site installs runs the daemon as its own user, may
/// write only the root and its state, reloads keys by SIGHUP, and starts
/// a command haul takes.
#[test]
fn the_systemd_unit_is_hardened_and_its_command_parses() {
    let unit = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../contrib/haul.service"
    ))
    .unwrap();
    let get = |k: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("contrib/haul.service has no {k}="))
            .to_string()
    };
    assert_eq!(get("User"), "haul");
    assert_eq!(get("ProtectSystem"), "strict");
    assert_eq!(get("NoNewPrivileges"), "yes");
    assert_eq!(get("CapabilityBoundingSet"), "");
    assert_eq!(get("ExecReload"), "/bin/kill -HUP $MAINPID");
    let exec = get("ExecStart");
    let root = exec
        .split("--root ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    assert_eq!(
        get("ReadWritePaths"),
        root,
        "the root is the one path it may write"
    );
    // The command line as haul reads it: a bad flag would fail here.
    let args: Vec<&str> = exec.split_whitespace().skip(1).collect();
    let out = Command::new(HAUL)
        .args(&args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every finished session is one line in the daemon's log: with
/// `--log-format json`, one JSON object naming the key by its comment,
/// the operation, the bytes and the outcome.
#[test]
fn each_transfer_is_one_log_line_as_json() {
    let env = Env::new();
    let keys = env.server_home.join("authorized_keys");
    let line = fs::read_to_string(&keys).unwrap();
    let key: Vec<&str> = line.split_whitespace().take(2).collect();
    fs::write(&keys, format!("{} alice@lab\n", key.join(" "))).unwrap();
    let server = env.serve_with(&["--log-format", "json"]);
    let src = env.local.join("f.bin");
    write_file(&src, &random_bytes(300_000, 4));
    ok(&env.cp(&[src.to_str().unwrap(), &env.remote(&server, "f.bin")]));
    fails(
        &env.cp(&[src.to_str().unwrap(), &env.remote(&server, "../escape.bin")]),
        8,
    );
    let events = || -> Vec<serde_json::Value> {
        server
            .log
            .lock()
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["event"] == "transfer")
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(10), || events().len() >= 2),
        "{}",
        server.log.lock().unwrap()
    );
    // The client may be done before its session's line is written: find
    // each by its path.
    let ev = events();
    let of = |p: &str| ev.iter().find(|e| e["paths"][0] == p).unwrap().clone();
    let (good, bad) = (of("f.bin"), of("../escape.bin"));
    assert_eq!(good["who"], "alice@lab");
    assert_eq!(good["op"], "push");
    assert_eq!(good["bytes"], 300_000);
    assert_eq!(good["files"], 1);
    assert_eq!(good["ok"], true);
    assert!(good["wire_bytes"].as_u64().unwrap() > 0);
    assert_eq!(bad["ok"], false);
    assert_eq!(bad["code"], 8);

    // A key the daemon does not know: refused, and said as an event.
    let stranger = Env::new();
    fails(
        &stranger.cp(&[src.to_str().unwrap(), &stranger.remote(&server, "f.bin")]),
        4,
    );
    let refused = || server.log.lock().unwrap().contains("\"event\":\"refused\"");
    assert!(
        wait_until(Duration::from_secs(10), refused),
        "{}",
        server.log.lock().unwrap()
    );
    // Every line on its stderr is one JSON object with an RFC 3339 time,
    // a level and an event: the daemon's notices, its tracing lines and
    // each session's line alike, and no colour escapes.
    let log = server.log.lock().unwrap().clone();
    assert!(!log.contains('\x1b'), "{log}");
    for line in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let t = v["timestamp"].as_str().unwrap_or_default();
        assert!(
            t.len() >= 20 && t.ends_with('Z') && &t[10..11] == "T",
            "{line}"
        );
        assert!(v["level"].is_string() && v["event"].is_string(), "{line}");
    }
}
