//! The sharing policy over TCP streams (P-46), sans-IO.
//!
//! The kernel's congestion control (BBR by default) runs each data stream;
//! several BBR streams beside one CUBIC flow take four fifths of the path
//! (measured: the CUBIC flow kept 0.17 of the emulated 1 Gbit/s, 150 ms
//! link, and 0.32 beside a single BBR stream). This governor watches the
//! streams' `TCP_INFO` and caps their pacing only while another flow keeps
//! the bottleneck's queue up and takes part of the path, so an idle path
//! is left to BBR alone:
//!
//! 1. **Watching.** Each sample gives the streams' delivery rate (what
//!    they delivered together over the last round trip, from the kernel's
//!    delivered-segment counts), their smoothed round trip and the
//!    least one. The median of the last [`RATES`] delivery rates, at its
//!    highest while the streams run free, is the measured peak. `peak` is
//!    that, or what the path carried when last measured (a known path)
//!    where the measured one is under [`TRUSTED`] of it, since streams that
//!    join a full path only ever measure their share of it. The queue is
//!    `srtt − min_rtt`; the threshold `T` is `max(10 ms, rtt / 8)`, or
//!    `max(5 ms, rtt / 16)` under `--background` (the UDP channel's, P-26
//!    step 3).
//! 2. **Entering.** Past a grace, when [`BUSY_SHARE`] of the samples of
//!    the last `max(1 s, 6 × rtt)` saw a queue over `T`, the last one
//!    too (a queue that drains is the streams' own), the queue is not their
//!    own startup's (sixteen or more BBR streams build one even under a
//!    known path's ceiling: see `own_startup`), and their median
//!    delivery rate is under [`SHORT`] of `peak`, another flow holds the
//!    queue and takes part of the path: cap the streams together at `peak
//!    / 2` (`--fair on`), or at [`BACKGROUND_SHARE`] of it (`--background`;
//!    at least [`TRICKLE`]: slower, a stream's acknowledgements come a
//!    delayed-ACK timer apart and read as a queue). Both tests
//!    are needed: several BBR streams keep a queue of their own (measured
//!    with six alone on the emulated link: 20 to 60 ms for a second or more
//!    after their drain) while they deliver the whole path. Streams whose
//!    queue stood in their grace before they delivered [`OWN_QUEUE`] of
//!    the peak they reach joined another flow's queue: they are held once
//!    their startup is over (`joined_busy`). A watch in which the
//!    streams' delivery collapsed under [`COLLAPSED`] of `peak`, once they
//!    had delivered [`SHORT`] of it, saw their own dip, not another flow
//!    (`own_dip`); a queue that stands while they deliver `SHORT` of the
//!    peak is theirs, and gets them a ceiling (step 5). The grace
//!    covers BBR's startup, whose overshoot fills the queue itself (the
//!    same six streams: a full queue, 150 ms, from 1.5 s to 3.0 s after the
//!    first data): it ends once the queue has passed `T` and fallen back
//!    under it, or [`GRACE_ROUND_TRIPS`] round trips (and [`GRACE`]) after
//!    the first delivery, whichever comes first. A known path's streams
//!    have one too under `--fair on` (their startup overflows the queue
//!    even under the ceiling), ended at once when the queue stood before
//!    they delivered [`OWN_QUEUE`] of the peak (another flow's queue:
//!    `end_grace_in_a_busy_queue`); under `--background` none.
//! 3. **Held.** Each sample with a queue under `T / 4` (the path has
//!    room: the other flow backed off, or left) raises the cap by
//!    [`GROWTH`] of `peak` a round trip, from half of it to [`SHORT`] of it
//!    in 26 round trips; under a ceiling the course goes on from the
//!    raised cap (a window that grew stays grown). (Doubling
//!    the gain each clear round trip was tried on the emulated link: a
//!    CUBIC flow that BBR's startup had cut to a few segments grows back
//!    over seconds, and the streams took the room first every time: it
//!    kept 0.24 of the link.) Any other sample puts the cap back on its
//!    course (holding it while the queue stayed between `T / 4` and `T`
//!    kept the streams at 0.7 of the link beside a CUBIC flow that was
//!    growing back): under `--background` the floor; under `--fair on`
//!    one CUBIC flow's course from the floor ([`crate::compete`]), cut by
//!    three tenths when the streams lose segments with a queue over `T`
//!    in the last two round trips (the queue overflowed, and the flows
//!    that fill it lost too; losses with no queue are the path's own;
//!    once an episode, the one that showed the other flow included),
//!    growing back between as CUBIC does
//!    (only while the streams fill the cap), never under [`LEAST_SHARE`]
//!    of `peak`. The streams then take what one more CUBIC flow would:
//!    about 1/(N+1) beside N of them, where a fixed half left two CUBIC
//!    flows 0.53 of the link together.
//! 4. **Leaving.** Once the cap reaches [`SHORT`] of `peak` (on room, or
//!    on its course without a loss), the other flow has left: the
//!    streams' congestion control restarts (BBR held far under the path
//!    grows back a quarter each eight round trips) and
//!    the cap is lifted, to the ceiling if there is one; without one a
//!    grace starts over. (Short of `peak` itself: a `peak` read above the
//!    path would have the streams fill the queue themselves on the way,
//!    and fall back to the floor.)
//! 5. **Ceiling.** On a known path the streams are held from the start to
//!    [`CEILING`] times what it carried when last measured, so BBR's
//!    startup cannot flood the queue (beside a CUBIC flow it cut the flow
//!    to a few segments every time), and there is no grace. A ceiling the
//!    streams press against (their delivery at [`PRESSING`] of it) while
//!    the queue stays clear for a watch rises by a quarter: the rate kept
//!    may have been measured while sharing. Streams with none get one
//!    when their queue stood through their grace, or stands later while
//!    they deliver the path; one over a twentieth above what they deliver
//!    beside such a queue is brought down to it, a grace's span after the
//!    first sample, and no longer rises (`fit_ceiling`). Leaving a hold
//!    returns to the ceiling. What the streams delivered at their most
//!    ([`TcpShare::measured`], none if ever held) sizes the next push's
//!    ceiling.
//!
//! `--fair off` never caps.

