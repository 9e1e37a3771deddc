//! What each key may do, from the options before it in `authorized_keys`
//! (issue 29): a subtree it is confined to, read-only, write-only (a drop
//! box), a rate cap, the tunnels it may open; each tried from both sides,
//! and every way out of a subtree tried.

mod common;

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::tunnel::{echo_through, service, tunnel};
use common::*;

/// A client home whose key the server knows with `options`.
fn client(env: &Env, name: &str, options: &str) -> PathBuf {
    let home = env.dir.path().join(format!("home-{name}"));
    fs::create_dir_all(&home).unwrap();
    let out = Command::new(HAUL)
        .args(["keygen", "-f"])
        .arg(home.join("id_x25519"))
        .output()
        .unwrap();
    let key = String::from_utf8(out.stdout).unwrap();
    let keys = env.server_home.join("authorized_keys");
    let mut all = fs::read_to_string(&keys).unwrap();
    let words: Vec<&str> = key.split_whitespace().take(2).collect();
    all += &format!("{options} {} {name}@test\n", words.join(" "));
    fs::write(&keys, all).unwrap();
    home
}

fn cp_as(home: &PathBuf, args: &[&str]) -> Output {
    let mut c = Command::new(HAUL);
    c.arg("cp")
        .args(args)
        .env("HAUL_HOME", home)
        .stdin(Stdio::null());
    output_within(c, CP_LIMIT)
}

fn sync_as(home: &PathBuf, args: &[&str]) -> Output {
    let mut c = Command::new(HAUL);
    c.arg("sync")
        .args(args)
        .env("HAUL_HOME", home)
        .stdin(Stdio::null());
    output_within(c, CP_LIMIT)
}

#[test]
fn a_key_confined_to_a_subtree_sees_only_it() {
    let env = Env::new();
    fs::create_dir_all(env.root.join("projects/alpha/sub")).unwrap();
    fs::create_dir_all(env.root.join("projects/beta")).unwrap();
    write_file(&env.root.join("projects/beta/secret"), b"beta's");
    write_file(
        &env.root.join("projects/alpha/mine"),
        &random_bytes(5000, 1),
    );
    std::os::unix::fs::symlink("../beta", env.root.join("projects/alpha/way-out")).unwrap();
    let alice = client(&env, "alice", "root=projects/alpha");
    let server = env.serve();
    let at = |p: &str| env.remote(&server, p);
    let src = env.local.join("f.bin");
    write_file(&src, &random_bytes(200_000, 2));
    let s = src.to_str().unwrap();
    // Inside: a push lands in the subtree, absolute paths too.
    ok(&cp_as(&alice, &[s, &at("sub/f.bin")]));
    assert!(env.root.join("projects/alpha/sub/f.bin").is_file());
    ok(&cp_as(&alice, &[s, &at("/g.bin")]));
    assert!(env.root.join("projects/alpha/g.bin").is_file());
    let back = env.local.join("back");
    ok(&cp_as(&alice, &[&at("mine"), back.to_str().unwrap()]));
    // Every way out: `..`, a link inside that leads out, --basis outside,
    // a --delete aimed outside.
    let b = back.to_str().unwrap();
    fails(&cp_as(&alice, &[&at("../beta/secret"), b]), 8);
    fails(&cp_as(&alice, &[&at("/../beta/secret"), b]), 8);
    fails(&cp_as(&alice, &[&at("way-out/secret"), b]), 8);
    fails(
        &cp_as(&alice, &["--basis", "../beta/secret", s, &at("h.bin")]),
        8,
    );
    let tree = env.local.join("tree");
    fs::create_dir_all(&tree).unwrap();
    write_file(&tree.join("x"), b"x");
    let t = format!("{}/", tree.display());
    fails(&sync_as(&alice, &["--delete", &t, &at("../beta/")]), 8);
    fails(&sync_as(&alice, &["--delete", &t, &at("way-out/")]), 8);
    assert_eq!(
        fs::read(env.root.join("projects/beta/secret")).unwrap(),
        b"beta's"
    );
    // A --delete inside stays inside.
    ok(&sync_as(&alice, &["--delete", &t, &at("sub/")]));
    assert!(!env.root.join("projects/alpha/sub/f.bin").exists());
    assert!(env.root.join("projects/beta/secret").exists());
    // A key without options still sees the whole root.
    ok(&env.cp(&[&at("projects/beta/secret"), b]));
}

