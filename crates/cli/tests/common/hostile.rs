//! Harness of the hostile-peer suite (`tests/hostile.rs`): a daemon whose
//! memory is watched, victims planted outside the served root and the
//! client's destination, fingerprints of them before and after, clients
//! run with their peak memory measured, and the assertions every case
//! ends with: a clear error and exit code, nothing outside changed,
//! memory within budget, and the daemon still serving the next client.
//!
//! Everything runs on loopback, in a temporary directory; every process
//! is started here and stopped by its own PID. Daemons and clients run
//! under an address-space limit ([`AS_LIMIT`]) so that a case that makes
//! one allocate without bound fails here instead of exhausting the host.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::common::{random_bytes, Env, HAUL};

/// Peak resident memory a daemon may reach in any case (`VmHWM`), in KiB.
/// Serving these small transfers takes a few tens of MiB; a receiver that
/// sizes its bookkeeping or buffers by what a peer claims goes far past.
pub const DAEMON_BUDGET_KIB: u64 = 1 << 20;

/// Peak resident memory a pulling client may reach (its `ru_maxrss`).
pub const CLIENT_BUDGET_KIB: u64 = 1 << 20;

/// Address space every process started here may map: far above what
/// these transfers need (256 streams' thread stacks included), far below
/// what the host has. A process that tries to map more aborts, and the
/// case says it died.
pub const AS_LIMIT: u64 = 4 << 30;

/// The longest one client command of a case may run.
pub const CASE_LIMIT: Duration = Duration::from_secs(45);

/// Applies [`AS_LIMIT`] to a command about to be started.
pub fn limit_memory(c: &mut Command) {
    // SAFETY: only async-signal-safe setrlimit runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: AS_LIMIT,
                rlim_max: AS_LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A field of /proc/PID/status in kB (`VmHWM`, `VmRSS`), if readable.
pub fn proc_status(pid: u32, field: &str) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// A `haul serve` started for one case, with its log kept.
pub struct Daemon {
    child: Child,
    pub port: u16,
    log: Arc<Mutex<String>>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// Starts `haul serve --root ROOT --listen 127.0.0.1:0 -v EXTRA...` for
    /// `env`, under [`AS_LIMIT`], and waits (bounded) until it listens.
    pub fn start(env: &Env, extra: &[&str]) -> Daemon {
        let mut c = Command::new(HAUL);
        c.args(["serve", "--listen", "127.0.0.1:0", "-v", "--root"])
            .arg(&env.root)
            .args(extra)
            .env("HAUL_HOME", &env.server_home)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        limit_memory(&mut c);
        let mut child = c.spawn().expect("start haul serve");
        let stderr = child.stderr.take().expect("piped");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let addr = rest.split(',').next().unwrap_or("");
                    if let Some(port) = addr.rsplit(':').next().and_then(|p| p.parse().ok()) {
                        let _ = tx.send(port);
                    }
                }
                let mut l = log2.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let port = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(p) => p,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("haul serve did not listen: {}", log.lock().unwrap());
            }
        };
        Daemon { child, port, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    pub fn remote(&self, path: &str) -> String {
        format!("127.0.0.1:{}:{path}", self.port)
    }

    /// The last lines of its log, for a failed assertion.
    pub fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// How it ended, if it did.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Panics, with its log, if it died (exited, or a zombie).
    pub fn assert_alive(&self, case: &str) {
        let state = fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("State:").map(|v| v.trim().to_string()))
            })
            .unwrap_or_else(|| "gone".into());
        if state.starts_with('Z') || state == "gone" {
            // Let the log reader take its last words.
            std::thread::sleep(Duration::from_millis(300));
        }
        assert!(
            !state.starts_with('Z') && state != "gone",
            "[{case}] the daemon died (state {state}); its log ends:\n{}",
            self.log_tail()
        );
    }

    /// Its peak resident memory so far, in KiB.
    pub fn peak_kib(&self) -> Option<u64> {
        proc_status(self.pid(), "VmHWM")
    }

    /// Asserts the daemon is alive, stayed under `budget_kib` of peak
    /// memory, and still serves a normal push and pull.
    pub fn assert_healthy(&mut self, env: &Env, budget_kib: u64, case: &str) {
        if let Some(st) = self.exited() {
            std::thread::sleep(Duration::from_millis(300));
            panic!(
                "[{case}] the daemon died ({}); its log ends:\n{}",
                describe_status(st),
                self.log_tail()
            );
        }
        let peak = self.peak_kib().unwrap_or(0);
        assert!(
            peak < budget_kib,
            "[{case}] the daemon's peak memory reached {} MiB, over its budget of {} MiB; its log ends:\n{}",
            peak >> 10,
            budget_kib >> 10,
            self.log_tail()
        );
        // The next client: a normal push, then pulled back.
        let src = env.local.join("next-client.bin");
        let data = random_bytes(200_000, 0x5eed);
        fs::write(&src, &data).unwrap();
        let _ = fs::remove_file(env.root.join("next-client.bin"));
        let out = run_client(
            env.cp_cmd(&[
                "--daemon",
                "--transport",
                "tcp",
                src.to_str().unwrap(),
                &self.remote("/next-client.bin"),
            ]),
            CASE_LIMIT,
        );
        assert!(
            out.code == Some(0),
            "[{case}] the daemon did not serve the next client's push: {}\nits log ends:\n{}",
            out.describe(),
            self.log_tail()
        );
        let back = env.local.join("next-client.back");
        let out = run_client(
            env.cp_cmd(&[
                "--daemon",
                "--transport",
                "tcp",
                &self.remote("/next-client.bin"),
                back.to_str().unwrap(),
            ]),
            CASE_LIMIT,
        );
        assert!(
            out.code == Some(0),
            "[{case}] the daemon did not serve the next client's pull: {}",
            out.describe()
        );
        assert!(
            fs::read(&back).unwrap() == data,
            "[{case}] the next client's file came back different"
        );
        let _ = fs::remove_file(env.root.join("next-client.bin"));
        let _ = fs::remove_file(&back);
    }
}

