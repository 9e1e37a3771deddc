//! The sending half of the UDP channel (P-25, P-26).
//!
//! Blocks handed in are cut into chunks and queued. Every datagram gets the
//! next sequence number, and the sender remembers which chunk each number
//! carried until the receiver's reports move past it. A report's missing
//! ranges put those chunks on the retransmission queue, which is served
//! before fresh chunks, so re-sending never stops the flow of new data; a
//! stale-block request re-queues the named bytes. Reports also feed the
//! rate controller. A block's bytes are dropped once the receiver has
//! acknowledged the block (on the control channel). Once no fresh data is
//! left ([`DatagramSender::set_tail`] and the queue empty), each re-send goes twice (the copy after the other re-sends), so
//! the end of a transfer on a lossy path rarely waits a further round
//! trip for a chunk lost twice.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rate::{Feedback, RateController};
use wire::datagram::{ChunkHeader, FirstChunk, Report, DATA_SEQ_START};

use super::chunking::chunks;
use super::reporting::{feedback_interval, report_interval, REPORT_INTERVAL};

/// Sequence numbers remembered at most; older losses are left to the
/// stale-block requests and the scheduler's endgame.
const MAX_REMEMBERED: usize = 1 << 22;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ChunkRef {
    file: u32,
    index: u32,
    offset: u32,
    len: u32,
}

struct Held {
    data: Arc<Vec<u8>>,
    first: FirstChunk,
    last_stale: Option<Duration>,
}

/// One data datagram to build: the header (with `sent_us` left for the
/// caller to stamp) and where its bytes are.
#[derive(Debug, Clone)]
pub struct ChunkTransmit {
    pub seq: u64,
    pub header: ChunkHeader,
    pub data: Arc<Vec<u8>>,
    pub range: std::ops::Range<usize>,
    pub retransmit: bool,
}

/// Counters for the summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    pub datagrams: u64,
    pub retransmitted: u64,
    /// Missing datagrams the receiver reported.
    pub reported_lost: u64,
    /// Datagrams the receiver's socket dropped (its own count).
    pub receiver_dropped: u64,
}

/// Report contents gathered until a feedback interval is full.
#[derive(Default)]
struct Gather {
    interval: Duration,
    bytes: u64,
    packets: u64,
    lost: u64,
    run: u64,
    min_owd: Option<i64>,
    /// The least train rate the reports gave (0: none).
    train: u64,
}

pub struct DatagramSender {
    payload: usize,
    rtt: Duration,
    next_seq: u64,
    blocks: HashMap<(u32, u32), Held>,
    fresh: VecDeque<ChunkRef>,
    fresh_bytes: u64,
    retx: VecDeque<ChunkRef>,
    /// Second copies of re-sends made once no fresh data is left (the
    /// tail): served after the re-sends, so a chunk lost twice rarely
    /// costs the transfer's end another round trip.
    copies: VecDeque<ChunkRef>,
    /// No block is left to be added for the first time.
    tail: bool,
    /// Tail copies queued so far: at most one per [`COPY_BUDGET`]
    /// datagrams sent (0.5%), so re-sent bytes stay within the loss rate + 1%.
    copied: u64,
    /// What each remembered sequence number carried (`None`: not data, or
    /// already re-queued); the front is `base`.
    sent: VecDeque<Option<ChunkRef>>,
    base: u64,
    controller: Box<dyn RateController>,
    gather: Gather,
    owd_origin: Option<i64>,
    last_report: Duration,
    last_timeout: Duration,
    last_sent: Duration,
    /// The receiver's `highest`: sequence numbers at or above it are in flight.
    peer_highest: u64,
    /// Delivery rates of recent feedback intervals, bytes per second.
    delivered: VecDeque<f64>,
    /// When the sender last had room to send and nothing to send.
    last_starved: Option<Duration>,
    pub stats: SenderStats,
}

/// Feedback intervals over which the delivery rate's maximum is kept.
const DELIVERED_WINDOW: usize = 10;
/// Datagrams sent per tail copy allowed.
const COPY_BUDGET: u64 = 200;
/// Above this share of datagrams lost, a tail re-send gets two copies.
const HEAVY_TAIL_LOSS: f64 = 0.03;
/// Datagrams always allowed in flight, whatever the estimate.
const MIN_IN_FLIGHT: u64 = 64;

