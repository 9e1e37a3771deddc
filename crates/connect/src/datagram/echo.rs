//! Echo measurements over a set-up UDP channel, for `haul probe` (P-36):
//! round trips and loss from a paced train of small probes, and the
//! largest datagram the path carries from don't-fragment probes up to
//! 9000 bytes. The server's set-up responder answers every probe in kind
//! (P-23), so nothing new runs there.
//!
//! Probes are told apart by their size: the train uses sizes
//! [`TRAIN_BASE`]`..TRAIN_BASE + n`, all below the smallest payload set-up
//! accepts; the path-MTU search uses sizes above the payload set-up found.
//! The client seals them from [`ECHO_SEQ_START`], above set-up's numbers
//! and below the transfer's, so no number is sealed twice under one key.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use secure::DatagramKey;
use udp::{RecvBatch, UdpChannel};
use wire::datagram::{Signal, MIN_PAYLOAD};

use super::{open, seal_signal, Opened};

/// First sequence number of the client's echo probes.
pub const ECHO_SEQ_START: u64 = 1 << 31;
/// Size of the train's first probe; probe `i` is `TRAIN_BASE + i` bytes.
pub const TRAIN_BASE: usize = 100;
/// Probes in the train: enough to see a loss rate of 1% within ±0.3%.
pub const TRAIN_LEN: usize = 1000;
/// Largest datagram the path-MTU search tries: a 9000-byte MTU.
const JUMBO_MTU: usize = 9000;

/// What the echoes showed.
#[derive(Debug, Clone, PartialEq)]
pub struct EchoReport {
    /// Round trips of the answered train probes, in the order sent.
    pub rtts: Vec<Duration>,
    /// Train probes sent and answered.
    pub sent: usize,
    pub answered: usize,
    /// Largest UDP payload both directions carried, and the IP MTU it
    /// means; the MTU the kernel knows for the route (the interface's, or
    /// less once a hop's ICMP "fragmentation needed" taught it).
    pub payload: usize,
    pub mtu: usize,
    pub route_mtu: Option<usize>,
}

/// Round-trip statistics, from [`EchoReport::rtts`] or any samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RttStats {
    pub min: Duration,
    pub mean: Duration,
    pub max: Duration,
    /// Mean difference between consecutive samples (RFC 3550's jitter,
    /// unsmoothed).
    pub jitter: Duration,
}

impl RttStats {
    /// `None` without samples.
    pub fn of(samples: &[Duration]) -> Option<RttStats> {
        let n = samples.len();
        if n == 0 {
            return None;
        }
        let total: Duration = samples.iter().sum();
        let steps: Duration = samples
            .windows(2)
            .map(|w| w[0].abs_diff(w[1]))
            .sum::<Duration>();
        Some(RttStats {
            min: *samples.iter().min().expect("not empty"),
            max: *samples.iter().max().expect("not empty"),
            mean: total / n as u32,
            jitter: if n > 1 {
                steps / (n - 1) as u32
            } else {
                Duration::ZERO
            },
        })
    }
}

impl EchoReport {
    /// Share of train probes that did not come back (either direction).
    pub fn round_trip_loss(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        1.0 - self.answered as f64 / self.sent as f64
    }

    /// Loss one way, taking both directions to lose alike:
    /// `1 - sqrt(answered / sent)`.
    pub fn one_way_loss(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        1.0 - (self.answered as f64 / self.sent as f64).sqrt()
    }
}

/// Sends sealed probes and matches their answers by size.
struct Echoer<'a> {
    channel: &'a UdpChannel,
    send_key: &'a DatagramKey,
    recv_key: &'a DatagramKey,
    seq: u64,
    batch: RecvBatch,
}

impl Echoer<'_> {
    /// Sends a probe of `size` bytes; `false` if the host refused it (too
    /// large for the interface, or no room).
    fn send(&mut self, size: usize) -> bool {
        let d = seal_signal(self.send_key, self.seq, &Signal::Probe(size as u16));
        self.seq += 1;
        self.channel
            .send(&d, d.len(), Duration::from_millis(50))
            .is_ok()
    }

    /// Waits up to `wait` for answers; calls `got` with each answered size
    /// and when it arrived.
    fn receive(&mut self, wait: Duration, mut got: impl FnMut(usize, Instant)) {
        if self.channel.recv(&mut self.batch, wait).unwrap_or(0) == 0 {
            return;
        }
        let now = Instant::now();
        let key = self.recv_key;
        self.batch.for_each(|_, d| {
            if let Some(Opened::Signal {
                signal: Signal::ProbeAck(n),
                ..
            }) = open(key, d)
            {
                got(n as usize, now);
            }
        });
    }
}

