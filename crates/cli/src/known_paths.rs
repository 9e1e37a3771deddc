//! What the last transfers to each host measured of its path, kept in
//! `$HAUL_HOME/known-paths/`: the UDP sender's capacity estimate, the rate
//! a push or pull over TCP streams moved, and the round trip they were
//! measured at. The next push to the same host starts its UDP channel at the UDP
//! estimate instead of probing up from 100 Mbit/s (P-26), which saves
//! about a second at 150 ms and several at 600 ms, and any transfer sizes
//! its TCP streams for the path's rate rather than 10 Gbit/s. A stale or
//! wrong entry costs little: a slower path shows a queue within a round
//! trip and the rate drops to what it delivers; a faster one is probed
//! for, and over TCP the next transfer gets a quarter more room.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use connect::progress::Mark;
use endpoint::{KnownPath, Report};
use serde::{Deserialize, Serialize};

use crate::home;
use crate::probe::host_file_name;
use crate::reach::Peer;

/// How long a measurement is used: routes and load change.
pub const KNOWN_PATH_TTL: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Saved {
    /// Seconds since the Unix epoch.
    time: u64,
    /// The UDP sender's estimate, bytes per second of datagram payload;
    /// 0 if unknown.
    rate: u64,
    /// What a push or pull over TCP moved while data flowed, wire bytes
    /// per second; 0 if unknown.
    #[serde(default)]
    tcp_rate: u64,
    /// What that push's TCP streams delivered together at their most,
    /// bytes per second (P-46); 0 if unknown.
    #[serde(default)]
    tcp_peak: u64,
    rtt_ms: f64,
    /// The UDP payload the channel used, bytes; 0 if unknown. A pinned
    /// start sends its data at this size without set-up (P-48).
    #[serde(default)]
    payload: u64,
    /// When automatic transport last asked for the UDP channel and got
    /// none, seconds since the Unix epoch; 0 if it has not, or a transfer
    /// over UDP worked since (P-23).
    #[serde(default)]
    udp_failed_at: u64,
}

/// How long a UDP channel that did not come up keeps automatic transport
/// on TCP streams for the same host: a firewall that opens is found the
/// next day.
pub const UDP_RETRY: Duration = Duration::from_secs(24 * 3600);

/// Below this many bytes a TCP push's rate says more about its start than
/// about the path.
const TCP_SAMPLE_MIN: u64 = 64 << 20;

