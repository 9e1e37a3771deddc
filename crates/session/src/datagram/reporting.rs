//! Report timing, apart from `mod.rs` so `send` and `receive` need not import their parent.

use std::time::Duration;

/// How often the receiver reports at most (P-25): see [`report_interval`].
pub const REPORT_INTERVAL: Duration = Duration::from_millis(20);
/// How much report time the rate controller sees per feedback at most.
pub const FEEDBACK_INTERVAL: Duration = Duration::from_millis(50);

/// How often the receiver reports on a path of round trip `rtt`: a
/// quarter of it, between 5 ms and [`REPORT_INTERVAL`], so short paths get
/// their losses repaired and their rate found quickly.
pub fn report_interval(rtt: Duration) -> Duration {
    (rtt / 4).clamp(Duration::from_millis(5), REPORT_INTERVAL)
}

/// Report time gathered into one controller feedback: half the round
/// trip, between 10 ms and [`FEEDBACK_INTERVAL`].
pub fn feedback_interval(rtt: Duration) -> Duration {
    (rtt / 2).clamp(Duration::from_millis(10), FEEDBACK_INTERVAL)
}
/// How many rounds of reports in a row carry a new missing range, against
/// lost reports; after them it goes again every quarter round trip until
/// it is a round trip old (P-25).
pub const REPORT_REPEATS: u8 = 3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_follow_the_round_trip_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(report_interval(ms(0)), ms(5));
        assert_eq!(report_interval(ms(40)), ms(10));
        assert_eq!(report_interval(ms(150)), REPORT_INTERVAL);
        assert_eq!(feedback_interval(ms(1)), ms(10));
        assert_eq!(feedback_interval(ms(150)), FEEDBACK_INTERVAL);
    }
}
