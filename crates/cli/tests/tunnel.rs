//! `haul tunnel` over loopback (P-37): many connections both ways through
//! one session, a service that speaks first, half closes, refusals, resets
//! and the statistics. Replication through the emulator is in
//! `replication.rs`, a bulk flow across it in `wan.rs`.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::tunnel::{connect, echo_through, service, tunnel};
use common::*;

fn median_round_trip(s: &mut TcpStream, n: usize) -> Duration {
    let mut times = Vec::new();
    let mut buf = [0u8; 100];
    for i in 0..n {
        let msg = [i as u8; 100];
        let t = Instant::now();
        s.write_all(&msg).unwrap();
        s.read_exact(&mut buf).unwrap();
        times.push(t.elapsed());
        assert_eq!(buf, msg);
    }
    times.sort();
    times[n / 2]
}

#[test]
fn many_connections_cross_one_session_both_ways() {
    let env = Env::new();
    let target = format!("127.0.0.1:{}", service());
    let server = env.serve_with(&["--tunnel-to", &target]);
    let via = format!("127.0.0.1:{}", server.port);
    let t = tunnel(&env, &["--to", &target, "--via", &via, "--streams", "3"])
        .unwrap_or_else(|log| panic!("tunnel did not start: {log}"));

    // Eight connections at once, each 1.5 MiB each way.
    let workers: Vec<_> = (0..8u64)
        .map(|i| {
            let port = t.port;
            std::thread::spawn(move || {
                let data = random_bytes(1_500_000 + i as usize * 1000, i);
                let got = echo_through(port, data.clone());
                assert!(got == data, "connection {i}: the echo differs");
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }

    // A half close reaches the service, and its answer comes back.
    let mut sink = connect(t.port, b'S');
    sink.write_all(&vec![7u8; 3_000_000]).unwrap();
    sink.shutdown(Shutdown::Write).unwrap();
    let mut answer = String::new();
    sink.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, "3000000");

    // Small round trips on an idle tunnel: well under a millisecond on
    // loopback (bench/tunnel.sh measures it); here only what would show a
    // batching or polling delay.
    let mut chat = connect(t.port, b'E');
    let idle = median_round_trip(&mut chat, 200);
    assert!(idle < Duration::from_millis(5), "idle round trip {idle:?}");

    // While a bulk connection floods the tunnel, the interactive one still
    // gets its turn.
    let port = t.port;
    let bulk = std::thread::spawn(move || {
        let mut s = connect(port, b'S');
        let chunk = vec![1u8; 1 << 20];
        let until = Instant::now() + Duration::from_secs(3);
        let mut sent = 0u64;
        while Instant::now() < until {
            s.write_all(&chunk).unwrap();
            sent += chunk.len() as u64;
        }
        s.shutdown(Shutdown::Write).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert_eq!(answer, sent.to_string());
    });
    std::thread::sleep(Duration::from_millis(300));
    let busy = median_round_trip(&mut chat, 100);
    bulk.join().unwrap();
    assert!(
        busy < Duration::from_millis(100),
        "round trip beside a bulk flow {busy:?}"
    );
    eprintln!("round trip through the tunnel: idle {idle:?}, beside a bulk flow {busy:?}");
    drop(chat);

    // The statistics of the running tunnel.
    let stats = |args: &[&str]| {
        Command::new(HAUL)
            .args(["tunnel", "--stats"])
            .args(args)
            .env("HAUL_HOME", &env.home)
            .output()
            .unwrap()
    };
    let mut v = serde_json::Value::Null;
    let counted = wait_until(Duration::from_secs(10), || {
        let out = stats(&["--json"]);
        v = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["tunnels"][0]["total"]["connections"].as_u64() >= Some(11)
    });
    assert!(counted, "statistics: {v}");
    let total = &v["tunnels"][0]["total"];
    assert!(
        total["sent_bytes"].as_u64().unwrap() > 15_000_000,
        "{total}"
    );
    assert!(
        total["wire_bytes"].as_u64().unwrap() > 25_000_000,
        "{total}"
    );
    let text = String::from_utf8(stats(&["--listen", &t.port.to_string()]).stdout).unwrap();
    assert!(text.contains(&format!("-> {target} via {via}")), "{text}");
    let out = stats(&["--listen", "1"]);
    fails(&out, 6);
    assert!(
        t.log.lock().unwrap().contains("3 lanes"),
        "{}",
        t.log.lock().unwrap()
    );
}

#[test]
fn a_target_the_server_does_not_list_is_refused() {
    let env = Env::new();
    let target = format!("127.0.0.1:{}", service());
    for extra in [vec![], vec!["--tunnel-to", "127.0.0.1:1"]] {
        let server = env.serve_with(&extra);
        let via = format!("127.0.0.1:{}", server.port);
        let log = match tunnel(&env, &["--to", &target, "--via", &via]) {
            Ok(_) => panic!("a tunnel to an unlisted target started"),
            Err(log) => log,
        };
        assert!(log.contains(&format!("--tunnel-to {target}")), "{log}");
    }
    // The exit code says why.
    let server = env.serve(); // no --tunnel-to at all
    let mut c = Command::new(HAUL);
    c.args([
        "tunnel",
        "--listen",
        "127.0.0.1:0",
        "--to",
        &target,
        "--via",
    ])
    .arg(format!("127.0.0.1:{}", server.port))
    .env("HAUL_HOME", &env.home)
    .stdin(Stdio::null());
    let out = output_within(c, Duration::from_secs(60));
    let err = fails(&out, 7);
    assert!(err.contains("forwards no tunnels"), "{err}");
}

#[test]
fn a_refused_target_resets_only_that_connection() {
    let env = Env::new();
    // A port nothing listens on.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let target = format!("127.0.0.1:{dead}");
    let server = env.serve_with(&["--tunnel-to", &target]);
    let via = format!("127.0.0.1:{}", server.port);
    let mut t = tunnel(&env, &["--to", &target, "--via", &via])
        .unwrap_or_else(|log| panic!("tunnel did not start: {log}"));
    for _ in 0..3 {
        let mut s = TcpStream::connect(("127.0.0.1", t.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = [0u8; 16];
        // Closed with a reset: no bytes, never a clean-looking stream.
        match s.read(&mut buf) {
            Ok(0) | Err(_) => {}
            Ok(n) => panic!("{n} bytes from a target that refused"),
        }
    }
    assert!(
        t.child.try_wait().unwrap().is_none(),
        "the tunnel keeps running: {}",
        t.log.lock().unwrap()
    );
}

#[test]
fn the_tunnel_ends_with_its_server() {
    let env = Env::new();
    let target = format!("127.0.0.1:{}", service());
    let mut server = env.serve_with(&["--tunnel-to", &target]);
    let via = format!("127.0.0.1:{}", server.port);
    let mut t = tunnel(&env, &["--to", &target, "--via", &via])
        .unwrap_or_else(|log| panic!("tunnel did not start: {log}"));
    let mut s = connect(t.port, b'E');
    server.kill();
    // The open connection is reset, not ended as if complete.
    let mut buf = [0u8; 1];
    let _ = s.write_all(b"x");
    assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)));
    let ended = wait_until(Duration::from_secs(30), || {
        t.child.try_wait().unwrap().is_some()
    });
    assert!(ended, "the tunnel exits when its session is lost");
    let code = t.child.wait().unwrap().code();
    assert_eq!(code, Some(10), "{}", t.log.lock().unwrap());
}
