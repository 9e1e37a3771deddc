//! The bottleneck's rate from packet trains (P-25): datagrams the sender
//! let go together (one GSO batch: sender timestamps within
//! [`TRAIN_SENT_WITHIN`]) leave the bottleneck spaced by its rate, so the
//! bytes after a train's first datagram over the span of their arrival
//! times (the kernel's, where it gives them) measure that rate within the
//! first round trip, whatever rate the sender paces at.

/// Datagrams sent within this many microseconds of a train's first belong
/// to it.
pub const TRAIN_SENT_WITHIN: u32 = 30;
/// A train shorter than this (datagrams) or arriving over less than
/// [`TRAIN_MIN_SPAN_US`] says nothing: the arrival clock's grain and a
/// receiver taking several datagrams at once would dominate it.
pub const TRAIN_MIN_LEN: u32 = 4;
pub const TRAIN_MIN_SPAN_US: u64 = 20;
/// Samples kept an interval (the rest are dropped): a bound on memory
/// whatever a sender does.
pub const TRAIN_SAMPLES_MAX: usize = 256;

/// Groups arriving datagrams into trains and keeps each train's rate.
#[derive(Debug, Default)]
pub struct TrainMeter {
    first_sent: u32,
    first_at: u64,
    last_at: u64,
    /// Bytes after the train's first datagram, and datagrams in it.
    bytes: u64,
    len: u32,
    samples: Vec<u64>,
}

impl TrainMeter {
    /// A datagram of `len` bytes sent at `sent_us` (sender clock, modulo
    /// 2^32) arrived at `at_us` (receiver clock).
    pub fn on_datagram(&mut self, sent_us: u32, at_us: u64, len: usize) {
        let apart = sent_us.wrapping_sub(self.first_sent) as i32;
        let same =
            self.len > 0 && apart.unsigned_abs() <= TRAIN_SENT_WITHIN && at_us >= self.last_at;
        if same {
            self.bytes += len as u64;
            self.len += 1;
            self.last_at = at_us;
            return;
        }
        self.close();
        (self.first_sent, self.first_at, self.last_at) = (sent_us, at_us, at_us);
        (self.bytes, self.len) = (0, 1);
    }

    fn close(&mut self) {
        let span = self.last_at.saturating_sub(self.first_at);
        if self.len >= TRAIN_MIN_LEN
            && span >= TRAIN_MIN_SPAN_US
            && self.samples.len() < TRAIN_SAMPLES_MAX
        {
            self.samples
                .push(self.bytes.saturating_mul(1_000_000) / span);
        }
        self.len = 0;
    }

    /// The median train rate (bytes per second) since the last call, or
    /// 0 without a train; the train in progress counts next time.
    pub fn take(&mut self) -> u64 {
        let mut s = std::mem::take(&mut self.samples);
        if s.is_empty() {
            return 0;
        }
        s.sort_unstable();
        s[(s.len() - 1) / 2]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_train_spread_by_the_bottleneck_measures_it() {
        let mut m = TrainMeter::default();
        // Trains of 8 datagrams of 1400 bytes every 1 ms, sent together,
        // arriving 14 µs apart (100 MB/s).
        for t in 0..10u64 {
            for i in 0..8u64 {
                m.on_datagram((t * 1000 + i) as u32, 75_000 + t * 1000 + i * 14, 1400);
            }
        }
        assert_eq!(m.take(), 100_000_000);
        assert_eq!(m.take(), 0);
        // The same across the sender's clock wrapping (every 71 minutes).
        for i in 0..8u32 {
            m.on_datagram(
                (u32::MAX - 3).wrapping_add(i),
                75_000 + u64::from(i) * 14,
                1400,
            );
        }
        m.on_datagram(1000, 80_000, 1400);
        assert_eq!(m.take(), 100_000_000);
    }

    #[test]
    fn paced_datagrams_and_bunched_arrivals_are_no_trains() {
        let mut m = TrainMeter::default();
        // One datagram at a time, 100 µs apart.
        for i in 0..100u64 {
            m.on_datagram((i * 100) as u32, 50 + i * 100, 1400);
        }
        // Trains arriving all at once (a receiver that took them together).
        for t in 0..10u64 {
            for _ in 0..8 {
                m.on_datagram((20_000 + t * 1000) as u32, 30_000 + t * 1000, 1400);
            }
        }
        assert_eq!(m.take(), 0);
    }

    #[test]
    fn samples_are_bounded() {
        let mut m = TrainMeter::default();
        for t in 0..10_000u64 {
            for i in 0..4u64 {
                m.on_datagram((t * 1000) as u32, t * 1000 + i * 10, 1000);
            }
        }
        assert!(m.samples.len() <= TRAIN_SAMPLES_MAX);
        assert_eq!(m.take(), 100_000_000);
    }
}
