//! Rate control, sans-IO: callers pass the time and act on what they are
//! told.
//!
//! - [`TokenBucket`]: the hard cap (`--rate`) that all TCP data streams draw
//!   from, so their sum stays under it whatever the number of streams.
//! - [`RateController`]: the policy behind a rate-based (UDP) channel, fed
//!   receiver reports ([`Feedback`]); one file per algorithm: [`Fixed`]
//!   and [`Adaptive`].
//! - [`TcpShare`]: the sharing policy (`--fair`, `--background`) over the
//!   TCP data streams, which the kernel's congestion control runs.

use std::time::Duration;

mod adaptive;
mod compete;
mod controller;
mod stagger;
mod tcp_share;
mod token_bucket;

pub use adaptive::{Adaptive, Share};
pub use controller::{Feedback, Fixed, RateController};
pub use tcp_share::{TcpAction, TcpSample, TcpShare};
pub use token_bucket::TokenBucket;

/// Parses a rate such as `500M`, `1.5G`, `800k` or `100000` as bits per
/// second (the unit network people quote) and returns bytes per second.
pub fn parse_rate(text: &str) -> Option<u64> {
    let t = text
        .trim()
        .trim_end_matches("bit/s")
        .trim_end_matches("bps")
        .trim_end_matches("b");
    let (num, mult) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 1e3),
        'm' | 'M' => (&t[..t.len() - 1], 1e6),
        'g' | 'G' => (&t[..t.len() - 1], 1e9),
        't' | 'T' => (&t[..t.len() - 1], 1e12),
        _ => (t, 1.0),
    };
    let bits: f64 = num.parse().ok()?;
    if !bits.is_finite() || bits <= 0.0 {
        return None;
    }
    Some(((bits * mult) / 8.0).max(1.0) as u64)
}

/// Time to send `bytes` at `rate` bytes per second.
pub fn transmit_time(bytes: u64, rate: u64) -> Duration {
    Duration::from_secs_f64(bytes as f64 / rate.max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_network_units() {
        assert_eq!(parse_rate("500M"), Some(62_500_000));
        assert_eq!(parse_rate("1G"), Some(125_000_000));
        assert_eq!(parse_rate("1.5G"), Some(187_500_000));
        assert_eq!(parse_rate("800k"), Some(100_000));
        assert_eq!(parse_rate("8"), Some(1));
        assert_eq!(parse_rate("0"), None);
        assert_eq!(parse_rate("fast"), None);
        assert_eq!(parse_rate(""), None);
    }
}
