//! The link state machine.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::config::LinkConfig;
use crate::rng::Rng;

/// What happened to the packets, for the emulator's report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    pub packets_in: u64,
    pub bytes_in: u64,
    pub delivered: u64,
    pub bytes_delivered: u64,
    pub dropped_outage: u64,
    pub dropped_loss: u64,
    pub dropped_queue: u64,
    pub reordered: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    /// Largest backlog seen, in bytes.
    pub max_queue_bytes: u64,
}

pub struct Link {
    cfg: LinkConfig,
    rng: Rng,
    queue_limit: u64,
    /// When the transmitter finishes what it has been given.
    tx_free: Duration,
    /// (departure time, length) of packets not yet fully transmitted.
    backlog: VecDeque<(Duration, u32)>,
    backlog_bytes: u64,
    /// Packets on their way in order (arrival times never decrease here).
    in_order: VecDeque<(Duration, Vec<u8>)>,
    /// Packets that left the order (reordered, duplicated), by (arrival, seq).
    out_of_order: BTreeMap<(Duration, u64), Vec<u8>>,
    seq: u64,
    last_arrival: Duration,
    ge_bad: bool,
    counters: Counters,
}

impl Link {
    pub fn new(cfg: LinkConfig, seed: u64) -> Link {
        let queue_limit = cfg.queue_limit();
        Link {
            cfg,
            rng: Rng::new(seed),
            queue_limit,
            tx_free: Duration::ZERO,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            in_order: VecDeque::new(),
            out_of_order: BTreeMap::new(),
            seq: 0,
            last_arrival: Duration::ZERO,
            ge_bad: false,
            counters: Counters::default(),
        }
    }

    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Bytes waiting for the transmitter at `now`.
    pub fn backlog_bytes(&mut self, now: Duration) -> u64 {
        while let Some(&(dep, len)) = self.backlog.front() {
            if dep > now {
                break;
            }
            self.backlog.pop_front();
            self.backlog_bytes -= len as u64;
        }
        self.backlog_bytes
    }

    fn lost(&mut self) -> bool {
        let random = self.rng.chance(self.cfg.loss);
        let burst = match self.cfg.gilbert_elliott {
            Some(ge) => {
                let flip = if self.ge_bad {
                    ge.p_bad_to_good
                } else {
                    ge.p_good_to_bad
                };
                if self.rng.chance(flip) {
                    self.ge_bad = !self.ge_bad;
                }
                self.rng.chance(if self.ge_bad {
                    ge.loss_bad
                } else {
                    ge.loss_good
                })
            }
            None => false,
        };
        random || burst
    }

    fn schedule_aside(&mut self, arrival: Duration, pkt: Vec<u8>) {
        self.seq += 1;
        self.out_of_order.insert((arrival, self.seq), pkt);
    }

    /// A packet enters the link at `now`.
    pub fn send(&mut self, now: Duration, mut pkt: Vec<u8>) {
        let len = pkt.len();
        self.counters.packets_in += 1;
        self.counters.bytes_in += len as u64;
        if self.cfg.in_outage(now) {
            self.counters.dropped_outage += 1;
            return;
        }
        if self.lost() {
            self.counters.dropped_loss += 1;
            return;
        }
        let departure = if self.cfg.rate_bps.is_some() {
            let backlog = self.backlog_bytes(now);
            if backlog + len as u64 > self.queue_limit && backlog > 0 {
                self.counters.dropped_queue += 1;
                return;
            }
            let dep = now.max(self.tx_free) + self.cfg.serialization(len);
            self.tx_free = dep;
            self.backlog.push_back((dep, len as u32));
            self.backlog_bytes += len as u64;
            self.counters.max_queue_bytes = self.counters.max_queue_bytes.max(self.backlog_bytes);
            dep
        } else {
            now
        };
        let mut arrival = departure + self.cfg.delay;
        if !self.cfg.jitter.is_zero() {
            let j = self.cfg.jitter.as_nanos() as u64;
            let offset = self.rng.below(2 * j + 1);
            arrival = (arrival + Duration::from_nanos(offset)).saturating_sub(self.cfg.jitter);
        }
        // Jitter alone never reorders.
        arrival = arrival.max(self.last_arrival);
        let reordered = self.rng.chance(self.cfg.reorder);
        if self.rng.chance(self.cfg.corrupt) && len > 0 {
            let bit = self.rng.below(len as u64 * 8);
            pkt[(bit / 8) as usize] ^= 1 << (bit % 8);
            self.counters.corrupted += 1;
        }
        if self.rng.chance(self.cfg.duplicate) {
            self.counters.duplicated += 1;
            self.schedule_aside(arrival, pkt.clone());
        }
        if reordered {
            // Held back past the packets behind it; does not move the
            // in-order horizon.
            self.counters.reordered += 1;
            arrival += Duration::from_millis(1) + self.cfg.jitter + self.cfg.serialization(len) * 4;
            self.schedule_aside(arrival, pkt);
        } else {
            self.last_arrival = arrival;
            self.in_order.push_back((arrival, pkt));
        }
    }

