//! One-time grants under attack (issue 42, P-45 G-1 … G-6): the holder
//! of a grant's key, or a client, tries to push elsewhere, pull, delete,
//! bring more than the budget, use it twice, after it expired or after
//! its issuer was revoked, or to widen it into another grant or a job.
//! Each is refused with its exit code and nothing is placed; the grant's
//! one push goes through.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use endpoint::{ClientConfig, Connected, GrantAsk, ServerTrust, Transport};
use secure::{Keypair, Protection};

fn config(home: &Path, identity: Keypair, port: u16) -> ClientConfig {
    ClientConfig {
        identity,
        trust: ServerTrust::KnownHosts(home.join("known_hosts")),
        host: "127.0.0.1".into(),
        port,
        dial: Vec::new(),
        streams: None,
        block_size: 1 << 20,
        protection: Protection::best_encrypting(),
        rate: None,
        transport: Transport::Tcp,
        preserve: false,
        compress: codec::Mode::Auto,
        sync: wire::SyncOptions::default(),
        basis: None,
        cache: None,
        tuning: connect::net::Tuning::auto(None, Duration::from_secs(30)),
        connect_timeout: Duration::from_secs(10),
        notice: None,
        advice: None,
        known_path: None,
        udp_blocked: false,
        shard: None,
        select: wire::Selection::default(),
        itemize: false,
        relay: None,
        share: rate::Share::Fair,
    }
}

/// A grant from the client's key for `path`, to a fresh one-time key;
/// the grantee's own `HAUL_HOME` (that key, and the client's pin of the
/// daemon).
fn grant(
    env: &Env,
    port: u16,
    path: &str,
    budget: u64,
    lifetime: u32,
) -> Result<PathBuf, connect::TransferError> {
    let me = Keypair::load(&env.home.join("id_x25519")).unwrap();
    let one = Keypair::generate();
    Connected::connect(config(&env.home, me, port))?.grant(&GrantAsk {
        key: one.public.0,
        path: path.into(),
        recursive: true,
        contents: true,
        many_sources: false,
        sync: wire::SyncOptions::default(),
        budget,
        lifetime,
        repeat: false,
    })?;
    let home = env
        .dir
        .path()
        .join(format!("grantee-{}", one.public.fingerprint()));
    fs::create_dir_all(&home).unwrap();
    one.save(&home.join("id_x25519"), "one-time").unwrap();
    fs::copy(env.home.join("known_hosts"), home.join("known_hosts")).unwrap();
    Ok(home)
}

fn cp_as(home: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(HAUL);
    c.arg("cp")
        .args(args)
        .env("HAUL_HOME", home)
        .stdin(Stdio::null());
    output_within(c, Duration::from_secs(60))
}

