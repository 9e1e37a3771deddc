//! `haul probe HOST`: measures the path to a haul server (round trips,
//! loss, path MTU, memory-to-memory goodput per transport and stream
//! count), prints what it found and its advice, and saves the advice for
//! `cp` and `doctor` (P-36). The measuring is the driver's
//! (`endpoint::probe`).

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use connect::datagram::echo::RttStats;
use connect::TransferError;
use endpoint::Advice;
use endpoint::{ClientConfig, Transport};
use probe::{Findings, ProbeOptions, Trial};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::args::ProbeArgs;
use crate::reach::{usage, Peer, Reach};
use crate::report::{bits_per_sec, bytes};
use crate::{exit, home};

/// How long saved advice is used by `cp`: paths change (routes, load),
/// so a stale measurement should not decide for long.
pub const ADVICE_TTL: Duration = Duration::from_secs(24 * 3600);

/// What `probe` saves for a host, in `$HAUL_HOME/probes/`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Saved {
    pub host: String,
    pub port: Option<u16>,
    pub ssh: bool,
    /// Seconds since the Unix epoch.
    pub time: u64,
    pub transport: String,
    pub streams: u16,
    /// Bits per second.
    pub rate_bps: u64,
    pub rtt_ms: f64,
}

impl Saved {
    pub fn advice(&self) -> Option<Advice> {
        Some(Advice {
            transport: match self.transport.as_str() {
                "tcp" => Transport::Tcp,
                "udp" => Transport::Udp,
                _ => return None,
            },
            streams: self.streams.clamp(1, 256),
            rate: self.rate_bps / 8,
        })
    }

    fn age(&self) -> Duration {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Duration::from_secs(now.saturating_sub(self.time))
    }
}

fn probes_dir() -> PathBuf {
    home::dir().join("probes")
}

/// The file of a host's advice: a daemon's by host and port, an
/// ssh-started side's by host.
fn advice_file(peer: &Peer, ssh: bool) -> PathBuf {
    probes_dir().join(host_file_name(peer, ssh))
}

/// A file name for what is kept about a host: a daemon's by host and
/// port, an ssh-started side's by host; characters other than letters,
/// digits, `.`, `-` and `_` become `_`.
pub fn host_file_name(peer: &Peer, ssh: bool) -> String {
    let name = if ssh {
        format!("ssh_{}", peer.host)
    } else {
        format!(
            "{}_{}",
            peer.host,
            peer.port.unwrap_or(endpoint::DEFAULT_PORT)
        )
    };
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}.json")
}

/// The advice saved for `peer` by a probe less than [`ADVICE_TTL`] ago.
pub fn saved(peer: &Peer, ssh: bool) -> Option<Advice> {
    let text = std::fs::read_to_string(advice_file(peer, ssh)).ok()?;
    let s: Saved = serde_json::from_str(&text).ok()?;
    (s.age() < ADVICE_TTL).then(|| s.advice()).flatten()
}

/// The most recent probe of any host, for `doctor` without `--rtt`.
pub fn latest() -> Option<Saved> {
    std::fs::read_dir(probes_dir())
        .ok()?
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|t| serde_json::from_str::<Saved>(&t).ok())
        .max_by_key(|s| s.time)
}

fn save(peer: &Peer, ssh: bool, f: &Findings) -> Result<PathBuf, String> {
    let r = &f.recommendation;
    let saved = Saved {
        host: peer.host.clone(),
        port: peer.port,
        ssh,
        time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        transport: transport_name(r.transport).to_string(),
        streams: r.streams,
        rate_bps: r.rate * 8,
        rtt_ms: f.rtt().map_or(0.0, |s| s.min.as_secs_f64() * 1e3),
    };
    let path = advice_file(peer, ssh);
    let dir = probes_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_string_pretty(&saved).expect("plain data serializes");
    std::fs::write(&tmp, text + "\n")
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

fn transport_name(t: Transport) -> &'static str {
    match t {
        Transport::Udp => "udp",
        _ => "tcp",
    }
}

pub fn run(a: ProbeArgs) -> i32 {
    crate::logging::init(a.common.verbose);
    match probe(&a) {
        Ok(()) => exit::OK,
        Err(e) => crate::report::failed(&e, a.json),
    }
}