use std::collections::VecDeque;
use std::time::Duration;

use crate::adaptive::{BUSY_SHARE, WATCH, WATCH_ROUND_TRIPS};
use crate::compete::{Compete, LEAST_SHARE};
use crate::stagger::Stagger;
use crate::Share;

/// Streams that deliver less than this share of `peak` beside a standing
/// queue have lost part of the path to another flow.
const SHORT: f64 = 0.9;
/// What `--background` leaves itself while another flow wants the path,
/// bytes per second (the UDP channel's floor).
const TRICKLE: u64 = 64 << 10;
/// What `--background` streams keep of `peak` while another flow wants
/// the path (issue 43 allows a tenth).
const BACKGROUND_SHARE: f64 = 0.05;
/// A known path's streams are held to this much more than it carried
/// when last measured: BBR's startup cannot flood the queue (it cut a
/// CUBIC flow to a few segments every time it did), and streams that
/// cannot outrun the path cannot build a queue of their own.
const CEILING: f64 = 1.05;
/// Streams that deliver this share of the ceiling (whose pacing counts
/// headers too) press against it.
const PRESSING: f64 = 0.9;
/// How much a ceiling the streams press against rises, each watch.
const RAISE: f64 = 1.25;
/// The share of the path the streams are held to when they find another
/// flow; from there the cap follows one CUBIC flow's course.
const FAIR_SHARE: f64 = 0.5;
const GRACE: Duration = Duration::from_secs(4);
const GRACE_ROUND_TRIPS: u32 = 40;
/// How much of `peak` a held cap gains a round trip while the queue is
/// clear.
const GROWTH: f64 = 1.0 / 64.0;
/// A cap moves the streams only when it changes by more than this.
const STEP: f64 = 0.02;
/// Samples kept, at most, whatever the round trip (bounds the history a
/// slow sampler or a huge round trip could grow).
const MAX_SAMPLES: usize = 1024;
/// Delivery rates whose median may raise `peak`: 1.2 s of them at 150 ms.
/// The median of three, each the sum of the streams' own last rate
/// samples, read up to 1,081 Mbit/s from sixteen streams on the emulated
/// 1 Gbit/s link, and 0.9 of that is more than the link: the streams' own
/// dips then passed for another flow, and held a lone push to half the
/// link for its last seconds. Counted over a round trip, sixteen streams
/// overfilling the queue in their startup (and losing to it) still read
/// up to 1.5 times the link for a few hundred milliseconds.
const RATES: usize = 32;
/// Streams whose delivery over the later half of a watch is this many
/// times the earlier half's are still in their startup.
const RAMPING: f64 = 1.25;
/// Streams delivering less than this share of `peak` cannot build a
/// queue of their own: sixteen and thirty-two streams' startups on the
/// emulated link first passed the threshold at 0.46 to 0.9 of it.
const OWN_QUEUE: f64 = 0.3;
/// A watch in which the streams delivered less than this share of `peak`
/// saw their own dip (see `own_dip`).
const COLLAPSED: f64 = 0.25;
/// Samples in a row over the threshold that make a standing queue.
const STOOD: u32 = 3;
/// A measured peak this close to the known figure is taken over it.
const TRUSTED: f64 = 0.8;
/// How often to sample: a quarter of the round trip, within these.
const MIN_TICK: Duration = Duration::from_millis(20);
const MAX_TICK: Duration = Duration::from_millis(100);

