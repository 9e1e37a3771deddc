//! End-to-end transfers through the `haul` binary on loopback: byte-exact
//! results for a large file, an empty file, a tree of 2,000 small files with
//! empty directories, symlinks and unusual names, both directions.

mod common;

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;

#[test]
fn large_file_push_and_pull_byte_exact() {
    let env = Env::new();
    let server = env.serve();
    let data = random_bytes(256 << 20, 42);
    let src = env.local.join("big.bin");
    write_file(&src, &data);
    fs::set_permissions(&src, fs::Permissions::from_mode(0o640)).unwrap();

    let out = env.cp(&[
        "--json",
        "-p",
        src.to_str().unwrap(),
        &env.remote(&server, "/big.bin"),
    ]);
    ok(&out);
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    assert_eq!(json["ok"], true);
    assert_eq!(json["file_bytes"], 256u64 << 20);
    assert!(json["goodput_bps"].as_f64().unwrap() > 0.0);
    assert!(json["wire_bytes"].as_u64().unwrap() >= 256 << 20);
    assert!(
        fs::read(env.root.join("big.bin")).unwrap() == data,
        "pushed copy differs"
    );
    assert_same_tree(&src, &env.root.join("big.bin"));

    let back = env.local.join("back.bin");
    ok(&env.cp(&[
        "--streams",
        "3",
        &env.remote(&server, "big.bin"),
        back.to_str().unwrap(),
    ]));
    assert!(fs::read(&back).unwrap() == data, "pulled copy differs");
    assert!(temporaries(env.dir.path()).is_empty());
}

#[test]
fn empty_file_and_into_directory() {
    let env = Env::new();
    let server = env.serve();
    let src = env.local.join("empty");
    write_file(&src, b"");
    fs::create_dir(env.root.join("in")).unwrap();
    ok(&env.cp(&[src.to_str().unwrap(), &env.remote(&server, "/in/")]));
    assert_eq!(fs::metadata(env.root.join("in/empty")).unwrap().len(), 0);
    let dst = env.local.join("pulled");
    fs::create_dir(&dst).unwrap();
    ok(&env.cp(&[&env.remote(&server, "in/empty"), dst.to_str().unwrap()]));
    assert_eq!(fs::metadata(dst.join("empty")).unwrap().len(), 0);
}

