//! The default controller for the rate-based channel: find the bottleneck,
//! treat random loss as noise, back off on rising queueing delay and on
//! clustered loss, and cap at `--rate` when given.
//!
//! The algorithm, per receiver report (one every feedback interval):
//!
//! 1. **Signals.** Delivered rate (arrived bytes / interval); the loss rate;
//!    queueing delay = this report's minimum one-way delay minus the
//!    smallest one-way delay seen in the last 10 s (clocks need not agree:
//!    only differences count).
//! 2. **Capacity estimate.** Random loss does not mean the path is full, so
//!    the delivered rate is scaled back up by the loss it saw,
//!    `delivered / (1 - loss)`, while the queueing delay is under half the
//!    congestion threshold; above that the bottleneck is already
//!    delivering all it can and the delivered rate is taken as is (losses
//!    before the bottleneck, or its own overflow, would otherwise inflate
//!    the estimate and keep the queue full). Each sample is the median of
//!    the last three such values (a receiver draining a backlog reports a
//!    burst above the path's rate), and the bottleneck estimate is the
//!    largest sample over the last 8 reports.
//! 3. **Congestion** is queueing delay above `max(10 ms, rtt / 8)` (a
//!    quarter of the one-way delay; the clocks' offset hides the base delay
//!    itself), or clustered loss (a run of 8 or more datagrams lost
//!    in a row). Either sets the rate to 85% of what was delivered (60%
//!    when the queueing delay is over four times the threshold), resets
//!    the estimate to it, and leaves startup.
//! 4. **Startup** jumps to 0.9 of the bottleneck's rate as soon as two
//!    reports have measured it from packet trains (datagrams sent in one
//!    batch arrive spaced by the bottleneck, P-25), and cruises from there;
//!    a background transfer, or one whose datagrams go one at a time,
//!    does not. Otherwise it doubles the rate once per round trip (by
//!    `2^min(1, interval / rtt)` each report) until congestion shows, or
//!    the capacity estimate has grown less than 25% in three round trips
//!    (the bottleneck is full); then the rate drops to 90% of the estimate
//!    for one report to drain the queue it built. (The sender,
//!    `session::datagram`, also caps bytes in flight at twice the best
//!    recent delivery rate times the round trip plus two report intervals,
//!    which bounds startup's overshoot while its feedback lags.)
//! 5. **Cruise** paces at the estimate times a gain that cycles over
//!    `max(8, rtt / interval + 4)` reports: `1 + p` for two reports (probe
//!    for more; two, so the median of three sees it), `1 / (1 + p)` for two
//!    (drain what the probe queued), then 1.0. `p` starts at 0.15; at the
//!    end of a cycle, if the estimate grew by `p / 2` or more (the probe
//!    found room), `p` doubles, up to 1.0, else it is 0.15 again; congestion
//!    resets it. A rate cut by a passing queue (a busy receiver at startup,
//!    a competing flow that left) thus comes back exponentially: measured
//!    before this rule, 10% loss at 150 ms took a minute to climb back from
//!    70 Mbit/s after one such cut.
//! 6. **Fair share** (P-46). Backing off (for delay or clustered loss) and
//!    cruising stop at half of the path's peak capacity (a maximum that
//!    decays with a 30 s half-life), unless a quarter of the datagrams are
//!    being lost: competing flows keep at least half the link, and a flow
//!    that keeps the queue full (loss-based TCP, BBR) cannot starve a
//!    transfer that held the link first. A transfer that joins a link
//!    already full never saw its peak; for it, a queue over three
//!    quarters of the threshold in 80% of the reports of `max(1 s, 6 rtt)`
//!    while it backs off means a loss-based flow holds the queue, and it
//!    **competes**: CUBIC's law in rates ([`crate::compete`]), cut on the
//!    queue's overflow, between half and 0.55 of the peak, until the queue
//!    has been clear for `max(3 s, 12 rtt)`. `--background` never
//!    competes, has no floor, a lower threshold, and halves on a queue
//!    (LEDBAT); `--fair off` holds 0.9 of the peak ([`Share`]).
//! 7. **Silence.** With no report for a while the rate halves; when the
//!    estimate comes back below a quarter of the rate in force (after an
//!    outage), startup runs again from the estimate.
//! 8. **Out of data.** A report the sender marks *application-limited*
//!    (its queue ran dry while those datagrams flew, say while it waited
//!    for acknowledgements or for the disk) counts only if it shows
//!    congestion or more capacity than estimated: a pause in the data is
//!    not a slower path, and must not send the controller back to startup
//!    (at 600 ms that cost about five seconds at a fraction of the rate).
//!
//! The estimate's window is 8 reports or two round trips, whichever is
//! longer, so a path's capacity is remembered across a round trip's lull.
//!
//! The rate never exceeds the cap and never falls below 64 KiB/s (or the
//! cap, if that is lower).

use std::collections::VecDeque;
use std::time::Duration;