/// The median of `rates` (0 if none).
fn median(rates: impl Iterator<Item = u64>) -> u64 {
    let mut rates: Vec<u64> = rates.collect();
    rates.sort_unstable();
    rates.get(rates.len() / 2).copied().unwrap_or(0)
}

/// Where a grace stands after a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grace {
    Runs,
    /// The queue passed the threshold and fell back under it, or never
    /// passed it.
    Ended,
    /// Its time ran out with the queue over the threshold since it first
    /// passed it.
    Standing,
}

/// Where a grace's watch for a queue that stood early is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Not yet: `run` samples in a row over the threshold so far, the
    /// first of them delivering `first`.
    Unseen { run: u32, first: u64 },
    /// The queue stood ([`STOOD`] samples in a row) from this delivery on.
    Stood(u64),
    /// Judged once the startup was over, or no grace to watch.
    Decided,
}

/// What the streams' `TCP_INFO` showed, taken together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSample {
    /// The streams' delivery rates summed, bytes per second.
    pub delivery: u64,
    /// The streams' smoothed round trip (their mean).
    pub srtt: Duration,
    /// The least round trip any stream has seen.
    pub min_rtt: Duration,
    /// Segments the streams sent again since the last sample (lost, or
    /// taken for lost).
    pub lost: u32,
    /// The streams' segment size, bytes.
    pub mss: u32,
}

/// What the driver does to the streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpAction {
    /// Hold the streams together to this many bytes per second.
    Cap(u64),
    /// A hold ends: restart the streams' congestion control (held far
    /// under the path, BBR believes the cap is the path and grows back a
    /// quarter each eight round trips: a background push took more than a
    /// minute to find the path again), then cap them here, or not at all.
    Release(Option<u64>),
}

/// One sample as the watch keeps it.
#[derive(Debug, Clone, Copy)]
struct Seen {
    at: Duration,
    over: bool,
    delivery: u64,
}

/// The governor's state: see the module docs.
#[derive(Debug)]
pub struct TcpShare {
    share: Share,
    /// The most the streams take of a known path, from the start.
    ceiling: Option<u64>,
    rtt: Duration,
    /// When the grace began (the first delivery, or the last release),
    /// and whether the queue has passed the threshold since; `None` once
    /// it is over.
    grace: Option<(Duration, bool)>,
    /// Whether, and at what delivery, the queue first stood in the grace
    /// (see `joined_busy`).
    standing: Standing,
    started: bool,
    /// The last delivery rates, newest last.
    rates: VecDeque<u64>,
    /// The most the streams were measured to move together (see
    /// [`TcpShare::peak`]).
    measured: f64,
    /// What the path carried when last measured, bytes per second (0: not
    /// known).
    known: f64,
    watch: VecDeque<Seen>,
    /// The cap in force and the cap last handed to the driver.
    cap: Option<(f64, f64)>,
    /// While held beside another flow under `--fair on`: the course the
    /// cap follows, one CUBIC flow's (step 3), and when the streams last
    /// lost segments.
    cubic: Option<Compete>,
    lossy: Duration,
    /// Whether the streams have delivered [`SHORT`] of `peak`.
    full: bool,
    /// Whether the ceiling was brought down to what the streams deliver
    /// beside their own queue (see `fit_ceiling`).
    fitted: bool,
    /// When a sample last saw the queue over the threshold.
    queued: Option<Duration>,
    /// When the first sample came.
    began: Duration,
    /// Whether the streams were ever held beside another flow.
    held: bool,
    /// Their turns at BBR's ProbeRTT.
    stagger: Stagger,
    last: Duration,
    next: Duration,
}

