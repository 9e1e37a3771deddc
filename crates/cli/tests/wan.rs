//! haul over the emulated WAN: a server in one namespace, the client in the
//! other, across a long, lossy link. Needs root (skips with a printed
//! reason elsewhere; CI runs as root and must run it).

mod common;

use std::fs;
use std::io::{Read, Write};
use std::time::Duration;

use common::emu::{cp_in_a, serve_in_b};
use common::*;
use netem::testing::{require_emulator, unique_name};
use netem::{Emulator, EmulatorConfig, ADDR_B};
use netsim::LinkConfig;

#[test]
fn push_and_pull_across_a_long_lossy_link() {
    if !require_emulator("the haul-over-WAN test") {
        return;
    }
    // 200 Mbit/s, 60 ms RTT, 0.5% loss and 0.5% reordering each way.
    let link = LinkConfig {
        delay: Duration::from_millis(30),
        rate_bps: Some(200_000_000),
        loss: 0.005,
        reorder: 0.005,
        ..Default::default()
    };
    let cfg = EmulatorConfig {
        name: unique_name("wan"),
        a2b: link.clone(),
        b2a: link,
        mtu: 1500,
        seed: 11,
        block_udp: false,
        only_tcp_ports: vec![],
        path_mtu: None,
    };
    let mut emu = Emulator::start(cfg).expect("emulator starts");
    let env = Env::new();
    let _server = serve_in_b(&emu, &env);

    let data = random_bytes(24 << 20, 77);
    let src = env.local.join("data.bin");
    write_file(&src, &data);
    // Auto transport: 60 ms is a long path, so the UDP channel carries it.
    let out = cp_in_a(
        &emu,
        &env,
        &[
            "--json",
            src.to_str().unwrap(),
            &format!("{ADDR_B}:7050:/data.bin"),
        ],
    );
    ok(&out);
    assert!(
        fs::read(env.root.join("data.bin")).unwrap() == data,
        "pushed copy differs"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rtt = json["rtt_ms"].as_f64().unwrap();
    assert!(
        (58.0..90.0).contains(&rtt),
        "handshake RTT {rtt} ms over a 60 ms path"
    );
    assert_eq!(json["transport"], "udp", "{json}");
    let udp = &json["udp"];
    assert!(
        udp["datagrams_retransmitted"].as_u64().unwrap() > 0,
        "{json}"
    );
    // The link MTU is 1500: the probe must not pick more.
    assert!(udp["datagram_bytes"].as_u64().unwrap() <= 1472, "{json}");
    // The tail went covered by parity (P-47).
    assert!(udp["parity_datagrams_sent"].as_u64().unwrap() > 0, "{json}");
    // The wall time is accounted for, step by step, in order.
    let t = &json["timeline_s"];
    let steps = [
        "connected",
        "authenticated",
        "accepted",
        "data_path",
        "first_data",
    ];
    let at: Vec<f64> = steps.iter().map(|s| t[s].as_f64().unwrap()).collect();
    assert!(at.windows(2).all(|w| w[0] <= w[1]), "{t}");
    let (full, finished) = (
        t["full_rate"].as_f64().unwrap(),
        t["finished"].as_f64().unwrap(),
    );
    assert!(at[4] <= full && full <= finished, "{t}");
    // A first push to this host (a fresh HAUL_HOME) starts at the rate
    // set-up's packet train measured, not at 100 Mbit/s (P-23, P-26).
    assert_eq!(
        t["full_rate"], t["first_data"],
        "first contact starts at the path's rate: {json}"
    );
    assert!(finished <= json["duration_s"].as_f64().unwrap(), "{json}");
    // The path's rate is kept for the next push to this host, which
    // starts there instead of probing up from 100 Mbit/s (P-26).
    let kept = fs::read_to_string(env.home.join("known-paths").join("198.18.0.2_7050.json"))
        .expect("the path's rate is kept");
    let kept: serde_json::Value = serde_json::from_str(&kept).unwrap();
    assert!(kept["rate"].as_u64().unwrap() > 10_000_000, "{kept}");
    let out = cp_in_a(
        &emu,
        &env,
        &[
            "--json",
            src.to_str().unwrap(),
            &format!("{ADDR_B}:7050:/again.bin"),
        ],
    );
    ok(&out);
    assert!(fs::read(env.root.join("again.bin")).unwrap() == data);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &json["timeline_s"];
    assert_eq!(
        t["full_rate"], t["first_data"],
        "a known path starts at full rate: {json}"
    );
    // The key is pinned and the path known: the request rode in the
    // handshake's first message, and the data followed the hello at the
    // kept datagram size, without set-up (P-48).
    assert_eq!(json["request_in_handshake"], true, "{json}");
    assert_eq!(json["udp"]["datagram_bytes"], kept["payload"], "{json}");

    // Pulled back over UDP: the tail's losses are rebuilt here, from the
    // server's parity, not waited for (0.5% loss over its last round
    // trip's 1,700 datagrams: none lost is one chance in 5,000).
    let from = format!("{ADDR_B}:7050:data.bin");
    let json = pull_in_a(
        &emu,
        &env,
        &["--transport", "udp"],
        &from,
        "udp-back.bin",
        &data,
    );
    assert!(
        json["udp"]["datagrams_rebuilt"].as_u64().unwrap() > 0,
        "{json}"
    );

    // The TCP streams, asked for by name, across the same link.
    let flags = ["--transport", "tcp", "--streams", "4"];
    let json = pull_in_a(&emu, &env, &flags, &from, "back.bin", &data);
    assert_eq!(json["transport"], "tcp", "{json}");
    assert_eq!(json["streams"], 4, "{json}");
    // And pushed over them: the timeline holds the streams' ramp (the
    // sharing governor's samples) and the moment the last block queued
    // was written, in order.
    let to = format!("{ADDR_B}:7050:/tcp.bin");
    let out = cp_in_a(
        &emu,
        &env,
        &[&["--json"], &flags[..], &[src.to_str().unwrap(), &to]].concat(),
    );
    ok(&out);
    assert!(fs::read(env.root.join("tcp.bin")).unwrap() == data);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &json["timeline_s"];
    let at: Vec<f64> = ["first_data", "full_rate", "last_fresh", "finished"]
        .iter()
        .map(|s| t[s].as_f64().unwrap_or_else(|| panic!("no {s}: {json}")))
        .collect();
    assert!(at.windows(2).all(|w| w[0] <= w[1]), "{t}");
    // What is left after the last write is what the sockets still held,
    // a round trip and the receiver's summary: 0.2 s of 1.4 here, where a
    // mark at the first write after the last block was read left 0.54.
    assert!(at[3] - at[2] < 0.25 * (at[3] - at[0]), "{t}");

    let report = emu.stop();
    assert!(
        report.a2b.dropped_loss > 0 && report.b2a.dropped_loss > 0,
        "the link did lose packets: {report:?}"
    );
}

/// Pulls `from` into `name` in the client's directory with `flags` and
/// `--json`, checks the copy is `data`, and returns the JSON summary.
fn pull_in_a(
    emu: &Emulator,
    env: &Env,
    flags: &[&str],
    from: &str,
    name: &str,
    data: &[u8],
) -> serde_json::Value {
    let to = env.local.join(name);
    let mut args = vec!["--json"];
    args.extend_from_slice(flags);
    args.extend([from, to.to_str().unwrap()]);
    let out = cp_in_a(emu, env, &args);
    ok(&out);
    assert!(fs::read(&to).unwrap() == data, "pulled copy {name} differs");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn udp_channel_survives_corruption_duplication_and_reordering() {
    if !require_emulator("the UDP-channel-over-WAN test") {
        return;
    }
    // 100 Mbit/s, 40 ms RTT, and a link that loses, corrupts, duplicates
    // and reorders datagrams in both directions.
    let link = LinkConfig {
        delay: Duration::from_millis(20),
        rate_bps: Some(100_000_000),
        loss: 0.01,
        corrupt: 0.005,
        duplicate: 0.01,
        reorder: 0.01,
        ..Default::default()
    };
    let cfg = EmulatorConfig {
        name: unique_name("udp"),
        a2b: link.clone(),
        b2a: link,
        mtu: 9000,
        seed: 23,
        block_udp: false,
        only_tcp_ports: vec![],
        path_mtu: None,
    };
    let mut emu = Emulator::start(cfg).expect("emulator starts");
    let env = Env::new();
    let _server = serve_in_b(&emu, &env);

    // A tree with an empty file, small files and one of several blocks.
    let tree = env.local.join("tree");
    fs::create_dir_all(tree.join("sub/deeper")).unwrap();
    write_file(&tree.join("empty"), b"");
    for i in 0..20u64 {
        write_file(
            &tree.join(format!("sub/f{i}")),
            &random_bytes(1000 + i as usize * 997, i),
        );
    }
    write_file(&tree.join("sub/deeper/big"), &random_bytes(6 << 20, 99));

    // Push under --no-encrypt: corrupted data passes the header's tag but
    // not the block hash, so whole blocks are sent again.
    let out = cp_in_a(
        &emu,
        &env,
        &[
            "--json",
            "--transport",
            "udp",
            "--no-encrypt",
            "-rp",
            tree.to_str().unwrap(),
            &format!("{ADDR_B}:7050:/"),
        ],
    );
    ok(&out);
    assert_same_tree(&tree, &env.root.join("tree"));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["transport"], "udp", "{json}");
    assert!(
        json["udp"]["datagram_bytes"].as_u64().unwrap() > 1472,
        "jumbo datagrams on a 9000-byte MTU: {json}"
    );

    // Pull it back encrypted: corruption fails the AEAD, like a loss.
    let back = env.local.join("back");
    let out = cp_in_a(
        &emu,
        &env,
        &[
            "--transport",
            "udp",
            "-rp",
            &format!("{ADDR_B}:7050:tree"),
            back.to_str().unwrap(),
        ],
    );
    ok(&out);
    assert_same_tree(&tree, &back);

    let report = emu.stop();
    assert!(
        report.a2b.corrupted > 0 && report.b2a.corrupted + report.a2b.duplicated > 0,
        "the link did corrupt and duplicate: {report:?}"
    );
}

#[test]
fn auto_falls_back_to_tcp_where_udp_is_blocked_and_forced_udp_says_why() {
    if !require_emulator("the UDP-fallback test") {
        return;
    }
    let link = LinkConfig {
        delay: Duration::from_millis(30),
        rate_bps: Some(100_000_000),
        ..Default::default()
    };
    let cfg = EmulatorConfig {
        name: unique_name("fw"),
        a2b: link.clone(),
        b2a: link,
        mtu: 1500,
        seed: 5,
        block_udp: true,
        only_tcp_ports: vec![],
        path_mtu: None,
    };
    let emu = Emulator::start(cfg).expect("emulator starts");
    let env = Env::new();
    let _server = serve_in_b(&emu, &env);
    let data = random_bytes(2 << 20, 5);
    let src = env.local.join("d.bin");
    write_file(&src, &data);

    // Pushes `name` with automatic transport: its JSON report and stderr.
    let push = |name: &str| {
        let dest = format!("{ADDR_B}:7050:/{name}");
        let out = cp_in_a(&emu, &env, &["--json", src.to_str().unwrap(), &dest]);
        ok(&out);
        assert!(fs::read(env.root.join(name)).unwrap() == data);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["transport"], "tcp", "{json}");
        (json, String::from_utf8_lossy(&out.stderr).into_owned())
    };

    // 60 ms: auto asks for UDP, gets no answer, and moves to TCP streams.
    let (json, stderr) = push("d.bin");
    assert_eq!(json["udp_failed"], true, "{json}");
    assert!(
        stderr.contains("using TCP streams"),
        "the fallback is announced: {stderr}"
    );

    // The next push knows: TCP streams at once, no wait for an answer
    // that will not come (P-23).
    let (json, stderr) = push("d2.bin");
    assert_eq!(json["udp_failed"], false, "not asked: {json}");
    assert!(
        !stderr.contains("UDP data channel unavailable"),
        "no second try of UDP within a day: {stderr}"
    );

    // Asked for by name, UDP fails with a reason and a way out.
    let out = cp_in_a(
        &emu,
        &env,
        &[
            "--transport",
            "udp",
            src.to_str().unwrap(),
            &format!("{ADDR_B}:7050:/e.bin"),
        ],
    );
    let stderr = fails(&out, 3);
    assert!(
        stderr.contains("firewall") && stderr.contains("--transport tcp"),
        "{stderr}"
    );
    assert!(!env.root.join("e.bin").exists());
}

