//! A token bucket: `rate` bytes per second, with a burst of `burst` bytes.
//!
//! `take(now, n)` reserves `n` bytes and returns how long the caller must
//! wait before sending them. Reservations may run the bucket into debt, so a
//! block larger than the burst is still paced correctly rather than refused.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    /// `rate` in bytes per second; `burst` bytes may go at once after idling.
    pub fn new(rate: u64, burst: u64) -> TokenBucket {
        TokenBucket {
            rate: rate.max(1) as f64,
            burst: burst as f64,
            tokens: burst as f64,
            last: None,
        }
    }

    pub fn rate(&self) -> u64 {
        self.rate as u64
    }

    /// A new rate and burst from now on; tokens held stay, within the new
    /// burst.
    pub fn set_rate(&mut self, rate: u64, burst: u64) {
        self.rate = rate.max(1) as f64;
        self.burst = burst as f64;
        self.tokens = self.tokens.min(self.burst);
    }

    /// Reserves `bytes` at time `now`; returns the delay before sending them.
    pub fn take(&mut self, now: Instant, bytes: u64) -> Duration {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        }
        self.last = Some(now.max(self.last.unwrap_or(now)));
        self.tokens -= bytes as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends as fast as the bucket allows for `secs` simulated seconds and
    /// returns the achieved rate.
    fn simulate(rate: u64, burst: u64, chunk: u64, secs: f64) -> f64 {
        let mut b = TokenBucket::new(rate, burst);
        let start = Instant::now();
        let mut now = start;
        let mut sent = 0u64;
        while now.duration_since(start).as_secs_f64() < secs {
            now += b.take(now, chunk);
            sent += chunk;
        }
        sent as f64 / now.duration_since(start).as_secs_f64()
    }

    #[test]
    fn holds_the_rate_within_one_percent() {
        for (rate, chunk) in [
            (62_500_000, 4 << 20),
            (1_000_000, 1500),
            (125_000_000, 64 << 10),
        ] {
            let got = simulate(rate, chunk.max(rate / 100), chunk, 60.0);
            let err = (got - rate as f64).abs() / rate as f64;
            assert!(err < 0.01, "rate {rate} chunk {chunk}: got {got}");
        }
    }

    #[test]
    fn idle_time_buys_at_most_one_burst() {
        let mut b = TokenBucket::new(1000, 500);
        let t0 = Instant::now();
        assert_eq!(b.take(t0, 500), Duration::ZERO);
        let later = t0 + Duration::from_secs(100);
        assert_eq!(b.take(later, 500), Duration::ZERO);
        assert!(b.take(later, 500) >= Duration::from_millis(499));
    }
}
