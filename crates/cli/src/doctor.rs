//! `haul doctor [--rtt MS --rate R]`: checks this host against the
//! bandwidth-delay product of the path it is to fill (issue 8; seed 003's
//! gains came from 128 MB buffers, the congestion control, the MTU and the
//! CPU). Each line is OK or WARN; a WARN says the exact setting to apply,
//! with a value derived from the BDP, and why.
//!
//! [`Facts::read`] is the only part that reads the host; [`checks`] is a
//! pure function of those facts and the path, tested on made-up hosts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use crate::args::DoctorArgs;

/// A long path assumed when none is given: 1 Gbit/s at 150 ms.
const DEFAULT_RTT_MS: f64 = 150.0;
const DEFAULT_RATE: u64 = 1_000_000_000;
/// Bits per second one core carries through haul's data path (AES-GCM,
/// BLAKE3, copies) at each end, with room to spare: a 2-core VM pulled
/// 5.5–6.6 Gbit/s on loopback with both ends on its two cores.
const PER_CORE_BPS: f64 = 3e9;

/// What the checks look at.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub rmem_max: Option<u64>,
    pub wmem_max: Option<u64>,
    /// `net.ipv4.tcp_rmem` / `tcp_wmem`: min, default, max.
    pub tcp_rmem: Option<[u64; 3]>,
    pub tcp_wmem: Option<[u64; 3]>,
    pub cc_available: Vec<String>,
    pub cc_default: Option<String>,
    /// Interfaces that are up, loopback left out: name and MTU.
    pub mtus: Vec<(String, u32)>,
    pub cores: usize,
    /// Distinct frequency governors of the CPUs; empty without cpufreq.
    pub governors: Vec<String>,
    /// The destination directory and its free bytes.
    pub free: Option<(PathBuf, u64)>,
    /// Root may force socket buffers past the caps (SO_*BUFFORCE).
    pub root: bool,
}

/// The path to fill.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub rtt: Duration,
    /// Bits per second.
    pub rate: u64,
    /// Bytes to be written at the destination, if known.
    pub size: Option<u64>,
}