#[test]
fn a_grant_allows_its_one_push_and_nothing_else() {
    let env = Env::new();
    fs::create_dir_all(env.root.join("in")).unwrap();
    fs::create_dir_all(env.root.join("other")).unwrap();
    let server = env.serve();
    // The client pins the daemon once, as any first contact.
    write_file(&env.local.join("pin"), b"pin");
    ok(&env.cp(&[
        env.local.join("pin").to_str().unwrap(),
        &env.remote(&server, "other/"),
    ]));
    let small = env.local.join("small");
    write_file(&small, &random_bytes(5_000, 1));
    let big = env.local.join("big");
    write_file(&big, &random_bytes(2 << 20, 2));
    let (small, big) = (small.to_str().unwrap(), big.to_str().unwrap());
    let home = grant(&env, server.port, "in/", 1 << 20, 60).unwrap();
    let to = |p: &str| env.remote(&server, p);

    let e = fails(&cp_as(&home, &[small, &to("other/")]), 7);
    assert!(e.contains("grant is for \"in/\" only"), "{e}");
    let pull = env.dir.path().join("pulled");
    let e = fails(
        &cp_as(&home, &["-r", &to("in/"), pull.to_str().unwrap()]),
        7,
    );
    assert!(e.contains("push only"), "{e}");
    let e = fails(&cp_as(&home, &["-r", "--delete", small, &to("in/")]), 7);
    assert!(e.contains("options"), "{e}");
    let e = fails(&cp_as(&home, &[big, &to("in/")]), 7);
    assert!(e.contains("allows 1048576 bytes"), "{e}");
    assert!(!env.root.join("in/big").exists());
    // Its one push, then never again.
    ok(&cp_as(&home, &[small, &to("in/")]));
    assert_eq!(
        fs::read(env.root.join("in/small")).unwrap(),
        random_bytes(5_000, 1)
    );
    let e = fails(&cp_as(&home, &[small, &to("in/")]), 20);
    assert!(e.contains("used up") && e.contains("ended verified"), "{e}");

    // Expired.
    let home = grant(&env, server.port, "in/", 1 << 20, 1).unwrap();
    std::thread::sleep(Duration::from_millis(2100));
    let e = fails(&cp_as(&home, &[small, &to("in/")]), 4);
    assert!(e.contains("expired"), "{e}");

    // A grant cannot make a grant or run a job.
    let home = grant(&env, server.port, "in/", 1 << 20, 60).unwrap();
    let one = Keypair::load(&home.join("id_x25519")).unwrap();
    let again = Connected::connect(config(&home, one.duplicate(), server.port))
        .unwrap()
        .grant(&GrantAsk {
            key: Keypair::generate().public.0,
            path: "in/".into(),
            recursive: true,
            contents: true,
            many_sources: false,
            sync: wire::SyncOptions::default(),
            budget: 1,
            lifetime: 60,
            repeat: false,
        });
    assert_eq!(
        again.err().map(|e| e.code),
        Some(wire::ErrorCode::Permission)
    );
    let job = Connected::connect(config(&home, one, server.port))
        .unwrap()
        .jobs();
    let code = job.and_then(|mut s| {
        s.call(br#"{"call":"list"}"#)?;
        s.answer()
    });
    assert_eq!(
        code.err().map(|e| e.code),
        Some(wire::ErrorCode::Permission)
    );

    // Its issuer's key revoked: the grant is void.
    fs::write(env.server_home.join("authorized_keys"), "").unwrap();
    let e = fails(&cp_as(&home, &[small, &to("in/")]), 4);
    assert!(e.contains("no longer authorized"), "{e}");
    assert!(!env.root.join("in/other").exists());
}

#[test]
fn who_may_grant() {
    let env = Env::new();
    fs::create_dir_all(env.root.join("in")).unwrap();
    let key = fs::read_to_string(env.home.join("id_x25519.pub")).unwrap();
    fs::write(
        env.server_home.join("authorized_keys"),
        format!("read-only {key}"),
    )
    .unwrap();
    let server = env.serve();
    let e = grant(&env, server.port, "in/", 1, 60).err().unwrap();
    assert_eq!(e.code, wire::ErrorCode::Permission, "{}", e.message);
    // Beneath the key's root only.
    fs::write(
        env.server_home.join("authorized_keys"),
        format!("root=in {key}"),
    )
    .unwrap();
    let e = grant(&env, server.port, "../x", 1, 60).err().unwrap();
    assert_eq!(e.code, wire::ErrorCode::OutsideRoot, "{}", e.message);
    // A daemon without a state directory grants nothing.
    drop(server);
    let server = env.serve_with(&["--no-jobs"]);
    let e = grant(&env, server.port, "x", 1, 60).err().unwrap();
    assert_eq!(e.code, wire::ErrorCode::BadRequest, "{}", e.message);
}

/// A key with `jobs` that sends calls a daemon cannot take: each is
/// refused with its code, and the daemon goes on answering.
#[test]
fn malformed_job_calls_are_refused_and_the_daemon_goes_on() {
    let env = Env::new();
    let key = fs::read_to_string(env.home.join("id_x25519.pub")).unwrap();
    fs::write(
        env.server_home.join("authorized_keys"),
        format!("jobs {key}"),
    )
    .unwrap();
    let server = env.serve();
    let call = |body: &[u8]| {
        let me = Keypair::load(&env.home.join("id_x25519")).unwrap();
        let mut s = Connected::connect(config(&env.home, me, server.port))?.jobs()?;
        s.call(body)?;
        s.answer()
    };
    let code = |r: Result<Vec<u8>, connect::TransferError>| r.err().map(|e| e.code);
    assert_eq!(code(call(b"not json")), Some(wire::ErrorCode::Protocol));
    assert_eq!(
        code(call(br#"{"call":"list","extra":1}"#)),
        Some(wire::ErrorCode::Protocol)
    );
    assert_eq!(
        code(call(
            br#"{"call":"show","id":"00112233445566778899aabbccddeeff"}"#
        )),
        Some(wire::ErrorCode::NotFound)
    );
    let mut spec = serde_json::json!({
        "kind": "cp", "sources": ["x"], "label": "",
        "dest": {"host": "h", "port": 1, "server_key": "ab".repeat(32),
                 "grant_secret": "cd".repeat(32), "path": "p", "grant_expires": 1},
        "options": {"recursive": false, "many_sources": false, "contents": false,
                    "preserve": false, "sync": 0, "protection": 0, "transport": 0,
                    "block_size": 1 << 20, "compress": 0}
    });
    spec["sources"] = serde_json::json!(vec!["x"; 2000]);
    let body = serde_json::json!({"call": "submit", "spec": spec}).to_string();
    assert_eq!(
        code(call(body.as_bytes())),
        Some(wire::ErrorCode::BadRequest)
    );
    // Still answering.
    let listed = call(br#"{"call":"list"}"#).unwrap();
    assert!(String::from_utf8_lossy(&listed).contains("\"jobs\":[]"));
}