impl DatagramSender {
    /// `payload`: UDP payload bytes per datagram; `rtt`: the control
    /// connection's round trip, for timers.
    pub fn new(payload: usize, rtt: Duration, controller: Box<dyn RateController>) -> Self {
        DatagramSender {
            payload,
            rtt,
            next_seq: DATA_SEQ_START,
            blocks: HashMap::new(),
            fresh: VecDeque::new(),
            fresh_bytes: 0,
            retx: VecDeque::new(),
            copies: VecDeque::new(),
            tail: false,
            copied: 0,
            sent: VecDeque::new(),
            base: DATA_SEQ_START,
            controller,
            gather: Gather::default(),
            owd_origin: None,
            last_report: Duration::ZERO,
            last_timeout: Duration::ZERO,
            last_sent: Duration::ZERO,
            peer_highest: DATA_SEQ_START,
            delivered: VecDeque::new(),
            last_starved: None,
            stats: SenderStats::default(),
        }
    }

    /// A block to send. A block already held (sent again after a nack or by
    /// the endgame) goes to the front with the retransmissions.
    /// `data` is the block as encoded for the wire (P-30); `first` says
    /// what its first chunk tells the receiver of the block.
    pub fn add_block(&mut self, file: u32, index: u32, first: FirstChunk, data: Arc<Vec<u8>>) {
        let len = data.len() as u32;
        let again = self
            .blocks
            .insert(
                (file, index),
                Held {
                    data,
                    first,
                    last_stale: None,
                },
            )
            .is_some();
        for (offset, n) in chunks(len, self.payload) {
            let c = ChunkRef {
                file,
                index,
                offset,
                len: n,
            };
            if again {
                self.retx.push_back(c);
            } else {
                self.fresh.push_back(c);
                self.fresh_bytes += n as u64;
            }
        }
    }

    /// Every block has been added once: from now on, once the fresh chunks
    /// are gone, each re-send goes twice.
    pub fn set_tail(&mut self) {
        self.tail = true;
    }

    /// The receiver verified the block: its bytes are no longer needed.
    pub fn block_acked(&mut self, file: u32, index: u32) {
        self.blocks.remove(&(file, index));
    }

    /// Fresh bytes queued and not yet sent, so the caller knows when to
    /// read more blocks.
    pub fn queued_bytes(&self) -> u64 {
        self.fresh_bytes
    }

    /// Blocks held until acknowledged.
    pub fn held_blocks(&self) -> usize {
        self.blocks.len()
    }

    pub fn rate(&self) -> u64 {
        self.controller.rate()
    }

    /// The path's capacity as the controller measured it, bytes per
    /// second (0 while unknown).
    pub fn estimate(&self) -> u64 {
        self.controller.estimate()
    }

    /// The controller is still probing for the path's rate.
    pub fn in_startup(&self) -> bool {
        self.controller.in_startup()
    }