impl TcpShare {
    /// A governor for `share`; `known` is what the path carried when last
    /// measured, bytes per second (0: not known), where `peak` starts and
    /// what sets the ceiling.
    pub fn new(share: Share, known: u64) -> TcpShare {
        TcpShare::with_ceiling(share, known, known)
    }

    /// As [`TcpShare::new`], the ceiling a twentieth over `most` rather
    /// than over `known` (a known TCP figure is an average over BBR's
    /// startup; the streams may need more).
    pub fn with_ceiling(share: Share, known: u64, most: u64) -> TcpShare {
        let most = if known > 0 { most.max(known) } else { 0 };
        let ceiling = (most > 0 && share != Share::Off).then_some((most as f64 * CEILING) as u64);
        TcpShare {
            ceiling,
            share,
            rtt: Duration::ZERO,
            grace: None,
            standing: Standing::Decided,
            started: false,
            rates: VecDeque::new(),
            measured: 0.0,
            known: known as f64,
            watch: VecDeque::new(),
            cap: None,
            cubic: None,
            lossy: Duration::ZERO,
            full: false,
            fitted: false,
            queued: None,
            began: Duration::ZERO,
            held: false,
            stagger: Stagger::default(),
            last: Duration::ZERO,
            next: Duration::ZERO,
        }
    }

    /// Whether this policy ever acts (`--fair off` does not).
    pub fn acts(&self) -> bool {
        self.share != Share::Off
    }

    /// When the driver should sample next.
    pub fn next_sample(&self) -> Duration {
        self.next
    }

    /// Whether the streams are held now.
    pub fn capped(&self) -> bool {
        self.cap.is_some()
    }

    /// Which of `streams` should restart its congestion control at `now`,
    /// so that they take BBR's ProbeRTT in turn ([`crate::stagger`]): only
    /// while their pacing is capped (held, or under a ceiling), so that a
    /// restarted stream cannot flood the queue in its startup.
    pub fn restart_due(&mut self, now: Duration, streams: usize) -> Option<usize> {
        let paced = self.cap.is_some() || self.ceiling.is_some();
        (self.acts() && paced)
            .then(|| self.stagger.due(now, streams))
            .flatten()
    }

    /// What the path carries, as far as the streams can tell, bytes per
    /// second: the most they were measured to move together, unless that
    /// is under [`TRUSTED`] of what the path carried when last measured
    /// (streams that joined a full path only ever measure their share of
    /// it). Never the ceiling's guess: a peak read above the path has the
    /// streams' own queue look like another flow taking part of it.
    pub fn peak(&self) -> f64 {
        if self.measured >= TRUSTED * self.known {
            self.measured
        } else {
            self.known.max(self.measured)
        }
    }

    /// What the streams were measured to move together at their most,
    /// bytes per second, whatever was known before; 0 if not measured, or
    /// if they were ever held beside another flow (their peak may then be
    /// a ramp's, cut short).
    pub fn measured(&self) -> u64 {
        match self.held {
            true => 0,
            false => self.measured as u64,
        }
    }

    /// No sample could be taken at `now` (no stream has data in flight):
    /// the next is due a tick later.
    pub fn skip(&mut self, now: Duration) {
        self.next = now + (self.rtt / 4).clamp(MIN_TICK, MAX_TICK);
    }