fn dir() -> PathBuf {
    home::dir().join("known-paths")
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The path the last transfer to `peer` measured, if less than
/// [`KNOWN_PATH_TTL`] ago.
pub fn load(peer: &Peer, ssh: bool) -> Option<KnownPath> {
    let s = read(peer, ssh)?;
    let fresh = now_secs().saturating_sub(s.time) < KNOWN_PATH_TTL.as_secs();
    (fresh && (s.rate > 0 || s.tcp_rate > 0))
        .then(|| s.known())
        .flatten()
}

/// Whether automatic transport asked for the UDP channel to `peer` less
/// than [`UDP_RETRY`] ago and got none (P-23).
pub fn udp_blocked(peer: &Peer, ssh: bool) -> bool {
    read(peer, ssh).is_some_and(|s| s.udp_blocked(now_secs()))
}

impl Saved {
    fn udp_blocked(&self, now: u64) -> bool {
        self.udp_failed_at > 0 && now.saturating_sub(self.udp_failed_at) < UDP_RETRY.as_secs()
    }

    /// When the UDP channel last failed, after `r`: now if it failed in
    /// `r`, never if `r` went over it, as before otherwise.
    fn udp_failed_after(last: Option<&Saved>, r: &Report) -> u64 {
        match (r.udp_failed, r.udp.is_some()) {
            (true, _) => now_secs(),
            (false, true) => 0,
            (false, false) => last.map_or(0, |s| s.udp_failed_at),
        }
    }

    /// What was kept, if its round trip is a sane one (positive, under an
    /// hour).
    fn known(&self) -> Option<KnownPath> {
        let sane = self.rtt_ms.is_finite() && self.rtt_ms > 0.0 && self.rtt_ms < 3_600_000.0;
        sane.then(|| KnownPath {
            rate: self.rate,
            tcp_rate: self.tcp_rate,
            tcp_peak: self.tcp_peak,
            rtt: Duration::from_secs_f64(self.rtt_ms / 1e3),
            udp_payload: self.payload,
        })
    }
}

fn read(peer: &Peer, ssh: bool) -> Option<Saved> {
    let text = std::fs::read_to_string(dir().join(host_file_name(peer, ssh))).ok()?;
    serde_json::from_str(&text).ok()
}

/// The UDP sender's estimate and the datagram payload it used.
type UdpMeasured = (u64, u64);
/// Over TCP: the average rate, and the streams' peak (0 if unmeasured).
type TcpMeasured = (u64, u64);

/// What a finished push measured of its path: the UDP sender's estimate
/// once it left startup, or, over TCP, the wire bytes a second from the
/// first data to the receiver's summary of a push large enough to say,
/// and what its streams delivered together at their most.
fn measured(r: &Report) -> Option<(Option<UdpMeasured>, Option<TcpMeasured>)> {
    if let Some(u) = r.udp {
        return (u.estimate > 0).then_some((Some((u.estimate, u.payload)), None));
    }
    let at = |m| r.timeline.iter().find(|(k, _)| *k == m).map(|(_, t)| *t);
    let secs = at(Mark::Finished)? - at(Mark::FirstData)?;
    let big = r.summary.file_bytes >= TCP_SAMPLE_MIN && r.wire_bytes >= TCP_SAMPLE_MIN;
    let average = || (r.wire_bytes as f64 / secs) as u64;
    (big && secs > 0.0).then(|| (None, Some((average(), r.tcp_peak))))
}

/// Forgets the datagram size kept for `peer`, after a transfer that lost
/// its path: a pinned start sends at that size without set-up (P-48), and
/// a path that carries less no longer would.
pub fn forget_payload(peer: &Peer, ssh: bool) {
    if let Some(s) = read(peer, ssh).filter(|s| s.payload > 0) {
        write(peer, ssh, &Saved { payload: 0, ..s });
    }
}

/// Keeps what a finished push or pull measured. Nothing is measured when
/// the UDP sender never left startup (or was the server's: a pull over
/// UDP keeps nothing), or a transfer over TCP moved less than 64 MiB
/// (transfers too short to fill the path); whether the UDP channel came
/// up is kept all the same. A failure to write is only logged: the
/// transfer itself succeeded.
pub fn save(peer: &Peer, ssh: bool, r: &Report) {
    let last = read(peer, ssh);
    let udp_failed_at = Saved::udp_failed_after(last.as_ref(), r);
    let Some((udp, tcp)) = measured(r) else {
        if last.as_ref().map_or(0, |s| s.udp_failed_at) != udp_failed_at {
            save_udp_outcome(peer, ssh, last, udp_failed_at, r.rtt);
        }
        return;
    };
    let rtt_ms = r.rtt.as_secs_f64() * 1e3;
    // The other transport's figure is kept while the round trip is the
    // same path's.
    let kept = last.filter(|s| s.known().is_some_and(|k| k.fits(r.rtt)));
    let saved = Saved {
        time: now_secs(),
        rate: udp.map_or_else(|| kept.as_ref().map_or(0, |s| s.rate), |u| u.0),
        tcp_rate: tcp.map_or_else(|| kept.as_ref().map_or(0, |s| s.tcp_rate), |t| t.0),
        // A push whose streams were held beside another flow measured no
        // peak of the path: the last one is kept.
        tcp_peak: tcp
            .map(|t| t.1)
            .filter(|&p| p > 0)
            .unwrap_or_else(|| kept.as_ref().map_or(0, |s| s.tcp_peak)),
        rtt_ms,
        payload: udp.map_or_else(|| kept.as_ref().map_or(0, |s| s.payload), |u| u.1),
        udp_failed_at,
    };
    write(peer, ssh, &saved);
}

/// Keeps when the UDP channel to `peer` last failed after a transfer too
/// short to measure the path: the next one need not wait for the channel.
/// With no file yet, rates of 0 load as no known path.
fn save_udp_outcome(
    peer: &Peer,
    ssh: bool,
    last: Option<Saved>,
    udp_failed_at: u64,
    rtt: Duration,
) {
    let saved = match last {
        Some(s) => Saved { udp_failed_at, ..s },
        None => Saved {
            time: now_secs(),
            rate: 0,
            tcp_rate: 0,
            tcp_peak: 0,
            rtt_ms: rtt.as_secs_f64() * 1e3,
            payload: 0,
            udp_failed_at,
        },
    };
    write(peer, ssh, &saved);
}

/// Writes `saved` for `peer`, whole or not at all (a temporary renamed
/// over the last); a failure is only logged.
fn write(peer: &Peer, ssh: bool, saved: &Saved) {
    let d = dir();
    let path = d.join(host_file_name(peer, ssh));
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let text = serde_json::to_string(saved).expect("plain data serializes");
    let res = std::fs::create_dir_all(&d)
        .and_then(|()| std::fs::write(&tmp, text + "\n"))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        tracing::debug!("the path's rate was not kept in {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_reads_back() {
        let s = Saved {
            time: now_secs(),
            rate: 122_000_000,
            tcp_rate: 0,
            tcp_peak: 0,
            rtt_ms: 150.5,
            payload: 1472,
            udp_failed_at: 0,
        };
        let back: Saved = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}

#[cfg(test)]
mod measure_tests {
    use super::*;

    #[test]
    fn a_udp_channel_that_failed_is_tried_again_after_a_day() {
        let s: Saved = serde_json::from_str(r#"{"time":1,"rate":5,"rtt_ms":150.0}"#).unwrap();
        assert_eq!(s.udp_failed_at, 0, "an older file: never failed");
        let failed = Saved {
            udp_failed_at: 1_000_000,
            ..s
        };
        assert!(failed.udp_blocked(1_000_000 + 3600));
        assert!(!failed.udp_blocked(1_000_000 + UDP_RETRY.as_secs()));
        assert!(!s.udp_blocked(1_000_000));
    }

    #[test]
    fn an_older_file_without_a_tcp_rate_reads() {
        let s: Saved = serde_json::from_str(r#"{"time":1,"rate":5,"rtt_ms":150.0}"#).unwrap();
        assert_eq!(s.tcp_rate, 0);
        assert_eq!(s.tcp_peak, 0);
        let k = s.known().unwrap();
        assert_eq!((k.rate, k.tcp_peak), (5, 0));
    }
}
