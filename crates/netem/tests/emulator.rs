//! The emulator measured from the inside: round-trip time by UDP echo, the
//! rate of a bulk TCP flow, loss and outages, each within tolerances. Needs
//! root; skips with a printed reason elsewhere, fails under CI without it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use netem::testing::{require_emulator, unique_name};
use netem::{Emulator, EmulatorConfig, ADDR_A, ADDR_B};
use netsim::LinkConfig;

fn emulator(tag: &str, link: LinkConfig, mtu: u32) -> Emulator {
    let cfg = EmulatorConfig {
        name: unique_name(tag),
        a2b: link.clone(),
        b2a: link,
        mtu,
        seed: 7,
        block_udp: false,
        only_tcp_ports: vec![],
        path_mtu: None,
    };
    Emulator::start(cfg).expect("emulator starts")
}

/// UDP echo server in B answering `count` datagrams (bounded by a timeout).
fn echo_in_b(emu: &Emulator, port: u16) -> UdpSocket {
    emu.in_b(|| {
        let s = UdpSocket::bind((ADDR_B, port))?;
        s.set_read_timeout(Some(Duration::from_millis(1500)))?;
        Ok(s)
    })
    .unwrap()
}

fn socket_in_a(emu: &Emulator) -> UdpSocket {
    emu.in_a(|| {
        let s = UdpSocket::bind((ADDR_A, 0))?;
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        Ok(s)
    })
    .unwrap()
}

#[test]
fn round_trip_time_matches_the_delay() {
    if !require_emulator("the emulator RTT test") {
        return;
    }
    let emu = emulator(
        "rtt",
        LinkConfig {
            delay: Duration::from_millis(20),
            ..Default::default()
        },
        1500,
    );
    let server = echo_in_b(&emu, 9100);
    // Enough echoes that the minimum is the link's, not a moment when the
    // other tests of this binary (a bulk flow) held both cores.
    const ECHOES: u8 = 30;
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..ECHOES {
            if let Ok((n, from)) = server.recv_from(&mut buf) {
                let _ = server.send_to(&buf[..n], from);
            }
        }
    });
    let client = socket_in_a(&emu);
    let mut rtts = Vec::new();
    for i in 0..ECHOES {
        let t = Instant::now();
        client.send_to(&[i; 32], (ADDR_B, 9100)).unwrap();
        let mut buf = [0u8; 64];
        if client.recv_from(&mut buf).is_ok() {
            rtts.push(t.elapsed());
        }
    }
    drop(client);
    echo.join().unwrap();
    assert!(
        rtts.len() >= ECHOES as usize * 9 / 10,
        "lost echoes: {rtts:?}"
    );
    let min = rtts.iter().min().unwrap().as_secs_f64() * 1e3;
    let mean = rtts.iter().map(|d| d.as_secs_f64()).sum::<f64>() / rtts.len() as f64 * 1e3;
    assert!(
        // The emulator releases packets due within 100 µs together
        // (forward.rs, MAX_SLACK), so each way may be that much early.
        (39.8..43.0).contains(&min),
        "min RTT {min:.2} ms, expected 40"
    );
    assert!(mean < 45.0, "mean RTT {mean:.2} ms");
}

#[test]
fn bulk_tcp_flow_runs_at_the_rate() {
    if !require_emulator("the emulator rate test") {
        return;
    }
    let link = LinkConfig {
        delay: Duration::from_millis(2),
        rate_bps: Some(100_000_000),
        ..Default::default()
    };
    let emu = emulator("rate", link, 1500);
    let listener = emu.in_b(|| TcpListener::bind((ADDR_B, 9200))).unwrap();
    let total = 25_000_000usize;
    let sink = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut got = 0;
        let t = Instant::now();
        while got < total {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        (got, t.elapsed())
    });
    let mut s = emu.in_a(|| TcpStream::connect((ADDR_B, 9200))).unwrap();
    let chunk = vec![7u8; 1 << 16];
    let mut sent = 0;
    while sent < total {
        s.write_all(&chunk).unwrap();
        sent += chunk.len();
    }
    let (got, took) = sink.join().unwrap();
    assert!(got >= total);
    let mbit = got as f64 * 8.0 / took.as_secs_f64() / 1e6;
    // TCP goodput over a 100 Mbit/s IP link at MTU 1500 is at most ~95.
    assert!(
        (80.0..=100.0).contains(&mbit),
        "goodput {mbit:.1} Mbit/s through a 100 Mbit/s link"
    );
    let mut emu = emu;
    let report = emu.stop();
    assert!(report.a2b.bytes_delivered >= total as u64);
}

#[test]
fn random_loss_and_an_outage() {
    if !require_emulator("the emulator loss test") {
        return;
    }
    let link = LinkConfig {
        loss: 0.1,
        outages: vec![(Duration::from_millis(1500), Duration::from_millis(2500))],
        ..Default::default()
    };
    let mut emu = emulator("loss", link, 1500);
    let server = echo_in_b(&emu, 9300);
    let client = socket_in_a(&emu);
    let counter = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        while let Ok((n, _)) = server.recv_from(&mut buf) {
            if n == 8 {
                got.push(u64::from_le_bytes(buf[..8].try_into().unwrap()));
            }
        }
        got
    });
    // 300 datagrams over 3 s: 100 fall in the outage, ~10% of the rest are lost.
    let t0 = Instant::now();
    for i in 0..300u64 {
        while t0.elapsed() < Duration::from_millis(i * 10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        client.send_to(&i.to_le_bytes(), (ADDR_B, 9300)).unwrap();
    }
    let got = counter.join().unwrap();
    let report = emu.stop();
    let in_outage = got.iter().filter(|&&i| (160..240).contains(&i)).count();
    assert_eq!(in_outage, 0, "datagrams crossed during the outage");
    assert!(report.a2b.dropped_outage >= 90, "{:?}", report.a2b);
    let lossy = 300 - report.a2b.dropped_outage;
    let loss = report.a2b.dropped_loss as f64 / lossy as f64;
    assert!((0.03..0.2).contains(&loss), "loss {loss:.3}");
    assert_eq!(got.len() as u64, report.a2b.delivered);
}
