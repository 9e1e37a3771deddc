//! Managed transfers on loopback (issue 42, P-45): a copy between two
//! daemons orchestrated by a client whose own files are not involved; a
//! sync between them that sends nothing the second time; a detached job
//! that survives the destination daemon killed and restarted mid-run,
//! resumes from what was verified and notifies a real HTTP listener;
//! `haul jobs` with its visibility rule; a revoked key and a vanished
//! destination that end a job with a clear reason. The hostile grant
//! cases are in `managed_grants.rs`; the three-namespace run with a cut
//! link in `managed_wan.rs`.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

/// A client, daemon A (its key allowed `jobs`) and daemon B.
struct Two {
    a: Env,
    b: Env,
}

impl Two {
    fn new() -> Two {
        let a = Env::new();
        let b = Env::new();
        let key = fs::read_to_string(a.home.join("id_x25519.pub")).unwrap();
        fs::write(a.server_home.join("authorized_keys"), format!("jobs {key}")).unwrap();
        fs::write(b.server_home.join("authorized_keys"), &key).unwrap();
        Two { a, b }
    }

    /// Runs `haul ARGS` as the client.
    fn haul(&self, args: &[&str]) -> Output {
        let mut c = Command::new(HAUL);
        c.args(args)
            .env("HAUL_HOME", &self.a.home)
            .stdin(Stdio::null());
        output_within(c, Duration::from_secs(120))
    }
}

/// `src`'s contents and `dst`'s are the same, entry by entry (a
/// directory's contents copied into one that was there keep that one's
/// own time, as rsync's do).
fn assert_same_contents(src: &Path, dst: &Path) {
    let names = |d: &Path| {
        let mut v: Vec<_> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(src), names(dst), "{}", dst.display());
    for n in names(src) {
        assert_same_tree(&src.join(&n), &dst.join(&n));
    }
}

fn json(out: &Output) -> serde_json::Value {
    let s = String::from_utf8_lossy(&out.stdout);
    let line = s.lines().last().unwrap_or("");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {s:?}"))
}

fn tree(dir: &Path, files: usize, size: usize) {
    fs::create_dir_all(dir.join("sub")).unwrap();
    for i in 0..files {
        let at = if i % 2 == 0 {
            dir.join(format!("f{i}"))
        } else {
            dir.join(format!("sub/f{i}"))
        };
        write_file(&at, &random_bytes(size + i * 1000, i as u64 + 7));
    }
}

#[test]
fn a_copy_and_a_sync_between_two_daemons() {
    let t = Two::new();
    tree(&t.a.root.join("data"), 6, 300_000);
    fs::create_dir_all(t.b.root.join("in")).unwrap();
    let (sa, sb) = (t.a.serve(), t.b.serve());
    let (from, to) = (t.a.remote(&sa, "data/"), t.b.remote(&sb, "in/"));
    let out = t.haul(&["cp", "-r", "-p", "--json", &from, &to]);
    ok(&out);
    let j = json(&out);
    assert_eq!(j["route"], "third-party", "{j}");
    assert_eq!(j["state"], "succeeded");
    assert_same_contents(&t.a.root.join("data"), &t.b.root.join("in"));
    // A sync sends nothing the second time; a change is sent.
    let out = t.haul(&["sync", "--json", &from, &to]);
    let first = json(&out)["wire_bytes_sent"].as_u64().unwrap();
    let out = t.haul(&["sync", "--json", &from, &to]);
    ok(&out);
    let again = json(&out)["wire_bytes_sent"].as_u64().unwrap();
    assert!(
        again < 64 << 10,
        "a second sync sent {again} bytes (first {first})"
    );
    write_file(&t.a.root.join("data/new"), b"new file");
    fs::remove_file(t.b.root.join("in/f0")).unwrap();
    ok(&t.haul(&["sync", &from, &to]));
    assert_same_contents(&t.a.root.join("data"), &t.b.root.join("in"));
    // --delete goes through the grant too.
    write_file(&t.b.root.join("in/extra"), b"not at the source");
    ok(&t.haul(&["sync", "--delete", &from, &to]));
    assert!(!t.b.root.join("in/extra").exists());
    assert_same_contents(&t.a.root.join("data"), &t.b.root.join("in"));
    // Relayed through the client, as scp -3.
    let out = t.haul(&[
        "cp",
        "-rp",
        "--through-client",
        "--json",
        &from,
        &t.b.remote(&sb, "relayed/"),
    ]);
    ok(&out);
    assert_eq!(json(&out)["state"], "succeeded");
    assert_same_contents(&t.a.root.join("data"), &t.b.root.join("relayed"));
    let both = t.haul(&["cp", "-r", "--through-client", "--detach", &from, &to]);
    assert_eq!(
        both.status.code(),
        Some(2),
        "--through-client with --detach"
    );
    // The daemon's log names the grant and the job.
    let log_b = sb.log.lock().unwrap().clone();
    assert!(log_b.contains("granted one-time key"), "{log_b}");
    // A destination that is not there ends the job at once, with B's
    // reason and its exit code.
    let out = t.haul(&["cp", "-r", &from, &t.b.remote(&sb, "no/such/dir/")]);
    let err = fails(&out, 6);
    assert!(err.contains("no/such"), "{err}");
}

