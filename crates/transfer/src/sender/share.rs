//! The sharing policy over the TCP data streams (P-46): samples their
//! `TCP_INFO` when [`rate::TcpShare`] asks, and caps or frees their
//! pacing as it says.

use std::collections::VecDeque;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use connect::progress::{Mark, Progress};
use rate::{Share, TcpAction, TcpSample, TcpShare};
use session::SenderSession;

use crate::shared::Shared;

/// What the last transfers to this host measured of the path (P-46).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownLink {
    /// What it carried, bytes per second: the TCP streams' sharing takes it
    /// for the path's capacity until they measure their own.
    pub rate: u64,
    /// The most the streams may need, bytes per second (at least `rate`):
    /// they are held a twentieth over it from the start.
    pub most: u64,
    /// Its round trip then: the streams' least, where theirs is more.
    pub rtt: Duration,
}

/// Runs until the transfer ends, stops, is stopped from outside or has
/// handed out its last block. `path`: what the last transfers to this
/// host measured of it.
pub(super) fn govern(sh: &Shared<SenderSession>, share: Share, path: Option<KnownLink>) {
    let data = sh.sockets.get(1..).unwrap_or(&[]);
    let (known, most) = path.map_or((0, 0), |p| (p.rate, p.most));
    let mut gov = TcpShare::with_ceiling(share, known, most);
    if !gov.acts() || data.is_empty() {
        return;
    }
    // Streams dialled while another flow held the queue never see the
    // path's least round trip; the control connection, opened first, or
    // the path's last measurement may have.
    let control = sh.sockets.first().and_then(connect::net::tcp_min_rtt);
    let base = control
        .into_iter()
        .chain(path.map(|p| p.rtt))
        .filter(|d| !d.is_zero())
        .min();
    let start = Instant::now();
    let mut meter = Meter::new(data.len());
    let mut ramp = Ramp::default();
    while wait_until(sh, start + gov.next_sample()) {
        let now = start.elapsed();
        // The last blocks are out: streams that finish one by one are no
        // sign of another flow.
        if sh.lock().all_handed_out() {
            break;
        }
        let Some(s) = meter.sample(now, data, base) else {
            gov.skip(now);
            continue;
        };
        ramp.seen(start + now, s.delivery);
        tracing::trace!(
            "sharing: delivery {:.0} Mbit/s, srtt {:?}, least {:?}, lost {}",
            s.delivery as f64 * 8e-6,
            s.srtt,
            s.min_rtt,
            s.lost
        );
        if let Some(action) = gov.on_sample(now, s) {
            act(data, action, gov.peak());
        }
        // What the next push to this host sizes its ceiling from.
        Progress::set(&sh.progress.tcp_peak, gov.measured());
        if let Some(s) = gov.restart_due(now, data.len()).and_then(|i| data.get(i)) {
            // BBR's ProbeRTT in turn (P-46, `rate/src/stagger.rs`).
            if let Err(e) = connect::net::restart_congestion_control(s) {
                tracing::debug!("sharing: congestion control not restarted: {e}");
            }
        }
    }
    if let Some(t) = ramp.full_at() {
        sh.progress.timeline.mark_at(Mark::FullRate, t);
    }
}

/// When the streams reached their full rate: the first delivery sample
/// at [`FULL`] of the highest, for the timeline's `full_rate` (P-26's
/// mark, which a push over TCP streams thus has too).
#[derive(Default)]
struct Ramp {
    /// Each sample that delivered more than every one before it.
    highs: Vec<(Instant, u64)>,
}

/// The share of the highest delivery that counts as full rate.
const FULL: f64 = 0.9;
/// New highs kept at most (the latest): a ramp doubles, so a few dozen
/// cover any path.
const MAX_HIGHS: usize = 64;

impl Ramp {
    fn seen(&mut self, t: Instant, delivery: u64) {
        if self.highs.last().is_none_or(|&(_, d)| delivery > d) {
            if self.highs.len() == MAX_HIGHS {
                self.highs.remove(0);
            }
            self.highs.push((t, delivery));
        }
    }

    fn full_at(&self) -> Option<Instant> {
        let &(_, top) = self.highs.last()?;
        let full = (top as f64 * FULL) as u64;
        self.highs.iter().find(|h| h.1 >= full).map(|h| h.0)
    }
}

/// Sleeps until `deadline` or the run's end; false once it ended.
fn wait_until(sh: &Shared<SenderSession>, deadline: Instant) -> bool {
    let mut st = sh.lock();
    loop {
        if sh.is_done() || sh.stopped() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        st = sh
            .cv
            .wait_timeout(st, deadline - now)
            .map_or_else(|p| p.into_inner().0, |r| r.0);
    }
}