    /// Takes one sample at `now` (time since any fixed start).
    pub fn on_sample(&mut self, now: Duration, s: TcpSample) -> Option<TcpAction> {
        self.skip(now);
        if !self.acts() || s.delivery == 0 || s.min_rtt.is_zero() {
            return None;
        }
        self.rtt = s.min_rtt;
        if !self.started {
            self.started = true;
            self.began = now;
            // A grace even under a known path's ceiling: sixteen BBR
            // streams' startup under a ceiling of 1,014 Mbit/s overflowed
            // the emulated 1 Gbit/s link's queue (150 ms) 1.75 s in, lost
            // 9,300 segments, and their dip passed for another flow. Not
            // under `--background`, which yields at once rather than
            // risk a round trip more of someone else's path.
            if self.ceiling.is_none() || self.share == Share::Fair {
                self.begin_grace(now);
            }
            if let Some(c) = self.ceiling {
                return Some(TcpAction::Cap(c));
            }
        }
        self.measure(s.delivery);
        self.full |= self.peak() > 0.0 && s.delivery as f64 >= SHORT * self.peak();
        let threshold = self.share.queue_threshold(self.rtt);
        let queue = s.srtt.saturating_sub(s.min_rtt);
        let interval = now.saturating_sub(self.last);
        self.last = now;
        let over = queue > threshold;
        if over {
            self.queued = Some(now);
        }
        self.keep(Seen {
            at: now,
            over,
            delivery: s.delivery,
        });
        self.note_standing(over, s.delivery);
        if let Some(held) = self.joined_busy(now) {
            return Some(held);
        }
        self.end_grace_in_a_busy_queue();
        match self.in_grace(now, over) {
            Some(Grace::Runs) => return None,
            Some(Grace::Standing) if self.ceiling.is_none() => return self.adopt_ceiling(),
            _ => {}
        }
        match self.cap {
            None => self.enter(now).or_else(|| self.raise_ceiling(now)),
            Some((cap, _)) if queue < threshold / 4 => self.room(now, interval, cap),
            Some((cap, _)) => self.hold(now, interval, cap, &s),
        }
    }

    /// A clear queue beside a held cap: the cap grows by `GROWTH` of the
    /// peak a round trip, and lets go once it reaches nearly the peak.
    fn room(&mut self, now: Duration, interval: Duration, cap: f64) -> Option<TcpAction> {
        let rounds = (interval.as_secs_f64() / self.rtt.as_secs_f64()).min(1.0);
        let cap = cap + self.peak() * GROWTH * rounds;
        if cap >= SHORT * self.peak() {
            return self.leave(now);
        }
        // Under a ceiling, what room gave is kept: a queue that
        // comes back puts the cap on a course from here, and only
        // an overflow cuts it. (Put back on the course from the
        // floor, a lone push held by mistake went back to half the
        // path at each of BBR's probes for the rest of its
        // transfer.) Not without one: a first push's startup may
        // have cut the other flow to a few segments, and its queue
        // is clear while it grows back (kept, the room left a CUBIC
        // flow 0.27 and 0.40 of the link).
        if let Some(c) = self.cubic.as_mut().filter(|_| self.ceiling.is_some()) {
            c.rebase(now, cap);
        }
        self.set_cap(cap)
    }

    /// Another flow keeps the queue up while the streams are held at
    /// `cap`: under `--background` they go back to the floor; under
    /// `--fair on` the cap follows one CUBIC flow's course, cut by three
    /// tenths once a loss episode when the streams lose segments (the
    /// queue overflowed: the other flows lost too), growing back
    /// between, never under [`LEAST_SHARE`] of `peak` nor over [`SHORT`]
    /// of it.
    fn hold(
        &mut self,
        now: Duration,
        interval: Duration,
        cap: f64,
        s: &TcpSample,
    ) -> Option<TcpAction> {
        if self.share == Share::Background {
            return self.set_cap(self.floor());
        }
        let least = (self.peak() * LEAST_SHARE).max(TRICKLE as f64);
        let most = (SHORT * self.peak()).max(least);
        let course = self.cubic.get_or_insert_with(|| {
            let mut c = Compete::new(s.mss as usize, s.srtt);
            c.leave_slow_start(now, cap);
            c
        });
        // One cut a loss episode: losses a round trip or less after the
        // last ones are the same overflow's, still being repaired. Only
        // an overflow's: losses with no queue over the threshold in the
        // last two round trips are the path's own (a link that drops one
        // packet in a thousand cut a lone push's cap every round trip,
        // and held it under half the path for the rest of the transfer).
        let queued = self
            .queued
            .is_some_and(|q| now.saturating_sub(q) <= 2 * s.srtt);
        let overflow = s.lost > 0 && queued;
        let new_episode = overflow && now >= self.lossy + s.srtt;
        if overflow {
            self.lossy = now;
        }
        let cut = new_episode.then(|| course.loss(now, cap)).flatten();
        let next = match cut {
            Some(cut) => cut,
            // Back on the course (after room the queue left, when it
            // comes back); streams that do not fill the cap do not grow
            // it, as CUBIC grows only a window that limits the flow.
            None if (s.delivery as f64) < PRESSING * cap => {
                course.grow(now, cap, interval).min(cap)
            }
            None => course.grow(now, cap, interval),
        };
        if next >= most {
            // Probing found no loss up to the path: the others left.
            return self.leave(now);
        }
        self.set_cap(next.max(least))
    }