fn describe_status(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (_, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown".into(),
    }
}

/// A client that ran: how it ended, what it said, its peak memory.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
    /// Peak resident memory (`ru_maxrss`), in KiB.
    pub peak_kib: u64,
}

impl Ran {
    pub fn describe(&self) -> String {
        let status = match (self.code, self.signal) {
            (Some(c), _) => format!("exit {c}"),
            (_, Some(s)) => format!("killed by signal {s}"),
            _ => "no status".into(),
        };
        let err: Vec<&str> = self.stderr.lines().rev().take(6).collect();
        let err: Vec<&str> = err.into_iter().rev().collect();
        format!(
            "{status}, peak memory {} MiB, stderr: {:?}",
            self.peak_kib >> 10,
            err.join("\n")
        )
    }

    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.stdout).ok()
    }
}

/// Runs a client command to its end under [`AS_LIMIT`], killed past
/// `limit`, and measures its peak memory (`wait4`'s `ru_maxrss`).
// The child is reaped by wait4 below, not by `Child::wait`.
#[allow(clippy::zombie_processes)]
pub fn run_client(mut c: Command, limit: Duration) -> Ran {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    limit_memory(&mut c);
    let mut child = c.spawn().expect("start the client");
    let pid = child.id() as libc::pid_t;
    let out = super::common::drain(Box::new(child.stdout.take().unwrap()));
    let err = super::common::drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + limit;
    let mut killed = false;
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: a plain wait4 on our own child, into locals.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (status, usage);
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if Instant::now() > deadline && !killed {
            // SAFETY: signals our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let st = ExitStatus::from_raw(status);
    let ran = Ran {
        code: st.code(),
        signal: st.signal(),
        stdout: out.join().unwrap_or_default(),
        stderr: String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned(),
        peak_kib: usage.ru_maxrss as u64,
    };
    assert!(
        !killed,
        "the client ran past {limit:?} and was killed: {}",
        ran.describe()
    );
    ran
}

/// What a path was: kind, permission bits, mtime, size, and the hash of
/// its content (files) or its target (links).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    kind: char,
    mode: u32,
    mtime: (i64, i64),
    size: u64,
    content: String,
}

/// Every path under a directory (itself included), fingerprinted.
pub type Snapshot = BTreeMap<PathBuf, Mark>;

pub fn snapshot(dir: &Path) -> Snapshot {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = fs::symlink_metadata(&p) else {
            continue;
        };
        let ft = m.file_type();
        let (kind, content) = if ft.is_symlink() {
            let t = fs::read_link(&p).map(|t| t.display().to_string());
            ('l', t.unwrap_or_default())
        } else if ft.is_dir() {
            if let Ok(rd) = fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
            ('d', String::new())
        } else {
            let h = fs::read(&p).map(|b| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::hash::Hash::hash(&b, &mut h);
                format!("{:016x}", std::hash::Hasher::finish(&h))
            });
            ('f', h.unwrap_or_default())
        };
        out.insert(
            p,
            Mark {
                kind,
                mode: m.permissions().mode() & 0o7777,
                mtime: (m.mtime(), m.mtime_nsec()),
                size: if ft.is_dir() { 0 } else { m.size() },
                content,
            },
        );
    }
    out
}

