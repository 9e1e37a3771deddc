//! Rate controllers for a rate-based (UDP) data channel.
//!
//! The receiver reports, once per feedback interval, what it received; a
//! controller turns those reports into the sending rate the pacer uses. All
//! inputs carry their time; nothing here reads a clock. One file per
//! algorithm: [`Fixed`] for a rate chosen by hand,
//! [`Adaptive`](crate::Adaptive) for the default that finds the bottleneck
//! by itself.

use std::time::Duration;

/// What the receiver saw during one feedback interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Feedback {
    /// Length of the interval the report covers.
    pub interval: Duration,
    /// Payload bytes that arrived in the interval.
    pub bytes: u64,
    /// Datagrams that arrived.
    pub packets: u64,
    /// Datagrams found missing (gaps in sequence numbers) in the interval.
    pub lost: u64,
    /// Longest run of consecutive missing datagrams in the interval.
    pub longest_loss_run: u64,
    /// Smallest one-way delay measured in the interval (receiver clock minus
    /// sender timestamp: only differences between reports are meaningful).
    pub min_one_way: Duration,
    /// The sender ran out of data to send while this interval's datagrams
    /// were on their way (its queue was empty, not its window full): the
    /// delivery rate shows what it had, not what the path can carry.
    pub app_limited: bool,
    /// The bottleneck's rate from packet trains, bytes per second (P-25);
    /// 0 when none was measured.
    pub train_rate: u64,
}

impl Feedback {
    /// Delivery rate in bytes per second.
    pub fn delivery_rate(&self) -> f64 {
        self.bytes as f64 / self.interval.as_secs_f64().max(1e-6)
    }

    /// Fraction of datagrams lost.
    pub fn loss_rate(&self) -> f64 {
        let total = self.packets + self.lost;
        if total == 0 {
            0.0
        } else {
            self.lost as f64 / total as f64
        }
    }
}

/// A sending-rate policy. Defaults do nothing, so a simple controller only
/// implements what it uses.
pub trait RateController: Send {
    /// Current sending rate in bytes per second.
    fn rate(&self) -> u64;

    /// Still probing for the path's rate (doubling it each round trip):
    /// the rate now says only that the path carries at least as much.
    fn in_startup(&self) -> bool {
        false
    }

    /// The path's capacity as measured so far, bytes per second; 0 while
    /// nothing is known (a controller that does not measure says 0).
    fn estimate(&self) -> u64 {
        0
    }

    /// A receiver report arrived at `now` (time since the transfer began).
    fn on_feedback(&mut self, _now: Duration, _fb: &Feedback) {}

    /// No report for a long time: the path may be down.
    fn on_feedback_timeout(&mut self, _now: Duration) {}

    /// A short name for logs and summaries.
    fn name(&self) -> &'static str;

    /// Internal state for debug logs.
    fn state(&self) -> String {
        String::new()
    }
}

/// A fixed rate: `--rate` given without adaptation.
pub struct Fixed(pub u64);

impl RateController for Fixed {
    fn rate(&self) -> u64 {
        self.0
    }

    fn name(&self) -> &'static str {
        "fixed"
    }
}