    /// The watch's span at the current round trip.
    fn span(&self) -> Duration {
        WATCH.max(self.rtt * WATCH_ROUND_TRIPS)
    }

    /// Keeps `seen`, and one sample older than the span (to know the span
    /// is covered), at most [`MAX_SAMPLES`].
    fn keep(&mut self, seen: Seen) {
        let span = self.span();
        self.watch.push_back(seen);
        while self.watch.len() > MAX_SAMPLES
            || self
                .watch
                .get(1)
                .is_some_and(|s| seen.at.saturating_sub(s.at) >= span)
        {
            self.watch.pop_front();
        }
    }

    /// The median of the last [`RATES`] delivery rates raises `peak`
    /// while the streams run free: one sample read high (acknowledgements
    /// bunched) does not.
    fn measure(&mut self, delivery: u64) {
        self.rates.push_back(delivery);
        if self.rates.len() > RATES {
            self.rates.pop_front();
        }
        if self.cap.is_some() || self.rates.len() < RATES {
            return;
        }
        let last = median(self.rates.iter().copied());
        self.measured = self.measured.max(last as f64);
    }

    /// Where the grace stands at `now`, with the queue `over` the
    /// threshold or not (`None`: there is none).
    fn in_grace(&mut self, now: Duration, over: bool) -> Option<Grace> {
        let (since, passed) = self.grace?;
        let end = if passed && !over {
            Grace::Ended
        } else if now >= since + self.grace_span() {
            if over {
                Grace::Standing
            } else {
                Grace::Ended
            }
        } else {
            self.grace = Some((since, passed || over));
            return Some(Grace::Runs);
        };
        self.grace = None;
        self.watch.clear();
        Some(end)
    }

    /// How long a grace lasts at most, at the current round trip.
    fn grace_span(&self) -> Duration {
        GRACE.max(self.rtt * GRACE_ROUND_TRIPS)
    }

    fn begin_grace(&mut self, now: Duration) {
        self.grace = Some((now, false));
        self.standing = Standing::Unseen { run: 0, first: 0 };
    }

    /// Keeps, in a grace, what the streams delivered when the queue first
    /// stood.
    fn note_standing(&mut self, over: bool, delivery: u64) {
        let Standing::Unseen { run, first } = self.standing else {
            return;
        };
        if self.grace.is_none() {
            return;
        }
        self.standing = match (over, run) {
            (false, _) => Standing::Unseen { run: 0, first: 0 },
            (true, 0) => Standing::Unseen {
                run: 1,
                first: delivery,
            },
            (true, n) if n + 1 >= STOOD => Standing::Stood(first),
            (true, n) => Standing::Unseen { run: n + 1, first },
        };
    }

