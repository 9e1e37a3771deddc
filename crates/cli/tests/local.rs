//! Copies on one host (issue 41): disk to disk, disk to a bucket and
//! back, bucket to bucket, with no daemon and no ssh; the same summary,
//! `--json`, `sync` rules, resume and exit codes as a transfer between
//! hosts.

mod common;

use std::fs;
use std::process::{Output, Stdio};
use std::time::Duration;

use common::s3gw::{gateway_available, Gateway};
use common::*;

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON summary ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn tree(env: &Env) -> std::path::PathBuf {
    let src = env.local.join("tree");
    fs::create_dir_all(src.join("sub/deeper")).unwrap();
    write_file(&src.join("big.bin"), &random_bytes((6 << 20) + 3, 41));
    write_file(&src.join("sub/small.txt"), b"a few bytes");
    write_file(&src.join("sub/deeper/empty"), b"");
    src
}

/// The tree's files and directories below its top, times included.
fn same(src: &std::path::Path, dest: &std::path::Path) {
    assert_same_tree(&src.join("sub"), &dest.join("sub"));
    assert_same_tree(&src.join("big.bin"), &dest.join("big.bin"));
}

#[test]
fn a_tree_copied_and_synced_on_one_host() {
    let env = Env::new();
    let src = tree(&env);
    let dest = env.dir.path().join("copy");
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let out = env.cp(&["-r", "-p", "--json", &format!("{}/", s(&src)), &s(&dest)]);
    ok(&out);
    let j = json(&out);
    assert_eq!(j["route"], "local", "{j}");
    assert_eq!(j["files"], 3, "{j}");
    same(&src, &dest);

    // A sync sends what changed, and nothing the second time.
    write_file(&src.join("sub/small.txt"), b"other bytes, longer");
    // (`haul sync` is `cp -r -p --update`.)
    let sync = || {
        let (from, to) = (format!("{}/", s(&src)), s(&dest));
        env.cp(&["--json", "-r", "-p", "--update", &from, &to])
    };
    ok(&sync());
    same(&src, &dest);
    // (An empty file is placed again, never skipped: P-32.)
    let again = json(&sync());
    assert_eq!(again["skipped_files"], 2, "{again}");
    assert_eq!(again["file_bytes"], 0, "{again}");
    assert!(again["wire_bytes"].as_u64().unwrap() < 4096, "{again}");

    // A source that is not there: the exit code of a transfer between
    // hosts, and nothing made.
    let out = env.cp(&[
        &s(&env.local.join("nothing")),
        &s(&env.dir.path().join("x")),
    ]);
    fails(&out, 6);
    assert!(!env.dir.path().join("x").exists());
}

#[test]
fn an_interrupted_copy_on_one_host_resumes() {
    let env = Env::new();
    let size = 24 << 20;
    let data = random_bytes(size, 43);
    let src = env.local.join("big");
    write_file(&src, &data);
    let dest = env.dir.path().join("big");
    let (s, d) = (src.to_str().unwrap(), dest.to_str().unwrap());
    let mut child = env
        .cp_cmd(&["--rate", "40M", "--block-size", "256K", s, d])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let journal = env.dir.path().join(".big.haul.journal");
    let started = wait_until(Duration::from_secs(30), || {
        fs::metadata(&journal).is_ok_and(|m| m.len() > 32 + 36 * 8)
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(started, "no blocks were journaled");
    let had = delivered(&env.dir.path().join(".big.haul.part"), &data);
    let out = env.cp(&["--json", "--block-size", "256K", s, d]);
    ok(&out);
    assert_resumed(&out, size as u64, had);
    assert!(fs::read(&dest).unwrap() == data);
}

#[test]
fn disk_to_bucket_to_bucket_to_disk_on_one_host() {
    if !gateway_available("the one-host s3 test") {
        return;
    }
    let env = Env::new();
    let gw = Gateway::start(env.dir.path(), &["bkt", "other"]);
    let src = tree(&env);
    let cp = |args: &[&str]| {
        let mut c = env.cp_cmd(args);
        gw.env(&mut c);
        output_within(c, CP_LIMIT)
    };
    let from = format!("{}/", src.to_str().unwrap());
    let up = cp(&["-r", "--json", "-p", &from, "s3://bkt/t/"]);
    ok(&up);
    assert_eq!(json(&up)["route"], "local");
    assert_eq!(
        fs::read(gw.object("bkt", "t/big.bin")).unwrap(),
        fs::read(src.join("big.bin")).unwrap()
    );
    // Bucket to bucket on one endpoint: the store copies.
    let across = cp(&["-r", "--json", "s3://bkt/t/", "s3://other/u/"]);
    ok(&across);
    assert_eq!(json(&across)["route"], "inside-store", "{}", json(&across));
    assert_eq!(json(&across)["wire_bytes"], 0);
    // The copies kept their times: a sync finds nothing to send.
    let again = cp(&["--update", "-r", "--json", "s3://bkt/t/", "s3://other/u/"]);
    ok(&again);
    assert_eq!(json(&again)["skipped_files"], 2, "{}", json(&again));
    assert_eq!(json(&again)["file_bytes"], 0, "{}", json(&again));
    // And back to disk, from the copy.
    let back = env.dir.path().join("back");
    ok(&cp(&["-r", "-p", "s3://other/u/", back.to_str().unwrap()]));
    assert_eq!(
        fs::read(back.join("big.bin")).unwrap(),
        fs::read(src.join("big.bin")).unwrap()
    );
    assert_eq!(
        fs::read(back.join("sub/small.txt")).unwrap(),
        b"a few bytes"
    );
}