/// Asserts nothing under a snapshot's directory changed: no path came,
/// went, or changed kind, mode, mtime, size or content.
pub fn assert_unchanged(before: &Snapshot, after: &Snapshot, what: &str, case: &str) {
    let mut diffs = Vec::new();
    for (p, m) in before {
        match after.get(p) {
            None => diffs.push(format!("{} was removed", p.display())),
            Some(n) if n != m => diffs.push(format!("{} changed: {m:?} -> {n:?}", p.display())),
            _ => {}
        }
    }
    for p in after.keys().filter(|p| !before.contains_key(*p)) {
        diffs.push(format!("{} appeared", p.display()));
    }
    assert!(
        diffs.is_empty(),
        "[{case}] {what} changed:\n  {}",
        diffs.join("\n  ")
    );
}

/// Victims outside the root and the destination, with old times and
/// known modes, so any write, removal, chmod or touch through a link
/// shows in their snapshot.
pub struct Outside {
    pub dir: PathBuf,
}

/// Bytes of `outside/secret.bin`: several content-defined chunks' worth.
pub const SECRET_LEN: usize = 300_000;

impl Outside {
    pub fn plant(base: &Path) -> Outside {
        let dir = base.join("outside");
        fs::create_dir_all(dir.join("vdir/sub")).unwrap();
        fs::create_dir_all(dir.join("pdir")).unwrap();
        fs::write(
            dir.join("victim.txt"),
            b"victim: must never change\n".repeat(100),
        )
        .unwrap();
        fs::write(dir.join("vdir/a.txt"), b"a\n").unwrap();
        fs::write(dir.join("vdir/b.txt"), b"b\n").unwrap();
        fs::write(dir.join("vdir/sub/c.txt"), b"c\n").unwrap();
        fs::write(dir.join("pdir/p.txt"), b"p\n").unwrap();
        fs::write(dir.join("secret.bin"), random_bytes(SECRET_LEN, 0x5ec2e7)).unwrap();
        fs::set_permissions(dir.join("pdir"), fs::Permissions::from_mode(0o750)).unwrap();
        fs::set_permissions(dir.join("victim.txt"), fs::Permissions::from_mode(0o640)).unwrap();
        let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let mut all: Vec<PathBuf> = snapshot(&dir).into_keys().collect();
        // Deepest first, so a directory's time is set after its children.
        all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for p in all {
            let f = fs::File::open(&p).unwrap();
            f.set_times(fs::FileTimes::new().set_modified(old).set_accessed(old))
                .unwrap();
        }
        Outside { dir }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    pub fn secret(&self) -> Vec<u8> {
        fs::read(self.path("secret.bin")).unwrap()
    }
}

/// Asserts a client was refused with one of `codes`, said why on a
/// `haul:` line, and did not panic or die by a signal; returns stderr.
pub fn assert_refused(ran: &Ran, codes: &[i32], case: &str) -> String {
    eprintln!("[{case}] the client ended: {}", ran.describe());
    assert!(
        ran.signal.is_none() && !ran.stderr.contains("panicked"),
        "[{case}] the client crashed: {}",
        ran.describe()
    );
    assert!(
        ran.code.is_some_and(|c| codes.contains(&c)),
        "[{case}] expected a refusal with exit code {codes:?}: {}",
        ran.describe()
    );
    assert!(
        ran.stderr.lines().any(|l| l.starts_with("haul:")),
        "[{case}] no error line: {}",
        ran.describe()
    );
    ran.stderr.clone()
}

/// Either a refusal as [`assert_refused`] checks, or a success: where
/// a link met a name the manifest also sends, a receiver may refuse, or
/// replace the link without following it. Returns whether it succeeded.
pub fn assert_refused_or_ok(ran: &Ran, codes: &[i32], case: &str) -> bool {
    if ran.code == Some(0) {
        eprintln!("[{case}] the client succeeded: {}", ran.describe());
        return true;
    }
    assert_refused(ran, codes, case);
    false
}

/// Asserts a hostile peer's session ended with an `Error` of one of
/// `codes`, with a message.
pub fn assert_error(ended: &hostile::Ended, codes: &[wire::ErrorCode], case: &str) {
    match &ended.error {
        Some((c, m)) if codes.contains(c) && !m.trim().is_empty() => {}
        _ => panic!(
            "[{case}] expected the peer to end with an Error of {codes:?}; {}",
            ended.describe()
        ),
    }
}