impl Target {
    /// Bytes in flight that keep the path full.
    pub fn bdp(&self) -> u64 {
        (self.rate as f64 / 8.0 * self.rtt.as_secs_f64()) as u64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub check: String,
    pub status: Status,
    pub value: String,
    /// The setting to apply; only for a WARN.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    pub why: String,
}

fn ok(check: impl Into<String>, value: impl Into<String>, why: impl Into<String>) -> Check {
    Check {
        check: check.into(),
        status: Status::Ok,
        value: value.into(),
        fix: None,
        why: why.into(),
    }
}

fn warn(
    check: impl Into<String>,
    value: impl Into<String>,
    fix: impl Into<String>,
    why: impl Into<String>,
) -> Check {
    Check {
        check: check.into(),
        status: Status::Warn,
        value: value.into(),
        fix: Some(fix.into()),
        why: why.into(),
    }
}

/// Every check of `f` against `t`, in a fixed order.
pub fn checks(f: &Facts, t: &Target) -> Vec<Check> {
    let bdp = t.bdp();
    // Linux keeps about half of a TCP buffer for its own bookkeeping, so
    // a window of one BDP takes a buffer of two, and never less than the
    // 4 MiB most distributions already allow.
    let want = (2 * bdp).max(4 << 20);
    let rtt_ms = t.rtt.as_secs_f64() * 1e3;
    let per_stream = |buf: u64| (buf / 2) as f64 * 8.0 / t.rtt.as_secs_f64();
    let mut out = Vec::new();
    let forced = if f.root {
        " haul forces its own buffers past it as root (SO_*BUFFORCE); other programs cannot."
    } else {
        ""
    };
    for (name, v) in [
        ("net.core.rmem_max", f.rmem_max),
        ("net.core.wmem_max", f.wmem_max),
    ] {
        out.push(match v {
            Some(v) if v >= want => ok(name, bytes(v), format!("at least twice the BDP ({})", bytes(bdp))),
            Some(v) => warn(
                name,
                bytes(v),
                format!("sysctl -w {name}={want}   (and in /etc/sysctl.d/90-haul.conf to keep it)"),
                format!(
                    "the largest socket buffer a program may ask for: one TCP stream then reaches about {} at {rtt_ms:.0} ms, and the UDP channel's buffer is capped too; the path needs {} in flight.{forced}",
                    rate_name(per_stream(v)),
                    bytes(bdp)
                ),
            ),
            None => warn(name, "unreadable", format!("sysctl {name}"), "could not read /proc/sys"),
        });
    }
    for (name, v) in [
        ("net.ipv4.tcp_rmem", f.tcp_rmem),
        ("net.ipv4.tcp_wmem", f.tcp_wmem),
    ] {
        out.push(match v {
            Some([lo, def, max]) if max >= want => ok(
                name,
                format!("{lo} {def} {max}"),
                "autotuning may grow a stream's buffer to twice the BDP",
            ),
            Some([lo, def, max]) => warn(
                name,
                format!("{lo} {def} {max}"),
                format!("sysctl -w {name}=\"{lo} {def} {want}\""),
                format!(
                    "TCP autotuning stops at the third value: one stream then reaches about {} at {rtt_ms:.0} ms, where the path takes {}. haul opens more streams, or uses UDP, to make up for it; scp and rsync cannot",
                    rate_name(per_stream(max)),
                    rate_name(t.rate as f64)
                ),
            ),
            None => warn(name, "unreadable", format!("sysctl {name}"), "could not read /proc/sys"),
        });
    }
    let have_bbr = f.cc_available.iter().any(|c| c == "bbr");
    let shown = format!(
        "{} (available: {})",
        f.cc_default.as_deref().unwrap_or("?"),
        f.cc_available.join(" ")
    );
    out.push(if have_bbr {
        ok(
            "congestion control",
            shown,
            "bbr is available: haul sets it on its own connections; for other programs, sysctl -w net.ipv4.tcp_congestion_control=bbr",
        )
    } else {
        warn(
            "congestion control",
            shown,
            "modprobe tcp_bbr && sysctl -w net.ipv4.tcp_congestion_control=bbr",
            "loss-based congestion control (cubic, reno) halves its window at each loss and takes many round trips to grow back on a long path; bbr paces at the measured bottleneck rate. haul's UDP channel has its own rate control either way",
        )
    });
    let udp = connect::sizing::udp_buffer(t.rtt, Some(t.rate / 8)) as u64;
    let rmem = f.rmem_max.unwrap_or(0);
    out.push(if t.rtt < endpoint::client::AUTO_UDP_RTT {
        ok(
            "UDP receive buffer",
            format!("{} may be granted", bytes(rmem)),
            "under 50 ms haul takes TCP streams unless told --transport udp",
        )
    } else if f.root || rmem >= udp {
        ok(
            "UDP receive buffer",
            if f.root {
                format!("{} wanted; root forces it", bytes(udp))
            } else {
                format!("{} may be granted, {} wanted", bytes(rmem), bytes(udp))
            },
            "the UDP channel's socket buffer holds a BDP at the target rate (16 to 128 MiB)",
        )
    } else {
        warn(
            "UDP receive buffer",
            format!("{} may be granted, {} wanted", bytes(rmem), bytes(udp)),
            format!("sysctl -w net.core.rmem_max={udp}"),
            "datagrams that arrive while the receiver is busy wait in the socket buffer; a small one drops them (RcvbufErrors in /proc/net/snmp) and they must be sent again",
        )
    });
    if f.mtus.is_empty() {
        out.push(ok(
            "MTU",
            "no interface up but loopback",
            "nothing to check",
        ));
    }
    for (dev, mtu) in &f.mtus {
        let name = format!("MTU of {dev}");
        out.push(if *mtu < 1500 {
            warn(
                name,
                mtu.to_string(),
                format!("ip link set dev {dev} mtu 1500   (if the network beneath allows it)"),
                "below Ethernet's 1500: a tunnel or VPN; every packet carries less data, and haul's UDP channel sends datagrams of at most MTU − 28 bytes",
            )
        } else if *mtu < 9000 && t.rate >= 10_000_000_000 {
            warn(
                name,
                mtu.to_string(),
                format!("ip link set dev {dev} mtu 9000   (only if every hop carries it: check with ping -M do -s 8972 HOST)"),
                "at 10 Gbit/s and more, per-packet work limits a core; 9000-byte frames carry six times the data per packet",
            )
        } else {
            ok(name, mtu.to_string(), "haul finds the path's MTU itself (DF probes up to 9000)")
        });
    }
    let need = (t.rate as f64 / PER_CORE_BPS).ceil() as usize;
    out.push(if f.cores >= need.max(1) {
        ok(
            "CPU cores",
            f.cores.to_string(),
            format!(
                "{} needs about {} per end for hashing and encryption",
                rate_name(t.rate as f64),
                need.max(1)
            ),
        )
    } else {
        warn(
            "CPU cores",
            f.cores.to_string(),
            "haul cp --no-encrypt   (on a trusted link: blocks stay hashed and authenticated)",
            format!(
                "{} needs about {need} cores per end for hashing and encryption (about {} a core)",
                rate_name(t.rate as f64),
                rate_name(PER_CORE_BPS)
            ),
        )
    });
    out.push(match f.governors.iter().find(|g| *g == "powersave" || *g == "conservative") {
        Some(g) => warn(
            "CPU frequency governor",
            f.governors.join(" "),
            "cpupower frequency-set -g performance",
            format!("{g} lowers the clock while cores look idle, and a transfer's bursts then run slow"),
        ),
        None if f.governors.is_empty() => ok(
            "CPU frequency governor",
            "none (no cpufreq: a virtual machine?)",
            "the host or hypervisor sets the clock",
        ),
        None => ok("CPU frequency governor", f.governors.join(" "), "the clock is not held down"),
    });
    out.push(match (&f.free, t.size) {
        (None, _) => warn("free disk", "unreadable", "haul doctor --dest DIR", "could not read the destination's free space"),
        (Some((dir, free)), Some(size)) if *free < size => warn(
            format!("free disk at {}", dir.display()),
            bytes(*free),
            format!("free {} at {} or choose another destination", bytes(size - free), dir.display()),
            format!("{} are to be written; a full disk ends the transfer (exit 9), keeping what arrived for a resume", bytes(size)),
        ),
        (Some((dir, free)), _) => ok(
            format!("free disk at {}", dir.display()),
            bytes(*free),
            t.size.map_or("give --size to compare with what is to be written".to_string(), |s| format!("room for {}", bytes(s))),
        ),
    });
    out
}

impl Facts {
    /// Reads this host: /proc/sys, /sys/class/net, cpufreq, statvfs.
    pub fn read(dest: &Path) -> Facts {
        let num = |p: &str| read(p).and_then(|s| s.trim().parse().ok());
        let triple = |p: &str| {
            let v: Vec<u64> = read(p)?
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            v.try_into().ok()
        };
        let words = |p: &str| -> Vec<String> {
            read(p)
                .map(|s| s.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default()
        };
        let mut mtus = Vec::new();
        if let Ok(dir) = std::fs::read_dir("/sys/class/net") {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                let base = format!("/sys/class/net/{name}");
                let flags = read(&format!("{base}/flags"))
                    .and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
                    .unwrap_or(0);
                // IFF_UP, and not IFF_LOOPBACK.
                if flags & 1 == 1 && flags & 8 == 0 {
                    if let Some(m) =
                        read(&format!("{base}/mtu")).and_then(|s| s.trim().parse().ok())
                    {
                        mtus.push((name, m));
                    }
                }
            }
        }
        mtus.sort();
        let mut governors: Vec<String> = std::fs::read_dir("/sys/devices/system/cpu")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| read(&format!("{}/cpufreq/scaling_governor", e.path().display())))
            .map(|g| g.trim().to_string())
            .collect();
        governors.sort();
        governors.dedup();
        Facts {
            rmem_max: num("/proc/sys/net/core/rmem_max"),
            wmem_max: num("/proc/sys/net/core/wmem_max"),
            tcp_rmem: triple("/proc/sys/net/ipv4/tcp_rmem"),
            tcp_wmem: triple("/proc/sys/net/ipv4/tcp_wmem"),
            cc_available: words("/proc/sys/net/ipv4/tcp_available_congestion_control"),
            cc_default: words("/proc/sys/net/ipv4/tcp_congestion_control")
                .into_iter()
                .next(),
            mtus,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            governors,
            free: free_space(dest).map(|f| (dest.to_path_buf(), f)),
            root: connect::net::can_force_buffers(),
        }
    }
}

