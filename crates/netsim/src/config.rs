//! What one direction of a link does to packets.

use std::time::Duration;

/// Two-state burst loss: in the good state packets are lost with
/// `loss_good`, in the bad state with `loss_bad`; before each packet the
/// state flips with `p_good_to_bad` or `p_bad_to_good`. Mean burst length
/// is `1 / p_bad_to_good` packets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliott {
    pub p_good_to_bad: f64,
    pub p_bad_to_good: f64,
    pub loss_bad: f64,
    pub loss_good: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Each packet's delay varies uniformly within ±jitter, but packets keep
    /// their order (a later packet never overtakes through jitter alone).
    pub jitter: Duration,
    /// Bottleneck rate in bits per second; `None` is unlimited.
    pub rate_bps: Option<u64>,
    /// Bytes that may wait for the transmitter; more is tail-dropped.
    /// `None`: one bandwidth-delay product of the round trip (2 × delay),
    /// at least 64 KiB.
    pub queue_bytes: Option<u64>,
    /// Independent random loss, 0..=1.
    pub loss: f64,
    pub gilbert_elliott: Option<GilbertElliott>,
    /// Fraction of packets held back so that later packets overtake them.
    pub reorder: f64,
    pub duplicate: f64,
    /// Fraction of packets with one bit flipped.
    pub corrupt: f64,
    /// Link down intervals, measured from the start.
    pub outages: Vec<(Duration, Duration)>,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            rate_bps: None,
            queue_bytes: None,
            loss: 0.0,
            gilbert_elliott: None,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            outages: Vec::new(),
        }
    }
}

impl LinkConfig {
    /// The queue limit in force: the configured one, or one BDP.
    pub fn queue_limit(&self) -> u64 {
        self.queue_bytes.unwrap_or_else(|| {
            let bdp = self.rate_bps.unwrap_or(0) as f64 / 8.0 * (2.0 * self.delay.as_secs_f64());
            (bdp as u64).max(64 << 10)
        })
    }

    /// Time to put `bytes` on the wire.
    pub fn serialization(&self, bytes: usize) -> Duration {
        match self.rate_bps {
            Some(r) if r > 0 => {
                Duration::from_nanos((bytes as u64 * 8).saturating_mul(1_000_000_000) / r)
            }
            _ => Duration::ZERO,
        }
    }

    pub fn in_outage(&self, now: Duration) -> bool {
        self.outages.iter().any(|&(a, b)| now >= a && now < b)
    }
}