/// What the streams delivered together, from their delivered-segment
/// counts over the last round trip. (Summing each stream's own last rate
/// sample read up to 1.1 times the link with sixteen streams or more, and
/// a peak above the link has the streams' own dips look like another
/// flow.)
struct Meter {
    /// Each stream's delivered and re-sent counts when last read.
    last: Vec<Option<(u32, u32)>>,
    /// Bytes delivered by all streams since the first reading.
    total: u64,
    /// `(when, total)`, oldest first, reaching back a round trip.
    seen: VecDeque<(Duration, u64)>,
}

/// Readings kept at most, whatever the round trip.
const MAX_SEEN: usize = 1024;

impl Meter {
    fn new(streams: usize) -> Meter {
        Meter {
            last: vec![None; streams],
            total: 0,
            seen: VecDeque::new(),
        }
    }

    /// The streams' figures at `now`: what they delivered over their last
    /// smoothed round trip, its mean over them, and the least one (or
    /// `base`). `None` while no stream has data in flight, or before a
    /// round trip's readings.
    fn sample(
        &mut self,
        now: Duration,
        data: &[TcpStream],
        base: Option<Duration>,
    ) -> Option<TcpSample> {
        let (mut busy, mut lost, mut mss) = (vec![], 0u32, 0u32);
        for (s, last) in data.iter().zip(&mut self.last) {
            let Some(i) = connect::net::tcp_share_info(s) else {
                continue;
            };
            mss = mss.max(i.mss);
            if let Some((delivered, retrans)) = last.replace((i.delivered, i.retrans)) {
                let segments = u64::from(i.delivered.wrapping_sub(delivered));
                self.total = self.total.saturating_add(segments * u64::from(i.mss));
                lost = lost.saturating_add(i.retrans.wrapping_sub(retrans));
            }
            if i.in_flight {
                busy.push((i.srtt, i.min_rtt));
            }
        }
        let n = u32::try_from(busy.len()).ok().filter(|&n| n > 0)?;
        let srtt = busy.iter().map(|b| b.0).sum::<Duration>() / n;
        let min_rtt = busy.iter().map(|b| b.1).chain(base).min()?;
        // A whole round trip of acknowledgements, queue included: over
        // less, the streams' flights read as bursts.
        let delivery = self.rate(now, srtt)?;
        Some(TcpSample {
            delivery,
            srtt,
            min_rtt,
            lost,
            mss,
        })
    }

    /// Keeps `(now, total)`; the rate since the newest reading at least
    /// `span` old, `None` if there is none.
    fn rate(&mut self, now: Duration, span: Duration) -> Option<u64> {
        self.seen.push_back((now, self.total));
        while self.seen.len() > MAX_SEEN
            || self
                .seen
                .get(1)
                .is_some_and(|&(t, _)| now.saturating_sub(t) >= span)
        {
            self.seen.pop_front();
        }
        let &(then, before) = self.seen.front()?;
        let elapsed = now.saturating_sub(then);
        (elapsed >= span && !elapsed.is_zero())
            .then(|| ((self.total - before) as f64 / elapsed.as_secs_f64()) as u64)
    }
}

fn act(data: &[TcpStream], action: TcpAction, peak: f64) {
    match action {
        TcpAction::Cap(rate) => {
            tracing::debug!(
                "sharing: streams capped at {:.0} Mbit/s together (peak {:.0})",
                rate as f64 * 8e-6,
                peak * 8e-6
            );
            let each = (rate / data.len() as u64).max(1);
            for s in data {
                if let Err(e) = connect::net::set_max_pacing_rate(s, Some(each)) {
                    tracing::debug!("sharing: pacing cap refused: {e}");
                }
            }
        }
        TcpAction::Release(ceiling) => {
            tracing::debug!("sharing: the path has room again; streams restart");
            let each = ceiling.map(|c| (c / data.len() as u64).max(1));
            for s in data {
                let _ = connect::net::set_max_pacing_rate(s, each);
                if let Err(e) = connect::net::restart_congestion_control(s) {
                    tracing::debug!("sharing: congestion control not restarted: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_rate_is_the_first_sample_at_nine_tenths_of_the_highest() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut r = Ramp::default();
        assert_eq!(r.full_at(), None);
        // Doubling each round trip, then a dip, then the top.
        for (ms, rate) in [
            (0, 10),
            (150, 20),
            (300, 40),
            (450, 80),
            (600, 95),
            (750, 60),
            (900, 100),
        ] {
            r.seen(at(ms), rate);
        }
        assert_eq!(r.full_at(), Some(at(600)));
        // Only new highs are kept, at most MAX_HIGHS of them.
        let mut r = Ramp::default();
        for i in 0..1000u64 {
            r.seen(at(i), i);
        }
        assert_eq!(r.highs.len(), MAX_HIGHS);
        // The oldest kept (936) is past nine tenths of the top (999).
        assert_eq!(r.full_at(), Some(at(936)));
    }
}
