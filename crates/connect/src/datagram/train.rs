//! Set-up's packet train (P-23): a peer sends [`train_len`] datagrams back
//! to back; the bottleneck spaces them by its rate, so their arrival (the
//! kernel's receive times) measures that rate before the first data
//! datagram leaves. Datagrams the kernel coalesced (GRO) share their first
//! one's time: the bytes that arrived before the last time seen, over the
//! span from the first, are the rate. Pure: the set-up loops feed it
//! arrivals and send what it answers.

use std::time::Duration;

use wire::datagram::SETUP_TRAIN_MAX;

/// Bytes a train carries, about: enough that the bottleneck spreads a
/// 1 Gbit/s train over most of a millisecond, little enough to wait in a
/// socket's default receive buffer (208 KiB, skb overhead included) while
/// the server walks its tree.
const TRAIN_BYTES: usize = 96 * 1024;
/// Fewest cars sent.
const TRAIN_MIN_CARS: usize = 8;
/// A train that arrived over less than this says nothing: a receiving
/// NIC's interrupt coalescing, or an emulator's forwarding slack, hands
/// datagrams over in bunches (about 100 µs here), which would dominate
/// a shorter span and read several times the bottleneck.
const TRAIN_MIN_SPAN: Duration = Duration::from_micros(250);
/// Fewest cars that must arrive for a measurement.
const TRAIN_MIN_ARRIVED: u16 = 6;

/// Cars in a train of `size`-byte datagrams.
pub fn train_len(size: usize) -> u16 {
    (TRAIN_BYTES / size.max(1)).clamp(TRAIN_MIN_CARS, SETUP_TRAIN_MAX as usize) as u16
}

/// Measures the trains of one peer, one at a time: a car of a newer train
/// closes the one before it.
#[derive(Debug, Default)]
pub struct TrainMeter {
    current: Option<Arriving>,
    /// Trains closed and answered so far.
    answered: u32,
}

#[derive(Debug)]
struct Arriving {
    train: u16,
    /// Answered already: its late or repeated cars are ignored.
    closed: bool,
    arrived: u16,
    /// Bytes of every car that arrived, and of those that arrived at the
    /// latest time seen.
    bytes: u64,
    last_bytes: u64,
    first_at: Duration,
    last_at: Duration,
}

impl Arriving {
    /// The train's rate in bytes per second, 0 when it cannot tell.
    fn rate(&self) -> u64 {
        let span = self.last_at.saturating_sub(self.first_at);
        if self.arrived < TRAIN_MIN_ARRIVED || span < TRAIN_MIN_SPAN {
            return 0;
        }
        let before_last = self.bytes.saturating_sub(self.last_bytes);
        (before_last as f64 / span.as_secs_f64()) as u64
    }
}

/// Most trains a meter answers: the train goes out with each hello, and a
/// peer resends its hello a few times at most before giving up.
pub const TRAINS_ANSWERED_MAX: u32 = 16;

impl TrainMeter {
    /// Car `index` of `count` of train `train`, `len` bytes, arrived at
    /// `at` (the kernel's receive time). Returns `(train, rate)` when a
    /// train is complete: its last car arrived, or a car of a later train
    /// did. The rate is 0 when the train could not be measured.
    pub fn on_car(
        &mut self,
        (train, index, count): (u16, u16, u16),
        len: usize,
        at: Duration,
    ) -> Option<(u16, u64)> {
        let mut closed = None;
        match &mut self.current {
            // A closed train's straggler, or an older train's: ignored.
            Some(a) if train < a.train || (a.train == train && a.closed) => return None,
            Some(a) if a.train == train => {
                a.arrived = a.arrived.saturating_add(1);
                a.bytes += len as u64;
                if at > a.last_at {
                    (a.last_at, a.last_bytes) = (at, 0);
                }
                if at == a.last_at {
                    a.last_bytes += len as u64;
                }
                a.first_at = a.first_at.min(at);
            }
            _ => {
                closed = self.flush();
                self.current = Some(Arriving {
                    train,
                    closed: false,
                    arrived: 1,
                    bytes: len as u64,
                    last_bytes: len as u64,
                    first_at: at,
                    last_at: at,
                });
            }
        }
        if index.saturating_add(1) == count {
            return self.flush().or(closed);
        }
        closed
    }

    /// A train is arriving (not yet closed).
    pub fn is_open(&self) -> bool {
        self.current.as_ref().is_some_and(|a| !a.closed)
    }

