//! Every bad input named in issue 2 gives one clear line, a distinct exit
//! code, no panic, and nothing incomplete under a final name.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use netem::testing::{is_root, require_root};

#[test]
fn unknown_host_and_refused_port_exit_3() {
    let env = Env::new();
    write_file(&env.local.join("f"), b"x");
    let f = env.local.join("f");
    let err = fails(
        &env.cp(&["--daemon", f.to_str().unwrap(), "no-such-host.invalid:/x"]),
        3,
    );
    assert!(err.contains("unknown host"), "{err}");
    // Without a port or a pinned daemon key, haul goes through ssh, which
    // says what is wrong in its own words.
    let err = fails(
        &env.cp(&[
            "-e",
            "ssh -F /dev/null -o BatchMode=yes",
            f.to_str().unwrap(),
            "no-such-host.invalid:/x",
        ]),
        13,
    );
    assert!(err.contains("Could not resolve hostname"), "{err}");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = fails(
        &env.cp(&[f.to_str().unwrap(), &format!("127.0.0.1:{port}:/x")]),
        3,
    );
    assert!(err.contains("refused"), "{err}");
}

#[test]
fn unknown_client_key_exit_4() {
    let env = Env::new();
    let server = env.serve();
    let stranger = env.dir.path().join("stranger");
    let out = Command::new(HAUL)
        .args(["keygen", "-f"])
        .arg(&stranger)
        .output()
        .unwrap();
    assert!(out.status.success());
    write_file(&env.root.join("secret"), b"not for strangers");
    let dst = env.local.join("got");
    let err = fails(
        &env.cp(&[
            "-i",
            stranger.to_str().unwrap(),
            &env.remote(&server, "secret"),
            dst.to_str().unwrap(),
        ]),
        4,
    );
    assert!(err.contains("authorized_keys"), "{err}");
    assert!(!dst.exists());
}

#[test]
fn changed_server_key_exit_4() {
    let env = Env::new();
    let server = env.serve();
    write_file(&env.root.join("f"), b"x");
    ok(&env.cp(&[&env.remote(&server, "f"), "/dev/null"]));
    // Re-key the server: the pinned key no longer matches.
    let port = server.port;
    drop(server);
    fs::remove_file(env.server_home.join("server_x25519")).unwrap();
    fs::remove_file(env.server_home.join("server_x25519.pub")).unwrap();
    let server = env.serve_with(&[]);
    let remote = format!("127.0.0.1:{}:f", server.port);
    // The new server listens on another port; pin the old key under the new
    // address so the check sees a change.
    let kh = env.home.join("known_hosts");
    let text = fs::read_to_string(&kh).unwrap().replace(
        &format!("127.0.0.1:{port} "),
        &format!("127.0.0.1:{} ", server.port),
    );
    fs::write(&kh, text).unwrap();
    let err = fails(&env.cp(&[&remote, "/dev/null"]), 4);
    assert!(err.contains("CHANGED"), "{err}");
    // On a known path the client opens with a pinned start (P-48), which
    // the re-keyed server cannot read: it starts over in full, and the
    // change is named all the same.
    known_path(&env, server.port, 0);
    let err = fails(&env.cp(&[&remote, "/dev/null"]), 4);
    assert!(err.contains("CHANGED"), "{err}");
}