fn probe(a: &ProbeArgs) -> Result<(), TransferError> {
    if !(0.2..=60.0).contains(&a.seconds) {
        return Err(usage("--seconds must be between 0.2 and 60"));
    }
    let peer = Peer::parse(&a.target)?;
    let reach = Reach::decide(&a.conn, peer)?;
    let protection = crate::reach::protection(a.no_encrypt);
    let mut dialer = reach.dialer(&a.conn, String::new())?;
    let opts = ProbeOptions {
        span: Duration::from_secs_f64(a.seconds),
        // The server's set-up responder waits 30 s at least for the
        // choice of transport; the echoes run well within it.
        echo_span: Duration::from_secs_f64(a.seconds.min(10.0)),
    };
    let quiet = a.json;
    let note = |what: &str| {
        if !quiet {
            eprintln!("haul: measuring {what}...");
        }
    };
    let found = {
        let mut connect = |transport: Transport, streams: Option<u16>| {
            // Generated data does not compress: measure the path, not a
            // codec's guess.
            let cfg = ClientConfig {
                transport,
                streams,
                compress: codec::Mode::Fixed(codec::Codec::None),
                ..reach.config(&a.conn, protection)?
            };
            dialer.connect(cfg)
        };
        probe::run(&mut connect, &opts, &note)
    };
    let route = dialer.finish(false);
    let found = found?;
    let saved = if a.no_save {
        None
    } else {
        match save(&reach.peer, reach.ssh, &found) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("haul: the advice was not saved: {e}");
                None
            }
        }
    };
    if a.json {
        println!("{}", json_of(&reach.peer, route, &found, saved.as_ref()));
    } else {
        print!("{}", text_of(&reach.peer, &found, saved.as_ref()));
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Milliseconds, with more digits below one.
fn show_ms(d: Duration) -> String {
    let v = ms(d);
    if v < 1.0 {
        format!("{v:.3} ms")
    } else {
        format!("{v:.1} ms")
    }
}

fn rtt_json(s: Option<RttStats>) -> serde_json::Value {
    s.map_or(serde_json::Value::Null, |s| {
        json!({ "min_ms": ms(s.min), "mean_ms": ms(s.mean), "max_ms": ms(s.max), "jitter_ms": ms(s.jitter) })
    })
}

fn trial_json(t: &Trial) -> serde_json::Value {
    json!({
        "transport": transport_name(t.transport), "streams": t.streams, "bytes": t.bytes,
        "seconds": t.seconds, "goodput_bps": (t.goodput * 8.0) as u64,
        "average_bps": (t.average * 8.0) as u64,
        "datagrams_sent": t.datagrams.map(|d| d.0), "datagrams_lost": t.datagrams.map(|d| d.1),
    })
}

fn json_of(peer: &Peer, route: endpoint::Route, f: &Findings, saved: Option<&PathBuf>) -> String {
    let r = &f.recommendation;
    let echo = f.echo.as_ref();
    json!({
        "host": peer.host, "port": peer.port, "route": crate::report::route_name(route),
        "rtt": rtt_json(f.rtt()),
        "rtt_source": if echo.is_some_and(|e| !e.rtts.is_empty()) { "udp-echo" } else { "handshake" },
        "loss": echo.map(|e| json!({
            "probes": e.sent, "answered": e.answered,
            "round_trip": e.round_trip_loss(), "one_way": e.one_way_loss(),
        })),
        "path_mtu": echo.map(|e| e.mtu),
        "udp_payload": echo.map(|e| e.payload),
        "route_mtu": echo.and_then(|e| e.route_mtu),
        "udp_error": f.udp_failed,
        "trials": f.trials.iter().map(trial_json).collect::<Vec<_>>(),
        "recommendation": {
            "transport": transport_name(r.transport), "streams": r.streams,
            "rate_bps": r.rate * 8, "compress": "auto", "reasons": r.reasons,
        },
        "saved": saved.map(|p| p.display().to_string()),
    })
    .to_string()
}

fn text_of(peer: &Peer, f: &Findings, saved: Option<&PathBuf>) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "path to {}:", peer.host);
    if let Some(s) = f.rtt() {
        let from = match &f.echo {
            Some(e) if !e.rtts.is_empty() => format!("{} UDP echoes", e.rtts.len()),
            _ => format!("{} handshakes", f.handshake_rtts.len()),
        };
        let _ = writeln!(
            o,
            "  round trip   min {}, mean {}, max {}, jitter {} ({from})",
            show_ms(s.min),
            show_ms(s.mean),
            show_ms(s.max),
            show_ms(s.jitter)
        );
    }
    match &f.echo {
        Some(e) => {
            let _ = writeln!(
                o,
                "  loss         {:.2}% each way ({} of {} echoes lost, {:.2}% round trip)",
                e.one_way_loss() * 100.0,
                e.sent - e.answered,
                e.sent,
                e.round_trip_loss() * 100.0
            );
            let kernel = match e.route_mtu {
                Some(k) => format!("; the kernel's MTU for the route: {k}"),
                None => String::new(),
            };
            let _ = writeln!(
                o,
                "  path MTU     {} bytes (UDP payload {}, by don't-fragment probes up to 9000{kernel})",
                e.mtu, e.payload
            );
        }
        None => {
            let why = f.udp_failed.as_deref().unwrap_or("not measured");
            let _ = writeln!(
                o,
                "  loss, MTU    not measured: UDP channel unavailable ({why})"
            );
        }
    }
    let _ = writeln!(
        o,
        "goodput, memory to memory (steady: from half of each test's time to 95% of its bytes):"
    );
    for t in &f.trials {
        let what = match t.transport {
            Transport::Udp => "UDP channel".to_string(),
            _ => format!(
                "TCP, {} stream{}",
                t.streams,
                if t.streams == 1 { "" } else { "s" }
            ),
        };
        let lost = t
            .datagrams
            .filter(|d| d.0 > 0)
            .map(|(sent, lost)| {
                format!(
                    ", {:.2}% of datagrams lost under load",
                    lost as f64 * 100.0 / sent as f64
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "  {what:<16} {:>12} steady ({} in {:.1} s: {} on average{lost})",
            bits_per_sec(t.goodput * 8.0),
            bytes(t.bytes),
            t.seconds,
            bits_per_sec(t.average * 8.0)
        );
    }
    let r = &f.recommendation;
    let _ = writeln!(
        o,
        "advice: --transport {} --streams {} --compress auto (expect about {})",
        transport_name(r.transport),
        r.streams,
        bits_per_sec(r.rate as f64 * 8.0)
    );
    for why in &r.reasons {
        let _ = writeln!(o, "  - {why}");
    }
    if let Some(p) = saved {
        let _ = writeln!(
            o,
            "saved to {}: `haul cp` uses it for this host for {} h where transport and streams are left automatic; `haul doctor` checks this host against it",
            p.display(),
            ADVICE_TTL.as_secs() / 3600
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let p = Peer::parse("dtn1").unwrap();
        assert_eq!((p.host.as_str(), p.port, p.user), ("dtn1", None, None));
        let p = Peer::parse("me@dtn1:7050").unwrap();
        assert_eq!(
            (p.host.as_str(), p.port, p.user.as_deref()),
            ("dtn1", Some(7050), Some("me"))
        );
        let p = Peer::parse("[::1]:7051").unwrap();
        assert_eq!((p.host.as_str(), p.port), ("::1", Some(7051)));
        assert!(Peer::parse("").is_err());
        assert!(Peer::parse("/tmp/x").is_err());
    }

    #[test]
    fn saved_advice_reads_back_and_expires() {
        let mut s = Saved {
            host: "dtn1".into(),
            port: None,
            ssh: true,
            time: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            transport: "udp".into(),
            streams: 8,
            rate_bps: 900_000_000,
            rtt_ms: 150.0,
        };
        let back: Saved = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        assert_eq!(
            s.advice(),
            Some(Advice {
                transport: Transport::Udp,
                streams: 8,
                rate: 112_500_000
            })
        );
        assert!(s.age() < ADVICE_TTL);
        s.time -= ADVICE_TTL.as_secs() + 1;
        assert!(s.age() > ADVICE_TTL);
        s.transport = "carrier pigeon".into();
        assert_eq!(s.advice(), None);
    }
}