use crate::compete::{Compete, LEAST_SHARE};
use crate::controller::{Feedback, RateController};

const FLOOR: f64 = 64.0 * 1024.0;
/// Reports over which the capacity estimate's maximum is kept, at least.
const ESTIMATE_WINDOW: usize = 8;
/// ... and round trips.
const ESTIMATE_ROUND_TRIPS: f64 = 2.0;
const BASE_DELAY_WINDOW: Duration = Duration::from_secs(10);
/// `--background` remembers the path's base delay longer, as LEDBAT does
/// (RFC 6817 keeps minutes): a flow that keeps the queue full for ten
/// seconds must not become the new "empty".
const BACKGROUND_BASE_WINDOW: Duration = Duration::from_secs(120);
/// A queue over three quarters of the congestion threshold in [`BUSY_SHARE`] of the
/// reports of this long (and at least [`WATCH_ROUND_TRIPS`] round trips),
/// while this transfer backs off each time it passes the threshold, is
/// someone else's: a loss-based flow shares the bottleneck. (Measured
/// beside CUBIC on the emulated 1 Gbit/s, 150 ms link: the queue hovered
/// at 15 to 40 ms for tens of seconds, dipping under the 19 ms threshold
/// now and then, while the delay-based rate stayed near a fifth of the
/// link.)
pub(crate) const WATCH: Duration = Duration::from_secs(1);
pub(crate) const WATCH_ROUND_TRIPS: u32 = 6;
pub(crate) const BUSY_SHARE: f64 = 0.8;
/// Competing ends once every report of [`LEAVE_ROUND_TRIPS`] round trips
/// (and at least [`LEAVE`]) saw the queue under a quarter of the
/// threshold: the other flow left. Longer than the watch: a CUBIC flow's
/// cut drains the queue for a moment, and CUBIC's own growth fills a path
/// the other flow left within seconds anyway.
const LEAVE: Duration = Duration::from_secs(3);
const LEAVE_ROUND_TRIPS: u32 = 12;
/// A loss while the queue is at least this fraction of the deepest queue
/// seen lately is the queue overflowing, not noise.
const OVERFLOW: f64 = 0.6;
/// Segment size assumed until the caller gives the datagram payload.
const DEFAULT_SEGMENT: usize = 1448;
const MIN_QUEUE_DELAY: Duration = Duration::from_millis(10);
const BACKGROUND_QUEUE_DELAY: Duration = Duration::from_millis(5);
const CLUSTER_RUN: u64 = 8;
/// Cruise's first probe above the estimate, and the most a probe may ask.
const PROBE: f64 = 0.15;
const MAX_PROBE: f64 = 1.0;
/// Reports in a cruise cycle, at least.
const CYCLE: usize = 8;
/// Backing off for queueing delay stops at this fraction of the path's
/// (decaying) peak capacity: enough to leave competing flows the rest, and
/// not so far that a loss-driven or BBR flow that keeps the queue full
/// starves the transfer.
const FAIR_SHARE: f64 = 0.5;
/// While competing, the most of the path's peak taken.
const FAIR_CEILING: f64 = 0.55;
/// `--fair=off` holds this fraction of the path's (decaying) peak whatever
/// queue another flow builds: Aspera's "fixed" policy at the rate found.
const HOLD: f64 = 0.9;
const PEAK_HALF_LIFE: Duration = Duration::from_secs(30);
/// Reports over which the rates sent are remembered: four round trips at
/// the usual two reports a round trip, so a report's datagrams, sent a
/// round trip before it, are within them.
const SENT_WINDOW: usize = 8;
/// How far above the rates sent a capacity sample may go: what arrives
/// can outrun what was sent only by the timing of the reports.
const SENT_SLACK: f64 = 1.25;
/// Above this loss rate a report is not mere noise: the share floor does
/// not hold (the path itself may have shrunk).
const HEAVY_LOSS: f64 = 0.25;
/// Where a transfer that knows its path's capacity starts, as a fraction
/// of it (see [`Adaptive::resuming`]).
const RESUME_GAIN: f64 = 0.95;
/// Startup jumps to this share of the packet trains' rate (module docs, 4):
/// trains measured on the test VM read 5-30% above the bottleneck in the
/// first reports.
const TRAIN_GAIN: f64 = 0.9;
/// Train rates that must agree (the least of them is taken) before
/// startup jumps.
const TRAIN_SAMPLES: usize = 2;
/// Round trip assumed until the caller gives one.
const DEFAULT_RTT: Duration = Duration::from_millis(100);

/// How a transfer shares a path with other traffic (`--fair`,
/// `--background`; P-46).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Share {
    /// A fair share: about half the path against one other flow that wants
    /// it all, the whole path when idle.
    #[default]
    Fair,
    /// Yield to any other flow (as LEDBAT does): at most a tenth of the
    /// path while another flow wants it, the whole path when idle.
    Background,
    /// A dedicated path: hold the rate found and never yield to a queue
    /// someone else builds.
    Off,
}

