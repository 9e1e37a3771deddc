//! `haul doctor` and `haul taste` (issue 8) against hosts and data whose
//! facts are known: a namespace of the emulator with a chosen MTU, and
//! files of zeros, random bytes and log text. The doctor test needs root
//! for the emulator (it skips with a printed reason elsewhere; CI runs it).

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
        let mut c = emu.command_a("cat");
        c.arg(format!("/proc/sys/net/core/{key}"));
        String::from_utf8(c.output().unwrap().stdout)
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
