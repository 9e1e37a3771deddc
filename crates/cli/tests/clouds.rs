//! `gs://` and `az://` locations through the whole tool, against the
//! clouds' own emulators (fake-gcs-server, Azurite), with the guarantees
//! `s3://` has (crates/cli/tests/s3.rs): a file in many parts into a
//! bucket and back, byte-exact; a tree through a prefix with its times;
//! sync skipping what is unchanged and `--delete`; the exit code of each
//! kind of store failure with nothing left under a key; an interrupted
//! upload resumed from what the store holds; a daemon serving a bucket;
//! shards reading one bucket. Every test runs once per store.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::clouds::{Azurite, Cloud, Gcs};
use common::*;

fn cp(env: &Env, cloud: &dyn Cloud, args: &[&str]) -> Output {
    let mut c = env.cp_cmd(args);
    cloud.env(&mut c);
    output_within(c, CP_LIMIT)
}

fn sync(env: &Env, cloud: &dyn Cloud, args: &[&str]) -> serde_json::Value {
    let mut c = Command::new(HAUL);
    c.arg("sync")
        .arg("--json")
        .args(args)
        .env("HAUL_HOME", &env.home)
        .stdin(Stdio::null());
    cloud.env(&mut c);
    let out = output_within(c, CP_LIMIT);
    ok(&out);
    json(&out)
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

/// Every test, once for each store.
macro_rules! per_cloud {
    ($($name:ident),* $(,)?) => {
        mod gs {
            $(#[test]
            fn $name() {
                if let Some(c) = super::Gcs::start(concat!("the gs:// test ", stringify!($name))) {
                    super::$name(&c);
                }
            })*
        }
        mod az {
            $(#[test]
            fn $name() {
                if let Some(c) = super::Azurite::start(concat!("the az:// test ", stringify!($name))) {
                    super::$name(&c);
                }
            })*
        }
    };
}

per_cloud!(
    files_in_many_parts_and_trees_with_times_round_trip,
    sync_skips_what_is_unchanged_and_deletes_what_went,
    store_failures_have_their_own_exit_codes_and_leave_nothing,
    an_upload_killed_midway_resumes_with_only_the_missing_parts,
    a_daemon_serves_a_bucket_and_shards_read_one,
    copies_on_this_host_into_out_of_and_inside_the_store,
);

/// Copies on one host (issue 41): a tree into the store and back with no
/// daemon, and from one prefix to another: inside the store where it
/// copies (GCS's rewrite), through this host where it does not (Azure
/// here), with the times kept either way.
fn copies_on_this_host_into_out_of_and_inside_the_store(cloud: &dyn Cloud) {
    let env = Env::new();
    let tree = env.local.join("t");
    fs::create_dir_all(tree.join("sub")).unwrap();
    write_file(&tree.join("big.bin"), &random_bytes((11 << 20) + 7, 4));
    write_file(&tree.join("sub/small"), b"small");
    let t = format!("{}/", tree.display());
    let up = cp(&env, cloud, &["-r", "-p", "--json", &t, &cloud.url("a/")]);
    ok(&up);
    assert_eq!(json(&up)["route"], "local");
    let inside = cp(
        &env,
        cloud,
        &["-r", "--json", &cloud.url("a/"), &cloud.url("b/")],
    );
    ok(&inside);
    let route = json(&inside)["route"].clone();
    match cloud.url("").starts_with("gs://") {
        true => assert_eq!(
            (route, json(&inside)["wire_bytes"].clone()),
            ("inside-store".into(), 0.into())
        ),
        false => assert_eq!(route, "local"),
    }
    // The copies kept their times: nothing to send again.
    let again = sync(&env, cloud, &[&cloud.url("a/"), &cloud.url("b/")]);
    assert_eq!(again["skipped_files"], 2, "{again}");
    let back = env.local.join("back");
    ok(&cp(
        &env,
        cloud,
        &["-r", "-p", &cloud.url("b/"), back.to_str().unwrap()],
    ));
    assert!(fs::read(back.join("big.bin")).unwrap() == random_bytes((11 << 20) + 7, 4));
    assert_eq!(fs::read(back.join("sub/small")).unwrap(), b"small");
}

fn files_in_many_parts_and_trees_with_times_round_trip(cloud: &dyn Cloud) {
    let env = Env::new();
    let server = env.serve();
    // 8 parts of 5 MiB and a short one; a file of one PUT; an empty one.
    let big = random_bytes((40 << 20) + 12345, 7);
    write_file(&env.root.join("big.bin"), &big);
    write_file(&env.root.join("small.txt"), b"a few bytes");
    write_file(&env.root.join("empty"), b"");
    let out = cp(
        &env,
        cloud,
        &[
            "--json",
            "--part-size",
            "5M",
            &env.remote(&server, "big.bin"),
            &cloud.url("in/big.bin"),
        ],
    );
    ok(&out);
    assert_eq!(json(&out)["file_bytes"], big.len() as u64);
    let files = [
        env.remote(&server, "small.txt"),
        env.remote(&server, "empty"),
    ];
    ok(&cp(&env, cloud, &[&files[0], &files[1], &cloud.url("in/")]));
    for (key, want) in [
        ("big.bin", &big[..]),
        ("small.txt", b"a few bytes"),
        ("empty", b""),
    ] {
        let back = format!("back-{key}");
        ok(&cp(
            &env,
            cloud,
            &[
                &cloud.url(&format!("in/{key}")),
                &env.remote(&server, &back),
            ],
        ));
        assert!(fs::read(env.root.join(&back)).unwrap() == want, "{key}");
    }

    // A tree through a prefix, and back with its times.
    let tree = env.root.join("tree");
    let rels = ["a.txt", "sub/b.bin", "sub/deeper/c", "sub/deeper/d e ü"];
    for (i, rel) in rels.iter().enumerate() {
        let p = tree.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        write_file(&p, &random_bytes(1000 * (i + 1) * (i + 1), i as u64));
    }
    let prefix = cloud.url("p/");
    ok(&cp(
        &env,
        cloud,
        &["-r", "-p", &env.remote(&server, "tree/"), &prefix],
    ));
    ok(&cp(
        &env,
        cloud,
        &["-r", "-p", &prefix, &env.remote(&server, "back/")],
    ));
    for rel in rels {
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
        &cp(&env, cloud, &[&cloud.url("p"), &env.remote(&server, "x")]),
        2,
    );
}

fn sync_skips_what_is_unchanged_and_deletes_what_went(cloud: &dyn Cloud) {
    let env = Env::new();
    let server = env.serve();
    let tree = env.root.join("data");
    fs::create_dir_all(&tree).unwrap();
    for i in 0..5 {
        write_file(
            &tree.join(format!("f{i}")),
            &random_bytes(20_000 + i, i as u64),
        );
    }
    let (from, to) = (env.remote(&server, "data/"), cloud.url("mirror/"));
    assert_eq!(sync(&env, cloud, &[&from, &to])["files"], 5);
    let again = sync(&env, cloud, &[&from, &to]);
    assert_eq!(
        (again["files"].clone(), again["skipped_files"].clone()),
        (0.into(), 5.into())
    );
    write_file(&tree.join("f3"), b"changed");
    let third = sync(&env, cloud, &[&from, &to]);
    assert_eq!(
        (third["files"].clone(), third["skipped_files"].clone()),
        (1.into(), 4.into())
    );

    // --delete: what the source no longer has goes, objects and prefixes.
    fs::create_dir_all(tree.join("sub/deeper")).unwrap();
    write_file(&tree.join("sub/deeper/x"), b"x");
    assert_eq!(sync(&env, cloud, &[&from, &to])["files"], 1);
    fs::remove_file(tree.join("f1")).unwrap();
    fs::remove_dir_all(tree.join("sub")).unwrap();
    let j = sync(&env, cloud, &["--delete", &from, &to]);
    let mut deleted: Vec<&str> = j["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    deleted.sort();
    assert_eq!(deleted, ["f1", "sub"]);
    // The bucket's copy is now the tree: pulled back, it is the same.
    ok(&cp(
        &env,
        cloud,
        &["-r", &to, &env.remote(&server, "check/")],
    ));
    same_files(&tree, &env.root.join("check"));
}

fn store_failures_have_their_own_exit_codes_and_leave_nothing(cloud: &dyn Cloud) {
    let env = Env::new();
    let server = env.serve();
    write_file(&env.root.join("f"), &random_bytes(100_000, 3));
    let src = env.remote(&server, "f");
    let run = |args: &[&str], set: &dyn Fn(&mut Command)| {
        let mut c = env.cp_cmd(args);
        set(&mut c);
        output_within(c, CP_LIMIT)
    };
    // Credentials refused, or none found: 16, both directions.
    let bad = |c: &mut Command| {
        cloud.bad_credentials(c);
    };
    let err = fails(&run(&[&src, &cloud.url("f")], &bad), 16);
    assert!(err.contains("credentials"), "{err}");
    fails(
        &run(&[&cloud.url("f"), &env.remote(&server, "g")], &bad),
        16,
    );
    // A bucket that is not there: 17, naming it.
    let err = fails(&cp(&env, cloud, &[&src, &cloud.missing_bucket("f")]), 17);
    assert!(err.contains("nobucket"), "{err}");
    // A key that is not there: 6.
    fails(
        &cp(
            &env,
            cloud,
            &[&cloud.url("none"), &env.remote(&server, "g")],
        ),
        6,
    );
    // A store that does not answer: 3, within the quick check's time.
    let t0 = Instant::now();
    let away = |c: &mut Command| {
        cloud.unreachable(c);
    };
    fails(&run(&[&src, &cloud.url("f")], &away), 3);
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    // Bad locations are usage errors.
    fails(&cp(&env, cloud, &[&src, &cloud.bad_name()]), 2);
    // None of it left anything under a key.
    fails(
        &cp(
            &env,
            cloud,
            &["-r", &cloud.url(""), &env.remote(&server, "all/")],
        ),
        6,
    );
}

fn an_upload_killed_midway_resumes_with_only_the_missing_parts(cloud: &dyn Cloud) {
    let env = Env::new();
    let server = env.serve();
    let data = random_bytes(60 << 20, 11);
    write_file(&env.root.join("big.bin"), &data);
    let dest = cloud.url("big.bin");
    let src = env.remote(&server, "big.bin");
    let args = [
        "--json",
        "--part-size",
        "5M",
        "--rate",
        "100M",
        "--transport",
        "tcp",
        &src,
        &dest,
    ];
    let mut c = env.cp_cmd(&args);
    cloud
        .env(&mut c)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    // Killed once the journal names a few parts the store has.
    let journals = env.home.join("s3-uploads");
    let parts = || {
        fs::read_dir(&journals)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| fs::read_to_string(e.ok()?.path()).ok())
            .map_or(0, |t| t.lines().filter(|l| l.starts_with("part ")).count())
    };
    let t0 = Instant::now();
    while parts() < 3 {
        assert!(t0.elapsed() < Duration::from_secs(60), "no parts journaled");
        assert!(
            child.try_wait().unwrap().is_none(),
            "finished before the kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let journaled = parts() as u64;
    // The client may stop after the store took a part but before it
    // journals the answer: that part is still taken over.
    forget_last_answer(&journals);
    // Nothing under the key before the upload completes.
    fails(&cp(&env, cloud, &[&dest, &env.remote(&server, "early")]), 6);
    let out = cp(&env, cloud, &args[..]);
    ok(&out);
    let j = json(&out);
    let resumed = j["resumed_bytes"].as_u64().unwrap();
    assert!(resumed >= journaled * (5 << 20), "{j}");
    assert!(
        j["wire_bytes"].as_u64().unwrap() < (60 << 20) - resumed + (2 << 20),
        "sent again only what was missing: {j}"
    );
    ok(&cp(&env, cloud, &[&dest, &env.remote(&server, "back.bin")]));
    assert!(fs::read(env.root.join("back.bin")).unwrap() == data);
    assert!(
        fs::read_dir(&journals).unwrap().next().is_none(),
        "the journal goes with the completed upload"
    );
}

/// Every file under `a` is under `b` with the same bytes and
/// modification time, and nothing else is: directories have no time of
/// their own in a bucket. A sharded transfer's own records
/// (`.haul-shards`) are not the tree's.
fn same_files(a: &std::path::Path, b: &std::path::Path) {
    fn files(root: &std::path::Path, at: &std::path::Path, out: &mut Vec<String>) {
        for e in fs::read_dir(at).unwrap() {
            let p = e.unwrap().path();
            if p.ends_with(".haul-shards") {
                continue;
            }
            if p.is_dir() {
                files(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let (mut fa, mut fb) = (Vec::new(), Vec::new());
    files(a, a, &mut fa);
    files(b, b, &mut fb);
    fa.sort();
    fb.sort();
    assert_eq!(fa, fb, "the files of {} and {}", a.display(), b.display());
    for rel in fa {
        let (x, y) = (a.join(&rel), b.join(&rel));
        assert!(fs::read(&x).unwrap() == fs::read(&y).unwrap(), "{rel}");
    }
}

/// A process of the test's, stopped by PID when dropped.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn a_daemon_serves_a_bucket_and_shards_read_one(cloud: &dyn Cloud) {
    let env = Env::new();
    // A daemon whose root is the bucket's prefix `served/`.
    let mut serve = Command::new(HAUL);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    serve
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--root", &cloud.url("served")])
        .env("HAUL_HOME", &env.server_home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cloud.env(&mut serve);
    let _daemon = Stopped(serve.spawn().unwrap());
    let up = wait_until(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let far = |p: &str| format!("127.0.0.1:{port}:{p}");
    let tree = env.local.join("tree");
    fs::create_dir_all(tree.join("s")).unwrap();
    write_file(&tree.join("large.bin"), &random_bytes(12 << 20, 3));
    for i in 0..5 {
        write_file(
            &tree.join(format!("s/f{i}")),
            &random_bytes(3000 + i * 11, 40 + i as u64),
        );
    }
    assert!(up, "the daemon did not listen");
    ok(&env.cp(&["-r", "-p", tree.to_str().unwrap(), &far("in/")]));
    let back = env.local.join("back");
    fs::create_dir_all(&back).unwrap();
    ok(&env.cp(&["-r", &far("in/tree"), &format!("{}/", back.display())]));
    same_files(&tree, &back.join("tree"));
    // Nothing outside the served prefix is named.
    fails(&env.cp(&[&far("../x"), back.to_str().unwrap()]), 8);

    // Three shards read the bucket's prefix and fill one destination.
    let server = env.serve();
    let d = env.remote(&server, "dst/");
    for i in 0..3 {
        let spec = format!("{i}/3");
        let src = cloud.url("served/in/tree/");
        let args = ["-r", "-p", "--block-size", "1M", "--shard", &spec, &src, &d];
        let said = ok(&cp(&env, cloud, &args));
        if i == 2 {
            assert!(said.contains("is complete and verified"), "{said}");
        }
    }
    same_files(&tree, &env.root.join("dst"));
}