#[test]
fn missing_sources_exit_6() {
    let env = Env::new();
    let server = env.serve();
    let err = fails(
        &env.cp(&[
            env.local.join("nope").to_str().unwrap(),
            &env.remote(&server, "/x"),
        ]),
        6,
    );
    assert!(err.contains("nope"), "{err}");
    let err = fails(
        &env.cp(&[&env.remote(&server, "nope"), env.local.to_str().unwrap()]),
        6,
    );
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn destination_directory_missing_exit_6() {
    let env = Env::new();
    let server = env.serve();
    write_file(&env.local.join("f"), b"x");
    let err = fails(
        &env.cp(&[
            env.local.join("f").to_str().unwrap(),
            &env.remote(&server, "no/such/dir/f"),
        ]),
        6,
    );
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn paths_outside_the_root_exit_8() {
    let env = Env::new();
    let server = env.serve();
    write_file(&env.dir.path().join("outside"), b"private");
    std::os::unix::fs::symlink(env.dir.path(), env.root.join("escape")).unwrap();
    write_file(&env.local.join("f"), b"x");
    let f = env.local.join("f");
    for (args, what) in [
        (
            vec![
                env.remote(&server, "../outside"),
                env.local.join("o1").display().to_string(),
            ],
            "pull ..",
        ),
        (
            vec![
                env.remote(&server, "escape/outside"),
                env.local.join("o2").display().to_string(),
            ],
            "pull via symlink",
        ),
        (
            vec![f.display().to_string(), env.remote(&server, "../../f")],
            "push ..",
        ),
        (
            vec![f.display().to_string(), env.remote(&server, "escape/f")],
            "push via symlink",
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let err = fails(&env.cp(&args), 8);
        assert!(err.contains("outside"), "{what}: {err}");
    }
    assert!(!env.dir.path().join("f").exists());
    assert!(!env.local.join("o1").exists() && !env.local.join("o2").exists());
}

#[test]
fn unwritable_destination_exit_7() {
    let env = Env::new();
    let server = env.serve();
    write_file(&env.root.join("f"), b"data");
    let ro = env.local.join("ro");
    fs::create_dir(&ro).unwrap();
    let mut cmd = env.cp_cmd(&[&env.remote(&server, "f"), ro.to_str().unwrap()]);
    if is_root() {
        // Root ignores permissions: run the client as nobody against a
        // directory nobody cannot write, with a home nobody can read.
        use std::os::unix::fs::PermissionsExt;
        let home = env.dir.path().join("nobody_home");
        fs::create_dir(&home).unwrap();
        for f in ["id_x25519", "id_x25519.pub", "known_hosts"] {
            if env.home.join(f).exists() {
                fs::copy(env.home.join(f), home.join(f)).unwrap();
            }
        }
        let st = netem::testing::program("chown")
            .args(["-R", "65534:65534"])
            .arg(&home)
            .status()
            .unwrap();
        assert!(st.success());
        for d in [env.dir.path(), &env.local] {
            fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
        }
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
        // The checkout may sit where nobody cannot reach (/root): run a copy.
        let bin = env.dir.path().join("haul");
        fs::copy(HAUL, &bin).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        let args: Vec<String> = vec![
            "cp".into(),
            env.remote(&server, "f"),
            ro.display().to_string(),
        ];
        cmd = netem::testing::program("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin)
            .args(&args)
            .env("HAUL_HOME", &home);
    } else {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
    }
    let err = fails(&cmd.output().unwrap(), 7);
    assert!(err.contains("ermission"), "{err}");
    assert_eq!(fs::read_dir(&ro).unwrap().count(), 0);
}

/// A fake server that answers the preamble as a haul server of version 99
/// and closes with the client's first handshake message unread (the client
/// sends it with its preamble, P-2): the reply still arrives first.
#[test]
fn other_protocol_version_exit_5() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut pre = [0u8; wire::PREAMBLE_LEN];
        s.read_exact(&mut pre).unwrap();
        let p = wire::Preamble::decode(&pre).unwrap();
        assert_eq!(p.version, wire::PROTOCOL_VERSION);
        s.write_all(
            &wire::PreambleReply {
                version: 99,
                accepted: false,
            }
            .encode(),
        )
        .unwrap();
    });
    let err = fails(&env.cp(&[&format!("127.0.0.1:{port}:f"), "/dev/null"]), 5);
    assert!(
        err.contains("version 99") && err.contains(&format!("version {}", wire::PROTOCOL_VERSION)),
        "{err}"
    );
    t.join().unwrap();
}

#[test]
fn not_a_haul_server_exit_5() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(200));
    });
    let err = fails(&env.cp(&[&format!("127.0.0.1:{port}:f"), "/dev/null"]), 5);
    assert!(err.contains("not a haul server"), "{err}");
    t.join().unwrap();
}

/// A client of another version gets a clear refusal from a real server.
#[test]
fn server_refuses_other_client_version() {
    let env = Env::new();
    let server = env.serve();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let pre = wire::Preamble {
        version: 77,
        kind: wire::ConnKind::Control,
        session: [0; 16],
        stream: 0,
    };
    s.write_all(&pre.encode()).unwrap();
    let mut reply = [0u8; wire::PreambleReply::LEN];
    s.read_exact(&mut reply).unwrap();
    let r = wire::PreambleReply::decode(&reply).unwrap();
    assert!(!r.accepted);
    assert_eq!(r.version, wire::PROTOCOL_VERSION);
}

/// Garbage on the server's port does not hurt it.
#[test]
fn garbage_then_a_good_transfer() {
    let env = Env::new();
    let server = env.serve();
    for junk in [&b"GET / HTTP/1.0\r\n\r\n"[..], &[0xffu8; 4096][..], b"HAUL"] {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let _ = s.write_all(junk);
    }
    write_file(&env.root.join("f"), b"still fine");
    let dst = env.local.join("f");
    ok(&env.cp(&[&env.remote(&server, "f"), dst.to_str().unwrap()]));
    assert_eq!(fs::read(&dst).unwrap(), b"still fine");
}

struct Mount(std::path::PathBuf);
impl Drop for Mount {
    fn drop(&mut self) {
        let _ = netem::testing::program("umount").arg(&self.0).status();
    }
}

