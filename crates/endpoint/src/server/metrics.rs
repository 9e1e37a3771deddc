//! What an operator watches (issue 29): `haul serve --metrics ADDR:PORT`
//! serves Prometheus text metrics at `/metrics`, and a small live status
//! page at `/` (the transfers running, with rate, progress and peer, and
//! the last ones finished), which polls `/status.json` every second.
//! Sessions report here as they start and end; the HTTP side only reads.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use connect::error::TransferError;
use serde_json::{json, Value};

use super::record::Record;

/// Finished sessions the page lists.
const LAST: usize = 20;
/// Clients still sending their request at once; a new one takes the
/// place of the oldest.
const MAX_CLIENTS: usize = 16;

const PAGE: &str = include_str!("status.html");

#[derive(Default)]
struct Totals {
    /// (who, outcome) → sessions.
    sessions: BTreeMap<(String, &'static str), u64>,
    /// (who, exit code) → failed sessions.
    errors: BTreeMap<(String, u8), u64>,
    /// (who, direction) → file bytes.
    bytes: BTreeMap<(String, &'static str), u64>,
    wire: u64,
    /// Why → file bytes not sent: zero blocks, compression, dedup.
    saved: BTreeMap<&'static str, u64>,
    retransmitted: u64,
}

/// Why file bytes were not sent, as `haul_saved_bytes_total` labels them.
const SAVED: [&str; 3] = ["zero", "compression", "dedup"];

/// What the jobs say of themselves: counts by state, the latest.
pub(crate) type JobsSummary = Box<dyn Fn() -> Value + Send + Sync>;

/// The daemon's sessions, running and finished.
pub(crate) struct Metrics {
    /// The jobs' summary (P-45), once the daemon runs jobs.
    jobs: std::sync::OnceLock<JobsSummary>,
    started: Instant,
    next: AtomicU64,
    live: Mutex<HashMap<u64, Arc<Record>>>,
    finished: Mutex<VecDeque<Value>>,
    totals: Mutex<Totals>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A label value as Prometheus' text format writes it.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        Metrics {
            jobs: std::sync::OnceLock::new(),
            started: Instant::now(),
            next: AtomicU64::new(0),
            live: Mutex::default(),
            finished: Mutex::default(),
            totals: Mutex::default(),
        }
    }

    /// The daemon runs jobs: `summary` tells of them.
    pub(crate) fn jobs(&self, summary: JobsSummary) {
        let _ = self.jobs.set(summary);
    }

    fn jobs_now(&self) -> Value {
        self.jobs.get().map_or(Value::Null, |f| f())
    }