fn build_tree(top: &Path) -> usize {
    fs::create_dir_all(top.join("empty dir/nested empty")).unwrap();
    fs::create_dir_all(top.join("ünï/日本")).unwrap();
    let mut files = 0;
    for i in 0..2000 {
        let dir = top.join(format!("d{:02}", i % 40));
        fs::create_dir_all(&dir).unwrap();
        let size = (i * 37) % 5000;
        write_file(
            &dir.join(format!("f{i}.txt")),
            &random_bytes(size, i as u64 + 1),
        );
        files += 1;
    }
    write_file(&top.join("with space.txt"), b"space");
    write_file(&top.join("ünï/日本/ファイル"), "utf-8 name".as_bytes());
    write_file(
        &top.join(std::ffi::OsStr::from_bytes(b"new\nline")),
        b"newline in name",
    );
    write_file(&top.join("exec.sh"), b"#!/bin/sh\n");
    fs::set_permissions(top.join("exec.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    write_file(&top.join("d00/readonly"), b"ro");
    fs::set_permissions(top.join("d00/readonly"), fs::Permissions::from_mode(0o444)).unwrap();
    std::os::unix::fs::symlink("d01/f1.txt", top.join("link to file")).unwrap();
    std::os::unix::fs::symlink("nowhere/dangling", top.join("dangling")).unwrap();
    std::os::unix::fs::symlink("../d02", top.join("d03/link to dir")).unwrap();
    fs::set_permissions(top.join("d05"), fs::Permissions::from_mode(0o750)).unwrap();
    files + 5
}

#[test]
fn tree_of_small_files_both_ways() {
    let env = Env::new();
    let server = env.serve();
    let top = env.local.join("tree");
    let nfiles = build_tree(&top);

    let out = env.cp(&[
        "-rp",
        "--json",
        top.to_str().unwrap(),
        &env.remote(&server, "/"),
    ]);
    ok(&out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["files"], nfiles as u64);
    assert_same_tree(&top, &env.root.join("tree"));

    // Pull it back under another name (destination does not exist: renamed).
    let back = env.local.join("tree back");
    ok(&env.cp(&["-rp", &env.remote(&server, "tree"), back.to_str().unwrap()]));
    assert_same_tree(&top, &back);
    assert!(temporaries(env.dir.path()).is_empty());
}

#[test]
fn several_sources_into_a_directory_and_directory_needs_r() {
    let env = Env::new();
    let server = env.serve();
    let (a, b) = (env.local.join("a"), env.local.join("b"));
    write_file(&a, b"aaa");
    write_file(&b, b"bbb");
    fs::create_dir(env.root.join("dst")).unwrap();
    ok(&env.cp(&[
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        &env.remote(&server, "dst"),
    ]));
    assert_eq!(fs::read(env.root.join("dst/a")).unwrap(), b"aaa");
    assert_eq!(fs::read(env.root.join("dst/b")).unwrap(), b"bbb");

    let err = fails(
        &env.cp(&[env.local.to_str().unwrap(), &env.remote(&server, "x")]),
        2,
    );
    assert!(err.contains("-r"), "{err}");
    let err = fails(
        &env.cp(&[
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            &env.remote(&server, "nodir"),
        ]),
        2,
    );
    assert!(err.contains("directory"), "{err}");
}

#[test]
fn pull_to_dev_null_and_stdout() {
    let env = Env::new();
    let server = env.serve();
    let data = random_bytes(9 << 20, 5);
    write_file(&env.root.join("blob"), &data);
    let out = env.cp(&["--json", &env.remote(&server, "blob"), "/dev/null"]);
    ok(&out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["file_bytes"], 9u64 << 20);

    let out = env.cp(&[
        "--block-size",
        "64K",
        "--streams",
        "4",
        &env.remote(&server, "blob"),
        "-",
    ]);
    ok(&out);
    assert!(out.stdout == data, "stdout bytes differ");
}

#[test]
fn rate_cap_holds() {
    let env = Env::new();
    let server = env.serve();
    write_file(&env.root.join("blob"), &random_bytes(6 << 20, 9));
    // 24 Mbit/s = 3 MB/s: 6 MiB must take about two seconds.
    let out = env.cp(&[
        "--json",
        "--rate",
        "24M",
        "--block-size",
        "256K",
        &env.remote(&server, "blob"),
        "/dev/null",
    ]);
    ok(&out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let secs = json["duration_s"].as_f64().unwrap();
    assert!(secs > 1.6 && secs < 4.0, "6 MiB at 24 Mbit/s took {secs} s");
}

/// The UDP channel on loopback, asked for by name (auto picks TCP here):
/// a file both ways, a tree, and a pull to stdout.
#[test]
fn udp_channel_on_loopback() {
    let env = Env::new();
    let server = env.serve();
    let data = random_bytes(48 << 20, 7);
    let src = env.local.join("u.bin");
    write_file(&src, &data);
    let out = env.cp(&[
        "--json",
        "--transport",
        "udp",
        src.to_str().unwrap(),
        &env.remote(&server, "/u.bin"),
    ]);
    ok(&out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["transport"], "udp", "{json}");
    assert!(
        json["udp"]["datagrams_sent"].as_u64().unwrap() > 0,
        "{json}"
    );
    assert!(fs::read(env.root.join("u.bin")).unwrap() == data);

    let out = env.cp(&["--json", &env.remote(&server, "u.bin"), "/dev/null"]);
    ok(&out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["transport"], "tcp", "auto on loopback: {json}");

    // The server sends a pull, by the policy the request carries (P-46).
    let out = env.cp(&[
        "--transport",
        "udp",
        "--background",
        &env.remote(&server, "u.bin"),
        "-",
    ]);
    ok(&out);
    assert!(out.stdout == data, "stdout copy differs");
    let both = env.cp(&[
        "--background",
        "--fair",
        "off",
        &env.remote(&server, "u.bin"),
        "-",
    ]);
    assert_eq!(both.status.code(), Some(2), "two share policies at once");

    let tree = env.local.join("t");
    fs::create_dir_all(tree.join("a/b")).unwrap();
    for i in 0..100 {
        write_file(&tree.join(format!("a/b/{i}")), format!("{i}").as_bytes());
    }
    write_file(&tree.join("empty"), b"");
    ok(&env.cp(&[
        "--transport",
        "udp",
        "--no-encrypt",
        "-rp",
        tree.to_str().unwrap(),
        &env.remote(&server, "/"),
    ]));
    assert_same_tree(&tree, &env.root.join("t"));
    let back = env.local.join("t2");
    ok(&env.cp(&[
        "--transport",
        "udp",
        "--fair",
        "off",
        "-rp",
        &env.remote(&server, "t"),
        back.to_str().unwrap(),
    ]));
    assert_same_tree(&tree, &back);
    assert!(temporaries(env.dir.path()).is_empty());
}

/// rsync's trailing-slash rule: `dir/` copies the directory's contents
/// (into the destination, made if missing); `dir` copies the directory
/// itself (into an existing destination directory, or as the destination).
/// To a daemon whose key is pinned, on a path measured before, the request
/// rides in the handshake's first message (P-48), both ways and over
/// either transport; the UDP channel's data follows its hello at the
/// known datagram size, with no set-up round trip.
#[test]
fn a_pinned_start_carries_the_request_to_a_known_host() {
    let env = Env::new();
    let server = env.serve();
    let data = random_bytes(3 << 20, 48);
    let src = env.local.join("p.bin");
    write_file(&src, &data);
    let push = |dest: &str, extra: &[&str]| {
        let mut args = vec!["--json"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[src.to_str().unwrap(), dest]);
        let out = env.cp(&args);
        ok(&out);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let first = push(&env.remote(&server, "first.bin"), &[]);
    assert_eq!(
        first["request_in_handshake"], false,
        "first contact: {first}"
    );
    known_path(&env, server.port, 1472);
    let json = push(&env.remote(&server, "tcp.bin"), &[]);
    assert_eq!(json["request_in_handshake"], true, "{json}");
    assert!(fs::read(env.root.join("tcp.bin")).unwrap() == data);
    let json = push(&env.remote(&server, "udp.bin"), &["--transport", "udp"]);
    assert_eq!(json["request_in_handshake"], true, "{json}");
    assert_eq!(
        json["udp"]["datagram_bytes"], 1472,
        "the known size: {json}"
    );
    assert!(fs::read(env.root.join("udp.bin")).unwrap() == data);
    for transport in ["tcp", "udp"] {
        let back = env.local.join(format!("back-{transport}.bin"));
        let out = env.cp(&[
            "--json",
            "--transport",
            transport,
            &env.remote(&server, "udp.bin"),
            back.to_str().unwrap(),
        ]);
        ok(&out);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["request_in_handshake"], true, "{json}");
        assert!(fs::read(&back).unwrap() == data, "pulled over {transport}");
    }
}

/// A relay on loopback to `to` that keeps what each connection's client
/// sent first (its first 4 KiB), for replaying.
fn recording_relay(to: u16) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>) {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let firsts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = firsts.clone();
    std::thread::spawn(move || {
        for c in listener.incoming().take(16) {
            let Ok(mut c) = c else { return };
            let Ok(mut s) = TcpStream::connect(("127.0.0.1", to)) else {
                return;
            };
            let (mut c2, mut s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
            let kept = kept.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 4096];
                let mut first = true;
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    if std::mem::take(&mut first) {
                        kept.lock().unwrap().push(buf[..n].to_vec());
                    }
                }
                let _ = s.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                // A path's latency on the way back: the keys (message two)
                // reach the client after its data connections have
                // connected, however busy this host is, so that they warm
                // up as they would over any real path (P-49).
                std::thread::sleep(std::time::Duration::from_millis(150));
                let _ = std::io::copy(&mut s2, &mut c2);
                let _ = c2.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    (port, firsts)
}

/// A pinned start recorded on the path and replayed to the daemon gets
/// its greeting's reply and nothing more: no message two, no session
/// (P-48's replay rule), while the true client's went through.
#[test]
fn a_replayed_pinned_start_is_closed_unanswered() {
    use std::io::{Read, Write};
    let env = Env::new();
    let server = env.serve();
    let (relay, firsts) = recording_relay(server.port);
    let src = env.local.join("r.bin");
    write_file(&src, &random_bytes(1 << 20, 49));
    let dest = format!("127.0.0.1:{relay}:r.bin");
    let push = || {
        let out = env.cp(&["--json", "--transport", "udp", src.to_str().unwrap(), &dest]);
        ok(&out);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    push();
    known_path(&env, relay, 0);
    let json = push();
    assert_eq!(json["request_in_handshake"], true, "{json}");
    let opening = firsts.lock().unwrap().last().unwrap().clone();
    assert_eq!(opening[6], 4, "a pinned preamble was recorded");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    s.write_all(&opening).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("closed, not timed out");
    assert_eq!(got.len(), 7, "the reply, and nothing after it: {got:?}");
    assert!(&got[..4] == b"HAUL");
    // The daemon logs the close once it has closed: waited for, bounded.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !server.log.lock().unwrap().contains("seen before") {
        let log = server.log.lock().unwrap().clone();
        assert!(std::time::Instant::now() < until, "{log}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A pinned push over TCP dials its data connections beside the control
/// connection and fills their first window with warm-ups while the keys
/// come (P-49); the daemon reads past them and the data arrives whole. A
/// pinned pull's connections ask the daemon for warm-ups back, and read
/// past them.
#[test]
fn a_pinned_transfer_warms_its_data_connections_up() {
    let env = Env::new();
    let server = env.serve();
    let (relay, firsts) = recording_relay(server.port);
    let data = random_bytes(2 << 20, 50);
    let src = env.local.join("w.bin");
    write_file(&src, &data);
    let push = |name: &str| {
        let dest = format!("127.0.0.1:{relay}:{name}");
        let args = ["--json", "--transport", "tcp", "--streams", "2"];
        let out = env.cp(&[&args[..], &[src.to_str().unwrap(), &dest]].concat());
        ok(&out);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    push("first.bin");
    let kind = |f: &Vec<u8>| (f.len() >= 7 && &f[..4] == b"HAUL").then(|| f[6]);
    let before: Vec<_> = firsts.lock().unwrap().iter().map(kind).collect();
    assert!(
        !before.contains(&Some(5)),
        "no warm-up on a first contact: {before:?}"
    );
    known_path(&env, relay, 0);
    let json = push("warm.bin");
    assert_eq!(json["request_in_handshake"], true, "{json}");
    assert!(fs::read(env.root.join("warm.bin")).unwrap() == data);
    let after: Vec<_> = firsts.lock().unwrap().iter().map(kind).collect();
    let warmed = after[before.len()..]
        .iter()
        .filter(|k| **k == Some(5))
        .count();
    assert_eq!(warmed, 2, "both data connections warmed up: {after:?}");
    let back = env.local.join("back.bin");
    let from = format!("127.0.0.1:{relay}:warm.bin");
    let args = ["--json", "--transport", "tcp", "--streams", "2", &from];
    let out = env.cp(&[&args[..], &[back.to_str().unwrap()]].concat());
    ok(&out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["request_in_handshake"], true, "{json}");
    assert!(fs::read(&back).unwrap() == data, "pulled whole");
    let firsts = firsts.lock().unwrap();
    let asked = firsts[after.len()..]
        .iter()
        .filter(|f| kind(f) == Some(5) && f.get(7) == Some(&wire::WARMUP_ASK))
        .count();
    assert_eq!(asked, 2, "both data connections asked for warm-ups");
}

/// A pinned start dials its control connection on a thread (P-49): a
/// daemon that has stopped is still a refused connection, exit 3, said
/// as plainly as for a first contact, both ways and over either
/// transport, with no file left half-made.
#[test]
fn a_pinned_start_to_a_stopped_daemon_says_so() {
    let env = Env::new();
    let mut server = env.serve();
    let src = env.local.join("s.bin");
    write_file(&src, &random_bytes(1 << 20, 51));
    ok(&env.cp(&[src.to_str().unwrap(), &env.remote(&server, "s.bin")]));
    known_path(&env, server.port, 0);
    let remote = env.remote(&server, "s.bin");
    server.kill();
    let back = env.local.join("back.bin");
    for transport in ["tcp", "udp"] {
        let push = ["--transport", transport, src.to_str().unwrap(), &remote];
        let err = fails(&env.cp(&push), 3);
        assert!(
            err.contains("connection refused"),
            "push over {transport}: {err}"
        );
        let pull = ["--transport", transport, &remote, back.to_str().unwrap()];
        let err = fails(&env.cp(&pull), 3);
        assert!(
            err.contains("connection refused"),
            "pull over {transport}: {err}"
        );
        assert!(
            !back.exists(),
            "nothing made by a pull that never connected"
        );
    }
}

#[test]
fn trailing_slash_copies_a_directorys_contents_like_rsync() {
    let env = Env::new();
    let server = env.serve();
    let top = env.local.join("src");
    fs::create_dir_all(top.join("sub")).unwrap();
    write_file(&top.join("a"), b"a");
    write_file(&top.join("sub/b"), b"b");
    let contents = format!("{}/", top.display());
    let names = |p: &std::path::Path| {
        let mut v: Vec<String> = fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };

    // Push `src/` to a missing directory: created, filled with the contents.
    ok(&env.cp(&["-r", &contents, &env.remote(&server, "new")]));
    assert_eq!(names(&env.root.join("new")), ["a", "sub"]);
    // Push `src/` to an existing directory: contents merged into it.
    fs::create_dir(env.root.join("old")).unwrap();
    write_file(&env.root.join("old/keep"), b"k");
    ok(&env.cp(&["-r", &contents, &env.remote(&server, "old")]));
    assert_eq!(names(&env.root.join("old")), ["a", "keep", "sub"]);
    // Push `src` (no slash) to an existing directory: the directory itself.
    ok(&env.cp(&["-r", top.to_str().unwrap(), &env.remote(&server, "old")]));
    assert_eq!(names(&env.root.join("old")), ["a", "keep", "src", "sub"]);
    // `src/.` is `src/`.
    ok(&env.cp(&[
        "-r",
        &format!("{}/.", top.display()),
        &env.remote(&server, "dot"),
    ]));
    assert_eq!(names(&env.root.join("dot")), ["a", "sub"]);

    // Pull: `new/` into a missing local directory, and `new` into an
    // existing one.
    let pulled = env.local.join("pulled");
    ok(&env.cp(&["-r", &env.remote(&server, "new/"), pulled.to_str().unwrap()]));
    assert_eq!(names(&pulled), ["a", "sub"]);
    ok(&env.cp(&["-r", &env.remote(&server, "new"), pulled.to_str().unwrap()]));
    assert_eq!(names(&pulled), ["a", "new", "sub"]);
    assert_eq!(fs::read(pulled.join("new/sub/b")).unwrap(), b"b");

    // An empty directory's contents still make the destination.
    fs::create_dir(env.local.join("empty")).unwrap();
    let empty = format!("{}/", env.local.join("empty").display());
    ok(&env.cp(&["-r", &empty, &env.remote(&server, "made")]));
    assert!(env.root.join("made").is_dir());
    // Contents into something that is not a directory: refused.
    write_file(&env.root.join("file"), b"f");
    let err = fails(&env.cp(&["-r", &contents, &env.remote(&server, "file")]), 2);
    assert!(err.contains("not a directory"), "{err}");
    // Contents need -r, like the directory itself.
    let err = fails(&env.cp(&[&contents, &env.remote(&server, "x")]), 2);
    assert!(err.contains("use -r"), "{err}");
    // A failed `dir/` pull leaves no empty destination behind.
    let nowhere = env.local.join("never");
    fails(
        &env.cp(&[
            "-r",
            &env.remote(&server, "no-such-dir/"),
            nowhere.to_str().unwrap(),
        ]),
        6,
    );
    assert!(!nowhere.exists());
}

/// Without -p, files get the receiver's umask and arrival time (like scp
/// and cp); with -p, their modification times and exact modes.
#[test]
fn preserve_keeps_times_and_modes_only_when_asked() {
    use std::os::unix::fs::MetadataExt;
    let env = Env::new();
    let server = env.serve();
    let src = env.local.join("f");
    write_file(&src, b"data");
    fs::set_permissions(&src, fs::Permissions::from_mode(0o777)).unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    fs::File::options()
        .write(true)
        .open(&src)
        .unwrap()
        .set_modified(old)
        .unwrap();

    ok(&env.cp(&[src.to_str().unwrap(), &env.remote(&server, "plain")]));
    let m = fs::metadata(env.root.join("plain")).unwrap();
    assert!(
        m.mtime() > 1_000_000_000 + 3600,
        "arrival time, not the source's"
    );
    // The server runs with the test's umask (022 unless set otherwise).
    let umask = 0o022;
    assert_eq!(m.mode() & 0o777, 0o777 & !umask);

    ok(&env.cp(&["-p", src.to_str().unwrap(), &env.remote(&server, "kept")]));
    let m = fs::metadata(env.root.join("kept")).unwrap();
    assert_eq!(m.mtime(), 1_000_000_000);
    assert_eq!(m.mode() & 0o777, 0o777);
}

/// `--progress` prints lines when stderr is not a terminal.
#[test]
fn progress_lines_for_logs() {
    let env = Env::new();
    let server = env.serve();
    let src = env.local.join("big");
    write_file(&src, &random_bytes(64 << 20, 9));
    let err = ok(&env.cp(&[
        "--progress",
        "--rate",
        "200M",
        src.to_str().unwrap(),
        &env.remote(&server, "big"),
    ]));
    assert!(
        err.lines()
            .any(|l| l.starts_with("haul: ") && l.contains("% ") && l.contains(", files ")),
        "{err}"
    );
    // Without it, a pipe gets the summary only.
    let err = ok(&env.cp(&[src.to_str().unwrap(), &env.remote(&server, "big2")]));
    assert!(!err.contains(", files "), "{err}");
}

/// All-zero blocks are announced, not sent, and land as holes (P-29), on
/// both transports and both directions; the copies are byte-exact.
/// On tmpfs the receiver reserves no space (P-17): a file that ends in
/// zero blocks, or is nothing else, must still get its full size.
#[test]
fn files_of_zeros_keep_their_size_on_tmpfs() {
    use std::os::unix::fs::MetadataExt;
    let shm = Path::new("/dev/shm");
    // SAFETY: statfs writes only into the zeroed struct passed.
    let is_tmpfs = unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        libc::statfs(c"/dev/shm".as_ptr(), &mut fs) == 0 && fs.f_type == libc::TMPFS_MAGIC
    };
    if !is_tmpfs {
        println!("SKIP: /dev/shm is not a tmpfs here, so the tmpfs path is not tested");
        return;
    }
    let env = Env::new();
    let server = env.serve();
    let mut tail = random_bytes(3 << 20, 13);
    tail.extend_from_slice(&vec![0u8; 5 << 20]);
    write_file(&env.root.join("zeros.img"), &vec![0u8; 9 << 20]);
    write_file(&env.root.join("tail.img"), &tail);
    let into = tempfile::tempdir_in(shm).unwrap();
    for transport in ["tcp", "udp"] {
        for (name, want) in [
            ("zeros.img", vec![0u8; 9 << 20]),
            ("tail.img", tail.clone()),
        ] {
            let dst = into.path().join(format!("{transport}-{name}"));
            ok(&env.cp(&[
                "--transport",
                transport,
                &env.remote(&server, name),
                dst.to_str().unwrap(),
            ]));
            assert!(
                fs::read(&dst).unwrap() == want,
                "{transport} {name} differs"
            );
            let used = fs::metadata(&dst).unwrap().blocks() * 512;
            assert!(
                used <= 4 << 20,
                "{transport} {name}: {used} bytes allocated"
            );
        }
    }
}

#[test]
fn zero_blocks_are_not_sent_and_land_as_holes() {
    use std::os::unix::fs::MetadataExt;
    let env = Env::new();
    let server = env.serve();
    // 6 MiB of zeros, 1 MiB of data, 6 MiB of zeros and a short tail.
    let mut data = vec![0u8; 6 << 20];
    data.extend_from_slice(&random_bytes(1 << 20, 11));
    data.extend_from_slice(&vec![0u8; 6 << 20]);
    data.extend_from_slice(&random_bytes(1000, 12));
    let src = env.local.join("sparse.img");
    write_file(&src, &data);
    // Whether this file system keeps holes at all (ext4, xfs and tmpfs do).
    let holes = {
        let probe = env.dir.path().join("probe");
        let f = fs::File::create(&probe).unwrap();
        f.set_len(8 << 20).unwrap();
        fs::metadata(&probe).unwrap().blocks() * 512 < 1 << 20
    };
    for transport in ["tcp", "udp"] {
        let name = format!("pushed-{transport}.img");
        let out = env.cp(&[
            "--json",
            "--transport",
            transport,
            src.to_str().unwrap(),
            &env.remote(&server, &name),
        ]);
        ok(&out);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["saved_zero_bytes"], 12u64 << 20, "{json}");
        // Only the data blocks crossed: far less than the file.
        assert!(json["wire_bytes"].as_u64().unwrap() < 3 << 20, "{json}");
        let pushed = env.root.join(&name);
        assert!(
            fs::read(&pushed).unwrap() == data,
            "{transport}: pushed copy differs"
        );
        if holes {
            let used = fs::metadata(&pushed).unwrap().blocks() * 512;
            assert!(
                used < 4 << 20,
                "{transport}: {used} bytes allocated for a sparse copy"
            );
        }

        let back = env.local.join(format!("back-{transport}.img"));
        let out = env.cp(&[
            "--json",
            "--transport",
            transport,
            &env.remote(&server, &name),
            back.to_str().unwrap(),
        ]);
        ok(&out);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["saved_zero_bytes"], 12u64 << 20, "{json}");
        assert!(
            fs::read(&back).unwrap() == data,
            "{transport}: pulled copy differs"
        );
    }
    if !holes {
        println!("NOTE: this file system keeps no holes; sparseness not checked");
    }
    // To standard output, zeros are written out in order.
    let out = env.cp(&[&env.remote(&server, "pushed-tcp.img"), "-"]);
    ok(&out);
    assert!(out.stdout == data, "stdout copy differs");
}

#[test]
fn a_push_of_nothing_but_zeros_needs_no_data_connection() {
    use std::os::unix::fs::MetadataExt as _;
    let env = Env::new();
    let server = env.serve();
    // Zeros of two and a half blocks, one block, an empty file, a directory.
    let tree = env.local.join("images");
    fs::create_dir_all(tree.join("sub")).unwrap();
    write_file(&tree.join("disk.img"), &vec![0u8; (5 << 19) + 300]);
    write_file(&tree.join("sub/one.img"), &vec![0u8; 1 << 20]);
    write_file(&tree.join("sub/empty"), b"");
    // -p: the tree is compared with its directories' times, which only
    // -p keeps (without it a directory's time is when its last entry was
    // made, a second apart now and then).
    let out = env.cp(&[
        "--json",
        "-r",
        "-p",
        tree.to_str().unwrap(),
        &env.remote(&server, ""),
    ]);
    ok(&out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["streams"], 0, "no data connection: {json}");
    assert_eq!(json["files"], 3, "{json}");
    assert_eq!(
        json["saved_zero_bytes"],
        (5u64 << 19) + 300 + (1 << 20),
        "{json}"
    );
    assert_same_tree(&tree, &env.root.join("images"));
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(text.is_empty() || !text.contains("note:"), "{text}");

    // The text summary says so; one byte of data and the usual path runs.
    let out = env.cp(&[
        tree.join("disk.img").to_str().unwrap(),
        &env.remote(&server, "again.img"),
    ]);
    let err = ok(&out);
    assert!(
        err.contains("no data connections (every block announced)"),
        "{err}"
    );
    let mut data = vec![0u8; 3 << 20];
    data[(2 << 20) + 5] = 1;
    write_file(&tree.join("disk.img"), &data);
    let out = env.cp(&[
        "--json",
        tree.join("disk.img").to_str().unwrap(),
        &env.remote(&server, "data.img"),
    ]);
    ok(&out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["streams"].as_u64() > Some(0), "{json}");
    assert!(fs::read(env.root.join("data.img")).unwrap() == data);

    // Refusals still come with the server's reason and code.
    write_file(&tree.join("disk.img"), &vec![0u8; 2 << 20]);
    let out = env.cp(&[
        tree.join("disk.img").to_str().unwrap(),
        &env.remote(&server, "../out.img"),
    ]);
    let err = fails(&out, 8);
    assert!(err.contains("outside the served root"), "{err}");
    let _ = fs::metadata(env.root.join("images/disk.img"))
        .unwrap()
        .blocks();
}

/// Log-like text: compresses several times over.
fn log_text(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 100);
    let mut i = 0u64;
    while out.len() < len {
        i += 1;
        out.extend_from_slice(
            format!(
                "2026-11-22T12:00:{:02} host{} GET /items/{} 200\n",
                i % 60,
                i % 7,
                i * 31 % 9973
            )
            .as_bytes(),
        );
    }
    out.truncate(len);
    out
}

/// Blocks are compressed per `--compress` on both transports and both
/// directions, and arrive byte-exact (P-30); auto leaves random data alone.
#[test]
fn compressed_blocks_both_ways_on_both_transports() {
    let env = Env::new();
    let server = env.serve();
    let text = log_text(6 << 20);
    let src = env.local.join("log.txt");
    write_file(&src, &text);
    let noise = random_bytes(6 << 20, 13);
    let rnd = env.local.join("random.bin");
    write_file(&rnd, &noise);
    let saved = |out: &std::process::Output| {
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            json["saved_compression_bytes"].as_u64().unwrap(),
            json["wire_bytes"].as_u64().unwrap(),
        )
    };
    for transport in ["tcp", "udp"] {
        for mode in ["lz4", "zstd", "zstd:9"] {
            let name = format!("{transport}-{mode}.txt");
            let out = env.cp(&[
                "--json",
                "--transport",
                transport,
                "--compress",
                mode,
                src.to_str().unwrap(),
                &env.remote(&server, &name),
            ]);
            ok(&out);
            let (s, wire) = saved(&out);
            assert!(s > 3 << 20, "{transport} {mode}: saved {s}");
            assert!(wire < 3 << 20, "{transport} {mode}: wire {wire}");
            assert!(
                fs::read(env.root.join(&name)).unwrap() == text,
                "{transport} {mode}: pushed copy differs"
            );

            let back = env.local.join(format!("back-{name}"));
            let out = env.cp(&[
                "--json",
                "--transport",
                transport,
                "--compress",
                mode,
                &env.remote(&server, &name),
                back.to_str().unwrap(),
            ]);
            ok(&out);
            assert!(
                saved(&out).0 > 3 << 20,
                "{transport} {mode}: pull saved nothing"
            );
            assert!(
                fs::read(&back).unwrap() == text,
                "{transport} {mode}: pulled copy differs"
            );
        }
        // auto: random data goes raw; text on loopback (a fast link for two
        // cores) may go either way, but always arrives intact.
        let name = format!("{transport}-auto.bin");
        let out = env.cp(&[
            "--json",
            "--transport",
            transport,
            rnd.to_str().unwrap(),
            &env.remote(&server, &name),
        ]);
        ok(&out);
        assert_eq!(saved(&out).0, 0, "{transport}: auto compressed random data");
        assert!(fs::read(env.root.join(&name)).unwrap() == noise);
        let name = format!("{transport}-none.txt");
        let out = env.cp(&[
            "--json",
            "--transport",
            transport,
            "--compress",
            "none",
            src.to_str().unwrap(),
            &env.remote(&server, &name),
        ]);
        ok(&out);
        assert_eq!(saved(&out).0, 0);
        assert!(fs::read(env.root.join(&name)).unwrap() == text);
    }
    let out = env.cp(&[
        "--compress",
        "gzip",
        src.to_str().unwrap(),
        &env.remote(&server, "x"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a compression"));
}

/// The JSON summary of a successful `haul cp --json`.
fn json_of(out: &std::process::Output) -> serde_json::Value {
    ok(out);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Pushes `src` to `name` on `server` without compression, so that the
/// wire bytes show what deduplication saved.
fn push_uncompressed(
    env: &Env,
    server: &Server,
    transport: &str,
    src: &std::path::Path,
    name: &str,
) -> serde_json::Value {
    json_of(&env.cp(&[
        "--json",
        "--compress",
        "none",
        "--transport",
        transport,
        src.to_str().unwrap(),
        &env.remote(server, name),
    ]))
}

/// `haul sync EXTRA --json FROM TO`, which must succeed.
fn haul_sync(env: &Env, extra: &[&str], from: &str, to: &str) -> serde_json::Value {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_haul"));
    c.arg("sync")
        .args(extra)
        .args(["--json", from, to])
        .env("HAUL_HOME", &env.home)
        .stdin(std::process::Stdio::null());
    json_of(&c.output().unwrap())
}

/// Small files that share words with each other but hardly within
/// themselves: each compresses poorly alone, and a bundle (P-33) well.
fn tree_of_related_files(top: &std::path::Path, files: usize) -> usize {
    let words: Vec<Vec<u8>> = (0..256).map(|i| random_bytes(32, 1000 + i)).collect();
    let mut total = 0;
    for i in 0..files {
        let dir = top.join(format!("d{}", i % 7));
        fs::create_dir_all(&dir).unwrap();
        let picks = random_bytes(128, 5000 + i as u64);
        let mut text: Vec<u8> = picks
            .iter()
            .flat_map(|&p| words[p as usize].clone())
            .collect();
        // Not all the same length, one of them a few bytes.
        text.truncate(if i == 5 { 3 } else { 4096 - i % 50 });
        total += text.len();
        write_file(&dir.join(format!("f{i}.txt")), &text);
    }
    total
}

#[test]
fn small_files_are_bundled_and_compressed_together_both_ways() {
    let env = Env::new();
    let server = env.serve();
    let top = env.local.join("small");
    let bytes = tree_of_related_files(&top, 400);
    // One zero file among them is announced, not bundled.
    write_file(&top.join("d0/zeros"), &[0u8; 1000]);
    // Alone each file keeps most of its bytes; bundled, the words are sent
    // about once per bundle.
    let copy = |transport: &str, from: &str, to: &str| {
        let out = env.cp(&[
            "-rp",
            "--json",
            "--compress",
            "zstd",
            "--transport",
            transport,
            from,
            to,
        ]);
        ok(&out);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let wire = json["wire_bytes"].as_u64().unwrap();
        assert!(
            wire < bytes as u64 / 3,
            "{transport} {from}: {wire} bytes on the wire for {bytes}"
        );
    };
    for transport in ["tcp", "udp"] {
        let name = format!("small-{transport}");
        copy(
            transport,
            top.to_str().unwrap(),
            &env.remote(&server, &name),
        );
        assert_same_tree(&top, &env.root.join(&name));
        let back = env.local.join(format!("back-{transport}"));
        copy(
            transport,
            &env.remote(&server, &name),
            back.to_str().unwrap(),
        );
        assert_same_tree(&top, &back);
    }
    assert!(temporaries(env.dir.path()).is_empty());
}

#[test]
fn an_existing_destination_is_a_basis_both_ways_on_both_transports() {
    let env = Env::new();
    let server = env.serve();
    // 16 MiB of random data, then the same with 1 MiB inserted in the
    // middle and 1 MiB appended.
    let old = random_bytes(16 << 20, 21);
    let mut new = old[..8 << 20].to_vec();
    new.extend_from_slice(&random_bytes(1 << 20, 22));
    new.extend_from_slice(&old[8 << 20..]);
    new.extend_from_slice(&random_bytes(1 << 20, 23));
    let src = env.local.join("new.bin");
    write_file(&src, &new);
    for transport in ["tcp", "udp"] {
        let name = format!("pushed-{transport}.bin");
        write_file(&env.root.join(&name), &old);
        let json = push_uncompressed(&env, &server, transport, &src, &name);
        assert!(
            fs::read(env.root.join(&name)).unwrap() == new,
            "{transport}: push differs"
        );
        let saved = json["saved_dedup_bytes"].as_u64().unwrap();
        assert!(
            saved >= 15 << 20,
            "{transport}: only {saved} bytes deduplicated: {json}"
        );
        assert!(
            json["wire_bytes"].as_u64().unwrap() < 3 << 20,
            "{transport}: {json}"
        );

        // Pull: the local old copy is the basis.
        let back = env.local.join(format!("back-{transport}.bin"));
        write_file(&back, &old);
        let json = json_of(&env.cp(&[
            "--json",
            "--compress",
            "none",
            "--transport",
            transport,
            &env.remote(&server, &name),
            back.to_str().unwrap(),
        ]));
        assert!(fs::read(&back).unwrap() == new, "{transport}: pull differs");
        assert!(
            json["saved_dedup_bytes"].as_u64().unwrap() >= 15 << 20,
            "{json}"
        );
        assert!(json["wire_bytes"].as_u64().unwrap() < 3 << 20, "{json}");
    }
    // --no-dedup sends everything; --basis names another file.
    let name = "other.bin";
    write_file(&env.root.join(name), &old);
    let json = json_of(&env.cp(&[
        "--json",
        "--compress",
        "none",
        "--no-dedup",
        src.to_str().unwrap(),
        &env.remote(&server, name),
    ]));
    assert_eq!(json["saved_dedup_bytes"], 0, "{json}");
    assert!(json["wire_bytes"].as_u64().unwrap() > 18 << 20, "{json}");
    let json = json_of(&env.cp(&[
        "--json",
        "--compress",
        "none",
        "--basis",
        "pushed-tcp.bin",
        src.to_str().unwrap(),
        &env.remote(&server, "fresh.bin"),
    ]));
    assert!(fs::read(env.root.join("fresh.bin")).unwrap() == new);
    assert!(
        json["saved_dedup_bytes"].as_u64().unwrap() >= 17 << 20,
        "{json}"
    );
    assert!(temporaries(&env.root).is_empty());
}

#[test]
fn a_destination_changed_throughout_is_still_partly_reused() {
    let env = Env::new();
    let server = env.serve();
    let data = random_bytes(6 << 20, 31);
    let src = env.local.join("f.bin");
    write_file(&src, &data);
    let dest = env.root.join("f.bin");
    let mut stale = data.clone();
    write_file(&dest, &stale);
    // Same size, one byte changed in every MiB: only the chunks around
    // those bytes are sent.
    for i in (0..stale.len()).step_by(1 << 20) {
        stale[i] ^= 0xff;
    }
    write_file(&dest, &stale);
    let json = json_of(&env.cp(&[
        "--json",
        src.to_str().unwrap(),
        &env.remote(&server, "f.bin"),
    ]));
    assert!(fs::read(&dest).unwrap() == data);
    let saved = json["saved_dedup_bytes"].as_u64().unwrap();
    assert!(saved > 2 << 20 && saved < 6 << 20, "{json}");
}

#[test]
fn update_skips_files_in_place_and_checksum_compares_content() {
    let env = Env::new();
    let server = env.serve();
    let tree = env.local.join("tree");
    fs::create_dir_all(tree.join("sub")).unwrap();
    for (i, name) in ["a", "b", "sub/c"].iter().enumerate() {
        write_file(
            &tree.join(name),
            &random_bytes(300_000 + i * 1000, 40 + i as u64),
        );
    }
    let dest = env.remote(&server, "");
    let sync = |extra: &[&str]| haul_sync(&env, extra, tree.to_str().unwrap(), &dest);
    let first = sync(&[]);
    assert_eq!(first["files"], 3, "{first}");
    assert_same_tree(&tree, &env.root.join("tree"));
    // Nothing changed: everything is skipped.
    let second = sync(&[]);
    assert_eq!(second["skipped_files"], 3, "{second}");
    assert_eq!(second["files"], 0, "{second}");
    // One file changes, keeping its size and time: the quick check
    // misses it, --checksum does not.
    let b = tree.join("b");
    let mtime = fs::metadata(&b).unwrap().modified().unwrap();
    let mut changed = fs::read(&b).unwrap();
    changed[1000] ^= 1;
    write_file(&b, &changed);
    fs::File::options()
        .write(true)
        .open(&b)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let quick = sync(&[]);
    assert_eq!(quick["skipped_files"], 3, "{quick}");
    let checked = sync(&["--checksum"]);
    assert_eq!(checked["skipped_files"], 2, "{checked}");
    assert_eq!(checked["files"], 1, "{checked}");
    assert!(
        checked["saved_dedup_bytes"].as_u64().unwrap() > 200_000,
        "{checked}"
    );
    assert_same_tree(&tree, &env.root.join("tree"));
    // A newer time sends the file again.
    let c = tree.join("sub/c");
    write_file(&c, &random_bytes(5000, 49));
    let third = sync(&[]);
    assert_eq!(third["skipped_files"], 2, "{third}");
    assert_eq!(third["files"], 1, "{third}");
    assert_same_tree(&tree, &env.root.join("tree"));
}

#[test]
fn the_chunk_cache_serves_chunks_seen_in_earlier_transfers() {
    let env = Env::new();
    let cache = env.dir.path().join("server-cache");
    let server = env.serve_with(&["--cache", cache.to_str().unwrap()]);
    let data = random_bytes(12 << 20, 51);
    let src = env.local.join("backup.tar");
    write_file(&src, &data);
    let first = json_of(&env.cp(&[
        "--json",
        src.to_str().unwrap(),
        &env.remote(&server, "b1.tar"),
    ]));
    assert_eq!(first["saved_dedup_bytes"], 0, "{first}");
    // The same bytes, with 1 MiB appended, to a new name: the receiver
    // has no old version of it, but its cache has the chunks.
    let mut grown = data.clone();
    grown.extend_from_slice(&random_bytes(1 << 20, 52));
    write_file(&src, &grown);
    for transport in ["tcp", "udp"] {
        let name = format!("b2-{transport}.tar");
        let again = push_uncompressed(&env, &server, transport, &src, &name);
        assert!(
            fs::read(env.root.join(&name)).unwrap() == grown,
            "{transport}"
        );
        assert!(
            again["saved_dedup_bytes"].as_u64().unwrap() >= 11 << 20,
            "{transport}: {again}"
        );
        assert!(
            again["wire_bytes"].as_u64().unwrap() < 2 << 20,
            "{transport}: {again}"
        );
    }
    // A pull keeps its cache on this side.
    let local_cache = env.dir.path().join("client-cache");
    let cache_arg = local_cache.to_str().unwrap();
    let back = env.local.join("back.tar");
    json_of(&env.cp(&[
        "--json",
        "--cache",
        cache_arg,
        &env.remote(&server, "b1.tar"),
        back.to_str().unwrap(),
    ]));
    fs::remove_file(&back).unwrap();
    let other = env.local.join("other.tar");
    let pulled = json_of(&env.cp(&[
        "--json",
        "--cache",
        cache_arg,
        &env.remote(&server, "b2-tcp.tar"),
        other.to_str().unwrap(),
    ]));
    assert!(fs::read(&other).unwrap() == grown);
    assert!(
        pulled["saved_dedup_bytes"].as_u64().unwrap() >= 11 << 20,
        "{pulled}"
    );
    // A push to a daemon cannot name the daemon's cache.
    let out = env.cp(&[
        "--cache",
        cache_arg,
        src.to_str().unwrap(),
        &env.remote(&server, "x"),
    ]);
    let err = fails(&out, 2);
    assert!(err.contains("serve --cache"), "{err}");
}

/// A daemon's cache is kept per client key (issue 23): a receiver
/// announces its cache's chunks to the sender, so a cache shared by every
/// client would tell each the hashes of the others' files. Another key
/// pushing the same bytes gets no copies; the first key still does.
#[test]
fn a_daemons_chunk_cache_is_kept_per_client_key() {
    let env = Env::new();
    let cache = env.dir.path().join("server-cache");
    let server = env.serve_with(&["--cache", cache.to_str().unwrap()]);
    let data = random_bytes(6 << 20, 61);
    let src = env.local.join("secret.tar");
    write_file(&src, &data);
    json_of(&env.cp(&["--json", src.to_str().unwrap(), &env.remote(&server, "a1")]));

    // A second client, with its own key, authorized on the server.
    let other = env.dir.path().join("other-home");
    fs::create_dir_all(&other).unwrap();
    let key = std::process::Command::new(HAUL)
        .args(["keygen", "-f"])
        .arg(other.join("id_x25519"))
        .output()
        .unwrap();
    let mut keys = fs::read(env.server_home.join("authorized_keys")).unwrap();
    keys.extend_from_slice(&key.stdout);
    fs::write(env.server_home.join("authorized_keys"), keys).unwrap();
    let as_other = |args: &[&str]| {
        let mut c = std::process::Command::new(HAUL);
        c.arg("cp")
            .args(args)
            .env("HAUL_HOME", &other)
            .stdin(std::process::Stdio::null());
        json_of(&output_within(c, CP_LIMIT))
    };
    let theirs = as_other(&[
        "--json",
        "--compress",
        "none",
        src.to_str().unwrap(),
        &env.remote(&server, "b1"),
    ]);
    assert_eq!(theirs["saved_dedup_bytes"], 0, "{theirs}");
    assert!(fs::read(env.root.join("b1")).unwrap() == data);
    // The first key's cache still serves it.
    let again = push_uncompressed(&env, &server, "tcp", &src, "a2");
    assert!(
        again["saved_dedup_bytes"].as_u64().unwrap() >= 5 << 20,
        "{again}"
    );
    let peers = fs::read_dir(cache.join("peers")).unwrap().count();
    assert_eq!(peers, 2, "one cache per client key");
    assert!(!cache.join("index").exists(), "nothing shared at the root");
}

/// Like `assert_same_tree`, but for what a `dir/` copy carries: the
/// directories' contents, not the top directory's own mode and time.
fn assert_same_contents(a: &std::path::Path, b: &std::path::Path) {
    let names = |p: &std::path::Path| {
        let mut v: Vec<_> = fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(a), names(b), "entries of {}", b.display());
    for n in names(a) {
        assert_same_tree(&a.join(&n), &b.join(&n));
    }
}

#[test]
fn delete_and_dry_run_both_ways() {
    let env = Env::new();
    let server = env.serve();
    let tree = env.local.join("tree");
    fs::create_dir_all(tree.join("sub")).unwrap();
    write_file(&tree.join("keep"), &random_bytes(70_000, 61));
    write_file(&tree.join("sub/keep2"), &random_bytes(80_000, 62));
    let sync = |extra: &[&str], from: &str, to: &str| haul_sync(&env, extra, from, to);
    let src = format!("{}/", tree.display());
    let dest = env.remote(&server, "mirror/");
    sync(&[], &src, &dest);
    let mirror = env.root.join("mirror");
    assert_same_contents(&tree, &mirror);
    // Extra files at the destination, one at the top, one in a subtree,
    // and a whole extra directory; one new file at the source.
    write_file(&mirror.join("stale"), b"old");
    write_file(&mirror.join("sub/stale2"), b"old");
    fs::create_dir_all(mirror.join("gone/deep")).unwrap();
    write_file(&mirror.join("gone/deep/x"), b"old");
    write_file(&tree.join("new"), &random_bytes(5000, 63));

    // A dry run changes nothing and says what would happen.
    let dry = sync(&["--delete", "--dry-run"], &src, &dest);
    assert_eq!(dry["dry_run"], true, "{dry}");
    assert_eq!(dry["would_send"], serde_json::json!(["new"]), "{dry}");
    let mut deleted: Vec<String> = serde_json::from_value(dry["deleted"].clone()).unwrap();
    deleted.sort();
    assert_eq!(deleted, ["gone", "stale", "sub/stale2"], "{dry}");
    assert!(mirror.join("stale").exists() && !mirror.join("new").exists());
    assert!(temporaries(&env.root).is_empty());

    // Without --delete, extra files stay; with it they go.
    sync(&[], &src, &dest);
    assert!(mirror.join("stale").exists() && mirror.join("new").exists());
    let done = sync(&["--delete"], &src, &dest);
    assert_eq!(done["deleted"].as_array().unwrap().len(), 3, "{done}");
    assert_same_contents(&tree, &mirror);

    // The same by pull, into a local mirror.
    let local = env.local.join("pulled");
    sync(
        &[],
        &env.remote(&server, "mirror/"),
        &format!("{}/", local.display()),
    );
    write_file(&local.join("extra"), b"x");
    let dry = sync(
        &["--delete", "-n"],
        &env.remote(&server, "mirror/"),
        &format!("{}/", local.display()),
    );
    assert_eq!(dry["deleted"], serde_json::json!(["extra"]), "{dry}");
    assert_eq!(dry["would_send"], serde_json::json!([]), "{dry}");
    assert!(local.join("extra").exists());
    sync(
        &["--delete"],
        &env.remote(&server, "mirror/"),
        &format!("{}/", local.display()),
    );
    assert_same_contents(&tree, &local);
}

/// A run that moved nothing states so, with no rate and no share of file
/// bytes (issue 41: "goodput 0.0 kbit/s", "3200.7% of file bytes").
#[test]
fn a_sync_with_nothing_to_send_reports_no_rate() {
    let env = Env::new();
    let server = env.serve();
    let top = env.local.join("data");
    fs::create_dir_all(&top).unwrap();
    for i in 0..3 {
        write_file(&top.join(format!("f{i}")), &random_bytes(10_000, i));
    }
    let sync = || {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_haul"));
        c.args(["sync", &format!("{}/", top.display())])
            .arg(env.remote(&server, "mirror/"))
            .env("HAUL_HOME", &env.home)
            .stdin(std::process::Stdio::null());
        c.output().unwrap()
    };
    let first = String::from_utf8_lossy(&sync().stderr).into_owned();
    assert!(first.contains("goodput"), "{first}");
    let out = sync();
    let again = ok(&out);
    assert!(again.contains("nothing needed sending"), "{again}");
    assert!(
        !again.contains("goodput") && !again.contains('%'),
        "{again}"
    );
    assert!(again.contains("already up to date"), "{again}");
}