    /// The next packet whose arrival time has come.
    pub fn poll(&mut self, now: Duration) -> Option<Vec<u8>> {
        let ordered = self.in_order.front().map(|p| p.0);
        let aside = self.out_of_order.first_key_value().map(|(k, _)| *k);
        let pkt = match (ordered, aside) {
            (Some(t), Some(k)) if k.0 < t && k.0 <= now => self.out_of_order.remove(&k),
            (Some(t), _) if t <= now => self.in_order.pop_front().map(|p| p.1),
            (None, Some(k)) if k.0 <= now => self.out_of_order.remove(&k),
            _ => None,
        }?;
        self.counters.delivered += 1;
        self.counters.bytes_delivered += pkt.len() as u64;
        Some(pkt)
    }

    /// When the next packet arrives, if any is on its way.
    pub fn next_arrival(&self) -> Option<Duration> {
        let a = self.in_order.front().map(|p| p.0);
        let b = self.out_of_order.first_key_value().map(|(k, _)| k.0);
        match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }

    pub fn packets_in_flight(&self) -> usize {
        self.in_order.len() + self.out_of_order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GilbertElliott;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Sends `n` packets of `len` bytes every `gap` and drains the link;
    /// returns (arrival time, payload index) in delivery order.
    fn run(
        cfg: LinkConfig,
        n: usize,
        len: usize,
        gap: Duration,
        seed: u64,
    ) -> (Link, Vec<(Duration, u32)>) {
        let mut link = Link::new(cfg, seed);
        let mut out = Vec::new();
        let mut now = Duration::ZERO;
        let mut sent = 0;
        loop {
            if sent < n {
                let mut p = vec![0u8; len];
                p[..4].copy_from_slice(&(sent as u32).to_le_bytes());
                link.send(now, p);
                sent += 1;
            }
            while let Some(p) = link.poll(now) {
                out.push((now, u32::from_le_bytes(p[..4].try_into().unwrap())));
            }
            if sent >= n {
                match link.next_arrival() {
                    Some(t) => now = t,
                    None => break,
                }
            } else {
                now += gap;
                if let Some(t) = link.next_arrival() {
                    // Deliver exactly on time when packets fall between sends.
                    if t < now {
                        now = t.max(now - gap);
                    }
                }
            }
        }
        (link, out)
    }

    #[test]
    fn delay_only() {
        let cfg = LinkConfig {
            delay: ms(75),
            ..Default::default()
        };
        let (_, out) = run(cfg, 10, 100, ms(1), 1);
        assert_eq!(out.len(), 10);
        assert_eq!(out[0].0, ms(75));
        assert_eq!(out[9].0, ms(84));
    }

    #[test]
    fn rate_serializes_and_queue_tail_drops() {
        // 100 Mbit/s, 1500-byte packets: 120 µs each. 1000 packets at once
        // with a queue of 100 packets: about 100 get through.
        let cfg = LinkConfig {
            rate_bps: Some(100_000_000),
            queue_bytes: Some(150_000),
            ..Default::default()
        };
        let (link, out) = run(cfg.clone(), 1000, 1500, Duration::ZERO, 1);
        assert!((100..=101).contains(&out.len()), "{}", out.len());
        assert_eq!(link.counters().dropped_queue as usize, 1000 - out.len());
        // Packets paced at the rate: the n-th leaves after n × 120 µs.
        assert_eq!(out[0].0, Duration::from_micros(120));
        assert_eq!(out[99].0, Duration::from_micros(12_000));
        // Sent at the rate, nothing is dropped and goodput is the rate.
        let (link, out) = run(cfg, 10_000, 1500, Duration::from_micros(120), 2);
        assert_eq!(out.len(), 10_000);
        assert_eq!(link.counters().dropped_queue, 0);
        let secs = out.last().unwrap().0.as_secs_f64();
        let rate = 10_000.0 * 1500.0 * 8.0 / secs;
        assert!((rate - 1e8).abs() / 1e8 < 0.01, "{rate}");
    }

    #[test]
    fn default_queue_is_one_bdp() {
        let cfg = LinkConfig {
            rate_bps: Some(1_000_000_000),
            delay: ms(75),
            ..Default::default()
        };
        assert_eq!(cfg.queue_limit(), 18_750_000);
        assert_eq!(LinkConfig::default().queue_limit(), 64 << 10);
    }

    #[test]
    fn random_loss_rate() {
        let cfg = LinkConfig {
            loss: 0.01,
            ..Default::default()
        };
        let (link, out) = run(cfg, 200_000, 64, Duration::from_micros(10), 3);
        let lost = link.counters().dropped_loss as f64 / 200_000.0;
        assert!((lost - 0.01).abs() < 0.001, "{lost}");
        assert_eq!(out.len() as u64 + link.counters().dropped_loss, 200_000);
    }

    #[test]
    fn gilbert_elliott_losses_come_in_bursts() {
        let ge = GilbertElliott {
            p_good_to_bad: 0.001,
            p_bad_to_good: 0.2,
            loss_bad: 1.0,
            loss_good: 0.0,
        };
        let cfg = LinkConfig {
            gilbert_elliott: Some(ge),
            ..Default::default()
        };
        let (_, out) = run(cfg, 200_000, 64, Duration::from_micros(10), 4);
        let got: std::collections::HashSet<u32> = out.iter().map(|x| x.1).collect();
        let (mut bursts, mut lost, mut in_burst) = (0, 0, false);
        for i in 0..200_000u32 {
            let l = !got.contains(&i);
            lost += l as u32;
            if l && !in_burst {
                bursts += 1;
            }
            in_burst = l;
        }
        let mean_burst = lost as f64 / bursts as f64;
        // Stationary loss p_gb / (p_gb + p_bg) ≈ 0.5 %, bursts of ~5.
        assert!((3.5..6.5).contains(&mean_burst), "mean burst {mean_burst}");
        let rate = lost as f64 / 200_000.0;
        assert!((0.003..0.008).contains(&rate), "loss {rate}");
    }

    #[test]
    fn outage_drops_everything_inside_it() {
        let cfg = LinkConfig {
            outages: vec![(ms(100), ms(200))],
            ..Default::default()
        };
        let (link, out) = run(cfg, 300, 64, ms(1), 5);
        assert_eq!(link.counters().dropped_outage, 100);
        assert!(out.iter().all(|&(_, i)| !(100..200).contains(&i)));
    }

    #[test]
    fn jitter_keeps_order_reorder_breaks_it() {
        let cfg = LinkConfig {
            delay: ms(20),
            jitter: ms(5),
            ..Default::default()
        };
        let (_, out) = run(cfg, 5000, 64, Duration::from_micros(100), 6);
        assert!(out.windows(2).all(|w| w[0].1 < w[1].1), "jitter reordered");
        let cfg = LinkConfig {
            delay: ms(20),
            reorder: 0.05,
            ..Default::default()
        };
        let (link, out) = run(cfg, 5000, 64, Duration::from_micros(100), 7);
        assert_eq!(out.len(), 5000);
        let inversions = out.windows(2).filter(|w| w[0].1 > w[1].1).count();
        assert!(inversions > 100, "{inversions}");
        assert!(link.counters().reordered > 150);
    }

    #[test]
    fn duplicate_and_corrupt() {
        let cfg = LinkConfig {
            duplicate: 0.02,
            corrupt: 0.03,
            ..Default::default()
        };
        let mut link = Link::new(cfg, 8);
        let mut changed = 0;
        let mut delivered = 0;
        for i in 0..50_000u32 {
            let t = Duration::from_micros(i as u64);
            link.send(t, vec![0u8; 100]);
            while let Some(p) = link.poll(t) {
                delivered += 1;
                changed += (p.iter().map(|b| b.count_ones()).sum::<u32>() == 1) as u32;
            }
        }
        let c = link.counters();
        assert_eq!(delivered, 50_000 + c.duplicated);
        assert!((800..1200).contains(&c.duplicated), "{}", c.duplicated);
        assert!((1300..1700).contains(&c.corrupted), "{}", c.corrupted);
        assert!(
            changed as u64 >= c.corrupted,
            "every corrupted packet has one bit flipped"
        );
    }

    #[test]
    fn same_seed_same_run() {
        let cfg = LinkConfig {
            loss: 0.05,
            jitter: ms(2),
            delay: ms(10),
            reorder: 0.01,
            ..Default::default()
        };
        let a = run(cfg.clone(), 2000, 64, Duration::from_micros(50), 99).1;
        let b = run(cfg, 2000, 64, Duration::from_micros(50), 99).1;
        assert_eq!(a, b);
    }
}
