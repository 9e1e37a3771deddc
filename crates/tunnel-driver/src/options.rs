//! What a tunnel session is set up with and bounded by: its coding
//! options, the lanes' frame size, what a peer can make it hold, and each
//! connection's window (P-37, P-39).

use std::time::Duration;

use tunnel::MuxConfig;

use crate::coding::HISTORY_WINDOW;

/// How a tunnel codes its data (P-37): the byte cache, and compression.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub mux: MuxConfig,
    /// Send content seen before as copies of the history.
    pub cache: bool,
    pub compress: codec::Mode,
}

/// How the server's connect to the target may take.
pub const TARGET_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest frame a lane carries (P-37, P-39).
pub const LANE_FRAME_MAX: u32 = 1 << 20;

/// The most a tunnel peer can make this side hold, lanes aside (P-39): the
/// receive credit of all its connections ([`tunnel::CREDIT_BUDGET`]) and
/// the byte cache, what copies may still name and what arrived ahead of a
/// missing position ([`tunnel::history::MAX_AHEAD`]). 544 MiB.
pub const SESSION_HELD: u64 =
    tunnel::CREDIT_BUDGET + HISTORY_WINDOW / 2 + tunnel::history::MAX_AHEAD;

/// The receive window of each tunnelled connection: four times the path's
/// bandwidth-delay product at 1 Gbit/s, between 1 and 128 MiB (P-37). One
/// connection's frames cross on several lanes and are delivered in order,
/// so a lane repairing a loss holds up the others' frames for a round trip
/// or more; the window must cover that as well as the path (twice the BDP
/// carried 507 Mbit/s of one flow at 150 ms and 0.1% loss, four times
/// 555-632).
pub fn window_for(rtt: Duration) -> u64 {
    let bdp = 125_000_000.0 * rtt.as_secs_f64();
    ((4.0 * bdp) as u64).clamp(1 << 20, 128 << 20)
}