    /// A session starts; its id for [`Metrics::end`].
    pub(crate) fn begin(&self, rec: Arc<Record>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.live).insert(id, rec);
        id
    }

    /// A session ended: counted, and listed among the last finished.
    pub(crate) fn end(&self, id: u64, outcome: &Result<String, TransferError>, took: Duration) {
        let Some(rec) = lock(&self.live).remove(&id) else {
            return;
        };
        let Some(e) = rec.event(outcome, took) else {
            return;
        };
        {
            let mut t = lock(&self.totals);
            let who = e["who"].as_str().unwrap_or("-").to_string();
            let ok = e["ok"] == true;
            *t.sessions
                .entry((who.clone(), if ok { "ok" } else { "failed" }))
                .or_default() += 1;
            if !ok {
                let code = e["code"].as_u64().unwrap_or(1) as u8;
                *t.errors.entry((who.clone(), code)).or_default() += 1;
            }
            let direction = match e["op"].as_str() {
                Some("push") => "in",
                _ => "out",
            };
            *t.bytes.entry((who, direction)).or_default() += e["bytes"].as_u64().unwrap_or(0);
            t.wire += e["wire_bytes"].as_u64().unwrap_or(0);
            for why in SAVED {
                *t.saved.entry(why).or_default() += e["saved"][why].as_u64().unwrap_or(0);
            }
            t.retransmitted += e["retransmitted"].as_u64().unwrap_or(0);
        }
        let mut f = lock(&self.finished);
        if f.len() == LAST {
            f.pop_back();
        }
        f.push_front(e);
    }

    fn running(&self) -> Vec<Value> {
        let live: Vec<Arc<Record>> = lock(&self.live).values().cloned().collect();
        live.iter().filter_map(|r| r.live()).collect()
    }

    /// Prometheus' text format (version 0.0.4).
    pub(crate) fn prometheus(&self) -> String {
        let running = self.running();
        let jobs = self.jobs_now();
        let t = lock(&self.totals);
        let mut o = String::new();
        let head = |o: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        if let Some(counts) = jobs["counts"].as_object() {
            head(&mut o, "haul_jobs", "gauge", "Jobs held, by state (P-45).");
            for (state, n) in counts {
                let _ = writeln!(o, "haul_jobs{{state=\"{}\"}} {n}", label(state));
            }
        }
        head(
            &mut o,
            "haul_sessions_active",
            "gauge",
            "Sessions running now.",
        );
        let _ = writeln!(o, "haul_sessions_active {}", running.len());
        head(
            &mut o,
            "haul_sessions_total",
            "counter",
            "Finished sessions, by key comment and outcome.",
        );
        for ((who, outcome), n) in &t.sessions {
            let _ = writeln!(
                o,
                "haul_sessions_total{{who=\"{}\",outcome=\"{outcome}\"}} {n}",
                label(who)
            );
        }
        head(
            &mut o,
            "haul_errors_total",
            "counter",
            "Failed sessions, by key comment and exit code.",
        );
        for ((who, code), n) in &t.errors {
            let _ = writeln!(
                o,
                "haul_errors_total{{who=\"{}\",code=\"{code}\"}} {n}",
                label(who)
            );
        }
        head(
            &mut o,
            "haul_file_bytes_total",
            "counter",
            "Verified file bytes moved, by key comment and direction (in: pushed to this daemon).",
        );
        for ((who, dir), n) in &t.bytes {
            let _ = writeln!(
                o,
                "haul_file_bytes_total{{who=\"{}\",direction=\"{dir}\"}} {n}",
                label(who)
            );
        }
        head(
            &mut o,
            "haul_wire_bytes_total",
            "counter",
            "Bytes on the wire, both ways, of finished sessions.",
        );
        let _ = writeln!(o, "haul_wire_bytes_total {}", t.wire);
        head(
            &mut o,
            "haul_saved_bytes_total",
            "counter",
            "File bytes not sent, by why: zero blocks, compression, deduplication.",
        );
        for why in SAVED {
            let n = t.saved.get(why).copied().unwrap_or(0);
            let _ = writeln!(o, "haul_saved_bytes_total{{reason=\"{why}\"}} {n}");
        }
        head(
            &mut o,
            "haul_retransmitted_blocks_total",
            "counter",
            "Blocks sent again.",
        );
        let _ = writeln!(o, "haul_retransmitted_blocks_total {}", t.retransmitted);
        head(
            &mut o,
            "haul_goodput_bytes_per_second",
            "gauge",
            "Goodput of the sessions running now, together, in bytes per second.",
        );
        // Whole bytes: an idle daemon's sum of no rates is -0.0 as a float.
        let rate: f64 = running
            .iter()
            .map(|r| r["rate"].as_f64().unwrap_or(0.0))
            .sum();
        let _ = writeln!(o, "haul_goodput_bytes_per_second {}", rate.round() as u64);
        head(
            &mut o,
            "haul_uptime_seconds",
            "gauge",
            "Seconds since the daemon started.",
        );
        let _ = writeln!(
            o,
            "haul_uptime_seconds {}",
            self.started.elapsed().as_secs()
        );
        o
    }

    /// What the status page shows.
    pub(crate) fn status(&self) -> Value {
        let running = self.running();
        let t = lock(&self.totals);
        let sum = |dir: &str| -> u64 {
            t.bytes
                .iter()
                .filter(|((_, d), _)| *d == dir)
                .map(|(_, n)| n)
                .sum()
        };
        json!({
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "running": running,
            "finished": *lock(&self.finished),
            "sessions_total": t.sessions.values().sum::<u64>(),
            "sessions_failed": t.errors.values().sum::<u64>(),
            "bytes_in": sum("in"),
            "bytes_out": sum("out"),
            "jobs": self.jobs_now(),
        })
    }
}

