//! `s3://` locations against a real S3 server (versitygw, started here on
//! loopback): a file into a bucket and back, byte-exact, in many parts; a
//! tree through a prefix; sync skipping what is unchanged; and the exit
//! code of each kind of store failure, with nothing half-written.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::process::Output;

use common::s3gw::{gateway_available, Gateway};
use common::*;

fn cp(env: &Env, gw: &Gateway, args: &[&str]) -> Output {
    let mut c = env.cp_cmd(args);
    gw.env(&mut c);
    output_within(c, CP_LIMIT)
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

#[test]
fn a_file_into_a_bucket_in_many_parts_and_back() {
    if !gateway_available("the s3 round-trip test") {
        return;
    }
    let env = Env::new();
    let server = env.serve();
    let gw = Gateway::start(env.dir.path(), &["bkt"]);
    // 8 parts of 5 MiB and a short one; a file of one PUT; an empty one.
    let big = random_bytes((40 << 20) + 12345, 7);
    write_file(&env.root.join("big.bin"), &big);
    write_file(&env.root.join("small.txt"), b"a few bytes");
    write_file(&env.root.join("empty"), b"");
    let out = cp(
        &env,
        &gw,
        &[
            "--json",
            "--s3-part-size",
            "5M",
            &env.remote(&server, "big.bin"),
            "s3://bkt/in/big.bin",
        ],
    );
    ok(&out);
    assert_eq!(json(&out)["file_bytes"], big.len() as u64);
    assert!(fs::read(gw.object("bkt", "in/big.bin")).unwrap() == big);
    ok(&cp(
        &env,
        &gw,
        &[
            &env.remote(&server, "small.txt"),
            &env.remote(&server, "empty"),
            "s3://bkt/in/",
        ],
    ));
    assert_eq!(
        fs::read(gw.object("bkt", "in/small.txt")).unwrap(),
        b"a few bytes"
    );
    assert_eq!(fs::read(gw.object("bkt", "in/empty")).unwrap(), b"");

    // And back, from the bucket to the far side.
    ok(&cp(
        &env,
        &gw,
        &["s3://bkt/in/big.bin", &env.remote(&server, "back.bin")],
    ));
    assert!(fs::read(env.root.join("back.bin")).unwrap() == big);
    ok(&cp(
        &env,
        &gw,
        &["s3://bkt/in/empty", &env.remote(&server, "back-empty")],
    ));
    assert_eq!(fs::read(env.root.join("back-empty")).unwrap(), b"");
}

#[test]
fn a_tree_through_a_prefix_keeps_names_and_times() {
    if !gateway_available("the s3 tree test") {
        return;
    }
    let env = Env::new();
    let server = env.serve();
    let gw = Gateway::start(env.dir.path(), &["bkt"]);
    let tree = env.root.join("tree");
    for (i, rel) in ["a.txt", "sub/b.bin", "sub/deeper/c", "sub/deeper/d e ü"]
        .iter()
        .enumerate()
    {
        let p = tree.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        write_file(&p, &random_bytes(1000 * (i + 1) * (i + 1), i as u64));
    }
    ok(&cp(
        &env,
        &gw,
        &["-r", "-p", &env.remote(&server, "tree/"), "s3://bkt/p/"],
    ));
    for rel in ["a.txt", "sub/b.bin", "sub/deeper/c", "sub/deeper/d e ü"] {
        assert_eq!(
            fs::read(gw.object("bkt", &format!("p/{rel}"))).unwrap(),
            fs::read(tree.join(rel)).unwrap(),
            "{rel}"
        );
    }
    // A prefix's contents come back as a tree, times kept in metadata.
    ok(&cp(
        &env,
        &gw,
        &["-r", "-p", "s3://bkt/p/", &env.remote(&server, "back/")],
    ));
    for rel in ["a.txt", "sub/b.bin", "sub/deeper/c", "sub/deeper/d e ü"] {
        let (a, b) = (tree.join(rel), env.root.join("back").join(rel));
        assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap(), "{rel}");
        assert_eq!(
            fs::metadata(&a).unwrap().mtime(),
            fs::metadata(&b).unwrap().mtime(),
            "mtime of {rel}"
        );
    }
    // A prefix named without '/' is the tree itself, and needs -r.
    fails(
        &cp(&env, &gw, &["s3://bkt/p", &env.remote(&server, "x")]),
        2,
    );
    ok(&cp(
        &env,
        &gw,
        &["-r", "s3://bkt/p", &env.remote(&server, "again")],
    ));
    assert!(env.root.join("again/sub/deeper/c").is_file());
}