/// sshd inside namespace B, on the emulator's far side.
fn sshd_in_b(emu: &Emulator, env: &Env) -> common::sshd::Sshd {
    common::sshd::Sshd::start_with(env.dir.path(), ADDR_B, |p: &str| emu.command_b(p))
}

/// `haul cp` in namespace A through ssh to namespace B.
fn cp_ssh_in_a(
    emu: &Emulator,
    env: &Env,
    sshd: &common::sshd::Sshd,
    args: &[&str],
) -> std::process::Output {
    let rsh = sshd.rsh();
    let mut all = vec!["-e", rsh.as_str(), "--remote-haul", HAUL];
    all.extend_from_slice(args);
    cp_in_a(emu, env, &all)
}

#[test]
fn over_ssh_across_the_link_then_through_a_firewall_that_opens_only_ssh() {
    if !require_emulator("the haul-over-ssh WAN test")
        || !common::sshd::sshd_available("the haul-over-ssh WAN test")
    {
        return;
    }
    // 100 Mbit/s, 60 ms RTT, 0.2% loss: a long path, so auto takes UDP.
    let link = LinkConfig {
        delay: Duration::from_millis(30),
        rate_bps: Some(100_000_000),
        loss: 0.002,
        ..Default::default()
    };
    let env = Env::new();
    let data = random_bytes(6 << 20, 21);
    let src = env.local.join("data.bin");
    write_file(&src, &data);
    {
        let cfg = EmulatorConfig {
            name: unique_name("ssh"),
            a2b: link.clone(),
            b2a: link.clone(),
            mtu: 1500,
            seed: 3,
            block_udp: false,
            only_tcp_ports: vec![],
            path_mtu: None,
        };
        let emu = Emulator::start(cfg).expect("emulator starts");
        let sshd = sshd_in_b(&emu, &env);
        let dest = format!("{ADDR_B}:{}", env.root.join("direct.bin").display());
        let out = cp_ssh_in_a(&emu, &env, &sshd, &["--json", src.to_str().unwrap(), &dest]);
        ok(&out);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["route"], "ssh", "{json}");
        assert_eq!(json["transport"], "udp", "{json}");
        assert!(fs::read(env.root.join("direct.bin")).unwrap() == data);
    }
    // Only ssh's port is open: the direct connection meets silence, and the
    // data goes through the ssh channel, both ways, with a notice. The
    // firewall needs sshd's port before sshd starts, so it is picked here.
    let ssh_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let cfg = EmulatorConfig {
        name: unique_name("sshfw"),
        a2b: link.clone(),
        b2a: link.clone(),
        mtu: 1500,
        seed: 4,
        block_udp: false,
        only_tcp_ports: vec![ssh_port],
        path_mtu: None,
    };
    let emu = Emulator::start(cfg).expect("emulator starts");
    let sshd =
        common::sshd::Sshd::start_on(env.dir.path(), ADDR_B, ssh_port, |p: &str| emu.command_b(p));
    let dest = format!("{ADDR_B}:{}", env.root.join("relayed.bin").display());
    let out = cp_ssh_in_a(&emu, &env, &sshd, &["--json", src.to_str().unwrap(), &dest]);
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no direct connection") && stderr.contains("through the ssh channel"),
        "the fallback is announced: {stderr}"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["route"], "ssh-relay", "{json}");
    assert!(fs::read(env.root.join("relayed.bin")).unwrap() == data);
    let back = env.local.join("back.bin");
    let src_remote = format!("{ADDR_B}:{}", env.root.join("relayed.bin").display());
    ok(&cp_ssh_in_a(
        &emu,
        &env,
        &sshd,
        &[&src_remote, back.to_str().unwrap()],
    ));
    assert!(fs::read(&back).unwrap() == data);
    drop(sshd);
    drop(emu);

    // The firewall also opens a range for bulk data (TCP only): with
    // --remote-ports the remote side listens inside it, and the data goes
    // direct again, on TCP streams since UDP stays blocked.
    let (lo, hi) = (47060u16, 47062u16);
    let cfg = EmulatorConfig {
        name: unique_name("sshpr"),
        a2b: link.clone(),
        b2a: link,
        mtu: 1500,
        seed: 5,
        block_udp: false,
        only_tcp_ports: vec![ssh_port, lo, lo + 1, hi],
        path_mtu: None,
    };
    let emu = Emulator::start(cfg).expect("emulator starts");
    let sshd =
        common::sshd::Sshd::start_on(env.dir.path(), ADDR_B, ssh_port, |p: &str| emu.command_b(p));
    let dest = format!("{ADDR_B}:{}", env.root.join("ranged.bin").display());
    let range = format!("{lo}-{hi}");
    let out = cp_ssh_in_a(
        &emu,
        &env,
        &sshd,
        &[
            "--json",
            "--remote-ports",
            &range,
            src.to_str().unwrap(),
            &dest,
        ],
    );
    ok(&out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["route"], "ssh", "{json}");
    assert_eq!(json["transport"], "tcp", "{json}");
    assert!(fs::read(env.root.join("ranged.bin")).unwrap() == data);
}

