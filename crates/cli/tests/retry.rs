//! Retries and partials (issue 24, P-41): a retry right behind a killed
//! client resumes; a partial that cannot be resumed from is named, with
//! the reason, in the client's summary and `--json`; `--delete` never
//! takes another transfer's partial; a temporary that vanishes fails the
//! transfer clearly; a source rewritten with its size and time restored
//! is sent again, never as a mix of old and new blocks.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime};

use common::*;

const BLOCK: &str = "256K";

/// Blocks the journal beside `partial`'s final name lists so far.
fn journaled(root: &Path, name: &str) -> u64 {
    let j = root.join(format!(".{name}.haul.journal"));
    fs::metadata(j).map_or(0, |m| m.len().saturating_sub(32) / 36)
}

/// A capped push of `src` to `name` on `server`, running.
fn capped_push(env: &Env, server: &Server, src: &Path, name: &str, extra: &[&str]) -> Child {
    let mut args = vec!["--json", "--rate", "40M", "--block-size", BLOCK];
    args.extend_from_slice(extra);
    let dest = env.remote(server, name);
    args.extend_from_slice(&[src.to_str().unwrap(), &dest]);
    env.cp_cmd(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A server, and a source `name` of `mib` MiB of seeded random bytes.
fn with_source(name: &str, mib: usize, seed: u64) -> (Env, Server, PathBuf, Vec<u8>) {
    let env = Env::new();
    let server = env.serve();
    let src = env.local.join(name);
    let data = random_bytes(mib << 20, seed);
    write_file(&src, &data);
    (env, server, src, data)
}

/// `capped_push` of `src` to `name`, once the server has written `blocks`
/// of it.
fn push_under_way(env: &Env, server: &Server, src: &Path, name: &str, blocks: u64) -> Child {
    let child = capped_push(env, server, src, name, &[]);
    let (dir, base) = match name.rsplit_once('/') {
        Some((d, b)) => (env.root.join(d), b),
        None => (env.root.clone(), name),
    };
    waits_for("blocks to arrive", Duration::from_secs(30), || {
        journaled(&dir, base) >= blocks
    });
    child
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON summary ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn waits_for(what: &str, limit: Duration, f: impl FnMut() -> bool) {
    assert!(wait_until(limit, f), "waited {limit:?} for {what}");
}

#[test]
fn a_retry_right_behind_a_killed_client_resumes_on_both_transports() {
    let (env, server, src, data) = with_source("big", 32, 24);
    for transport in ["tcp", "udp"] {
        for trial in 0..3 {
            let name = format!("{transport}{trial}");
            let mut child = capped_push(&env, &server, &src, &name, &["--transport", transport]);
            waits_for("blocks to arrive", Duration::from_secs(30), || {
                journaled(&env.root, &name) >= 8
            });
            child.kill().unwrap();
            child.wait().unwrap();
            // At once: the server may not even have noticed yet.
            let out = env.cp(&[
                "--json",
                "--transport",
                transport,
                "--block-size",
                BLOCK,
                src.to_str().unwrap(),
                &env.remote(&server, &name),
            ]);
            ok(&out);
            let j = json(&out);
            assert!(
                j["resumed_bytes"].as_u64().unwrap() >= 8 * (256 << 10),
                "{transport} trial {trial}: an immediate retry did not resume: {j}"
            );
            assert_eq!(j["notes"], serde_json::json!([]), "{j}");
            assert!(fs::read(env.root.join(&name)).unwrap() == data);
            assert!(
                temporaries(&env.root).is_empty(),
                "{transport} left temporaries"
            );
        }
    }
}

#[test]
fn a_partial_another_live_transfer_holds_is_named_and_the_loser_leaves_nothing() {
    // 40 MiB at 40 Mbit/s: 8 s, still running when the second has waited
    // out its grace for a live holder (5 s).
    let (env, server, src, data) = with_source("f", 40, 25);
    let first = push_under_way(&env, &server, &src, "same", 2);
    let t0 = Instant::now();
    let out = env.cp(&[
        "--json",
        "--block-size",
        BLOCK,
        src.to_str().unwrap(),
        &env.remote(&server, "same"),
    ]);
    ok(&out);
    let j = json(&out);
    assert_eq!(j["resumed_bytes"], 0, "{j}");
    let notes = j["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{j}");
    assert_eq!(notes[0]["kind"], "partial_held", "{j}");
    let m = notes[0]["message"].as_str().unwrap();
    assert!(
        m.starts_with("same: ") && m.contains("still running"),
        "{m}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "it waited for the live one"
    );
    let text = String::from_utf8_lossy(
        &env.cp(&[
            "--block-size",
            BLOCK,
            src.to_str().unwrap(),
            &env.remote(&server, "other"),
        ])
        .stderr,
    )
    .into_owned();
    assert!(!text.contains("note:"), "{text}");
    let first = first.wait_with_output().unwrap();
    ok(&first);
    assert!(fs::read(env.root.join("same")).unwrap() == data);
    assert!(temporaries(&env.root).is_empty());
}

#[test]
fn a_partial_of_another_version_or_without_its_journal_is_named() {
    let (env, server, src, data) = with_source("v", 16, 26);
    let interrupt = |name: &str| {
        let mut child = push_under_way(&env, &server, &src, name, 4);
        child.kill().unwrap();
        child.wait().unwrap();
        waits_for("the server to let go", Duration::from_secs(20), || {
            !store::partial::in_use(&env.root.join(format!(".{name}.haul.part")))
        });
    };
    let retry = |name: &str| {
        let out = env.cp(&[
            "--block-size",
            BLOCK,
            src.to_str().unwrap(),
            &env.remote(&server, name),
        ]);
        let err = ok(&out);
        assert!(fs::read(env.root.join(name)).unwrap() == data);
        err
    };
    // Another modification time: the journal is not this source's.
    interrupt("stale");
    let f = fs::File::options().write(true).open(&src).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    let err = retry("stale");
    assert!(
        err.contains("note: stale: the partial an earlier transfer left is of another version of the source (another modification time)"),
        "{err}"
    );
    // No journal at all.
    interrupt("bare");
    fs::remove_file(env.root.join(".bare.haul.journal")).unwrap();
    let err = retry("bare");
    assert!(
        err.contains("note: bare: the partial an earlier transfer left has no journal"),
        "{err}"
    );
    assert!(temporaries(&env.root).is_empty());
}

#[test]
fn sync_delete_keeps_partials_and_delete_partials_takes_only_free_ones() {
    let (env, server, big, data) = with_source("big", 24, 27);
    let mirror = env.local.join("mirror");
    fs::create_dir(&mirror).unwrap();
    write_file(&mirror.join("kept"), b"kept");
    fs::create_dir(env.root.join("dir")).unwrap();
    write_file(&env.root.join("dir/stray"), b"stray");
    // A leftover of a transfer killed earlier, and a live push.
    fs::create_dir(env.root.join("dir/sub")).unwrap();
    write_file(&env.root.join("dir/sub/.old.haul.part"), b"left");
    let live = push_under_way(&env, &server, &big, "dir/pushed", 2);
    let sync = |extra: &[&str]| {
        let mut c = env.cp_cmd(&["--json"]);
        c.arg("--delete").arg("-r").args(extra);
        c.arg(format!("{}/", mirror.display()))
            .arg(env.remote(&server, "dir/"));
        let out = output_within(c, CP_LIMIT);
        ok(&out);
        let j = json(&out);
        let deleted: Vec<String> = j["deleted"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap().to_string())
            .collect();
        (j, deleted)
    };
    let (j, deleted) = sync(&[]);
    assert_eq!(deleted, ["stray"], "{j}");
    assert!(env.root.join("dir/.pushed.haul.part").exists());
    assert!(env.root.join("dir/sub/.old.haul.part").exists());
    // Asked to: the leftover goes, with the directory that held only it;
    // the live push's partial stays.
    let (j, deleted) = sync(&["--delete-partials"]);
    assert_eq!(deleted, ["sub"], "{j}");
    assert!(env.root.join("dir/.pushed.haul.part").exists());
    let live = live.wait_with_output().unwrap();
    ok(&live);
    assert!(fs::read(env.root.join("dir/pushed")).unwrap() == data);
    assert!(temporaries(&env.root).is_empty());
    // --delete-partials alone is refused.
    let out = env.cp(&[
        "-r",
        "--delete-partials",
        &format!("{}/", mirror.display()),
        &env.remote(&server, "dir/"),
    ]);
    let err = fails(&out, 2);
    assert!(err.contains("--delete-partials widens --delete"), "{err}");
}

#[test]
fn a_push_whose_temporary_vanished_fails_saying_so() {
    let (env, server, src, _) = with_source("g", 16, 28);
    let child = push_under_way(&env, &server, &src, "gone", 2);
    fs::remove_file(env.root.join(".gone.haul.part")).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("was removed or replaced while") && err.contains("nothing was placed"),
        "{err}"
    );
    assert!(!env.root.join("gone").exists());
}

/// Writes `bytes` of `fill` at each of `offsets` in `path`, in place, and
/// sets its modification time back to what it was, to the nanosecond.
fn rewrite_keeping_time(path: &Path, offsets: &[u64], bytes: usize, fill: u8) {
    let before = fs::metadata(path).unwrap().modified().unwrap();
    let f = fs::File::options().write(true).open(path).unwrap();
    for &o in offsets {
        f.write_all_at(&vec![fill; bytes], o).unwrap();
    }
    f.set_modified(before).unwrap();
    drop(f);
    assert_eq!(fs::metadata(path).unwrap().modified().unwrap(), before);
}

#[test]
fn a_source_rewritten_with_its_time_restored_is_sent_whole_and_new() {
    let (env, server, src, _) = with_source("db", 24, 29);
    let child = push_under_way(&env, &server, &src, "db", 8);
    // One region already sent, one not yet: without the inode's change
    // time the result would mix old and new.
    rewrite_keeping_time(&src, &[1 << 20, 20 << 20], 256 << 10, 0xab);
    let out = child.wait_with_output().unwrap();
    let err = ok(&out);
    assert!(
        err.contains("changed while it was being sent")
            && err.contains("with its size and modification time kept"),
        "{err}"
    );
    assert!(
        fs::read(env.root.join("db")).unwrap() == fs::read(&src).unwrap(),
        "the destination is not the new version"
    );
}
