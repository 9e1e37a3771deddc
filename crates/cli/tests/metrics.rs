//! What an operator watches (issue 29): `haul serve --metrics` serves
//! Prometheus text metrics, parsed here with a Prometheus text-format
//! parser against a known transfer, and a live status page, loaded in a
//! real headless browser (Debian's Chromium) while a transfer runs.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

use common::*;

/// The daemon's metrics address, from its log.
fn page_addr(server: &common::Server) -> String {
    assert!(
        wait_until(Duration::from_secs(10), || server
            .log
            .lock()
            .unwrap()
            .contains("metrics on http://")),
        "{}",
        server.log.lock().unwrap()
    );
    let log = server.log.lock().unwrap().clone();
    let rest = log.split("metrics on http://").nth(1).unwrap();
    rest.split('/').next().unwrap().to_string()
}

fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

fn named_key(env: &Env, name: &str) {
    let keys = env.server_home.join("authorized_keys");
    let line = fs::read_to_string(&keys).unwrap();
    let key: Vec<&str> = line.split_whitespace().take(2).collect();
    fs::write(&keys, format!("{} {name}\n", key.join(" "))).unwrap();
}

#[test]
fn metrics_count_a_known_transfer_in_prometheus_text() {
    let env = Env::new();
    named_key(&env, "alice@lab");
    let server = env.serve_with(&["--metrics", "127.0.0.1:0"]);
    let addr = page_addr(&server);
    let src = env.local.join("f.bin");
    write_file(&src, &random_bytes(700_000, 1));
    ok(&env.cp(&[src.to_str().unwrap(), &env.remote(&server, "f.bin")]));
    fails(
        &env.cp(&[src.to_str().unwrap(), &env.remote(&server, "../out.bin")]),
        8,
    );
    ok(&env.cp(&[
        &env.remote(&server, "f.bin"),
        env.local.join("back").to_str().unwrap(),
    ]));
    // The sessions end on the server a moment after the clients.
    let scrape = || {
        let text = get(&addr, "/metrics");
        let lines = text.lines().map(|l| Ok(l.to_string()));
        prometheus_parse::Scrape::parse(lines).expect("Prometheus text format")
    };
    let value = |s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]| -> f64 {
        s.samples
            .iter()
            .filter(|x| x.metric == name)
            .filter(|x| labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
            .map(|x| match x.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
                prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    };
    assert!(wait_until(Duration::from_secs(10), || {
        let s = scrape();
        value(&s, "haul_sessions_total", &[]) >= 3.0
            && value(&s, "haul_sessions_active", &[]) == 0.0
    }));
    let s = scrape();
    let who = [("who", "alice@lab")];
    assert_eq!(
        value(
            &s,
            "haul_sessions_total",
            &[("who", "alice@lab"), ("outcome", "ok")]
        ),
        2.0
    );
    assert_eq!(
        value(
            &s,
            "haul_sessions_total",
            &[("who", "alice@lab"), ("outcome", "failed")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &s,
            "haul_errors_total",
            &[("who", "alice@lab"), ("code", "8")]
        ),
        1.0
    );
    // Why bytes were not sent, each its own series; an idle daemon's rate
    // is 0, not -0 (issue 41).
    for why in ["zero", "compression", "dedup"] {
        assert!(
            s.samples.iter().any(
                |x| x.metric == "haul_saved_bytes_total" && x.labels.get("reason") == Some(why)
            ),
            "no haul_saved_bytes_total{{reason={why}}}"
        );
    }
    let text = get(&addr, "/metrics");
    assert!(
        text.lines().any(|l| l == "haul_goodput_bytes_per_second 0"),
        "{text}"
    );
    assert_eq!(
        value(&s, "haul_file_bytes_total", &[who[0], ("direction", "in")]),
        700_000.0
    );
    assert_eq!(
        value(&s, "haul_file_bytes_total", &[who[0], ("direction", "out")]),
        700_000.0
    );
    assert!(value(&s, "haul_wire_bytes_total", &[]) >= 1_400_000.0);
    assert!(value(&s, "haul_uptime_seconds", &[]) >= 0.0);
}

#[test]
fn the_status_page_shows_a_running_transfer_in_a_real_browser() {
    if !std::path::Path::new("/usr/bin/chromium").exists() {
        let why =
            "the status page test needs Chromium: run scripts/test.sh once, or apt-get install chromium";
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "{why}, and CI must install it"
        );
        println!("SKIPPED: {why}");
        return;
    }
    let env = Env::new();
    named_key(&env, "pagetest@lab");
    let server = env.serve_with(&["--metrics", "127.0.0.1:0"]);
    let addr = page_addr(&server);
    let src = env.local.join("slow.bin");
    write_file(&src, &random_bytes(32 << 20, 2));
    // Capped at 16 Mbit/s: seventeen seconds, long enough to be seen
    // running by a browser that starts slowly on a busy host (six were not,
    // once, under the full suite); both are stopped once it has looked.
    let mut push = env
        .cp_cmd(&[
            "--rate",
            "16M",
            src.to_str().unwrap(),
            &env.remote(&server, "running-now.bin"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // And a pull beside it: the daemon sends, and knows the total too.
    write_file(&env.root.join("pulled-now.bin"), &random_bytes(32 << 20, 3));
    let mut pull = env
        .cp_cmd(&[
            "--rate",
            "16M",
            &env.remote(&server, "pulled-now.bin"),
            env.local.join("pulled.bin").to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let both = || {
        let body = get(&addr, "/status.json");
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) else {
            return false;
        };
        let running = v["running"].as_array().cloned().unwrap_or_default();
        let pull = running.iter().find(|r| r["op"] == "pull");
        running.iter().any(|r| r["paths"][0] == "running-now.bin")
            && pull.is_some_and(|p| p["total"] == 32u64 << 20)
    };
    assert!(
        wait_until(Duration::from_secs(10), both),
        "{}",
        get(&addr, "/status.json")
    );
    let profile = env.dir.path().join("chromium");
    let mut c = netem::testing::program("/usr/bin/chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(["--virtual-time-budget=3000", "--dump-dom"])
    .arg(format!("http://{addr}/"))
    .stdin(Stdio::null());
    let out = output_within(c, Duration::from_secs(90));
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    for c in [&mut push, &mut pull] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let running = dom
        .split("id=\"running\"")
        .nth(1)
        .unwrap_or("")
        .split("</tbody>")
        .next()
        .unwrap_or("");
    assert!(
        running.contains("running-now.bin")
            && running.contains("pagetest@lab")
            && running.contains("Mbit/s")
            && running.contains("pulled-now.bin")
            && running.contains(" of 32.0 MiB"),
        "the page did not show the transfer: {dom}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
