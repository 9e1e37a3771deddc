//! The rate a paced flow takes while a loss-based flow (CUBIC, Reno) keeps
//! the bottleneck's queue full: CUBIC's own window law (RFC 9438) carried
//! over to rates, so that two such flows converge on equal shares as two
//! CUBIC flows do.
//!
//! A rate `r` on a path of round trip `rtt` holds `r × rtt / segment`
//! segments in flight, CUBIC's window. A loss event (the queue overflowed)
//! multiplies the rate by [`BETA`]; between loss events the window follows
//! `W(t) = C (t − K)³ + W_max`, with `K = ∛(W_max (1 − β) / C)`, and never
//! grows slower than Reno would (CUBIC's TCP-friendly region). Before the
//! first loss event the rate doubles each round trip, as slow start does.

use std::time::Duration;

/// CUBIC's multiplicative decrease and growth constant (RFC 9438 §4.5,
/// §5.1).
const BETA: f64 = 0.7;
const C: f64 = 0.4;

/// The least share of the path a sender keeps while competing, however
/// many flows share it (a 32nd: beside 31 CUBIC flows its fair share).
pub(crate) const LEAST_SHARE: f64 = 1.0 / 32.0;

#[derive(Debug)]
pub(crate) struct Compete {
    /// Bytes a segment carries on this path: CUBIC counts in segments.
    segment: f64,
    rtt: f64,
    /// The window, in segments, before the last loss event (none yet:
    /// slow start).
    w_max: Option<f64>,
    k: f64,
    epoch: Duration,
    /// No second cut within a round trip of one (one loss event a window,
    /// as TCP's recovery).
    last_cut: Option<Duration>,
}

impl Compete {
    pub(crate) fn new(segment: usize, rtt: Duration) -> Compete {
        Compete {
            segment: segment.max(512) as f64,
            rtt: rtt.as_secs_f64().max(1e-3),
            w_max: None,
            k: 0.0,
            epoch: Duration::ZERO,
            last_cut: None,
        }
    }

    fn window(&self, rate: f64) -> f64 {
        rate * self.rtt / self.segment
    }

    fn rate_of(&self, window: f64) -> f64 {
        window * self.segment / self.rtt
    }

    /// The queue overflowed at `now`, with `delivered` bytes a second
    /// arriving: back off, unless this round trip has already. Returns the
    /// new rate, if it changed.
    pub(crate) fn loss(&mut self, now: Duration, delivered: f64) -> Option<f64> {
        let rtt = Duration::from_secs_f64(self.rtt);
        if self.last_cut.is_some_and(|t| now < t + rtt) {
            return None;
        }
        let w = self.window(delivered);
        self.w_max = Some(w);
        self.k = (w * (1.0 - BETA) / C).cbrt();
        self.epoch = now;
        self.last_cut = Some(now);
        Some(self.rate_of(w * BETA))
    }

    /// No slow start: CUBIC goes on from `rate`, convex from the start
    /// (`K = 0`), as after a timeout.
    pub(crate) fn leave_slow_start(&mut self, now: Duration, rate: f64) {
        if self.w_max.is_none() {
            self.w_max = Some(self.window(rate));
            self.k = 0.0;
            self.epoch = now;
        }
    }

    /// The rate rose to `rate` at `now` outside the law (the path had
    /// room): CUBIC goes on from there, convex from the start, rather
    /// than back down to where its course had come.
    pub(crate) fn rebase(&mut self, now: Duration, rate: f64) {
        self.w_max = Some(self.window(rate));
        self.k = 0.0;
        self.epoch = now;
    }

    /// Before the first loss event: the path is still being measured.
    pub(crate) fn in_slow_start(&self) -> bool {
        self.w_max.is_none()
    }

    /// The rate at `now`, from `rate` after a report `interval` long.
    pub(crate) fn grow(&self, now: Duration, rate: f64, interval: Duration) -> f64 {
        let Some(w_max) = self.w_max else {
            // Slow start: double each round trip.
            return rate * 2f64.powf((interval.as_secs_f64() / self.rtt).min(1.0));
        };
        let t = now.saturating_sub(self.epoch).as_secs_f64();
        // CUBIC aims one round trip ahead.
        let cubic = w_max + C * (t + self.rtt - self.k).powi(3);
        let reno = w_max * BETA + 3.0 * (1.0 - BETA) / (1.0 + BETA) * t / self.rtt;
        self.rate_of(cubic.max(reno))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_loss_event_cuts_once_a_round_trip() {
        let mut c = Compete::new(1448, 150 * MS);
        let r = c.loss(Duration::from_secs(1), 1e8).unwrap();
        assert!((r - 0.7e8).abs() < 1.0);
        assert!(c.loss(Duration::from_secs(1) + 100 * MS, 0.7e8).is_none());
        assert!(c.loss(Duration::from_secs(1) + 200 * MS, 0.7e8).is_some());
    }

    #[test]
    fn the_rate_comes_back_to_where_it_was_cut_after_k() {
        let mut c = Compete::new(1448, 150 * MS);
        let t0 = Duration::from_secs(10);
        let r = c.loss(t0, 62.5e6).unwrap();
        let k = Duration::from_secs_f64(c.k);
        let back = c.grow(t0 + k - 150 * MS, r, 50 * MS);
        assert!((back / 62.5e6 - 1.0).abs() < 0.01, "{back}");
        // Concave before K, convex after.
        let early = c.grow(t0 + k / 2, r, 50 * MS);
        assert!(early > 0.95 * 62.5e6 - 1.0 && early < 62.5e6);
        assert!(c.grow(t0 + 2 * k, r, 50 * MS) > 1.2 * 62.5e6);
    }
}