/// Measures the path over `channel`, connected to the server's set-up
/// responder: a train of [`TRAIN_LEN`] probes paced over `span`, then the
/// path-MTU search upward from `payload` (what set-up found). `rtt` is the
/// handshake's round trip, which bounds the waits.
pub fn measure(
    channel: &UdpChannel,
    send_key: &DatagramKey,
    recv_key: &DatagramKey,
    rtt: Duration,
    payload: usize,
    span: Duration,
) -> EchoReport {
    let mut e = Echoer {
        channel,
        send_key,
        recv_key,
        seq: ECHO_SEQ_START,
        batch: RecvBatch::default(),
    };
    let (rtts, sent) = train(&mut e, rtt, span);
    let overhead = channel.header_overhead();
    let route_mtu = channel.route_mtu();
    let top = route_mtu.unwrap_or(JUMBO_MTU).min(JUMBO_MTU) - overhead;
    let wait =
        rtt.max(rtts.iter().copied().max().unwrap_or_default()) * 2 + Duration::from_millis(200);
    let payload = largest_echoed(&mut e, payload, top, wait);
    EchoReport {
        answered: rtts.len(),
        rtts,
        sent,
        payload,
        mtu: payload + overhead,
        route_mtu,
    }
}

/// The train's probes: when each left and how long its answer took.
struct Train {
    sent_at: Vec<Option<Instant>>,
    back: Vec<Option<Duration>>,
    sent: usize,
    answered: usize,
}

impl Train {
    fn record(&mut self, size: usize, at: Instant) {
        let Some(i) = size.checked_sub(TRAIN_BASE).filter(|&i| i < TRAIN_LEN) else {
            return;
        };
        if let (Some(t), None) = (self.sent_at[i], self.back[i]) {
            self.back[i] = Some(at.saturating_duration_since(t));
            self.answered += 1;
        }
    }
}

/// The train: probe `i` leaves at `i * span / TRAIN_LEN`; answers are
/// taken while it runs and for a while after the last.
fn train(e: &mut Echoer, rtt: Duration, span: Duration) -> (Vec<Duration>, usize) {
    debug_assert!(TRAIN_BASE + TRAIN_LEN <= MIN_PAYLOAD as usize);
    let gap = span / TRAIN_LEN as u32;
    let start = Instant::now();
    let mut t = Train {
        sent_at: vec![None; TRAIN_LEN],
        back: vec![None; TRAIN_LEN],
        sent: 0,
        answered: 0,
    };
    for i in 0..TRAIN_LEN {
        let due = start + gap * i as u32;
        loop {
            let now = Instant::now();
            if now >= due {
                break;
            }
            e.receive(due - now, |n, at| t.record(n, at));
        }
        let at = Instant::now();
        if e.send(TRAIN_BASE + i) {
            t.sent_at[i] = Some(at);
            t.sent += 1;
        }
    }
    // The last answers: a few round trips, at least half a second.
    let until = Instant::now() + (rtt * 3).max(Duration::from_millis(500));
    while t.answered < t.sent {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        e.receive(left, |n, at| t.record(n, at));
    }
    let rtts: Vec<Duration> = t.back.into_iter().flatten().collect();
    (rtts, t.sent)
}

/// The largest payload in `known..=top` that comes back: three rounds of
/// probes sent together, at steps of 256, 16 and 1 bytes above the
/// largest answered so far (each probe twice, against loss).
fn largest_echoed(e: &mut Echoer, known: usize, top: usize, wait: Duration) -> usize {
    let (mut lo, mut hi) = (known, top.max(known));
    for step in [256usize, 16, 1] {
        if lo >= hi {
            break;
        }
        let sizes: Vec<usize> = (1..)
            .map(|k| lo + k * step)
            .take_while(|&s| s <= hi)
            .chain(((hi - lo) % step != 0).then_some(hi))
            .collect();
        let mut sent: HashMap<usize, bool> = HashMap::new();
        for _ in 0..2 {
            for &s in &sizes {
                let ok = e.send(s);
                *sent.entry(s).or_default() |= ok;
            }
        }
        let mut answered: Vec<usize> = Vec::new();
        let until = Instant::now() + wait;
        let largest = *sizes.last().expect("lo < hi");
        while Instant::now() < until && !answered.contains(&largest) {
            let left = until.saturating_duration_since(Instant::now());
            e.receive(left, |n, _| {
                if sent.get(&n) == Some(&true) {
                    answered.push(n);
                }
            });
        }
        let best = answered.iter().copied().max().unwrap_or(lo).max(lo);
        // The next size above the best failed: the answer lies below it.
        if let Some(&failed) = sizes.iter().find(|&&s| s > best) {
            hi = failed - 1;
        }
        lo = best;
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtt_statistics() {
        let ms = Duration::from_millis;
        let s = RttStats::of(&[ms(100), ms(104), ms(100), ms(102)]).unwrap();
        assert_eq!(s.min, ms(100));
        assert_eq!(s.max, ms(104));
        assert_eq!(s.mean, Duration::from_micros(101_500));
        // Steps of 4, 4 and 2 ms.
        assert_eq!(s.jitter, Duration::from_nanos(3_333_333));
        assert_eq!(RttStats::of(&[]), None);
        assert_eq!(RttStats::of(&[ms(5)]).unwrap().jitter, Duration::ZERO);
    }

    #[test]
    fn loss_estimates() {
        let r = EchoReport {
            rtts: vec![],
            sent: 1000,
            answered: 960,
            payload: 1472,
            mtu: 1500,
            route_mtu: Some(1500),
        };
        assert!((r.round_trip_loss() - 0.04).abs() < 1e-9);
        // 0.98 * 0.98 = 0.9604: about 2% each way.
        assert!((r.one_way_loss() - 0.0202).abs() < 1e-3);
    }
}