    pub fn controller_name(&self) -> &'static str {
        self.controller.name()
    }

    /// The controller's state, for debug logs.
    pub fn controller_state(&self) -> String {
        self.controller.state()
    }

    fn take_seq(&mut self, what: Option<ChunkRef>) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.sent.push_back(what);
        if self.sent.len() > MAX_REMEMBERED {
            self.sent.pop_front();
            self.base += 1;
        }
        seq
    }

    /// The session is near the most datagrams a side may send (48-bit
    /// sequence numbers, P-24), with room left for a batch and its
    /// signals: the driver ends it, and a resume goes on from there.
    pub fn seqs_spent(&self) -> bool {
        self.next_seq >= wire::datagram::SEQ_LIMIT - (1 << 16)
    }

    /// A sequence number for a datagram that carries no chunk (a signal).
    pub fn signal_seq(&mut self, now: Duration) -> u64 {
        self.last_sent = now;
        self.take_seq(None)
    }

    /// Bytes allowed in flight (sent, not yet reported arrived or lost):
    /// twice the path's best recent delivery rate times the round trip plus
    /// the reporting delay, so that startup's overshoot (its feedback lags
    /// a round trip) queues little more than one BDP at the bottleneck.
    pub fn in_flight_cap(&self) -> u64 {
        // Before any delivery is measured, the controller's rate stands in.
        let rate = if self.delivered.is_empty() {
            self.controller.rate() as f64
        } else {
            self.delivered.iter().copied().fold(0.0, f64::max)
        };
        let window = (self.rtt + report_interval(self.rtt) * 2).as_secs_f64();
        ((2.0 * rate * window) as u64).max(MIN_IN_FLIGHT * self.payload as u64)
    }

    /// Bytes in flight, as far as the receiver's reports tell.
    pub fn in_flight(&self) -> u64 {
        self.next_seq.saturating_sub(self.peer_highest) * self.payload as u64
    }

    /// The next data datagram, re-sends first, or `None` when nothing waits
    /// or the in-flight cap is reached.
    pub fn poll_transmit(&mut self, now: Duration) -> Option<ChunkTransmit> {
        if self.in_flight() >= self.in_flight_cap() {
            return None;
        }
        loop {
            let (c, retransmit) = if let Some(c) = self.retx.pop_front() {
                if self.tail && self.fresh.is_empty() {
                    self.copy_in_tail(c);
                }
                (c, true)
            } else if let Some(c) = self.fresh.pop_front() {
                self.fresh_bytes -= c.len as u64;
                (c, false)
            } else if let Some(c) = self.copies.pop_front() {
                (c, true)
            } else {
                // Room to send and nothing to send: the next reports
                // measure the data, not the path.
                self.last_starved = Some(now);
                return None;
            };
            // Chunks of a block acknowledged meanwhile are dropped.
            let Some(h) = self.blocks.get(&(c.file, c.index)) else {
                continue;
            };
            let data = h.data.clone();
            let first = (c.offset == 0).then_some(h.first);
            let seq = self.take_seq(Some(c));
            self.stats.datagrams += 1;
            if retransmit {
                self.stats.retransmitted += 1;
            }
            self.last_sent = now;
            return Some(ChunkTransmit {
                seq,
                header: ChunkHeader {
                    sent_us: 0,
                    file: c.file,
                    index: c.index,
                    offset: c.offset,
                    block_len: data.len() as u32,
                    first,
                },
                range: c.offset as usize..(c.offset + c.len) as usize,
                data,
                retransmit,
            });
        }
    }

    /// Queues a tail re-send's copies, within the budget: one, and a second
    /// where the path lost more than [`HEAVY_TAIL_LOSS`] of the datagrams
    /// so far (at 10% loss a chunk sent twice is still lost once in a
    /// hundred, and the tail's last round trip waits on it).
    fn copy_in_tail(&mut self, c: ChunkRef) {
        let heavy = (self.stats.reported_lost as f64)
            > HEAVY_TAIL_LOSS * self.stats.datagrams.max(1) as f64;
        for _ in 0..if heavy { 2 } else { 1 } {
            if self.copied >= self.stats.datagrams / COPY_BUDGET {
                return;
            }
            self.copied += 1;
            self.copies.push_back(c);
        }
    }

    /// Whether an idle sender should send a ping now: it holds unacknowledged
    /// blocks and has sent nothing for a quarter of the round trip, so a
    /// lost tail becomes a gap the receiver reports.
    pub fn wants_ping(&self, now: Duration) -> bool {
        !self.blocks.is_empty()
            && self.retx.is_empty()
            && self.copies.is_empty()
            && self.fresh.is_empty()
            && now.saturating_sub(self.last_sent) >= (self.rtt / 4).max(report_interval(self.rtt))
    }

    fn requeue_seq(&mut self, seq: u64) -> bool {
        let Some(i) = seq.checked_sub(self.base) else {
            return false;
        };
        let Some(slot) = self.sent.get_mut(i as usize) else {
            return false;
        };
        match slot.take() {
            Some(c) if self.blocks.contains_key(&(c.file, c.index)) => {
                self.retx.push_back(c);
                true
            }
            _ => false,
        }
    }

    /// A report from the receiver.
    pub fn on_report(&mut self, now: Duration, r: &Report) {
        if r.packets > 0 {
            // Reports of nothing arriving count as silence (an outage).
            self.last_report = now;
        }
        self.peer_highest = self.peer_highest.max(r.highest.min(self.next_seq));
        self.stats.receiver_dropped = self.stats.receiver_dropped.max(r.dropped);
        for &(start, count) in &r.missing {
            // Bounded by what is remembered, whatever the report claims.
            let lo = start.max(self.base);
            let hi = start
                .saturating_add(count as u64)
                .min(self.base + self.sent.len() as u64);
            for seq in lo..hi {
                if self.requeue_seq(seq) {
                    self.stats.reported_lost += 1;
                }
            }
        }
        // A block named again within a round trip is probably already being
        // repaired; every hole named in one report is served together.
        let mut served: Vec<(u32, u32)> = Vec::new();
        for s in &r.stale {
            let payload = self.payload;
            let patience = self.rtt.max(REPORT_INTERVAL * 4);
            let key = (s.file, s.index);
            let Some(h) = self.blocks.get_mut(&key) else {
                continue;
            };
            let fresh_request = !served.contains(&key);
            if fresh_request
                && h.last_stale
                    .is_some_and(|t| now.saturating_sub(t) < patience)
            {
                continue;
            }
            if fresh_request {
                served.push(key);
            }
            h.last_stale = Some(now);
            let end = s.offset.saturating_add(s.len);
            for (offset, n) in chunks(h.data.len() as u32, payload) {
                if offset < end && offset + n > s.offset {
                    self.retx.push_back(ChunkRef {
                        file: s.file,
                        index: s.index,
                        offset,
                        len: n,
                    });
                }
            }
        }
        while self.base < r.floor && !self.sent.is_empty() {
            self.sent.pop_front();
            self.base += 1;
        }
        // Intervals in which nothing arrived (before the first datagram,
        // during an outage) say nothing about the path's rate.
        if r.interval_us > 0 && r.packets > 0 {
            self.gather_feedback(now, r);
        }
    }

    fn gather_feedback(&mut self, now: Duration, r: &Report) {
        let g = &mut self.gather;
        g.interval += Duration::from_micros(r.interval_us as u64);
        // A report's figures are the peer's: summed without overflow.
        g.bytes = g.bytes.saturating_add(r.bytes);
        g.packets += r.packets as u64;
        g.lost += r.lost as u64;
        g.run = g.run.max(r.longest_run as u64);
        if r.packets > 0 {
            g.min_owd = Some(g.min_owd.map_or(r.min_owd_us, |m| m.min(r.min_owd_us)));
        }
        if r.train_rate > 0 {
            g.train = match g.train {
                0 => r.train_rate,
                t => t.min(r.train_rate),
            };
        }
        if g.interval < feedback_interval(self.rtt) {
            return;
        }
        let g = std::mem::take(&mut self.gather);
        // In startup, what the trains measured the path to carry counts as
        // delivered for the in-flight cap: else a first transfer's cap,
        // twice what a startup at 100 Mbit/s delivered, held back the jump
        // to the trains' rate for round trips. Only then: a transfer
        // holding its share of a busy path keeps its cap to its share.
        let mut delivered = g.bytes as f64 / g.interval.as_secs_f64().max(1e-6);
        if self.controller.in_startup() {
            delivered = delivered.max(g.train as f64);
        }
        self.delivered.push_back(delivered);
        if self.delivered.len() > DELIVERED_WINDOW {
            self.delivered.pop_front();
        }
        let Some(owd) = g.min_owd else {
            // Nothing arrived: `on_tick` deals with silence.
            return;
        };
        // One-way delays compare only with each other (the clocks differ):
        // measure from an origin a second below the first sample.
        let origin = *self.owd_origin.get_or_insert(owd.saturating_sub(1_000_000));
        // The interval's datagrams left about a round trip before its
        // end; if the queue ran dry since then, they were all there was.
        let app_limited = self
            .last_starved
            .is_some_and(|t| t + g.interval + self.rtt >= now);
        let fb = Feedback {
            app_limited,
            interval: g.interval,
            bytes: g.bytes,
            packets: g.packets,
            lost: g.lost,
            longest_loss_run: g.run,
            min_one_way: Duration::from_micros(owd.saturating_sub(origin).max(0) as u64),
            train_rate: g.train,
        };
        self.controller.on_feedback(now, &fb);
    }

    /// Call regularly: with no report for a while, the rate backs off.
    pub fn on_tick(&mut self, now: Duration) {
        let timeout = (self.rtt * 2).max(REPORT_INTERVAL * 10);
        let since = now.saturating_sub(self.last_report.max(self.last_timeout));
        if since >= timeout {
            self.last_timeout = now;
            self.controller.on_feedback_timeout(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rate::Fixed;

    /// The first chunk of a raw block of `len` bytes.
    fn raw(hash: [u8; 32], len: u32) -> FirstChunk {
        FirstChunk {
            hash,
            codec: wire::CODEC_NONE,
            len,
        }
    }

    fn sender() -> DatagramSender {
        DatagramSender::new(1472, Duration::from_millis(100), Box::new(Fixed(1 << 20)))
    }

    /// Every block added, after 10,000 datagrams (a budget of 50 copies).
    fn tail(s: &mut DatagramSender) {
        s.set_tail();
        s.stats.datagrams += 10_000;
    }

    #[test]
    fn retransmissions_go_first_and_only_once() {
        let now = Duration::ZERO;
        let mut s = sender();
        s.add_block(0, 0, raw([7; 32], 5000), Arc::new(vec![1u8; 5000]));
        let a = s.poll_transmit(now).unwrap();
        assert_eq!(a.header.first.map(|f| f.hash), Some([7; 32]));
        let b = s.poll_transmit(now).unwrap();
        assert_eq!(b.header.first, None);
        let report = Report {
            missing: vec![(a.seq, 1)],
            ..Report::default()
        };
        s.on_report(now, &report);
        // The same range reported again (a repeated report) is ignored.
        s.on_report(now, &report);
        let r = s.poll_transmit(now).unwrap();
        assert!(r.retransmit);
        assert_eq!(r.range, a.range);
        assert!(r.seq > b.seq);
        let next = s.poll_transmit(now).unwrap();
        assert!(!next.retransmit);
        assert_eq!(s.stats.retransmitted, 1);
    }

    #[test]
    fn trains_raise_the_in_flight_cap_and_absurd_ones_do_not_overflow() {
        // Trains count toward the cap in startup only.
        let startup = rate::Adaptive::new(12_500_000, None).with_rtt(Duration::from_millis(100));
        let mut s = DatagramSender::new(1472, Duration::from_millis(100), Box::new(startup));
        let before = s.in_flight_cap();
        // A feedback interval's worth that delivered 1 MB/s, over a path
        // whose trains said 100 MB/s.
        let report = Report {
            interval_us: 60_000,
            bytes: 60_000,
            packets: 40,
            min_owd_us: 75_000,
            train_rate: 100_000_000,
            ..Report::default()
        };
        s.on_report(Duration::from_millis(60), &report);
        let cap = s.in_flight_cap();
        assert!(
            cap > before && cap >= 2 * 100_000_000 / 10,
            "{before} -> {cap}"
        );
        // A receiver's absurd claim saturates rather than wraps.
        let hostile = Report {
            train_rate: u64::MAX,
            ..report.clone()
        };
        s.on_report(Duration::from_millis(120), &hostile);
        assert!(s.in_flight_cap() >= cap);
        // Outside startup they do not count.
        let mut s = sender();
        let before = s.in_flight_cap();
        s.on_report(Duration::from_millis(60), &report);
        assert!(s.in_flight_cap() < 2 * 100_000_000 / 10, "{before}");
    }

    #[test]
    fn acked_blocks_are_not_sent_again() {
        let now = Duration::ZERO;
        let mut s = sender();
        s.add_block(0, 0, raw([0; 32], 3000), Arc::new(vec![0u8; 3000]));
        let a = s.poll_transmit(now).unwrap();
        s.block_acked(0, 0);
        s.on_report(
            now,
            &Report {
                missing: vec![(a.seq, 1)],
                ..Report::default()
            },
        );
        assert!(s.poll_transmit(now).is_none());
        assert!(!s.wants_ping(Duration::from_secs(1)));
    }

    #[test]
    fn stale_request_requeues_the_named_bytes_once_per_round_trip() {
        let now = Duration::ZERO;
        let mut s = sender();
        s.add_block(2, 5, raw([0; 32], 10_000), Arc::new(vec![0u8; 10_000]));
        tail(&mut s);
        while s.poll_transmit(now).is_some() {}
        let stale = wire::datagram::StaleRange {
            file: 2,
            index: 5,
            offset: 3000,
            len: 100,
        };
        let r = Report {
            stale: vec![stale],
            ..Report::default()
        };
        s.on_report(now, &r);
        let c = s.poll_transmit(now).unwrap();
        assert!(c.range.start <= 3000 && c.range.end > 3000);
        // Nothing fresh is left: the re-send goes twice.
        let copy = s.poll_transmit(now).unwrap();
        assert_eq!(copy.range, c.range);
        assert!(s.poll_transmit(now).is_none());
        s.on_report(now + Duration::from_millis(10), &r);
        assert!(s.poll_transmit(now).is_none());
        assert!(s.wants_ping(Duration::from_millis(30)));
    }

    #[test]
    fn every_hole_of_a_block_named_in_one_report_is_served() {
        let now = Duration::ZERO;
        let mut s = sender();
        s.add_block(1, 1, raw([0; 32], 20_000), Arc::new(vec![0u8; 20_000]));
        tail(&mut s);
        while s.poll_transmit(now).is_some() {}
        let hole = |offset| wire::datagram::StaleRange {
            file: 1,
            index: 1,
            offset,
            len: 10,
        };
        s.on_report(
            now,
            &Report {
                stale: vec![hole(100), hole(5000), hole(15_000)],
                ..Report::default()
            },
        );
        let mut again = 0;
        while s.poll_transmit(now).is_some() {
            again += 1;
        }
        assert_eq!(again, 3 * 2, "each re-send and its tail copy");
    }

    /// One 6000-byte block sent whole in the tail, after `lost` of the
    /// 10,000 datagrams before it were reported lost; then its second and
    /// fourth chunks reported missing. What was sent first, and after.
    fn two_lost_in_the_tail(lost: u64) -> (DatagramSender, Vec<ChunkTransmit>, Vec<ChunkTransmit>) {
        let now = Duration::ZERO;
        let mut s = sender();
        s.add_block(0, 0, raw([0; 32], 6000), Arc::new(vec![0u8; 6000]));
        tail(&mut s);
        s.stats.reported_lost = lost;
        let first: Vec<_> = std::iter::from_fn(|| s.poll_transmit(now)).collect();
        assert_eq!(first.len(), 5);
        s.on_report(
            now,
            &Report {
                missing: vec![(first[1].seq, 1), (first[3].seq, 1)],
                ..Report::default()
            },
        );
        let again: Vec<_> = std::iter::from_fn(|| s.poll_transmit(now)).collect();
        (s, first, again)
    }

    #[test]
    fn re_sends_in_the_tail_go_twice_after_the_others() {
        let (s, first, again) = two_lost_in_the_tail(0);
        let ranges: Vec<_> = again.iter().map(|c| c.range.clone()).collect();
        assert_eq!(
            ranges,
            [&first[1], &first[3], &first[1], &first[3]].map(|c| c.range.clone())
        );
        assert!(again.iter().all(|c| c.retransmit));
        assert_eq!(s.stats.retransmitted, 4);
    }

    #[test]
    fn on_a_heavily_lossy_path_tail_re_sends_go_three_times() {
        // A tenth of the datagrams so far were reported lost.
        let (_, first, again) = two_lost_in_the_tail(1_000);
        let ranges: Vec<_> = again.iter().map(|c| c.range.clone()).collect();
        let (a, b) = (first[1].range.clone(), first[3].range.clone());
        assert_eq!(ranges, [a.clone(), b.clone(), a.clone(), a, b.clone(), b]);
    }

    #[test]
    fn tail_copies_stay_within_one_percent_of_datagrams() {
        let now = Duration::ZERO;
        let mut s = sender();
        s.add_block(0, 0, raw([0; 32], 600_000), Arc::new(vec![0u8; 600_000]));
        s.set_tail();
        // All of it sent, the receiver's reports moving the in-flight cap.
        let mut first: Vec<ChunkTransmit> = Vec::new();
        let mut reported = 0;
        loop {
            if let Some(c) = s.poll_transmit(now) {
                first.push(c);
                continue;
            }
            let highest = first.last().unwrap().seq + 1;
            if highest == reported {
                break;
            }
            reported = highest;
            s.on_report(
                now,
                &Report {
                    highest,
                    ..Report::default()
                },
            );
        }
        assert!(first.len() > 400);
        let missing = first.iter().map(|c| (c.seq, 1)).take(50).collect();
        s.on_report(
            now,
            &Report {
                missing,
                ..Report::default()
            },
        );
        let again = std::iter::from_fn(|| s.poll_transmit(now)).count() as u64;
        assert_eq!(again, 50 + first.len() as u64 / COPY_BUDGET);
    }
}