#[test]
fn sync_skips_the_objects_that_are_unchanged_and_deletes_what_went() {
    if !gateway_available("the s3 sync test") {
        return;
    }
    let env = Env::new();
    let server = env.serve();
    let gw = Gateway::start(env.dir.path(), &["bkt"]);
    let tree = env.root.join("data");
    fs::create_dir_all(&tree).unwrap();
    for i in 0..5 {
        write_file(
            &tree.join(format!("f{i}")),
            &random_bytes(20_000 + i, i as u64),
        );
    }
    let sync = |env: &Env| {
        let mut c = std::process::Command::new(HAUL);
        c.args([
            "sync",
            "--json",
            &env.remote(&server, "data/"),
            "s3://bkt/mirror/",
        ])
        .env("HAUL_HOME", &env.home)
        .stdin(std::process::Stdio::null());
        gw.env(&mut c);
        let out = output_within(c, CP_LIMIT);
        ok(&out);
        json(&out)
    };
    assert_eq!(sync(&env)["files"], 5);
    let again = sync(&env);
    assert_eq!(
        (again["files"].clone(), again["skipped_files"].clone()),
        (0.into(), 5.into())
    );
    write_file(&tree.join("f3"), b"changed");
    let third = sync(&env);
    assert_eq!(
        (third["files"].clone(), third["skipped_files"].clone()),
        (1.into(), 4.into())
    );
    assert_eq!(fs::read(gw.object("bkt", "mirror/f3")).unwrap(), b"changed");

    // --delete: what the source no longer has goes, objects and prefixes.
    fs::create_dir_all(tree.join("sub/deeper")).unwrap();
    write_file(&tree.join("sub/deeper/x"), b"x");
    assert_eq!(sync(&env)["files"], 1);
    assert!(gw.object("bkt", "mirror/sub/deeper/x").is_file());
    fs::remove_file(tree.join("f1")).unwrap();
    fs::remove_dir_all(tree.join("sub")).unwrap();
    let mut c = std::process::Command::new(HAUL);
    c.args([
        "sync",
        "--delete",
        "--json",
        &env.remote(&server, "data/"),
        "s3://bkt/mirror/",
    ])
    .env("HAUL_HOME", &env.home)
    .stdin(std::process::Stdio::null());
    gw.env(&mut c);
    let out = output_within(c, CP_LIMIT);
    ok(&out);
    let mut deleted: Vec<String> = json(&out)["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    deleted.sort();
    assert_eq!(deleted, ["f1", "sub"]);
    assert!(!gw.object("bkt", "mirror/f1").exists());
    assert!(!gw.object("bkt", "mirror/sub/deeper/x").exists());
    assert!(gw.object("bkt", "mirror/f2").is_file());
}

#[test]
fn store_failures_have_their_own_exit_codes_and_leave_nothing() {
    if !gateway_available("the s3 failure test") {
        return;
    }
    let env = Env::new();
    let server = env.serve();
    let gw = Gateway::start(env.dir.path(), &["bkt"]);
    write_file(&env.root.join("f"), &random_bytes(100_000, 3));
    let to = |dest: &str| cp(&env, &gw, &[&env.remote(&server, "f"), dest]);
    // Wrong secret: 16, for both directions.
    let mut c = env.cp_cmd(&[&env.remote(&server, "f"), "s3://bkt/f"]);
    gw.env(&mut c).env("AWS_SECRET_ACCESS_KEY", "wrong");
    let err = fails(&output_within(c, CP_LIMIT), 16);
    assert!(err.contains("credentials"), "{err}");
    let mut c = env.cp_cmd(&["s3://bkt/f", &env.remote(&server, "g")]);
    gw.env(&mut c).env("AWS_SECRET_ACCESS_KEY", "wrong");
    fails(&output_within(c, CP_LIMIT), 16);
    // No credentials at all: 16 too, saying so.
    let mut c = env.cp_cmd(&["s3://bkt/f", &env.remote(&server, "g")]);
    gw.env(&mut c)
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY");
    let err = fails(&output_within(c, CP_LIMIT), 16);
    assert!(err.contains("no credentials"), "{err}");
    // A profile that is not there: 16, saying so (issue 41).
    let err = fails(
        &cp(
            &env,
            &gw,
            &[
                "--profile",
                "nosuch",
                &env.remote(&server, "f"),
                "s3://bkt/f",
            ],
        ),
        16,
    );
    assert!(err.contains("no profile \"nosuch\""), "{err}");
    // A bucket that is not there: 17.
    let err = fails(&to("s3://nobucket/f"), 17);
    assert!(err.contains("nobucket"), "{err}");
    // A key that is not there: 6.
    fails(
        &cp(&env, &gw, &["s3://bkt/none", &env.remote(&server, "g")]),
        6,
    );
    // A store that does not answer: 3.
    let mut c = env.cp_cmd(&[&env.remote(&server, "f"), "s3://bkt/f"]);
    gw.env(&mut c).env("AWS_ENDPOINT_URL", "http://127.0.0.1:1");
    fails(&output_within(c, CP_LIMIT), 3);
    // Bad locations are usage errors.
    fails(&to("s3://Bad_Name/f"), 2);
    // None of it left anything under a key.
    let left: Vec<_> = fs::read_dir(gw.root.join("bkt"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_str() != Some(".sgwtmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn an_upload_killed_midway_resumes_with_only_the_missing_parts() {
    if !gateway_available("the s3 resume test") {
        return;
    }
    let env = Env::new();
    let server = env.serve();
    let gw = Gateway::start(env.dir.path(), &["bkt"]);
    let data = random_bytes(60 << 20, 11);
    write_file(&env.root.join("big.bin"), &data);
    let args = [
        "--json",
        "--s3-part-size",
        "5M",
        "--rate",
        "100M",
        "--transport",
        "tcp",
        &env.remote(&server, "big.bin"),
        "s3://bkt/big.bin",
    ];
    let mut c = env.cp_cmd(&args);
    gw.env(&mut c)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    // Killed once the journal names a few parts the store has.
    let journals = env.home.join("s3-uploads");
    let t0 = std::time::Instant::now();
    let parts = || {
        fs::read_dir(&journals)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| fs::read_to_string(e.ok()?.path()).ok())
            .map_or(0, |t| t.lines().filter(|l| l.starts_with("part ")).count())
    };
    while parts() < 3 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "no parts journaled"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "finished before the kill"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let journaled = parts() as u64;
    // The client may stop after the store took a part but before it
    // journals the answer: that part is still taken over, its CRC32C
    // from the line written as it went out completing the upload.
    forget_last_answer(&journals);
    assert!(
        !gw.object("bkt", "big.bin").exists(),
        "nothing under the key before the upload completes"
    );
    let out = cp(&env, &gw, &args[..]);
    ok(&out);
    let j = json(&out);
    let resumed = j["resumed_bytes"].as_u64().unwrap();
    assert!(resumed >= journaled * (5 << 20), "{j}");
    assert!(
        j["wire_bytes"].as_u64().unwrap() < (60 << 20) - resumed + (2 << 20),
        "sent again only what was missing: {j}"
    );
    assert!(fs::read(gw.object("bkt", "big.bin")).unwrap() == data);
    assert!(
        fs::read_dir(&journals).unwrap().next().is_none(),
        "the journal goes with the completed upload"
    );
}

#[test]
fn a_daemon_serves_a_bucket_across_a_long_link() {
    if !netem::testing::require_emulator("the bucket-daemon-over-WAN test")
        || !gateway_available("the bucket-daemon-over-WAN test")
    {
        return;
    }
    // 200 Mbit/s, 100 ms round trip, 0.1% loss each way.
    let link = netsim::LinkConfig {
        delay: std::time::Duration::from_millis(50),
        rate_bps: Some(200_000_000),
        loss: 0.001,
        ..Default::default()
    };
    let emu = netem::Emulator::start(netem::EmulatorConfig {
        name: netem::testing::unique_name("s3wan"),
        a2b: link.clone(),
        b2a: link,
        mtu: 1500,
        seed: 27,
        block_udp: false,
        only_tcp_ports: vec![],
        path_mtu: None,
    })
    .expect("emulator starts");
    let env = Env::new();
    let gw = Gateway::start_in_b(&emu, env.dir.path(), &["bkt"]);
    // The daemon in b lands pushes in the bucket beside it.
    let mut serve = emu.command_b(HAUL);
    serve
        .args(["serve", "--listen", &format!("{}:7050", netem::ADDR_B)])
        .args(["--root", "s3://bkt/served"])
        .env("HAUL_HOME", &env.server_home);
    gw.env(&mut serve);
    let _server = common::emu::start_listening(serve);

    let data = random_bytes(24 << 20, 5);
    let src = env.local.join("data.bin");
    write_file(&src, &data);
    let tree = env.local.join("tree");
    fs::create_dir_all(tree.join("sub")).unwrap();
    write_file(&tree.join("a"), &random_bytes(300_000, 1));
    write_file(&tree.join("sub/b"), &random_bytes(70_000, 2));
    let far = |p: &str| format!("{}:7050:{p}", netem::ADDR_B);
    ok(&common::emu::cp_in_a(
        &emu,
        &env,
        &[src.to_str().unwrap(), &far("in/data.bin")],
    ));
    assert!(fs::read(gw.object("bkt", "served/in/data.bin")).unwrap() == data);
    ok(&common::emu::cp_in_a(
        &emu,
        &env,
        &["-r", tree.to_str().unwrap(), &far("in/")],
    ));
    assert_eq!(
        fs::read(gw.object("bkt", "served/in/tree/sub/b")).unwrap(),
        random_bytes(70_000, 2)
    );
    // And pulled back, objects to files, across the same link.
    let back = env.local.join("back");
    let out = common::emu::cp_in_a(
        &emu,
        &env,
        &["-r", &far("in/"), &format!("{}/", back.display())],
    );
    ok(&out);
    assert!(fs::read(back.join("data.bin")).unwrap() == data);
    assert_eq!(
        fs::read(back.join("tree/a")).unwrap(),
        random_bytes(300_000, 1)
    );
    // Nothing outside the served prefix is named.
    fails(
        &common::emu::cp_in_a(&emu, &env, &[&far("../x"), back.to_str().unwrap()]),
        8,
    );
}

#[test]
fn over_ssh_a_remote_path_may_be_a_bucket_the_remote_reaches() {
    if !common::sshd::sshd_available("the s3-over-ssh test")
        || !gateway_available("the s3-over-ssh test")
    {
        return;
    }
    let env = Env::new();
    let sshd = common::sshd::Sshd::start(env.dir.path());
    let gw = Gateway::start(env.dir.path(), &["bkt"]);
    // The remote side's credentials: its environment, as a login's
    // profile would set it (sshd passes none of the client's).
    let remote_haul = format!(
        "env AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={} AWS_ENDPOINT_URL={} AWS_EC2_METADATA_DISABLED=true {HAUL}",
        common::s3gw::ACCESS,
        common::s3gw::SECRET,
        gw.endpoint()
    );
    let rsh = sshd.rsh();
    let data = random_bytes(3_000_000, 9);
    let src = env.local.join("f.bin");
    write_file(&src, &data);
    let ssh_cp = |args: &[&str]| {
        let mut all = vec!["-e", rsh.as_str(), "--remote-haul", remote_haul.as_str()];
        all.extend_from_slice(args);
        env.cp(&all)
    };
    ok(&ssh_cp(&[
        src.to_str().unwrap(),
        "127.0.0.1:s3://bkt/over/f.bin",
    ]));
    assert!(fs::read(gw.object("bkt", "over/f.bin")).unwrap() == data);
    let back = env.local.join("back.bin");
    ok(&ssh_cp(&[
        "127.0.0.1:s3://bkt/over/f.bin",
        back.to_str().unwrap(),
    ]));
    assert!(fs::read(&back).unwrap() == data);
}

#[test]
fn shards_read_one_bucket_and_fill_one_destination() {
    if !gateway_available("the s3 shards test") {
        return;
    }
    let env = Env::new();
    let server = env.serve();
    let gw = Gateway::start(env.dir.path(), &["bkt"]);
    // Objects put there by haul: one large (split across the shards) and
    // a few small.
    let tree = env.root.join("tree");
    fs::create_dir_all(tree.join("s")).unwrap();
    write_file(&tree.join("large.bin"), &random_bytes(12 << 20, 3));
    for i in 0..5 {
        write_file(
            &tree.join(format!("s/f{i}")),
            &random_bytes(3000 + i * 11, 40 + i as u64),
        );
    }
    ok(&cp(
        &env,
        &gw,
        &["-r", "-p", &env.remote(&server, "tree/"), "s3://bkt/t/"],
    ));
    let d = env.remote(&server, "dst/");
    for i in 0..3 {
        let spec = format!("{i}/3");
        let out = cp(
            &env,
            &gw,
            &[
                "-r",
                "-p",
                "--block-size",
                "1M",
                "--shard",
                &spec,
                "s3://bkt/t/",
                &d,
            ],
        );
        let said = ok(&out);
        if i == 2 {
            assert!(said.contains("is complete and verified"), "{said}");
        }
    }
    assert_eq!(
        fs::read(env.root.join("dst/large.bin")).unwrap(),
        fs::read(tree.join("large.bin")).unwrap()
    );
    for i in 0..5 {
        let rel = format!("s/f{i}");
        assert_eq!(
            fs::read(env.root.join("dst").join(&rel)).unwrap(),
            fs::read(tree.join(&rel)).unwrap(),
            "{rel}"
        );
    }
}

/// A store behind a private CA: refused without its certificate, reached
/// with `--ca-bundle` or `AWS_CA_BUNDLE`; and the write options
/// (`--s3-storage-class`, `--s3-sse`, `--s3-acl`, `--s3-region`, path
/// style) go with an upload and a copy inside the store without breaking
/// either (this server keeps none of them; `s3`'s unit tests check each
/// reaches its request).
#[test]
fn a_store_behind_a_private_ca_and_the_write_options() {
    if !gateway_available("the private-CA s3 test") {
        return;
    }
    let env = Env::new();
    let gw = Gateway::start_tls(env.dir.path(), &["bkt"]);
    let ca = gw.ca.clone().unwrap();
    let src = env.local.join("f.bin");
    let data = random_bytes((6 << 20) + 5, 3);
    write_file(&src, &data);
    let s = src.to_str().unwrap();
    let out = cp(&env, &gw, &[s, "s3://bkt/refused"]);
    assert!(!out.status.success(), "an unknown CA was trusted");
    assert!(!gw.object("bkt", "refused").exists());
    let opts = [
        "--s3-storage-class",
        "STANDARD_IA",
        "--s3-sse",
        "AES256",
        "--s3-acl",
        "bucket-owner-full-control",
        "--s3-region",
        "us-east-1",
        "--s3-force-path-style",
        "--s3-part-size",
        "5M",
    ];
    let ca_arg = ["--ca-bundle", ca.to_str().unwrap()];
    ok(&cp(
        &env,
        &gw,
        &[&opts[..], &ca_arg, &[s, "s3://bkt/a"]].concat(),
    ));
    assert!(fs::read(gw.object("bkt", "a")).unwrap() == data);
    let mut c = env.cp_cmd(&[s, "s3://bkt/b"]);
    gw.env(&mut c).env("AWS_CA_BUNDLE", &ca);
    ok(&output_within(c, CP_LIMIT));
    assert!(fs::read(gw.object("bkt", "b")).unwrap() == data);
    let copied = cp(
        &env,
        &gw,
        &[&opts[..], &ca_arg, &["--json", "s3://bkt/a", "s3://bkt/c"]].concat(),
    );
    ok(&copied);
    assert_eq!(json(&copied)["route"], "inside-store");
    assert!(fs::read(gw.object("bkt", "c")).unwrap() == data);
    // The region goes into each request's signature: this server, in
    // us-east-1, refuses another by name.
    let other = cp(
        &env,
        &gw,
        &[&ca_arg[..], &["--s3-region", "eu-west-1", s, "s3://bkt/e"]].concat(),
    );
    assert_eq!(other.status.code(), Some(16));
    assert!(String::from_utf8_lossy(&other.stderr).contains("eu-west-1"));
    // A value S3 does not take is refused before anything is sent.
    let bad = cp(&env, &gw, &["--s3-acl", "everyone", s, "s3://bkt/d"]);
    assert_eq!(bad.status.code(), Some(2));
}

/// A write-only key on a daemon that serves a bucket: a drop box there
/// too, new keys taken, an existing one never replaced (issue 41).
#[test]
fn a_write_only_key_adds_objects_and_replaces_none() {
    if !gateway_available("the s3 drop-box test") {
        return;
    }
    let env = Env::new();
    let gw = Gateway::start(env.dir.path(), &["bkt"]);
    let keys = env.server_home.join("authorized_keys");
    let line = fs::read_to_string(&keys).unwrap();
    fs::write(&keys, format!("write-only {line}")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut serve = std::process::Command::new(HAUL);
    serve
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--root", "s3://bkt/drop"])
        .env("HAUL_HOME", &env.server_home);
    gw.env(&mut serve);
    let _server = common::emu::start_listening(serve);
    let first = env.local.join("first.bin");
    write_file(&first, &random_bytes(300_000, 8));
    let second = env.local.join("second.bin");
    write_file(&second, &random_bytes(200_000, 9));
    let at = format!("127.0.0.1:{port}:f.bin");
    ok(&cp(&env, &gw, &[first.to_str().unwrap(), &at]));
    let err = fails(&cp(&env, &gw, &[second.to_str().unwrap(), &at]), 7);
    assert!(err.contains("only takes new objects"), "{err}");
    assert!(fs::read(gw.object("bkt", "drop/f.bin")).unwrap() == random_bytes(300_000, 8));
}