/// Serves `/metrics`, `/status.json` and `/` on `listener`, on threads of
/// its own, until the process ends. `hosts`: the names a request's `Host`
/// may give besides an address (`--metrics-host`).
pub(crate) fn serve_http(listener: TcpListener, metrics: Arc<Metrics>, hosts: Vec<String>) {
    let reading = Arc::new(Reading::default());
    let hosts = Arc::new(hosts);
    let loopback = listener
        .local_addr()
        .is_ok_and(|a| a.ip().is_loopback() || a.ip().is_unspecified());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let Some(id) = reading.enter(&conn) else {
                continue;
            };
            let (m, reading, hosts) = (metrics.clone(), reading.clone(), hosts.clone());
            std::thread::spawn(move || {
                let _ = answer(conn, &m, &reading, id, &hosts, loopback);
                reading.leave(id);
            });
        }
    });
}

/// Time a client has to send its request line and headers, in all.
const REQUEST_TIME: Duration = Duration::from_secs(2);

/// The connections still sending their request (issue 39): at most
/// [`MAX_CLIENTS`]; a new one takes the place of the one that has taken
/// longest, so slow clients cannot keep a scrape out.
#[derive(Default)]
struct Reading {
    conns: Mutex<Vec<(u64, Instant, TcpStream)>>,
    next: AtomicU64,
}

impl Reading {
    fn enter(&self, conn: &TcpStream) -> Option<u64> {
        let clone = conn.try_clone().ok()?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut c = lock(&self.conns);
        if c.len() >= MAX_CLIENTS {
            // The oldest goes: it has had the most time already.
            let (_, _, oldest) = c.remove(0);
            let _ = oldest.shutdown(std::net::Shutdown::Both);
        }
        c.push((id, Instant::now(), clone));
        Some(id)
    }

    fn leave(&self, id: u64) {
        lock(&self.conns).retain(|(i, ..)| *i != id);
    }
}

/// Whether a request's `Host` may be answered: none (not a browser), an
/// address, `localhost` on a loopback or wildcard listener, or a name
/// `--metrics-host` lists. Any other name is what a page that rebound
/// its own name to this address would send (DNS rebinding).
fn host_allowed(host: Option<&str>, hosts: &[String], loopback: bool) -> bool {
    let Some(host) = host.map(str::trim) else {
        return true;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.parse::<std::net::IpAddr>().is_ok()
        || (loopback && name.eq_ignore_ascii_case("localhost"))
        || hosts.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// One request, one answer, then the connection closes. Only the request
/// line and headers are read (at most 8 KiB, within 2 s in all): nothing a
/// client sends is kept.
fn answer(
    mut conn: TcpStream,
    m: &Metrics,
    reading: &Reading,
    id: u64,
    hosts: &[String],
    loopback: bool,
) -> std::io::Result<()> {
    conn.set_write_timeout(Some(Duration::from_secs(5)))?;
    let deadline = Instant::now() + REQUEST_TIME;
    let mut buf = vec![0u8; 8192];
    let mut got = 0;
    while got < buf.len() && !buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        conn.set_read_timeout(Some(left))?;
        let n = conn.read(&mut buf[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    reading.leave(id);
    let head = String::from_utf8_lossy(&buf[..got]);
    let mut lines = head.split("\r\n");
    let mut words = lines.next().unwrap_or("").split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let host = lines.find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case("host").then_some(v)
    });
    let (status, kind, body) = match (method, path) {
        _ if !host_allowed(host, hosts, loopback) => (
            "421 Misdirected Request",
            "text/plain",
            "this daemon answers its metrics only to its own address or the names --metrics-host lists\n".into(),
        ),
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            m.prometheus(),
        ),
        ("GET", "/status.json") => ("200 OK", "application/json", m.status().to_string()),
        ("GET", "/") => ("200 OK", "text/html; charset=utf-8", PAGE.to_string()),
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "not found: try /, /metrics or /status.json\n".into(),
        ),
        _ => ("405 Method Not Allowed", "text/plain", "only GET\n".into()),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(reply.as_bytes())
}

/// Binds `addr` for the metrics and the status page.
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_not_listed_is_what_a_rebound_page_sends_and_is_refused() {
        let hosts = vec!["dtn1.example.org".to_string()];
        for ok in [
            None,
            Some("127.0.0.1:9090"),
            Some("[::1]:9090"),
            Some("10.1.2.3"),
            Some("localhost:9090"),
            Some("DTN1.example.org:9090"),
        ] {
            assert!(host_allowed(ok, &hosts, true), "{ok:?}");
        }
        for bad in [Some("attacker.example:9090"), Some("dtn1.example.org.evil")] {
            assert!(!host_allowed(bad, &hosts, true), "{bad:?}");
        }
        assert!(!host_allowed(Some("localhost"), &hosts, false));
    }
}