#[test]
fn a_bulk_flow_crosses_a_long_lossy_link_through_the_tunnel() {
    if !require_emulator("the tunnel-over-WAN test") {
        return;
    }
    // 60 ms RTT, 200 Mbit/s, 0.5% loss and 0.5% reordering each way: the
    // lanes lose and reorder packets, the tunnelled stream must not.
    let link = LinkConfig {
        delay: Duration::from_millis(30),
        rate_bps: Some(200_000_000),
        loss: 0.005,
        reorder: 0.005,
        ..Default::default()
    };
    let emu = Emulator::start(EmulatorConfig {
        name: unique_name("tun"),
        a2b: link.clone(),
        b2a: link,
        mtu: 1500,
        seed: 13,
        block_udp: false,
        only_tcp_ports: vec![],
        path_mtu: None,
    })
    .expect("emulator starts");
    let env = Env::new();
    let _server = common::emu::serve_in_b_with(&emu, &env, &["--tunnel-to", "127.0.0.1:5001"]);
    let mut tunnel = emu
        .command_a(HAUL)
        .args(["tunnel", "--listen", "15001", "--to", "127.0.0.1:5001"])
        .args(["--via", &format!("{ADDR_B}:7050")])
        .env("HAUL_HOME", &env.home)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let up = wait_until(Duration::from_secs(30), || {
        env.home.join("tunnels/15001.json").exists()
    });
    assert!(up, "the tunnel started");

    // Random bytes, so that neither the cache nor compression shrinks them.
    let data = random_bytes(24 << 20, 31);
    // The flow's two ends are threads of this test inside the namespaces
    // (no netcat): a target in B, a client of the tunnel in A.
    let (target, secs) = std::thread::scope(|s| {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let emu = &emu;
        let target = s.spawn(move || {
            emu.in_b(move || {
                let l = std::net::TcpListener::bind("127.0.0.1:5001")?;
                let _ = ready_tx.send(());
                let (mut c, _) = l.accept()?;
                c.set_read_timeout(Some(CP_LIMIT))?;
                let mut got = Vec::new();
                c.read_to_end(&mut got)?;
                Ok(got)
            })
        });
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the target listens");
        let t0 = std::time::Instant::now();
        emu.in_a(|| {
            let mut c = std::net::TcpStream::connect("127.0.0.1:15001")?;
            c.set_write_timeout(Some(CP_LIMIT))?;
            c.write_all(&data)?;
            c.shutdown(std::net::Shutdown::Write)
        })
        .expect("the flow goes into the tunnel");
        let got = target.join().expect("the target thread");
        (got, t0.elapsed().as_secs_f64())
    });
    let _ = tunnel.kill();
    let _ = tunnel.wait();
    let got = target.expect("the target saw the end of the flow");
    assert!(got == data, "the flow arrived intact");
    eprintln!(
        "24 MiB through the tunnel in {secs:.1}s ({:.0} Mbit/s)",
        (24 << 20) as f64 * 8.0 / secs / 1e6
    );
}