    /// Streams whose queue stood before they delivered [`OWN_QUEUE`] of
    /// what they reached once their startup was over joined a queue
    /// another flow held: they are held then, their grace over if it was
    /// not.
    /// (Dialled into that queue, they never saw the path's own round trip,
    /// so it showed only above the other flow's; and in their grace their
    /// startup took the path from the flow, so that they were never short
    /// of the peak they measured. A first push beside a CUBIC flow left it
    /// 0.17–0.23 of the link.) Alone, sixteen or thirty-two streams' queue
    /// first stood at 0.46 of their peak or more.
    fn joined_busy(&mut self, now: Duration) -> Option<TcpAction> {
        let Standing::Stood(stood) = self.standing else {
            return None;
        };
        if self.cap.is_some() {
            self.standing = Standing::Decided;
            return None;
        }
        if self.measured == 0.0 || self.ramping() || !self.covered(now) {
            return None;
        }
        // Decided, whether held or not: the grace may have ended already
        // (a dip of the queue under the threshold ends it).
        self.standing = Standing::Decided;
        if stood as f64 >= OWN_QUEUE * self.peak() {
            return None;
        }
        self.grace = None;
        Some(self.hold_at_floor(now))
    }

    /// Ends a known path's grace once its queue stood before the streams
    /// delivered [`OWN_QUEUE`] of the peak: joining another flow's queue,
    /// they are watched as without one (the grace is for their own
    /// startup's overflow; waiting for their startup to end beside a
    /// CUBIC flow left it 0.34 of the link once).
    fn end_grace_in_a_busy_queue(&mut self) {
        let Standing::Stood(first) = self.standing else {
            return;
        };
        if self.ceiling.is_some() && (first as f64) < OWN_QUEUE * self.peak() {
            self.grace = None;
            self.standing = Standing::Decided;
        }
    }

    /// Whether the streams still speed up: the later half of the watch
    /// delivered [`RAMPING`] times the earlier half, or more.
    fn ramping(&self) -> bool {
        let half = self.watch.len() / 2;
        let early = median(self.watch.iter().take(half).map(|s| s.delivery));
        let late = median(self.watch.iter().skip(half).map(|s| s.delivery));
        late as f64 >= RAMPING * early as f64
    }

    /// Streams without a ceiling whose queue never cleared in their grace
    /// get one from what they measured, as a known path's: left free,
    /// sixteen BBR streams kept the emulated link's whole queue (150 ms)
    /// and lost packets to it, and their dips then passed for another
    /// flow. (Not after a drain: the peak may be a ramp's, and a ceiling
    /// rises only a quarter a watch.)
    fn adopt_ceiling(&mut self) -> Option<TcpAction> {
        let ceiling = (CEILING * self.peak()) as u64;
        (ceiling > 0).then(|| {
            self.ceiling = Some(ceiling);
            TcpAction::Cap(ceiling)
        })
    }

    fn enter(&mut self, now: Duration) -> Option<TcpAction> {
        let busy = self.watch.iter().filter(|s| s.over).count();
        let holds = self.watch.back().is_some_and(|s| s.over);
        if !self.covered(now) || !holds || (busy as f64) < BUSY_SHARE * self.watch.len() as f64 {
            return None;
        }
        if self.median_delivery() as f64 >= SHORT * self.peak() {
            // The streams deliver the path beside the queue: it is theirs.
            // Left free they keep it full and lose packets to it (a first
            // push whose grace a dip had ended lost 9% of its packets for
            // 20 s), and their next dip passes for another flow.
            return self.fit_ceiling(now);
        }
        if self.own_startup() || self.own_dip() {
            return None;
        }
        Some(self.hold_at_floor(now))
    }

    /// A ceiling from what the streams measured, once they no longer
    /// speed up (mid-ramp, the peak is not yet the path's): where they
    /// have none, or where theirs is over [`CEILING`] times what they
    /// deliver with the queue standing. (A known TCP figure is an average
    /// over BBR's startup, and the ceiling sized from it a guess: after a
    /// 1 GiB push over the emulated 1 Gbit/s link it was 1,123 Mbit/s,
    /// and sixteen BBR streams under it grew their own queue for 3 s until
    /// it overflowed and lost 3,278 segments at once; their dip then
    /// passed for another flow.) A ceiling is brought down only a grace's
    /// span after the first sample (a peak measured sooner may be a
    /// dip's, at the end of the ramp), and then is the path's: it is not
    /// raised again.
    fn fit_ceiling(&mut self, now: Duration) -> Option<TcpAction> {
        let fits = CEILING * self.peak();
        let over = match self.ceiling {
            None => true,
            Some(c) => c as f64 > fits * (1.0 + STEP) && now >= self.began + self.grace_span(),
        };
        if !over || fits <= 0.0 || self.ramping() {
            return None;
        }
        self.watch.clear();
        self.fitted |= self.ceiling.is_some();
        self.adopt_ceiling()
    }