fn read(p: &str) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

fn free_space(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a valid out
    // pointer for the call's duration.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

pub fn run(a: DoctorArgs) -> i32 {
    let given = a.rtt.is_some() || a.rate.is_some();
    // Without --rtt and --rate: the path the last `haul probe` measured.
    let probed = (!given)
        .then(crate::probe::latest)
        .flatten()
        .filter(|p| p.rtt_ms > 0.0 && p.rate_bps > 0);
    let (rtt_ms, rate) = match &probed {
        Some(p) => (p.rtt_ms, p.rate_bps),
        None => (
            a.rtt.unwrap_or(DEFAULT_RTT_MS),
            // parse_rate gives bytes per second.
            a.rate.map_or(DEFAULT_RATE, |r| r * 8),
        ),
    };
    let source = match &probed {
        _ if given => "given",
        Some(_) => "probe",
        None => "assumed",
    };
    let t = Target {
        rtt: Duration::from_secs_f64(rtt_ms / 1e3),
        rate,
        size: a.size,
    };
    let facts = Facts::read(&a.dest);
    let list = checks(&facts, &t);
    let warnings = list.iter().filter(|c| c.status == Status::Warn).count();
    if a.json {
        let out = json!({
            "rtt_ms": t.rtt.as_secs_f64() * 1e3, "rate_bps": t.rate, "bdp_bytes": t.bdp(),
            "assumed": source == "assumed", "source": source,
            "probed_host": probed.as_ref().map(|p| &p.host),
            "warnings": warnings, "checks": list,
        });
        println!("{out}");
        return 0;
    }
    println!(
        "path: {} at {:.0} ms round trip: {} in flight (the BDP){}",
        rate_name(t.rate as f64),
        t.rtt.as_secs_f64() * 1e3,
        bytes(t.bdp()),
        match &probed {
            _ if given => String::new(),
            Some(p) => format!(
                " — as `haul probe {}` measured it; give another with --rtt MS --rate R",
                p.host
            ),
            None => " — assumed; give yours with --rtt MS --rate R, or run `haul probe HOST`"
                .to_string(),
        }
    );
    for c in &list {
        let tag = match c.status {
            Status::Ok => "OK  ",
            Status::Warn => "WARN",
        };
        println!("{tag} {}: {}", c.check, c.value);
        if let Some(fix) = &c.fix {
            println!("       fix: {fix}");
        }
        println!("       why: {}", c.why);
    }
    println!(
        "{warnings} warning(s).{}",
        if warnings > 0 && !facts.root {
            " Settings under /proc/sys need root."
        } else {
            ""
        }
    );
    0
}

/// The exact number, for the fixes, and its size in words.
fn bytes(b: u64) -> String {
    format!("{b} ({})", crate::report::bytes(b))
}

fn rate_name(bits: f64) -> String {
    crate::report::bits_per_sec(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This VM's defaults: 4 MB caps, bbr, one 1500 interface, 2 cores.
    fn stock() -> Facts {
        Facts {
            rmem_max: Some(4194304),
            wmem_max: Some(4194304),
            tcp_rmem: Some([4096, 131072, 33554432]),
            tcp_wmem: Some([4096, 16384, 4194304]),
            cc_available: vec!["reno".into(), "bbr".into(), "cubic".into()],
            cc_default: Some("bbr".into()),
            mtus: vec![("eth0".into(), 1500)],
            cores: 2,
            governors: vec![],
            free: Some(("/data".into(), 100 << 30)),
            root: false,
        }
    }

    fn target(rate: u64, rtt_ms: u64) -> Target {
        Target {
            rtt: Duration::from_millis(rtt_ms),
            rate,
            size: None,
        }
    }

    fn find<'a>(list: &'a [Check], name: &str) -> &'a Check {
        list.iter().find(|c| c.check == name).unwrap()
    }

    #[test]
    fn buffers_are_judged_against_twice_the_bdp_and_the_fix_names_it() {
        // 1 Gbit/s at 150 ms: 18.75 MB in flight, 37.5 MB of buffer.
        let list = checks(&stock(), &target(1_000_000_000, 150));
        let r = find(&list, "net.core.rmem_max");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.fix.as_deref().unwrap().split_whitespace().nth(2),
            Some("net.core.rmem_max=37500000")
        );
        assert!(r.why.contains("111.8 Mbit/s"), "{}", r.why);
        // tcp_rmem's 32 MiB is short of 37.5 MB too; its fix keeps the
        // first two values.
        let t = find(&list, "net.ipv4.tcp_rmem");
        assert_eq!(t.status, Status::Warn);
        assert!(t
            .fix
            .as_deref()
            .unwrap()
            .contains("\"4096 131072 37500000\""));
        // On a LAN the stock host is fine.
        let lan = checks(&stock(), &target(1_000_000_000, 1));
        assert!(lan.iter().all(|c| c.status == Status::Ok), "{lan:#?}");
    }

    #[test]
    fn congestion_control_mtu_cores_governor_and_disk() {
        let mut f = stock();
        f.cc_available = vec!["reno".into(), "cubic".into()];
        f.mtus.push(("wg0".into(), 1420));
        f.governors = vec!["powersave".into()];
        f.free = Some(("/data".into(), 1 << 30));
        let mut t = target(10_000_000_000, 50);
        t.size = Some(2 << 30);
        let list = checks(&f, &t);
        for name in [
            "congestion control",
            "MTU of eth0",
            "MTU of wg0",
            "CPU cores",
            "CPU frequency governor",
            "free disk at /data",
        ] {
            let c = find(&list, name);
            assert_eq!(c.status, Status::Warn, "{c:?}");
            assert!(c.fix.is_some());
        }
        assert!(find(&list, "MTU of eth0")
            .fix
            .as_deref()
            .unwrap()
            .contains("mtu 9000"));
        assert!(find(&list, "CPU cores").why.contains("4 cores"));
    }

    #[test]
    fn root_may_force_the_udp_buffer() {
        let mut f = stock();
        let t = target(1_000_000_000, 150);
        assert_eq!(
            find(&checks(&f, &t), "UDP receive buffer").status,
            Status::Warn
        );
        f.root = true;
        assert_eq!(
            find(&checks(&f, &t), "UDP receive buffer").status,
            Status::Ok
        );
    }
}