impl Share {
    /// Queueing delay above which the path counts as congested (P-26 step
    /// 3): `max(10 ms, rtt / 8)`, or `max(5 ms, rtt / 16)` under
    /// `--background`. LEDBAT keeps its own queue low and reads any more
    /// as another flow's (measured beside CUBIC at 150 ms: at rtt / 8 it
    /// still took a fifth of the link, the queue dipping under the
    /// threshold between CUBIC's bursts).
    pub fn queue_threshold(self, rtt: Duration) -> Duration {
        match self {
            Share::Background => BACKGROUND_QUEUE_DELAY.max(rtt / 16),
            _ => MIN_QUEUE_DELAY.max(rtt / 8),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Startup,
    Drain,
    Cruise,
}

pub struct Adaptive {
    rate: f64,
    cap: Option<f64>,
    phase: Phase,
    estimates: VecDeque<f64>,
    /// (time, one-way delay) samples for the windowed minimum.
    delays: VecDeque<(Duration, Duration)>,
    cycle: usize,
    /// The cruise probe's gain over the estimate (exponential while probes
    /// find room), and the estimate when the cycle began.
    probe_up: f64,
    probe_base: f64,
    rtt: Duration,
    /// Startup: best delivery so far, round trips without a 25% gain, and
    /// when the current round ends.
    full_rate: f64,
    flat_rounds: u32,
    round_end: Duration,
    /// The last raw capacity samples, for the median filter.
    raw: VecDeque<f64>,
    /// The rates in force at the last [`SENT_WINDOW`] reports: no sample
    /// of capacity is taken above [`SENT_SLACK`] times their most.
    sent: VecDeque<f64>,
    /// The best capacity seen, decaying with a half-life of
    /// [`PEAK_HALF_LIFE`]: what "a fair share of the path" refers to.
    peak: f64,
    share: Share,
    /// While a loss-based flow keeps the queue full: CUBIC's law, in rates.
    compete: Option<Compete>,
    /// Each report's time and queueing delay, over the watch span (the
    /// leave span while competing).
    queues: VecDeque<(Duration, Duration)>,
    /// This transfer has competed before.
    competed: bool,
    /// Startup: the last packet-train rates reported.
    trains: VecDeque<f64>,
    /// Cruising from set-up's train: the reports' trains may still raise
    /// the rate once, as in startup (a set-up train can read low).
    train_check: bool,
    /// When startup first ended: its overshoot's queue takes a while to
    /// drain (seconds at 600 ms) and is no other flow's.
    settled: Option<Duration>,
    /// The deepest queueing delay lately (decaying with the peak's
    /// half-life): how deep the bottleneck's buffer is.
    deepest: f64,
    /// The last report's queueing delay, for the debug log.
    queueing: Duration,
    segment: usize,
    /// Reports that showed congestion, for the summary.
    pub congestion_events: u64,
}

impl Adaptive {
    /// Starts at `initial` bytes per second, never above `cap`.
    pub fn new(initial: u64, cap: Option<u64>) -> Adaptive {
        let cap = cap.map(|c| c as f64);
        let rate = (initial as f64).max(FLOOR).min(cap.unwrap_or(f64::MAX));
        Adaptive {
            rate,
            cap,
            phase: Phase::Startup,
            estimates: VecDeque::new(),
            delays: VecDeque::new(),
            cycle: 0,
            probe_up: PROBE,
            probe_base: 0.0,
            rtt: DEFAULT_RTT,
            full_rate: 0.0,
            flat_rounds: 0,
            round_end: Duration::ZERO,
            raw: VecDeque::new(),
            sent: VecDeque::new(),
            peak: 0.0,
            share: Share::Fair,
            compete: None,
            queues: VecDeque::new(),
            competed: false,
            trains: VecDeque::new(),
            train_check: false,
            settled: None,
            deepest: 0.0,
            queueing: Duration::ZERO,
            segment: DEFAULT_SEGMENT,
            congestion_events: 0,
        }
    }

    /// How this transfer shares its path.
    pub fn with_share(mut self, share: Share) -> Adaptive {
        self.share = share;
        self
    }

    /// Starts at a rate this path delivered recently (the last transfer to
    /// the same host, at a similar round trip) instead of probing up from
    /// `initial`: in cruise, with `known` as the estimate until reports
    /// replace it (within [`ESTIMATE_WINDOW`] reports or two round trips).
    /// A path that carries less now shows a queue within a round trip, and
    /// congestion cuts the rate to what was delivered; one that carries
    /// more is found by cruise's probes. The fair-share floor is not
    /// seeded: it comes from this transfer's own deliveries.
    /// It starts at [`RESUME_GAIN`] of `known`: an estimate measured while
    /// probing sits a little above what the path carries.
    pub fn resuming(mut self, known: u64) -> Adaptive {
        self.cruise_at((known as f64 * RESUME_GAIN).max(FLOOR));
        self
    }

    /// Starts from the rate set-up's packet train crossed the path at
    /// (P-23): cruising from [`TRAIN_GAIN`] of it, as after reports of
    /// trains (module docs, 4), when that is above the rate in force. A
    /// background transfer probes up as before. One train can read low
    /// (a sender or forwarder that lost its core mid-train spreads it):
    /// until the reports have measured trains, they may still raise the
    /// rate as they would in startup, unless congestion came first.
    pub fn from_setup_train(mut self, rate: u64) -> Adaptive {
        let path = rate as f64 * TRAIN_GAIN;
        if self.share != Share::Background && path > self.rate {
            self.cruise_at(path);
            self.train_check = true;
        }
        self
    }

    /// Cruises from `rate`, taken as the estimate until reports replace
    /// it: a known path's, or the one packet trains measured.
    fn cruise_at(&mut self, rate: f64) {
        self.phase = Phase::Cruise;
        self.estimates = VecDeque::from([rate]);
        // Begin where the gain is 1: the first probe comes with the next
        // cycle, once reports have confirmed the rate.
        self.cycle = 4;
        self.probe_up = PROBE;
        self.probe_base = rate;
        self.set(rate);
    }

    /// Startup (module docs, 4): once [`TRAIN_SAMPLES`] reports have
    /// measured packet trains, the least of their rates is the
    /// bottleneck's; if a share of it is above the rate in force, jump
    /// there and cruise. Whether it jumped. A background transfer probes
    /// up as before.
    fn train_jump(&mut self, fb: &Feedback) -> bool {
        if fb.train_rate == 0 || self.share == Share::Background {
            return false;
        }
        self.trains.push_back(fb.train_rate as f64);
        if self.trains.len() > TRAIN_SAMPLES {
            self.trains.pop_front();
        }
        if self.trains.len() < TRAIN_SAMPLES {
            return false;
        }
        let path = self.trains.iter().copied().fold(f64::MAX, f64::min) * TRAIN_GAIN;
        if path <= self.rate {
            return false;
        }
        self.cruise_at(path);
        true
    }

    /// The payload of one datagram: competing with TCP counts in segments.
    pub fn with_segment(mut self, bytes: usize) -> Adaptive {
        self.segment = bytes;
        self
    }

    /// The path's round trip, which paces startup's growth.
    pub fn with_rtt(mut self, rtt: Duration) -> Adaptive {
        self.rtt = rtt.max(Duration::from_millis(1));
        self
    }

    fn estimate(&self) -> f64 {
        self.estimates.iter().copied().fold(0.0, f64::max)
    }

    /// The smallest one-way delay lately: the path with an empty queue.
    /// Frozen while competing, since the other flow never lets the queue
    /// empty.
    fn base_delay(&mut self, now: Duration, sample: Duration) -> Duration {
        let window = match self.share {
            Share::Background => BACKGROUND_BASE_WINDOW,
            _ if self.compete.is_some() => Duration::MAX,
            _ => BASE_DELAY_WINDOW,
        };
        while self
            .delays
            .front()
            .is_some_and(|&(t, _)| now.saturating_sub(t) > window)
        {
            self.delays.pop_front();
        }
        // Keep the deque increasing in delay so the front is the minimum.
        while self.delays.back().is_some_and(|&(_, d)| d >= sample) {
            self.delays.pop_back();
        }
        self.delays.push_back((now, sample));
        self.delays.front().map(|&(_, d)| d).unwrap_or(sample)
    }

    fn set(&mut self, rate: f64) {
        self.rate = rate.max(FLOOR).min(self.cap.unwrap_or(f64::MAX));
    }

    pub fn in_startup(&self) -> bool {
        self.phase == Phase::Startup
    }
}

impl RateController for Adaptive {
    fn rate(&self) -> u64 {
        self.rate as u64
    }

    fn on_feedback(&mut self, now: Duration, fb: &Feedback) {
        self.decide(now, fb);
    }

    fn estimate(&self) -> u64 {
        Adaptive::estimate(self) as u64
    }

    fn in_startup(&self) -> bool {
        self.phase == Phase::Startup
    }

    fn on_feedback_timeout(&mut self, _now: Duration) {
        let r = self.rate / 2.0;
        self.set(r);
    }

    fn name(&self) -> &'static str {
        "adaptive"
    }

    fn state(&self) -> String {
        format!(
            "{:?}{}, estimate {:.0} B/s, peak {:.0} B/s, queueing {:.1} ms (deepest {:.1}), congestion events {}",
            self.phase,
            if self.compete.is_some() {
                " (competing)"
            } else {
                ""
            },
            self.estimate(),
            self.peak,
            self.queueing.as_secs_f64() * 1e3,
            self.deepest * 1e3,
            self.congestion_events
        )
    }
}

impl Adaptive {
    /// A fair share against a loss-based flow (module docs, 6): whether
    /// this report was handled so. A queue that stays up while this
    /// transfer backs off is another flow's, which only loss will stop;
    /// from then on the rate follows CUBIC's law, until the queue clears.
    fn competing(
        &mut self,
        now: Duration,
        fb: &Feedback,
        threshold: Duration,
        queueing: Duration,
        delivered: f64,
        floor: f64,
    ) -> bool {
        if self.share != Share::Fair {
            return false;
        }
        if self.phase == Phase::Startup {
            return false;
        }
        let rtt = self.rtt;
        let watch = WATCH.max(rtt * WATCH_ROUND_TRIPS);
        let settled = *self.settled.get_or_insert(now);
        if now < settled + watch {
            return false;
        }
        let span = if self.compete.is_some() {
            LEAVE.max(rtt * LEAVE_ROUND_TRIPS)
        } else {
            watch
        };
        // Keep one sample older than the span, to know it is covered.
        while self
            .queues
            .get(1)
            .is_some_and(|&(t, _)| now.saturating_sub(t) >= span)
        {
            self.queues.pop_front();
        }
        self.queues.push_back((now, queueing));
        let covered = self
            .queues
            .front()
            .is_some_and(|&(t, _)| now.saturating_sub(t) >= span);
        let recent = || self.queues.iter().skip(1).map(|&(_, q)| q);
        let n = recent().count().max(1) as f64;
        if self.compete.is_none() {
            let busy = recent().filter(|&q| q > threshold * 3 / 4).count() as f64;
            if !covered || busy < BUSY_SHARE * n {
                return false;
            }
            // The first time, slow start: its overshoot of the full queue
            // measures the path (the peak, and so the floor of half of
            // it). Coming back, CUBIC goes on from the rate in force.
            let mut c = Compete::new(self.segment, rtt);
            if self.competed {
                c.leave_slow_start(now, self.rate);
            }
            self.competed = true;
            self.compete = Some(c);
            self.phase = Phase::Cruise;
        } else if covered && recent().all(|q| q < threshold / 4) {
            // The other flow left: cruise from what arrives, and let the
            // probes find the rest of the path.
            self.compete = None;
            self.estimates.clear();
            self.estimates.push_back(delivered);
            self.cycle = 0;
            self.probe_up = PROBE;
            self.probe_base = delivered;
            self.set(delivered.max(self.rate));
            return true;
        }
        let Some(c) = self.compete.as_mut() else {
            return false;
        };
        let overflow = fb.lost > 0 && queueing.as_secs_f64() >= OVERFLOW * self.deepest;
        let cut = if overflow {
            c.loss(now, delivered)
        } else {
            None
        };
        let rate = match cut {
            Some(r) => {
                self.congestion_events += 1;
                r
            }
            None => c.grow(now, self.rate, fb.interval),
        };
        // Known the path (its peak, once slow start has overflowed the
        // queue), competing keeps to about half of it at most: CUBIC's law
        // alone converges on equal shares over minutes at these windows,
        // and keeps whatever ratio it started from till then. Its least is
        // no longer half (beside two CUBIC flows that took 0.6 of the
        // link): CUBIC's cuts find a third beside two flows.
        let (ceiling, floor) = if floor > 0.0 && !c.in_slow_start() {
            (self.peak * FAIR_CEILING, self.peak * LEAST_SHARE)
        } else {
            (f64::MAX, floor)
        };
        self.set(rate.min(ceiling).max(floor));
        true
    }