#[test]
fn read_only_and_write_only_keys_do_only_that() {
    let env = Env::new();
    fs::create_dir_all(env.root.join("drop")).unwrap();
    write_file(&env.root.join("pub.bin"), &random_bytes(100_000, 3));
    let reader = client(&env, "reader", "read-only");
    let dropper = client(&env, "dropper", "write-only,root=drop");
    let server = env.serve();
    let at = |p: &str| env.remote(&server, p);
    let src = env.local.join("f.bin");
    write_file(&src, &random_bytes(3 << 20, 4));
    let (s, back) = (src.to_str().unwrap(), env.local.join("b"));
    let b = back.to_str().unwrap();
    ok(&cp_as(&reader, &[&at("pub.bin"), b]));
    let t = fails(&cp_as(&reader, &[s, &at("up.bin")]), 7);
    assert!(t.contains("read-only"), "{t}");
    assert!(!env.root.join("up.bin").exists());
    // The drop box takes pushes; reads nothing of what is there.
    ok(&cp_as(&dropper, &[s, &at("f.bin")]));
    let again = cp_as(&dropper, &["--json", s, &at("g.bin")]);
    ok(&again);
    let r: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(
        r["saved_dedup_bytes"], 0,
        "the drop box offered chunks of what it holds"
    );
    assert!(fs::read(env.root.join("drop/f.bin")).unwrap() == fs::read(&src).unwrap());
    // And replaces nothing: a name taken is refused, the earlier drop
    // kept as it was (issue 41).
    let other = env.local.join("other.bin");
    write_file(&other, &random_bytes(200_000, 5));
    let t = fails(
        &cp_as(&dropper, &[other.to_str().unwrap(), &at("f.bin")]),
        7,
    );
    assert!(t.contains("only takes new files"), "{t}");
    assert!(fs::read(env.root.join("drop/f.bin")).unwrap() == fs::read(&src).unwrap());
    assert!(temporaries(&env.root.join("drop")).is_empty());
    let t = fails(&cp_as(&dropper, &[&at("f.bin"), b]), 7);
    assert!(t.contains("write-only"), "{t}");
    fails(&sync_as(&dropper, &[s, &at("f.bin")]), 7);
    fails(&cp_as(&dropper, &["-n", s, &at("f.bin")]), 7);
}

#[test]
fn a_rate_cap_holds_both_ways() {
    let env = Env::new();
    write_file(&env.root.join("two.bin"), &random_bytes(2 << 20, 5));
    let capped = client(&env, "capped", "rate=8M");
    let server = env.serve();
    let at = |p: &str| env.remote(&server, p);
    let src = env.local.join("f.bin");
    write_file(&src, &random_bytes(100_000, 6));
    let s = src.to_str().unwrap();
    let t = fails(&cp_as(&capped, &[s, &at("f.bin")]), 7);
    assert!(t.contains("--rate 8M"), "{t}");
    ok(&cp_as(&capped, &["--rate", "8M", s, &at("f.bin")]));
    // 2 MiB at 8 Mbit/s: two seconds, whatever the client asks.
    let t0 = Instant::now();
    ok(&cp_as(
        &capped,
        &[&at("two.bin"), env.local.join("two").to_str().unwrap()],
    ));
    assert!(
        t0.elapsed() > Duration::from_millis(1700),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn a_key_tunnels_only_where_its_options_say() {
    let env = Env::new();
    let (a, b) = (
        format!("127.0.0.1:{}", service()),
        format!("127.0.0.1:{}", service()),
    );
    let to_a = client(&env, "toa", &format!("tunnel-to={a}"));
    let rooted = client(&env, "rooted", "read-only");
    fs::create_dir_all(env.root.join("x")).unwrap();
    let server = env.serve_with(&["--tunnel-to", &a, "--tunnel-to", &b]);
    let via = format!("127.0.0.1:{}", server.port);
    let run = |home: &PathBuf, target: &str| {
        let mut c = Command::new(HAUL);
        c.args([
            "tunnel",
            "--listen",
            "127.0.0.1:0",
            "--to",
            target,
            "--via",
            &via,
            "--daemon",
        ])
        .env("HAUL_HOME", home)
        .stdin(Stdio::null());
        output_within(c, Duration::from_secs(60))
    };
    let t = fails(&run(&to_a, &b), 7);
    assert!(t.contains("may tunnel only to"), "{t}");
    let t = fails(&run(&rooted, &a), 7);
    assert!(t.contains("may open no tunnels"), "{t}");
    // Where it may: the tunnel carries bytes.
    let home_env = Env {
        home: to_a.clone(),
        ..Env::new()
    };
    let tun = tunnel(&home_env, &["--to", &a, "--via", &via, "--daemon"]).expect("tunnel starts");
    let data = random_bytes(100_000, 7);
    assert!(echo_through(tun.port, data.clone()) == data);
}

#[test]
fn an_option_haul_does_not_know_refuses_the_key() {
    let env = Env::new();
    let typo = client(&env, "typo", "readonly");
    let server = env.serve();
    let t = fails(&cp_as(&typo, &[&env.remote(&server, "x"), "/dev/null"]), 4);
    assert!(t.contains("not an option haul knows"), "{t}");
}