/// A tmpfs of `size` (as mount takes it: "2m") at `dir`, created, and
/// unmounted when the guard drops.
fn small_tmpfs(dir: &Path, size: &str) -> Mount {
    fs::create_dir(dir).unwrap();
    let st = netem::testing::program("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "haul-test"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs");
    Mount(dir.to_path_buf())
}

#[test]
fn disk_full_exit_9_and_nothing_left() {
    if !require_root("the disk-full test (mounts a 2 MiB tmpfs)") {
        return;
    }
    let env = Env::new();
    let small = env.root.join("small");
    let _m = small_tmpfs(&small, "2m");
    let server = env.serve();
    let src = env.local.join("big");
    write_file(&src, &random_bytes(8 << 20, 3));
    let err = fails(
        &env.cp(&[src.to_str().unwrap(), &env.remote(&server, "small/big")]),
        9,
    );
    assert!(err.contains("No space left"), "{err}");
    assert!(!small.join("big").exists());
    assert!(
        wait_until(Duration::from_secs(5), || temporaries(&small).is_empty()),
        "temporary left: {:?}",
        temporaries(&small)
    );

    // And pulling into a full local disk.
    write_file(&env.root.join("big"), &random_bytes(8 << 20, 4));
    let err = fails(
        &env.cp(&[
            &env.remote(&server, "big"),
            small.join("pulled").to_str().unwrap(),
        ]),
        9,
    );
    assert!(err.contains("No space left"), "{err}");
    assert!(!small.join("pulled").exists());
    assert!(temporaries(&small).is_empty());
}