/// A free loopback port, for a daemon that must come back on the same.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An HTTP listener that takes POSTs and keeps their bodies.
fn listener() -> (u16, std::sync::mpsc::Receiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming().take(8) {
            let Ok(mut s) = s else { continue };
            s.set_read_timeout(Some(Duration::from_secs(10))).ok();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut len = 0;
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0u8; len];
            let _ = r.read_exact(&mut body);
            let _ = s.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n");
            let _ = tx.send(String::from_utf8_lossy(&body).into_owned());
        }
    });
    (port, rx)
}

#[test]
fn a_detached_job_outlives_its_destination_restarting_and_notifies() {
    let t = Two::new();
    let size = 24 << 20;
    let data = random_bytes(size, 42);
    fs::create_dir_all(t.a.root.join("big")).unwrap();
    write_file(&t.a.root.join("big/file"), &data);
    fs::create_dir_all(t.b.root.join("in")).unwrap();
    let port_b = free_port();
    let listen_b = format!("127.0.0.1:{port_b}");
    let sa = t.a.serve();
    let mut sb = t.b.serve_with(&["--listen", &listen_b]);
    let (http, posted) = listener();
    let url = format!("http://127.0.0.1:{http}/hook");
    let out = t.haul(&[
        "cp",
        "-r",
        "--detach",
        "--json",
        "--rate",
        "32M",
        "--notify-url",
        &url,
        &t.a.remote(&sa, "big/"),
        &format!("127.0.0.1:{port_b}:in/"),
    ]);
    ok(&out);
    let id = json(&out)["job"].as_str().unwrap().to_string();
    // The client has exited. B goes away mid-run and comes back.
    let part = |root: &Path| temporaries(root).into_iter().next();
    assert!(wait_until(Duration::from_secs(30), || part(&t.b.root)
        .is_some_and(
            |p| fs::metadata(p).map(|m| m.len()).unwrap_or(0) > 0
        )
        && delivered_any(&t.b.root)));
    std::thread::sleep(Duration::from_millis(1500));
    sb.kill();
    let show = t.haul(&["jobs", "show", &id, "--json"]);
    ok(&show);
    std::thread::sleep(Duration::from_secs(2));
    let _sb = t.b.serve_with(&["--listen", &listen_b]);
    // The job retries, resumes, and ends verified.
    let done = wait_until(Duration::from_secs(90), || {
        let o = t.haul(&["jobs", "show", &id, "--json"]);
        json(&o)["state"] == "succeeded"
    });
    let o = t.haul(&["jobs", "show", &id, "--json"]);
    let v = json(&o);
    assert!(done, "{v}");
    assert_eq!(fs::read(t.b.root.join("in/file")).unwrap(), data);
    assert!(temporaries(&t.b.root).is_empty());
    let events = v["events"].as_array().unwrap();
    assert!(events.iter().any(|e| e["event"] == "fault"), "{v}");
    // File bytes each attempt brought: a fault's verified ones, the
    // success's sent ones; past the file's size, they were sent twice.
    let sent = job_bytes_sent(&v);
    let resent = sent.saturating_sub(size as u64);
    eprintln!(
        "{sent} file bytes sent for {size} over {} attempts",
        v["attempts"]
    );
    assert!(resent <= size as u64 / 100, "re-sent {resent} bytes: {v}");
    // The notification reached the listener, and is journaled.
    let body = posted
        .recv_timeout(Duration::from_secs(30))
        .expect("a notification");
    let n: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(n["id"], id.as_str());
    assert_eq!(n["state"], "succeeded");
    assert!(wait_until(Duration::from_secs(10), || {
        let o = t.haul(&["jobs", "show", &id, "--json"]);
        json(&o)["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "notified" && e["ok"] == true)
    }));
    // Listed, and seen by no other key.
    let list = t.haul(&["jobs", "--json"]);
    assert!(json(&list)["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|j| j["id"] == id.as_str()));
    let other = Env::new();
    let key = fs::read_to_string(other.home.join("id_x25519.pub")).unwrap();
    let mut keys = fs::read_to_string(t.a.server_home.join("authorized_keys")).unwrap();
    keys.push_str(&format!("jobs {key}"));
    fs::write(t.a.server_home.join("authorized_keys"), keys).unwrap();
    let mut c = Command::new(HAUL);
    c.args(["jobs", "show", &id, "--on"])
        .arg(format!("127.0.0.1:{}", sa.port))
        .env("HAUL_HOME", &other.home);
    fails(&output_within(c, Duration::from_secs(30)), 6);
}

fn delivered_any(root: &Path) -> bool {
    temporaries(root)
        .iter()
        .any(|p| fs::metadata(p).map(|m| m.len() > 0).unwrap_or(false))
}

#[test]
fn pause_resume_cancel_retry_and_a_revoked_key() {
    let t = Two::new();
    tree(&t.a.root.join("data"), 4, 1_000_000);
    fs::create_dir_all(t.b.root.join("in")).unwrap();
    let port_b = free_port();
    let listen_b = format!("127.0.0.1:{port_b}");
    let sa = t.a.serve();
    let mut sb = t.b.serve_with(&["--listen", &listen_b]);
    let (from, to) = (t.a.remote(&sa, "data/"), format!("127.0.0.1:{port_b}:in/"));
    // Submitted while B runs; B then goes: the job waits to retry.
    let out = t.haul(&[
        "cp", "-rp", "--detach", "--json", "--rate", "2M", &from, &to,
    ]);
    ok(&out);
    let id = json(&out)["job"].as_str().unwrap().to_string();
    sb.kill();
    let state = |t: &Two| {
        json(&t.haul(&["jobs", "show", &id, "--json"]))["state"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert!(
        wait_until(Duration::from_secs(30), || state(&t) == "retrying"),
        "{}",
        state(&t)
    );
    ok(&t.haul(&["jobs", "pause", &id]));
    assert_eq!(state(&t), "paused");
    fails(&t.haul(&["jobs", "pause", &id]), 2);
    ok(&t.haul(&["jobs", "resume", &id]));
    ok(&t.haul(&["jobs", "cancel", &id]));
    assert_eq!(state(&t), "cancelled");
    // Retried with B back, it ends verified.
    let mut sb = t.b.serve_with(&["--listen", &listen_b]);
    ok(&t.haul(&["jobs", "retry", &id]));
    assert!(
        wait_until(Duration::from_secs(60), || state(&t) == "succeeded"),
        "{}",
        state(&t)
    );
    assert_same_contents(&t.a.root.join("data"), &t.b.root.join("in"));
    // A job whose key is revoked ends with that reason (seen by an
    // operator key).
    write_file(&t.a.root.join("data/more"), &random_bytes(3_000_000, 3));
    let out = t.haul(&["cp", "-r", "--detach", "--json", "--rate", "2M", &from, &to]);
    let id = json(&out)["job"].as_str().unwrap().to_string();
    sb.kill();
    let op = Env::new();
    let op_key = fs::read_to_string(op.home.join("id_x25519.pub")).unwrap();
    fs::write(
        t.a.server_home.join("authorized_keys"),
        format!("operator {op_key}"),
    )
    .unwrap();
    let op_show = || {
        let mut c = Command::new(HAUL);
        c.args(["jobs", "show", &id, "--json", "--on"])
            .arg(format!("127.0.0.1:{}", sa.port))
            .env("HAUL_HOME", &op.home);
        output_within(c, Duration::from_secs(20))
    };
    let seen = wait_until(Duration::from_secs(40), || {
        json(&op_show())["state"] == "failed"
    });
    let v = json(&op_show());
    assert!(seen, "{v}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("no longer authorized"),
        "{v}"
    );
    assert_eq!(v["exit_code"], 4);
}

/// A daemon serving a bucket is either end of a job: objects pushed from
/// A's bucket into B's files, and from A's files into B's bucket.
#[test]
fn a_bucket_on_either_end() {
    if !common::s3gw::gateway_available("the managed-transfer bucket test") {
        return;
    }
    let t = Two::new();
    let gw = common::s3gw::Gateway::start(t.a.dir.path(), &["bkt"]);
    tree(&t.a.local.join("data"), 3, 200_000);
    let mut up = t.a.cp_cmd(&[
        "-r",
        "-p",
        &format!("{}/", t.a.local.join("data").display()),
        "s3://bkt/served/data/",
    ]);
    gw.env(&mut up);
    ok(&output_within(up, Duration::from_secs(60)));
    let serve_bucket = |env: &Env, root: &str| {
        let port = free_port();
        let mut c = Command::new(HAUL);
        c.args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--root",
            root,
        ])
        .env("HAUL_HOME", &env.server_home);
        gw.env(&mut c);
        (common::emu::start_listening(c), port)
    };
    let (_sa, pa) = serve_bucket(&t.a, "s3://bkt/served");
    let sb = t.b.serve();
    let out = t.haul(&[
        "cp",
        "-r",
        "-p",
        &format!("127.0.0.1:{pa}:data/"),
        &t.b.remote(&sb, "in/"),
    ]);
    ok(&out);
    assert_same_contents(&t.a.local.join("data"), &t.b.root.join("in"));
    // And files into a bucket.
    let (_sb2, pb) = serve_bucket(&t.b, "s3://bkt/landing");
    let sa2 = t.a.serve();
    fs::create_dir_all(t.a.root.join("run")).unwrap();
    write_file(&t.a.root.join("run/f"), &random_bytes(150_000, 9));
    let out = t.haul(&[
        "cp",
        "-r",
        &t.a.remote(&sa2, "run/"),
        &format!("127.0.0.1:{pb}:out/"),
    ]);
    ok(&out);
    assert_eq!(
        fs::read(gw.object("bkt", "landing/out/f")).unwrap(),
        random_bytes(150_000, 9)
    );
}

/// The daemon that holds a job is killed mid-run and started again: the
/// job is read back from its journal, retried, and ends verified; the
/// daemon's `--notify-exec` command gets the job's JSON. A job's own
/// command needs an operator key. Where the kill lands after B verified
/// the push but before A heard so, the retry learns it from B's spent
/// grant (P-45 G-5) and the job still ends succeeded.
#[test]
fn the_daemon_holding_a_job_restarts_and_notifies_by_command() {
    let t = Two::new();
    tree(&t.a.root.join("data"), 4, 1_000_000);
    fs::create_dir_all(t.b.root.join("in")).unwrap();
    let port_a = free_port();
    let listen_a = format!("127.0.0.1:{port_a}");
    let told = t.a.dir.path().join("told.json");
    let cmd = format!("cat > {}", told.display());
    let serve_a = || {
        t.a.serve_with(&["--listen", &listen_a, "--notify-exec", &cmd])
    };
    let mut sa = serve_a();
    let sb = t.b.serve();
    let (from, to) = (format!("{listen_a}:data/"), t.b.remote(&sb, "in/"));
    let e = fails(
        &t.haul(&["cp", "-r", "--detach", "--notify-exec", "true", &from, &to]),
        7,
    );
    assert!(e.contains("operator"), "{e}");
    let out = t.haul(&[
        "cp", "-rp", "--detach", "--json", "--rate", "4M", &from, &to,
    ]);
    ok(&out);
    let id = json(&out)["job"].as_str().unwrap().to_string();
    let show = || json(&t.haul(&["jobs", "show", &id, "--json"]));
    assert!(wait_until(Duration::from_secs(30), || show()["bytes_done"]
        .as_u64()
        .unwrap_or(0)
        > 0));
    sa.kill();
    let _sa = serve_a();
    assert!(
        wait_until(Duration::from_secs(150), || show()["state"] == "succeeded"),
        "{}\nthe destination's daemon said:\n{}",
        show(),
        sb.log.lock().unwrap()
    );
    assert_same_contents(&t.a.root.join("data"), &t.b.root.join("in"));
    let v = show();
    assert!(
        fault_errors(&v)
            .iter()
            .any(|e| e.contains("daemon stopped")),
        "{v}"
    );
    assert!(wait_until(Duration::from_secs(20), || fs::read(&told)
        .is_ok_and(|b| !b.is_empty())));
    let n: serde_json::Value = serde_json::from_slice(&fs::read(&told).unwrap()).unwrap();
    assert_eq!(n["id"], id.as_str());
    assert_eq!(n["state"], "succeeded");
}

/// The daemon holding a job stopped after B verified the push but before
/// it journaled so (its journal cut back to the attempt's start, as a
/// kill in that window leaves it): started again, it retries, B answers
/// that the grant was spent by a verified push (P-45 G-5), and the job
/// ends succeeded, not refused for an unknown key.
#[test]
fn a_push_verified_before_its_daemon_heard_so_ends_the_job_succeeded() {
    let t = Two::new();
    tree(&t.a.root.join("data"), 3, 200_000);
    fs::create_dir_all(t.b.root.join("in")).unwrap();
    let listen_a = format!("127.0.0.1:{}", free_port());
    let serve_a = || t.a.serve_with(&["--listen", &listen_a]);
    let mut sa = serve_a();
    let sb = t.b.serve();
    let (from, to) = (format!("{listen_a}:data/"), t.b.remote(&sb, "in/"));
    let out = t.haul(&["cp", "-rp", "--detach", "--json", &from, &to]);
    ok(&out);
    let id = json(&out)["job"].as_str().unwrap().to_string();
    let show = || json(&t.haul(&["jobs", "show", &id, "--json"]));
    assert!(wait_until(Duration::from_secs(60), || show()["state"] == "succeeded"));
    sa.kill();
    // The daemon's journal (P-45 J-6) in its default state directory.
    let events =
        t.a.server_home
            .join(format!("state/jobs/{id}/events.jsonl"));
    let kept: Vec<String> = fs::read_to_string(&events)
        .unwrap()
        .lines()
        .scan(false, |past, l| {
            let keep = !*past;
            *past |= l.contains("\"event\":\"started\"");
            Some(keep.then(|| format!("{l}\n")))
        })
        .flatten()
        .collect();
    fs::write(&events, kept.concat()).unwrap();
    let _sa = serve_a();
    assert!(
        wait_until(Duration::from_secs(60), || show()["state"] == "succeeded"),
        "{}\nthe destination's daemon said:\n{}",
        show(),
        sb.log.lock().unwrap()
    );
    let v = show();
    let faults = fault_errors(&v);
    assert!(
        faults.len() == 1 && faults[0].contains("daemon stopped"),
        "{v}"
    );
    assert_eq!(v["attempts"], 2, "{v}");
    assert_same_contents(&t.a.root.join("data"), &t.b.root.join("in"));
    assert!(sb.log.lock().unwrap().contains("used up"));
}

/// The errors of a job's faults, in order, from its `jobs show --json`.
fn fault_errors(v: &serde_json::Value) -> Vec<&str> {
    v["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "fault")
        .filter_map(|e| e["error"].as_str())
        .collect()
}

/// Either end, or both, reached over ssh (a side started there for the
/// command, as scp's): the data still go from A to B directly.
#[test]
fn ends_reached_over_ssh() {
    if !common::sshd::sshd_available("ends_reached_over_ssh") {
        return;
    }
    let t = Two::new();
    let sshd = common::sshd::Sshd::start(t.a.dir.path());
    let rsh = sshd.rsh();
    let over_ssh = |args: &[&str]| {
        let mut all = vec!["cp", "-e", rsh.as_str(), "--remote-haul", HAUL];
        all.extend_from_slice(args);
        t.haul(&all)
    };
    tree(&t.a.root.join("data"), 3, 200_000);
    let src = t.a.root.join("data");
    let sa = t.a.serve();
    let sb = t.b.serve();
    // A over ssh, B a daemon.
    let out = over_ssh(&[
        "-rp",
        "--json",
        &format!("127.0.0.1:{}/", src.display()),
        &t.b.remote(&sb, "from-ssh/"),
    ]);
    ok(&out);
    assert_eq!(json(&out)["state"], "succeeded");
    assert_same_contents(&src, &t.b.root.join("from-ssh"));
    // A a daemon, B over ssh.
    let to_ssh = t.b.dir.path().join("to-ssh");
    let out = over_ssh(&[
        "-rp",
        &t.a.remote(&sa, "data/"),
        &format!("127.0.0.1:{}/", to_ssh.display()),
    ]);
    ok(&out);
    assert_same_contents(&src, &to_ssh);
    // Both over ssh.
    let both = t.b.dir.path().join("both");
    let out = over_ssh(&[
        "-rp",
        &format!("127.0.0.1:{}/", src.display()),
        &format!("127.0.0.1:{}/", both.display()),
    ]);
    ok(&out);
    assert_same_contents(&src, &both);
    // Detached, between two hosts reached over ssh: an agent started
    // there (its home in this test's directory) holds the job.
    let agent_home = t.a.dir.path().join("agent-home");
    let remote_haul = format!("HAUL_HOME={} {HAUL}", agent_home.display());
    let detached = t.b.dir.path().join("detached");
    let mut all = vec![
        "cp",
        "-e",
        rsh.as_str(),
        "--remote-haul",
        remote_haul.as_str(),
    ];
    let (from, to) = (
        format!("127.0.0.1:{}/", src.display()),
        format!("127.0.0.1:{}/", detached.display()),
    );
    all.extend_from_slice(&["-rp", "--detach", "--json", &from, &to]);
    let out = t.haul(&all);
    ok(&out);
    let id = json(&out)["job"].as_str().unwrap().to_string();
    let agent = fs::read_to_string(agent_home.join("agent/agent")).unwrap();
    let pid: i32 = agent.split_whitespace().next().unwrap().parse().unwrap();
    let state = || json(&t.haul(&["jobs", "show", &id, "--json"]))["state"].clone();
    let done = wait_until(Duration::from_secs(20), || state() == "succeeded");
    // SAFETY: kill only signals the agent this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let last = t.haul(&["jobs", "show", &id, "--json"]);
    assert!(
        done,
        "{}: {}",
        String::from_utf8_lossy(&last.stdout),
        String::from_utf8_lossy(&last.stderr)
    );
    assert_same_contents(&src, &detached);
}

/// `jobs-to=` in a key's line bounds where its jobs may push.
#[test]
fn jobs_to_bounds_where_a_keys_jobs_push() {
    let t = Two::new();
    tree(&t.a.root.join("data"), 1, 10_000);
    let key = fs::read_to_string(t.a.home.join("id_x25519.pub")).unwrap();
    let (sa, sb) = (t.a.serve(), t.b.serve());
    let (from, to) = (t.a.remote(&sa, "data/"), t.b.remote(&sb, "in/"));
    let keys = t.a.server_home.join("authorized_keys");
    fs::write(&keys, format!("jobs-to=127.0.0.1:1 {key}")).unwrap();
    let e = fails(&t.haul(&["cp", "-r", &from, &to]), 7);
    assert!(e.contains("jobs-to="), "{e}");
    fs::write(&keys, format!("jobs-to=127.0.0.1:{} {key}", sb.port)).unwrap();
    ok(&t.haul(&["cp", "-rp", &from, &to]));
    assert_same_contents(&t.a.root.join("data"), &t.b.root.join("in"));
}