    fn decide(&mut self, now: Duration, fb: &Feedback) {
        let delivered = fb.delivery_rate();
        let loss = fb.loss_rate().min(0.5);
        let base = self.base_delay(now, fb.min_one_way);
        let queueing = fb.min_one_way.saturating_sub(base);
        self.queueing = queueing;
        let threshold = self.share.queue_threshold(self.rtt);
        let congested = queueing > threshold || fb.longest_loss_run >= CLUSTER_RUN;
        // What the sender could have sent, when it ran out of data: the
        // rate in force or the estimate, whichever is lower.
        let held = self.rate.min(self.estimate());
        if fb.app_limited && !congested && delivered <= held {
            return;
        }
        // Scaling delivery up by the loss is right only while the
        // bottleneck has room: once a queue builds, it is delivering all it
        // can, and losses before it (or its own overflow) must not inflate
        // the estimate, or the sender would keep the queue full.
        let capacity = if queueing > threshold / 2 {
            delivered
        } else {
            delivered / (1.0 - loss)
        };
        // Nothing arrives faster than it was sent: a receiver that stalls
        // and then drains its socket reports bursts the path never
        // carried. Two in a row passed the median below and set the peak
        // at 3.3 times a 1 Gbit/s link (10% loss, 150 ms): fair sharing's
        // floor, half the peak, then kept the link's queue full.
        self.sent.push_back(self.rate);
        if self.sent.len() > SENT_WINDOW {
            self.sent.pop_front();
        }
        let most_sent = self.sent.iter().copied().fold(0.0, f64::max);
        let capacity = capacity.min(most_sent * SENT_SLACK);
        // A receiver that falls behind and then drains its socket reports a
        // burst above the path's rate; the median of the last three samples
        // keeps one such spike out of the estimate and the peak.
        self.raw.push_back(capacity);
        if self.raw.len() > 3 {
            self.raw.pop_front();
        }
        let mut sorted: Vec<f64> = self.raw.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let capacity = sorted[(sorted.len() - 1) / 2];
        self.estimates.push_back(capacity);
        let span = (ESTIMATE_ROUND_TRIPS * self.rtt.as_secs_f64()
            / fb.interval.as_secs_f64().max(1e-3))
        .ceil() as usize;
        while self.estimates.len() > ESTIMATE_WINDOW.max(span) {
            self.estimates.pop_front();
        }
        let decay = 0.5f64.powf(fb.interval.as_secs_f64() / PEAK_HALF_LIFE.as_secs_f64());
        // While competing, the peak is the path's capacity from before
        // (or from this transfer's own first probe): it does not fade
        // while the other flow holds its half.
        // `--fair=off` holds it too, short of heavy loss (the path itself
        // shrank).
        let hold = self.compete.is_some() || (self.share == Share::Off && loss < HEAVY_LOSS);
        let fade = if hold { 1.0 } else { decay };
        self.peak = (self.peak * fade).max(capacity);
        self.deepest = (self.deepest * decay).max(queueing.as_secs_f64());
        let floor = if loss < HEAVY_LOSS {
            self.peak * FAIR_SHARE
        } else {
            0.0
        };
        if self.competing(now, fb, threshold, queueing, delivered, floor) {
            return;
        }
        // `floor` is 0 under heavy loss, and so is every share then.
        let share = match self.share {
            Share::Background => 0.0,
            Share::Off if floor > 0.0 => self.peak * HOLD,
            _ => floor,
        };
        if congested {
            // Short of data, the sender delivered less than it may send.
            let delivered = if fb.app_limited {
                delivered.max(held)
            } else {
                delivered
            };
            self.congestion_events += 1;
            self.train_check = false;
            self.estimates.clear();
            self.estimates.push_back(delivered);
            self.phase = Phase::Cruise;
            self.cycle = 2;
            self.probe_up = PROBE;
            // A deep queue (startup's overshoot) is drained faster.
            let gain = match self.share {
                // Yield at once: LEDBAT halves its window on a queue.
                Share::Background => 0.5,
                _ if queueing > threshold * 4 => 0.6,
                _ => 0.85,
            };
            self.set((delivered * gain).max(share));
            return;
        }
        match self.phase {
            Phase::Startup => {
                if self.train_jump(fb) {
                    return;
                }
                // Once per round trip: did the (loss-corrected) delivery
                // grow by a quarter? Three flat rounds mean the bottleneck
                // is full even where no queue shows.
                if now >= self.round_end {
                    self.round_end = now + self.rtt;
                    let best = self.estimate();
                    if best >= self.full_rate * 1.25 {
                        self.full_rate = best;
                        self.flat_rounds = 0;
                    } else {
                        self.flat_rounds += 1;
                    }
                }
                if self.flat_rounds >= 3 {
                    self.phase = Phase::Drain;
                    let est = self.estimate();
                    self.set(est * 0.9);
                } else {
                    let growth =
                        2f64.powf((fb.interval.as_secs_f64() / self.rtt.as_secs_f64()).min(1.0));
                    let r = self.rate * growth;
                    self.set(r);
                }
            }
            Phase::Drain => {
                self.phase = Phase::Cruise;
                self.cycle = 0;
                self.probe_up = PROBE;
                self.probe_base = self.estimate();
                let est = self.estimate();
                self.set(est);
            }
            Phase::Cruise => {
                if self.train_check {
                    let jumped = self.train_jump(fb);
                    self.train_check = self.trains.len() < TRAIN_SAMPLES;
                    if jumped {
                        return;
                    }
                }
                let est = self.estimate();
                if est < self.rate * 0.25 {
                    // Far below where we were (after an outage): look again.
                    self.phase = Phase::Startup;
                    self.peak = est;
                    self.full_rate = 0.0;
                    self.flat_rounds = 0;
                    self.set(est.max(FLOOR));
                    return;
                }
                // A cycle spans a round trip and more, so that it ends
                // after its probe's deliveries have been reported.
                let len = CYCLE.max(
                    (self.rtt.as_secs_f64() / fb.interval.as_secs_f64().max(1e-3)).ceil() as usize
                        + 4,
                );
                self.cycle = (self.cycle + 1) % len;
                if self.cycle == 0 {
                    // Did the last probe find room? Then ask for twice as
                    // much more: a rate cut by a passing queue (a busy
                    // receiver, a flow that left) comes back in a few
                    // cycles, not minutes.
                    self.probe_up = if est >= self.probe_base * (1.0 + self.probe_up / 2.0) {
                        (self.probe_up * 2.0).min(MAX_PROBE)
                    } else {
                        PROBE
                    };
                    self.probe_base = est;
                }
                // Two reports of probe (one would not pass the median of
                // three), two of drain, then the estimate.
                // The drain takes back what the probe sent beyond the
                // estimate, which the cap may have clipped.
                let probe =
                    (1.0 + self.probe_up).min(self.cap.map_or(f64::MAX, |c| c / est.max(1.0)));
                let gain = match self.cycle {
                    0 | 1 => 1.0 + self.probe_up,
                    2 | 3 => 1.0 / probe.max(1.0),
                    _ => 1.0,
                };
                self.set((est * gain).max(share));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const LINK: f64 = 125e6;

    /// A 50 ms report: `rate` bytes/s delivered at a steady one-way delay.
    fn report(rate: f64, app_limited: bool) -> Feedback {
        let interval = 50 * MS;
        Feedback {
            interval,
            bytes: (rate * interval.as_secs_f64()) as u64,
            packets: (rate * interval.as_secs_f64() / 9000.0) as u64,
            lost: 0,
            longest_loss_run: 0,
            min_one_way: 300 * MS,
            app_limited,
            train_rate: 0,
        }
    }

    /// Cruising at 1 Gbit/s on a 600 ms path, then 1.5 s of reports at a
    /// twentieth of that (longer than the estimate's two round trips).
    fn after_lull(app_limited: bool) -> Adaptive {
        let mut c = Adaptive::new(LINK as u64, None).with_rtt(600 * MS);
        let mut now = Duration::ZERO;
        for _ in 0..200 {
            now += 50 * MS;
            c.on_feedback(now, &report(LINK, false));
        }
        assert!(!c.in_startup());
        for _ in 0..30 {
            now += 50 * MS;
            c.on_feedback(now, &report(LINK / 20.0, app_limited));
        }
        c
    }

    #[test]
    fn a_sender_out_of_data_keeps_its_rate() {
        let c = after_lull(true);
        assert!(!c.in_startup());
        assert!(c.rate() as f64 >= 0.85 * LINK, "rate {}", c.rate());
    }

    #[test]
    fn a_path_that_stops_delivering_starts_over() {
        let c = after_lull(false);
        assert!(c.in_startup());
        assert!((c.rate() as f64) < 0.25 * LINK, "rate {}", c.rate());
    }

    /// A path of `LINK` bytes/s and 150 ms (3 reports) with no queue: what
    /// arrives is what was sent a round trip ago, up to the link.
    fn seconds_to_recover(c: &mut Adaptive) -> f64 {
        let mut sent = std::collections::VecDeque::from(vec![c.rate() as f64; 3]);
        let mut now = Duration::from_secs(100);
        for i in 0..2000 {
            if c.rate() as f64 >= 0.9 * LINK {
                return i as f64 * 0.05;
            }
            now += 50 * MS;
            sent.push_back(c.rate() as f64);
            let arrived = sent.pop_front().unwrap().min(LINK);
            let mut fb = report(arrived, false);
            fb.min_one_way = 75 * MS;
            c.on_feedback(now, &fb);
        }
        f64::INFINITY
    }

    #[test]
    fn a_rate_cut_by_a_passing_queue_comes_back_in_seconds() {
        // Startup reaches 115 Mbit/s; a queueing delay (a receiver busy
        // preallocating, say) cuts it; the path has room for 1 Gbit/s.
        let mut c = Adaptive::new(1_250_000, None).with_rtt(150 * MS);
        let mut now = Duration::ZERO;
        for _ in 0..3 {
            now += 50 * MS;
            let mut fb = report(14e6, false);
            fb.min_one_way = 75 * MS;
            c.on_feedback(now, &fb);
        }
        now += 50 * MS;
        let mut spike = report(14e6, false);
        spike.min_one_way = 200 * MS;
        c.on_feedback(now, &spike);
        assert!(!c.in_startup());
        assert!((c.rate() as f64) < 0.1 * LINK);
        let secs = seconds_to_recover(&mut c);
        assert!(secs < 5.0, "{secs} s to come back to 90% of the link");
    }

    #[test]
    fn bursts_above_what_was_sent_move_neither_the_estimate_nor_the_peak() {
        // Cruising on a 1 Gbit/s path, then two reports of a receiver
        // draining its socket after a stall, 3.3 times the link: the
        // median lets two in a row through, so the rates sent bound them.
        let mut c = Adaptive::new(LINK as u64, None).with_rtt(150 * MS);
        let mut now = Duration::ZERO;
        let mut most = 0f64;
        for _ in 0..200 {
            now += 50 * MS;
            c.on_feedback(now, &report(LINK, false));
            most = most.max(c.rate() as f64);
        }
        for _ in 0..2 {
            now += 50 * MS;
            c.on_feedback(now, &report(3.3 * LINK, false));
        }
        let bound = SENT_SLACK * most + 1.0;
        assert!(
            c.estimate() <= bound,
            "estimate {} over {bound}",
            c.estimate()
        );
        let peak: f64 = c
            .state()
            .split("peak ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(peak <= bound, "peak {peak} over {bound}");
        // The floor of fair sharing, half the peak, stays below the link.
        assert!(peak * FAIR_SHARE < LINK, "peak {peak}");
    }

    #[test]
    fn the_estimate_spans_two_round_trips() {
        // 600 ms: 24 reports of 50 ms; a lull shorter than that is
        // remembered even when the sender had data.
        let mut c = Adaptive::new(LINK as u64, None).with_rtt(600 * MS);
        let mut now = Duration::ZERO;
        for _ in 0..200 {
            now += 50 * MS;
            c.on_feedback(now, &report(LINK, false));
        }
        for _ in 0..12 {
            now += 50 * MS;
            c.on_feedback(now, &report(LINK / 20.0, false));
        }
        assert!(!c.in_startup());
        assert!(c.estimate() >= 0.95 * LINK);
    }

    /// Startup at 100 Mbit/s on a 1 Gbit/s path whose reports measure
    /// packet trains at `train` bytes/s.
    fn startup_with_trains(share: Share, train: u64) -> Adaptive {
        let mut c = Adaptive::new(12_500_000, None)
            .with_rtt(150 * MS)
            .with_share(share);
        for i in 1..=2u32 {
            let fb = Feedback {
                train_rate: train,
                ..report(12_500_000.0, false)
            };
            c.on_feedback(i * 50 * MS, &fb);
        }
        c
    }

    #[test]
    fn startup_jumps_to_what_packet_trains_measured() {
        // Two reports of trains: cruise at 0.9 of the least.
        let c = startup_with_trains(Share::Fair, 125_000_000);
        assert!(!c.in_startup());
        assert_eq!(c.rate() as f64, 125e6 * TRAIN_GAIN);
        // A background transfer probes up as before.
        let c = startup_with_trains(Share::Background, 125_000_000);
        assert!(c.in_startup());
        assert!(c.rate() < 30_000_000);
        // Trains no faster than the rate in force: startup goes on.
        let c = startup_with_trains(Share::Fair, 12_000_000);
        assert!(c.in_startup());
        // Nor does one report of trains suffice.
        let mut c = Adaptive::new(12_500_000, None).with_rtt(150 * MS);
        let fb = Feedback {
            train_rate: 125_000_000,
            ..report(12_500_000.0, false)
        };
        c.on_feedback(50 * MS, &fb);
        assert!(c.in_startup());
        // A cap holds.
        let mut c = Adaptive::new(12_500_000, Some(50_000_000)).with_rtt(150 * MS);
        for i in 1..=2u32 {
            c.on_feedback(i * 50 * MS, &fb);
        }
        assert_eq!(c.rate(), 50_000_000);
    }

    #[test]
    fn set_up_train_starts_the_transfer_at_its_rate() {
        let start = |share, cap, train| {
            Adaptive::new(12_500_000, cap)
                .with_rtt(150 * MS)
                .with_share(share)
                .from_setup_train(train)
        };
        let c = start(Share::Fair, None, 125_000_000);
        assert!(!c.in_startup());
        assert_eq!(c.rate() as f64, 125e6 * TRAIN_GAIN);
        // Background probes up; a slower train leaves startup as it was;
        // a cap holds.
        assert!(start(Share::Background, None, 125_000_000).in_startup());
        let c = start(Share::Fair, None, 10_000_000);
        assert!(c.in_startup());
        assert_eq!(c.rate(), 12_500_000);
        assert_eq!(
            start(Share::Fair, Some(50_000_000), 125_000_000).rate(),
            50_000_000
        );
        // An absurd claim (a hostile peer's) saturates under the cap.
        assert_eq!(
            start(Share::Off, Some(50_000_000), u64::MAX).rate(),
            50_000_000
        );
        // A train that read low: the reports' trains raise the rate once.
        let mut c = start(Share::Fair, None, 80_000_000);
        let fb = Feedback {
            train_rate: 125_000_000,
            ..report(72_000_000.0, false)
        };
        c.on_feedback(50 * MS, &fb);
        c.on_feedback(100 * MS, &fb);
        assert_eq!(c.rate() as f64, 125e6 * TRAIN_GAIN);
        // And no more after that: cruise's probes take over.
        let before = c.rate();
        let fb = Feedback {
            train_rate: 250_000_000,
            ..report(112_000_000.0, false)
        };
        c.on_feedback(150 * MS, &fb);
        c.on_feedback(200 * MS, &fb);
        assert!(c.rate() < before * 2, "{}", c.rate());
    }
}
