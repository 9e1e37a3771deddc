//! BBR's ProbeRTT taken in turn by a transfer's TCP streams (P-46, "Over
//! TCP"), sans-IO.
//!
//! BBR drains each stream to four segments for 200 ms and a round trip
//! (ProbeRTT) [`PROBE_RTT_EVERY`] after its least round trip was last
//! set: streams that began together do it together, and the path went
//! idle for that long every 10 s (a 2 GiB push: delivery under the path
//! for 0.8 s, about 0.35 s of the link, 11 s in). Restarting each
//! stream's congestion control once, at its own time, sets its clock
//! afresh (`bbr_init` stamps the least round trip), so that afterwards
//! one stream at a time drains and the others' queue covers it. Only
//! while the streams' pacing is capped: a restarted BBR starts up again.

use std::time::Duration;

const PROBE_RTT_EVERY: Duration = Duration::from_secs(10);
/// The first restart after the pacing is capped, and the span the others
/// spread over, within [`PROBE_RTT_EVERY`].
const STAGGER_FROM: Duration = Duration::from_secs(1);
const STAGGER_OVER: Duration =
    Duration::from_secs(PROBE_RTT_EVERY.as_secs() - 2 * STAGGER_FROM.as_secs());

/// Which stream restarts when.
#[derive(Debug, Default)]
pub(crate) struct Stagger {
    /// When the streams' pacing was first capped.
    since: Option<Duration>,
    /// How many streams have had their turn (stream 0 keeps its own
    /// clock, so one of n drains at each slot).
    done: usize,
}

impl Stagger {
    /// The stream of `streams` whose congestion control should restart
    /// at `now`, if one is due: one a call, stream 1 first, the last
    /// [`STAGGER_FROM`] before the first stream's ProbeRTT.
    pub(crate) fn due(&mut self, now: Duration, streams: usize) -> Option<usize> {
        let since = *self.since.get_or_insert(now);
        let next = self.done.max(1);
        if next >= streams {
            return None;
        }
        let n = u32::try_from(streams).ok()?;
        let i = u32::try_from(next).ok()?;
        if now < since + STAGGER_FROM + STAGGER_OVER * i / n {
            return None;
        }
        self.done = next + 1;
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// When each stream restarts, in 20 ms steps from `from`.
    fn restarts(streams: usize, from: Duration) -> Vec<(usize, Duration)> {
        let mut s = Stagger::default();
        let mut seen = vec![];
        let mut now = from;
        while now < from + PROBE_RTT_EVERY * 2 {
            if let Some(i) = s.due(now, streams) {
                seen.push((i, now - from));
            }
            now += Duration::from_millis(20);
        }
        seen
    }

    #[test]
    fn streams_restart_one_at_a_time_within_probe_rtt_s_period() {
        let seen = restarts(16, Duration::from_millis(300));
        // Stream 0 keeps its clock; the fifteen others in order, half a
        // second apart.
        let order: Vec<usize> = seen.iter().map(|s| s.0).collect();
        assert_eq!(order, (1..16).collect::<Vec<_>>());
        assert!(
            seen[0].1 >= STAGGER_FROM + Duration::from_millis(500),
            "{seen:?}"
        );
        assert!(seen[14].1 < PROBE_RTT_EVERY - STAGGER_FROM, "{seen:?}");
        assert!(seen
            .windows(2)
            .all(|w| w[1].1 - w[0].1 >= Duration::from_millis(480)));
        // One stream: nothing to spread.
        assert!(restarts(1, Duration::ZERO).is_empty());
    }
}