    /// Whether the streams' delivery collapsed in the watch (a sample under
    /// [`COLLAPSED`] of `peak`, once they have delivered [`SHORT`] of it;
    /// rising from under it is a startup's): their own dip, BBR's ProbeRTT on every
    /// stream at once (they began together, so it comes together, every
    /// 10 s), not another flow, which takes part of the path, never all of
    /// it within a sample. Taken for one, it held a lone push at half the
    /// path for 4 s.
    fn own_dip(&self) -> bool {
        let least = COLLAPSED * self.peak();
        self.full && self.watch.iter().any(|s| (s.delivery as f64) < least)
    }

    /// Holds the streams at the floor from `now`; losses until a round
    /// trip passes without any, from two least round trips on (a queue
    /// doubles the round trip, and the repair shows them a round trip
    /// late), are those of the overflow that showed the
    /// other flow (often the streams' own startup's), not a new one: the
    /// hold was their cut.
    fn hold_at_floor(&mut self, now: Duration) -> TcpAction {
        let floor = self.floor();
        self.cap = Some((floor, floor));
        self.held = true;
        self.lossy = now + 2 * self.rtt;
        TcpAction::Cap(floor as u64)
    }

    /// A ceiling the streams press against while the queue stays clear is
    /// under the path (a known rate measured while sharing, or a TCP
    /// transfer's average): a quarter more, each watch.
    fn raise_ceiling(&mut self, now: Duration) -> Option<TcpAction> {
        let ceiling = self.ceiling? as f64;
        if self.fitted || !self.covered(now) || self.watch.iter().any(|s| s.over) {
            return None;
        }
        if (self.median_delivery() as f64) < PRESSING * ceiling {
            return None;
        }
        let raised = (ceiling * RAISE) as u64;
        self.ceiling = Some(raised);
        self.watch.clear();
        Some(TcpAction::Cap(raised))
    }

    /// Whether the watch reaches back its whole span from `now`.
    fn covered(&self, now: Duration) -> bool {
        self.watch
            .front()
            .is_some_and(|s| now.saturating_sub(s.at) >= self.span())
    }

    /// The median delivery rate of the watch (0 if empty).
    fn median_delivery(&self) -> u64 {
        median(self.watch.iter().map(|s| s.delivery))
    }

    /// Whether the watch's queue may be the streams' own startup: they
    /// still speed up (the later half of the watch delivered [`RAMPING`]
    /// times the earlier half, or more; BBR's startup overshoots while it
    /// is still under the peak), and the queue stood only while they
    /// delivered [`OWN_QUEUE`] of the peak or more. A queue beside
    /// streams that deliver less is another flow's (joining a busy path,
    /// it stood from their first sample).
    fn own_startup(&self) -> bool {
        let least = OWN_QUEUE * self.peak();
        self.ramping()
            && self
                .watch
                .iter()
                .filter(|s| s.over)
                .all(|s| s.delivery as f64 >= least)
    }

    /// The least cap: half of `peak`, or a twentieth under `--background`.
    fn floor(&self) -> f64 {
        let trickle = TRICKLE as f64;
        match self.share {
            Share::Background => (self.peak() * BACKGROUND_SHARE).max(trickle),
            _ => (self.peak() * FAIR_SHARE).max(trickle),
        }
    }

    /// Holds the streams at `cap`, telling the driver when it moved enough.
    fn set_cap(&mut self, cap: f64) -> Option<TcpAction> {
        let (_, told) = self.cap?;
        if (cap - told).abs() <= STEP * told {
            self.cap = Some((cap, told));
            return None;
        }
        self.cap = Some((cap, cap));
        Some(TcpAction::Cap(cap as u64))
    }

    fn leave(&mut self, now: Duration) -> Option<TcpAction> {
        self.cap = None;
        self.cubic = None;
        self.rates.clear();
        self.watch.clear();
        if self.ceiling.is_none() {
            self.begin_grace(now);
        }
        Some(TcpAction::Release(self.ceiling))
    }
}

#[cfg(test)]
#[path = "tcp_share_tests.rs"]
mod tests;