    /// Closes the train in progress (its last car arrived, a later
    /// train's did, or nothing more waits to be read and its last car was
    /// lost): `(train, rate)` to answer, unless the meter has answered
    /// [`TRAINS_ANSWERED_MAX`] already.
    pub fn flush(&mut self) -> Option<(u16, u64)> {
        let a = self.current.as_mut().filter(|a| !a.closed)?;
        // Kept, closed, so that its stragglers stay ignored.
        a.closed = true;
        if self.answered >= TRAINS_ANSWERED_MAX {
            return None;
        }
        self.answered += 1;
        Some((a.train, a.rate()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: fn(u64) -> Duration = Duration::from_micros;

    /// Feeds `cars` cars of `len` bytes, `gap` apart, starting at `t0`.
    fn feed(
        m: &mut TrainMeter,
        train: u16,
        cars: u16,
        len: usize,
        gap: Duration,
        t0: Duration,
    ) -> Vec<(u16, u64)> {
        (0..cars)
            .filter_map(|i| m.on_car((train, i, cars), len, t0 + gap * i as u32))
            .collect()
    }

    #[test]
    fn a_train_spread_by_the_bottleneck_measures_it() {
        // 1 Gbit/s: a 1250-byte datagram every 10 µs.
        let mut m = TrainMeter::default();
        let got = feed(&mut m, 0, 64, 1250, US(10), US(5));
        assert_eq!(got.len(), 1);
        let (train, rate) = got[0];
        assert_eq!(train, 0);
        assert!((rate as f64 - 125e6).abs() < 1e5, "{rate}");
    }

    #[test]
    fn coalesced_cars_count_from_their_shared_time() {
        // 1 Gbit/s, the kernel coalescing 8 cars at a time: each group
        // carries its first car's time, 80 µs apart.
        let mut m = TrainMeter::default();
        let mut last = None;
        for i in 0..64u16 {
            last = m.on_car((0, i, 64), 1250, US(80 * (i / 8) as u64));
        }
        let (_, rate) = last.unwrap();
        assert!((rate as f64 - 125e6).abs() < 1e5, "{rate}");
    }

    #[test]
    fn a_bunched_or_short_train_measures_nothing() {
        let mut m = TrainMeter::default();
        // All within 100 µs: coalesced, not spread.
        assert_eq!(feed(&mut m, 0, 64, 1250, US(1), US(0)), vec![(0, 0)]);
        // Too few cars arrived.
        assert_eq!(feed(&mut m, 1, 5, 1250, US(100), US(0)), vec![(1, 0)]);
    }

    #[test]
    fn a_lost_last_car_is_answered_when_the_next_train_comes() {
        let mut m = TrainMeter::default();
        // Cars 0..63 of 64 arrive, the last is lost.
        for i in 0..63u16 {
            assert_eq!(m.on_car((0, i, 64), 1250, US(10 * i as u64)), None);
        }
        let got = feed(&mut m, 1, 64, 1250, US(10), US(100_000));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, 0);
        assert!(got[0].1 > 120_000_000, "{got:?}");
        // A straggler of the first train changes nothing.
        assert_eq!(m.on_car((0, 63, 64), 1250, US(200_000)), None);
    }

    #[test]
    fn a_train_whose_last_car_was_lost_is_answered_once_the_socket_is_quiet() {
        let mut m = TrainMeter::default();
        assert!(!m.is_open() && m.flush().is_none());
        for i in 0..63u16 {
            assert_eq!(m.on_car((0, i, 64), 1250, US(10 * i as u64)), None);
        }
        assert!(m.is_open());
        let (train, rate) = m.flush().unwrap();
        assert!(train == 0 && rate > 120_000_000, "{rate}");
        // Answered once: neither a second flush nor the late car answers.
        assert!(!m.is_open() && m.flush().is_none());
        assert_eq!(m.on_car((0, 63, 64), 1250, US(630)), None);
    }

    #[test]
    fn lost_cars_make_the_rate_lower_not_higher() {
        let mut m = TrainMeter::default();
        let mut last = None;
        for i in (0..64u16).filter(|i| i % 8 != 3) {
            last = m.on_car((0, i, 64), 1250, US(10 * i as u64));
        }
        let (_, rate) = last.unwrap();
        assert!(rate < 125_000_000 && rate > 100_000_000, "{rate}");
    }

    #[test]
    fn answers_are_bounded() {
        let mut m = TrainMeter::default();
        let answers: usize = (0..100u16)
            .map(|t| feed(&mut m, t, 8, 1250, US(50), US(t as u64 * 10_000)).len())
            .sum();
        assert_eq!(answers as u32, TRAINS_ANSWERED_MAX);
    }

    #[test]
    fn train_length_follows_the_datagram_size() {
        assert_eq!(train_len(1472), 64);
        assert_eq!(train_len(8972), 10);
        assert_eq!(train_len(60_000), 8);
    }
}
