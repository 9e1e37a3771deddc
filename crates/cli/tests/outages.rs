//! Outages on the emulated link: one shorter than `--timeout` is ridden
//! through on either transport; one longer ends the transfer with a clear
//! error, and the same command afterwards resumes. Needs root (skips with a
//! printed reason elsewhere; CI runs as root and must run it).

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::emu::{cp_in_a, serve_in_b_with};
use common::*;
use netem::testing::{require_emulator, unique_name};
use netem::{Emulator, EmulatorConfig, ADDR_B};
use netsim::LinkConfig;

/// 60 ms of round trip, 200 Mbit/s, and every packet dropped both ways
/// from `from` to `to` after the emulator starts.
fn start(tag: &str, from: Duration, to: Duration) -> Emulator {
    let link = LinkConfig {
        delay: Duration::from_millis(30),
        rate_bps: Some(200_000_000),
        outages: vec![(from, to)],
        ..Default::default()
    };
    Emulator::start(EmulatorConfig {
        name: unique_name(tag),
        a2b: link.clone(),
        b2a: link,
        mtu: 1500,
        seed: 5,
        block_udp: false,
        only_tcp_ports: vec![],
        path_mtu: None,
    })
    .expect("emulator starts")
}

#[test]
fn an_outage_shorter_than_the_timeout_is_ridden_through_on_both_transports() {
    if !require_emulator("the outage test") {
        return;
    }
    for transport in ["udp", "tcp"] {
        // 16 MiB at 16 Mbit/s: about 8 s, with 4 s of silence inside.
        let mut emu = start("ride", Duration::from_secs(3), Duration::from_secs(7));
        let env = Env::new();
        let _server = serve_in_b_with(&emu, &env, &["--timeout", "20"]);
        let data = random_bytes(16 << 20, 21);
        let src = env.local.join("data.bin");
        write_file(&src, &data);
        let t0 = Instant::now();
        let out = cp_in_a(
            &emu,
            &env,
            &[
                "--json",
                "--timeout",
                "20",
                "--transport",
                transport,
                "--rate",
                "16M",
                src.to_str().unwrap(),
                &format!("{ADDR_B}:7050:data.bin"),
            ],
        );
        ok(&out);
        assert!(
            fs::read(env.root.join("data.bin")).unwrap() == data,
            "{transport}: copy differs"
        );
        let report = emu.stop();
        assert!(
            report.a2b.dropped_outage > 0,
            "{transport}: the outage fell outside the transfer ({:?}, {report:?})",
            t0.elapsed()
        );
    }
}

#[test]
fn an_outage_longer_than_the_timeout_fails_clearly_then_the_same_command_resumes() {
    if !require_emulator("the outage test") {
        return;
    }
    let outage_ends = Duration::from_secs(16);
    let emu = start("cut", Duration::from_secs(3), outage_ends);
    let started = Instant::now();
    let env = Env::new();
    let _server = serve_in_b_with(&emu, &env, &["--timeout", "4"]);
    let data = random_bytes(16 << 20, 22);
    let src = env.local.join("data.bin");
    write_file(&src, &data);
    let cmd = |extra: &[&str]| {
        let mut args = vec!["--json", "--timeout", "4", "--transport", "tcp"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[src.to_str().unwrap(), "198.18.0.2:7050:data.bin"]);
        cp_in_a(&emu, &env, &args)
    };
    assert_eq!(ADDR_B.to_string(), "198.18.0.2");
    let out = cmd(&["--rate", "16M"]);
    let err = fails(&out, 10);
    assert!(err.contains("--timeout"), "{err}");
    assert!(err.contains("run the same command again"), "{err}");
    assert!(!env.root.join("data.bin").exists());
    // The server's side times out too, and keeps what it verified.
    let partial = env.root.join(".data.bin.haul.part");
    assert!(
        wait_until(Duration::from_secs(20), || partial.exists()
            && !store::partial::in_use(&partial)),
        "the server kept no partial, or still holds it"
    );

    // Once the link is back, the same command (without the rate cap)
    // sends only what is missing.
    if let Some(left) = outage_ends.checked_sub(started.elapsed()) {
        std::thread::sleep(left + Duration::from_millis(500));
    }
    let had = delivered(&partial, &data);
    assert!(had > 0, "nothing was delivered before the outage");
    let out = cmd(&[]);
    ok(&out);
    assert!(
        fs::read(env.root.join("data.bin")).unwrap() == data,
        "resumed copy differs"
    );
    assert_resumed(&out, data.len() as u64, had);
}
