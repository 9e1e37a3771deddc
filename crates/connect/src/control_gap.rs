//! How often a control writer writes (P-34).
//!
//! Control messages are small, and each write on a `TCP_NODELAY`
//! connection leaves as its own packet. A connection in slow start may
//! have only ten packets in flight, whatever their size, so a sender that
//! announces zero blocks as fast as it reads them, or a receiver that acks
//! each block as it lands, spent round trips pushing 33-byte packets
//! through that window: 512 MiB of zeros, nothing but such messages, took
//! 1.39 s on a 150 ms path, and 1.14 s once writes kept a gap. A writer
//! that waits a sixteenth of the round trip between writes lets the
//! sessions merge what comes meanwhile into one message (`Zeros` and
//! `Acks` are lists), so a round trip carries at most about sixteen
//! writes, and no message waits more than [`MAX_GAP`].

use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The longest a message waits for the gap to pass.
pub const MAX_GAP: Duration = Duration::from_millis(10);

/// The share of the round trip between two writes.
const RTT_SHARE: u32 = 16;

/// How often the round trip is read again from the kernel.
const REFRESH: Duration = Duration::from_millis(250);

/// The gap a control writer keeps between writes, from its connection's
/// round-trip time.
pub struct ControlGap {
    gap: Duration,
    last_write: Option<Instant>,
    read_at: Option<Instant>,
}

impl Default for ControlGap {
    fn default() -> Self {
        ControlGap::new()
    }
}

impl ControlGap {
    pub fn new() -> ControlGap {
        ControlGap {
            gap: Duration::ZERO,
            last_write: None,
            read_at: None,
        }
    }

    /// The gap for a path of round-trip time `rtt`.
    pub fn for_rtt(rtt: Duration) -> Duration {
        (rtt / RTT_SHARE).min(MAX_GAP)
    }

    /// How long to wait before the next write, if at all.
    pub fn hold(&self, now: Instant) -> Option<Duration> {
        let since = now.saturating_duration_since(self.last_write?);
        (since < self.gap).then(|| self.gap - since)
    }

    /// A write went out at `now` on `socket`.
    pub fn wrote(&mut self, now: Instant, socket: Option<&TcpStream>) {
        self.last_write = Some(now);
        let stale = self
            .read_at
            .is_none_or(|t| now.saturating_duration_since(t) >= REFRESH);
        if let (true, Some(s)) = (stale, socket) {
            if let Some(rtt) = crate::net::tcp_rtt(s) {
                self.gap = ControlGap::for_rtt(rtt);
            }
            self.read_at = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_is_a_share_of_the_round_trip_up_to_a_bound() {
        assert_eq!(
            ControlGap::for_rtt(Duration::from_micros(50)),
            Duration::from_nanos(3125)
        );
        assert_eq!(
            ControlGap::for_rtt(Duration::from_millis(80)),
            Duration::from_millis(5)
        );
        assert_eq!(ControlGap::for_rtt(Duration::from_millis(300)), MAX_GAP);
    }

    #[test]
    fn holds_only_within_the_gap_after_a_write() {
        let t0 = Instant::now();
        let mut g = ControlGap::new();
        assert_eq!(g.hold(t0), None, "the first write never waits");
        g.gap = Duration::from_millis(8);
        g.wrote(t0, None);
        assert_eq!(
            g.hold(t0 + Duration::from_millis(3)),
            Some(Duration::from_millis(5))
        );
        assert_eq!(g.hold(t0 + Duration::from_millis(8)), None);
        assert_eq!(g.hold(t0 + Duration::from_millis(20)), None);
    }
}