#[test]
fn server_killed_mid_pull_exit_10_then_the_pull_resumes() {
    let env = Env::new();
    let mut server = env.serve();
    let data = random_bytes(32 << 20, 8);
    write_file(&env.root.join("big"), &data);
    let dst = env.local.join("big");
    // 40 Mbit/s: 32 MiB takes ~7 s, so the kill lands mid-transfer.
    let child = env
        .cp_cmd(&[
            "--rate",
            "40M",
            "--block-size",
            "256K",
            &env.remote(&server, "big"),
            dst.to_str().unwrap(),
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    server.kill();
    let out = child.wait_with_output().unwrap();
    let err = fails(&out, 10);
    assert!(err.contains("connection"), "{err}");
    assert!(!dst.exists(), "partial file under its final name");
    let partial = env.local.join(".big.haul.part");
    let journal = env.local.join(".big.haul.journal");
    assert_eq!(temporaries(&env.local), vec![journal, partial.clone()]);
    let had = delivered(&partial, &data);
    assert!(had > 0, "the first run delivered nothing before the kill");

    // The same command again, against a restarted server.
    let server = env.serve();
    let out = env.cp(&[
        "--json",
        "--block-size",
        "256K",
        &env.remote(&server, "big"),
        dst.to_str().unwrap(),
    ]);
    ok(&out);
    assert!(fs::read(&dst).unwrap() == data, "resumed copy differs");
    assert!(temporaries(&env.local).is_empty());
    assert_resumed(&out, data.len() as u64, had);
}

#[test]
fn client_killed_mid_push_leaves_nothing_under_the_final_name_then_resumes() {
    let env = Env::new();
    let server = env.serve();
    let src = env.local.join("big");
    let data = random_bytes(32 << 20, 8);
    write_file(&src, &data);
    let mut child = env
        .cp_cmd(&[
            "--rate",
            "40M",
            "--block-size",
            "256K",
            src.to_str().unwrap(),
            &env.remote(&server, "big"),
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap();
    child.wait().unwrap();
    // The server notices, drops the session and keeps what it verified,
    // under the resumable name only.
    let partial = env.root.join(".big.haul.part");
    assert!(
        wait_until(Duration::from_secs(20), || !store::partial::in_use(
            &partial
        )),
        "the server still holds {partial:?}"
    );
    let journal = env.root.join(".big.haul.journal");
    assert_eq!(temporaries(&env.root), vec![journal, partial.clone()]);
    assert!(!Path::new(&env.root.join("big")).exists());
    let had = delivered(&partial, &data);
    assert!(had > 0, "the first run delivered nothing before the kill");

    let out = env.cp(&[
        "--json",
        "--block-size",
        "256K",
        src.to_str().unwrap(),
        &env.remote(&server, "big"),
    ]);
    ok(&out);
    assert!(
        fs::read(env.root.join("big")).unwrap() == data,
        "resumed copy differs"
    );
    assert!(temporaries(&env.root).is_empty());
    assert_resumed(&out, data.len() as u64, had);
}

/// Overwrites 4 KiB in the middle of `path` in place: its size stays, its
/// modification time moves.
fn scribble(path: &Path, seed: u8) {
    use std::os::unix::fs::FileExt;
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&[seed; 4096], 12 << 20).unwrap();
}

#[test]
fn a_source_changed_while_sent_is_sent_once_more_and_a_restless_one_refused() {
    let env = Env::new();
    let server = env.serve();
    let src = env.local.join("live");
    write_file(&src, &random_bytes(24 << 20, 31));
    let push = |name: &str| {
        env.cp_cmd(&[
            "--rate",
            "80M",
            "--block-size",
            "256K",
            src.to_str().unwrap(),
            &env.remote(&server, name),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
    };
    // Changed once, mid-transfer: the second attempt sends the new version.
    let child = push("once");
    std::thread::sleep(Duration::from_millis(800));
    scribble(&src, 1);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("changed while it was being sent"), "{err}");
    assert!(err.contains("once more"), "{err}");
    assert!(fs::read(env.root.join("once")).unwrap() == fs::read(&src).unwrap());

    // Changed all the time: both attempts fail, and nothing is placed.
    let child = push("restless");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, src) = (stop.clone(), src.clone());
        std::thread::spawn(move || {
            let mut n = 2u8;
            for _ in 0..200 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                scribble(&src, n);
                n = n.wrapping_add(1);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let out = child.wait_with_output().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(
        err.matches("changed while it was being sent").count(),
        2,
        "{err}"
    );
    assert!(!env.root.join("restless").exists());
}

#[test]
fn a_disk_that_fills_midway_exit_9_keeps_the_partial_and_places_nothing() {
    if !require_root("the disk-full test (mounts a 3 MiB tmpfs)") {
        return;
    }
    let env = Env::new();
    let small = env.root.join("small");
    let _m = small_tmpfs(&small, "3m");
    let server = env.serve();
    // Each file fits alone, so both pass the check made when they are
    // opened; together they do not, so a write fails partway.
    let dir = env.local.join("two");
    fs::create_dir(&dir).unwrap();
    write_file(&dir.join("a"), &random_bytes(2 << 20, 41));
    write_file(&dir.join("b"), &random_bytes(2 << 20, 42));
    let err = fails(
        &env.cp(&[
            "-r",
            "--block-size",
            "256K",
            "--compress",
            "none",
            dir.to_str().unwrap(),
            &env.remote(&server, "small"),
        ]),
        9,
    );
    assert!(err.contains("No space left"), "{err}");
    for name in ["a", "b"] {
        let placed = small.join("two").join(name);
        assert!(
            !placed.exists() || fs::read(&placed).unwrap() == fs::read(dir.join(name)).unwrap(),
            "{name}: a partial file under its final name"
        );
    }
    // What was verified stays for a resume, under the resumable names.
    assert!(
        wait_until(Duration::from_secs(5), || temporaries(&small).iter().all(
            |p| {
                let p = p.to_string_lossy();
                p.ends_with(".haul.part") || p.ends_with(".haul.journal")
            }
        )),
        "{:?}",
        temporaries(&small)
    );
}

#[test]
fn past_max_sessions_a_client_is_told_the_server_is_busy() {
    let env = Env::new();
    let server = env.serve_with(&["--max-sessions", "1"]);
    write_file(&env.root.join("big"), &random_bytes(16 << 20, 51));
    // One slow pull holds the only session.
    let mut first = env
        .cp_cmd(&[
            "--rate",
            "20M",
            &env.remote(&server, "big"),
            env.local.join("first").to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let out = env.cp(&[
        &env.remote(&server, "big"),
        env.local.join("second").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second session was let in");
    assert!(err.contains("busy"), "{err}");
    assert!(!env.local.join("second").exists());
    let _ = first.kill();
    let _ = first.wait();
}

#[test]
fn probe_of_nothing_and_bad_probe_options_say_so() {
    let env = Env::new();
    let probe = |args: &[&str]| {
        Command::new(HAUL)
            .arg("probe")
            .args(args)
            .env("HAUL_HOME", &env.home)
            .output()
            .unwrap()
    };
    let err = fails(&probe(&["--daemon", "no-such-host.invalid"]), 3);
    assert!(err.contains("unknown host"), "{err}");
    // A port nothing listens on: refused, with the JSON error too.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let out = probe(&["--json", &format!("127.0.0.1:{port}")]);
    let err = fails(&out, 3);
    assert!(err.contains("connection refused"), "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(doc["exit_code"], 3, "{doc}");
    let err = fails(&probe(&["--seconds", "100", "127.0.0.1:1"]), 2);
    assert!(err.contains("--seconds"), "{err}");
    let err = fails(&probe(&["/not/a/host"]), 2);
    assert!(err.contains("is not a host"), "{err}");
    // Nothing was saved for hosts never measured.
    assert!(!env.home.join("probes").exists());
}
