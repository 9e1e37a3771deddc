//! `haul doctor`, `haul probe` and `haul taste` (issue 8) against hosts,
//! paths and data whose facts are known: namespaces of the emulator with a
//! chosen delay, loss, rate and MTU, and files of zeros, random bytes and
//! log text. The doctor and probe tests need root for the emulator (they
//! skip with a printed reason elsewhere; CI runs them).

mod common;

use std::process::Command;

use common::*;
use netem::testing::{require_emulator, unique_name};
use netem::{Emulator, EmulatorConfig};
use netsim::LinkConfig;

fn json_of(out: &std::process::Output) -> serde_json::Value {
    ok(out);
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn check<'a>(doc: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {doc}"))
}

#[test]
fn doctor_reads_an_emulated_hosts_mtu_and_buffers_and_judges_them_by_the_bdp() {
    if !require_emulator("the doctor test") {
        return;
    }
    let link = LinkConfig {
        delay: std::time::Duration::from_millis(5),
        rate_bps: Some(100_000_000),
        ..Default::default()
    };
    let cfg = EmulatorConfig {
        name: unique_name("doc"),
        a2b: link.clone(),
        b2a: link,
        mtu: 1280,
        seed: 1,
        block_udp: false,
        only_tcp_ports: vec![],
        path_mtu: None,
    };
    let emu = Emulator::start(cfg).expect("emulator starts");
    let dest = tempfile::tempdir().unwrap();
    let doctor = |rtt: &str, rate: &str| {
        let mut c: Command = emu.command_a(HAUL);
        c.args([
            "doctor", "--json", "--rtt", rtt, "--rate", rate, "--size", "1T",
        ])
        .arg("--dest")
        .arg(dest.path());
        json_of(&c.output().unwrap())
    };
    // What the namespace's /proc/sys says, read by another program there.
    let sysctl = |key: &str| -> u64 {
        emu.in_a(|| std::fs::read_to_string(format!("/proc/sys/net/core/{key}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let long = doctor("150", "1G");
    assert_eq!(long["bdp_bytes"], 18_750_000, "{long}");
    assert_eq!(long["assumed"], false);
    let mtu = check(&long, "MTU of tun-a");
    assert_eq!(mtu["value"], "1280", "{mtu}");
    assert_eq!(mtu["status"], "warn", "below 1500: {mtu}");
    // Buffers: the value read, judged against twice the BDP (37.5 MB),
    // with that value in the fix.
    for key in ["rmem_max", "wmem_max"] {
        let have = sysctl(key);
        let c = check(&long, &format!("net.core.{key}"));
        assert!(
            c["value"].as_str().unwrap().starts_with(&have.to_string()),
            "{c} against {have}"
        );
        if have < 37_500_000 {
            assert_eq!(c["status"], "warn", "{c}");
            let fix = format!("net.core.{key}=37500000");
            assert!(c["fix"].as_str().unwrap().contains(&fix), "{c}");
        } else {
            assert_eq!(c["status"], "ok", "{c}");
        }
    }
    // A terabyte does not fit a test's temporary directory.
    let disk = long["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"].as_str().unwrap().starts_with("free disk"))
        .unwrap();
    assert_eq!(disk["status"], "warn", "{disk}");
    // A short, slow path asks only for the 4 MiB floor.
    let short = doctor("2", "100M");
    assert_eq!(short["bdp_bytes"], 25_000, "{short}");
    let ok_at_floor = sysctl("rmem_max") >= 4 << 20;
    let status = &check(&short, "net.core.rmem_max")["status"];
    assert_eq!(status == "ok", ok_at_floor, "{short}");
    assert_eq!(
        check(&short, "UDP receive buffer")["status"],
        "ok",
        "TCP under 50 ms"
    );
}

#[test]
fn probe_measures_an_emulated_paths_delay_loss_mtu_and_rate_and_cp_follows_its_advice() {
    if !require_emulator("the probe test") {
        return;
    }
    // 40 ms round trip, 2% loss each way, 200 Mbit/s; 9000-byte MTUs at
    // both ends and a hop of 4000 between them.
    let link = LinkConfig {
        delay: std::time::Duration::from_millis(20),
        rate_bps: Some(200_000_000),
        loss: 0.02,
        ..Default::default()
    };
    let cfg = EmulatorConfig {
        name: unique_name("prb"),
        a2b: link.clone(),
        b2a: link,
        mtu: 9000,
        seed: 7,
        block_udp: false,
        only_tcp_ports: vec![],
        path_mtu: Some(4000),
    };
    let emu = Emulator::start(cfg).expect("emulator starts");
    let env = Env::new();
    let _server = emu::serve_in_b(&emu, &env);
    let mut c: Command = emu.command_a(HAUL);
    c.args(["probe", "--json", "--seconds", "1.5"])
        .arg(format!("{}:7050", netem::ADDR_B))
        .env("HAUL_HOME", &env.home)
        .stdin(std::process::Stdio::null());
    let p = json_of(&output_within(c, CP_LIMIT));
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("not a number in {p}"));
    // Round trip: the 40 ms set, plus little (the emulator's own hops).
    let rtt = &p["rtt"];
    assert_eq!(p["rtt_source"], "udp-echo", "{p}");
    assert!((39.5..46.0).contains(&f(&rtt["min_ms"])), "{rtt}");
    assert!(f(&rtt["mean_ms"]) < 50.0, "{rtt}");
    assert!(f(&rtt["jitter_ms"]) < 3.0, "{rtt}");
    // Loss: 2% each way, from 1000 echoes (about 40 lost round trip).
    let loss = f(&p["loss"]["one_way"]);
    assert!((0.01..0.035).contains(&loss), "{p}");
    // The path MTU, exactly: the hop's, not the ends'.
    assert_eq!(p["path_mtu"], 4000, "{p}");
    // Goodput: every test's average below the line rate, the best steady
    // rate near it. The steady rate reads high by what a starved receiver
    // had yet to read at half time and read after it, faster than the
    // link, from its socket buffers: up to 28% over the link (255 and 256
    // Mbit/s, each once) when the whole suite ran beside it on these two
    // cores.
    let trials = p["trials"].as_array().unwrap();
    assert!(trials.len() >= 2, "{p}");
    assert!(trials.iter().any(|t| t["transport"] == "udp"), "{p}");
    let best = trials
        .iter()
        .map(|t| f(&t["goodput_bps"]))
        .fold(0.0, f64::max);
    assert!(trials.iter().all(|t| f(&t["goodput_bps"]) <= 275e6), "{p}");
    assert!(trials.iter().all(|t| f(&t["average_bps"]) <= 200e6), "{p}");
    assert!(
        best > 100e6,
        "the best test fills half the link at least: {p}"
    );
    let advice = &p["recommendation"];
    // The advice's rate is its setting's goodput: the best, or within the
    // 5% a cheaper setting may give up.
    let rate = f(&advice["rate_bps"]);
    assert!(rate <= best + 8.0 && rate * 1.06 >= best, "{p}");
    assert_eq!(advice["compress"], "auto");
    assert!(p["saved"].is_string(), "{p}");

    // cp to the same host, transport and streams left automatic, follows
    // the saved advice; at 40 ms it would otherwise take TCP streams.
    let data = random_bytes(4 << 20, 9);
    let src = env.local.join("advised");
    write_file(&src, &data);
    let src = src.to_string_lossy().into_owned();
    let dest = format!("{}:7050:advised", netem::ADDR_B);
    let out = emu::cp_in_a(&emu, &env, &["--json", &src, &dest]);
    let r = json_of(&out);
    assert_eq!(r["advised"], true, "{r}");
    assert_eq!(r["transport"], advice["transport"], "{r} after {advice}");
    // Its streams are the advice's, but no more than the file has blocks
    // (4 of 1 MiB): a small transfer opens no idle streams.
    if advice["transport"] == "tcp" {
        let advised = advice["streams"].as_u64().unwrap();
        assert_eq!(r["streams"], advised.min(4), "{r} after {advice}");
    }
    assert_eq!(std::fs::read(env.root.join("advised")).unwrap(), data);
    // Asked for explicitly, a transport overrides the advice.
    let out = emu::cp_in_a(&emu, &env, &["--json", "--transport", "tcp", &src, &dest]);
    let r = json_of(&out);
    assert_eq!(
        (r["advised"].clone(), r["transport"].clone()),
        (false.into(), "tcp".into())
    );
}

#[test]
fn taste_reports_the_zeros_and_the_compressibility_of_known_data() {
    let dir = tempfile::tempdir().unwrap();
    let mib = 1 << 20;
    let zeros = dir.path().join("zeros");
    write_file(&zeros, &vec![0u8; 8 * mib]);
    let random = dir.path().join("random");
    write_file(&random, &random_bytes(8 * mib, 5));
    let text = dir.path().join("text.log");
    write_file(&text, &codec::samples::log_text(8 * mib, 3));
    let taste = |paths: &[&std::path::Path], extra: &[&str]| {
        let mut c = Command::new(HAUL);
        c.args(["taste", "--json"]).args(extra).args(paths);
        json_of(&c.output().unwrap())
    };
    let ratio = |doc: &serde_json::Value, codec: &str| {
        doc["codecs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["codec"] == codec)
            .unwrap()["ratio"]
            .as_f64()
            .unwrap()
    };
    // Half zeros, half random: the zeros are found, the rest does not shrink.
    let mixed = taste(&[&zeros, &random], &[]);
    let zf = mixed["zero_fraction"].as_f64().unwrap();
    assert!((zf - 0.5).abs() < 0.01, "{mixed}");
    assert!(ratio(&mixed, "lz4") > 0.99, "{mixed}");
    assert_eq!(mixed["sampled_bytes"], 16 * mib, "{mixed}");
    // Log text shrinks, zstd more than lz4; on a slow link compressing
    // wins and auto takes it, on any link auto is never below sending raw.
    let logs = taste(&[&text], &["--sample", "4M"]);
    assert_eq!(logs["zero_fraction"], 0.0);
    assert_eq!(logs["sampled_bytes"], 4 * mib, "{logs}");
    let (lz4, zstd) = (ratio(&logs, "lz4"), ratio(&logs, "zstd:3"));
    assert!(zstd < lz4 && lz4 < 0.6, "lz4 {lz4}, zstd {zstd}");
    let slow = taste(&[&text], &["--rate", "100M"]);
    let links = slow["links"].as_array().unwrap();
    assert_eq!(links.len(), 1);
    assert_eq!(links[0]["link_bps"], 100_000_000u64);
    let g = &links[0]["goodput_bps"];
    let (none, auto) = (g["none"].as_f64().unwrap(), g["auto"].as_f64().unwrap());
    assert!((none - 100e6).abs() < 1e6, "raw fills the link: {g}");
    assert!(auto > 2.0 * none, "{g}");
    for l in taste(&[&text, &random], &[])["links"].as_array().unwrap() {
        let g = &l["goodput_bps"];
        assert!(g["auto"].as_f64() >= g["none"].as_f64(), "{l}");
    }
}

#[test]
fn taste_of_nothing_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(HAUL)
        .args(["taste"])
        .arg(dir.path())
        .output()
        .unwrap();
    let err = fails(&out, 6);
    assert!(err.contains("nothing to taste"), "{err}");
}

#[test]
fn doctor_takes_the_path_the_latest_probe_measured() {
    let home = tempfile::tempdir().unwrap();
    let probes = home.path().join("probes");
    std::fs::create_dir_all(&probes).unwrap();
    let saved = |host: &str, time: u64, rtt: f64, rate: u64| {
        let doc = serde_json::json!({
            "host": host, "port": 7050, "ssh": false, "time": time,
            "transport": "udp", "streams": 4, "rate_bps": rate, "rtt_ms": rtt,
        });
        std::fs::write(probes.join(format!("{host}_7050.json")), doc.to_string()).unwrap();
    };
    saved("old", 1_000, 10.0, 100_000_000);
    saved("dtn1", 2_000, 80.0, 500_000_000);
    let doctor = |extra: &[&str]| {
        let mut c = Command::new(HAUL);
        c.args(["doctor", "--json"])
            .args(extra)
            .env("HAUL_HOME", home.path());
        json_of(&c.output().unwrap())
    };
    let d = doctor(&[]);
    assert_eq!(d["source"], "probe", "{d}");
    assert_eq!(d["probed_host"], "dtn1", "the latest: {d}");
    // 500 Mbit/s at 80 ms: 5 MB in flight.
    assert_eq!(d["bdp_bytes"], 5_000_000, "{d}");
    // Given values win over the probe.
    let d = doctor(&["--rtt", "150", "--rate", "1G"]);
    assert_eq!(
        (d["source"].clone(), d["bdp_bytes"].clone()),
        ("given".into(), 18_750_000.into())
    );
}
