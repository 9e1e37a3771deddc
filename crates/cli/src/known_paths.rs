//! What the last transfer to each host measured of its path, kept in
//! `$HAUL_HOME/known-paths/`: the UDP sender's capacity estimate and the
//! round trip it was measured at. The next push to the same host starts
//! its UDP channel at that rate instead of probing up from 100 Mbit/s
//! (P-26), which saves about a second at 150 ms and several at 600 ms.
//! A stale or wrong entry costs little: a slower path shows a queue
//! within a round trip and the rate drops to what it delivers.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    /// Bytes per second of datagram payload.
    rate: u64,
    rtt_ms: f64,
}

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
    let text = std::fs::read_to_string(dir().join(host_file_name(peer, ssh))).ok()?;
    let s: Saved = serde_json::from_str(&text).ok()?;
    let fresh = now_secs().saturating_sub(s.time) < KNOWN_PATH_TTL.as_secs();
    (fresh && s.rate > 0 && s.rtt_ms.is_finite() && s.rtt_ms > 0.0).then(|| KnownPath {
        rate: s.rate,
        rtt: Duration::from_secs_f64(s.rtt_ms / 1e3),
    })
}

/// Keeps what a finished push measured. Nothing is kept when the UDP
/// channel did not carry the data or its sender never left startup (a
/// transfer too short to fill the path). A failure to write is only
/// logged: the transfer itself succeeded.
pub fn save(peer: &Peer, ssh: bool, r: &Report) {
    let Some(estimate) = r.udp.map(|u| u.estimate).filter(|&e| e > 0) else {
        return;
    };
    let saved = Saved {
        time: now_secs(),
        rate: estimate,
        rtt_ms: r.rtt.as_secs_f64() * 1e3,
    };
    let d = dir();
    let path = d.join(host_file_name(peer, ssh));
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let text = serde_json::to_string(&saved).expect("plain data serializes");
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
            rtt_ms: 150.5,
        };
        let back: Saved = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}
