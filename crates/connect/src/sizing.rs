//! How much each side keeps in flight and asks of the OS: the sending
//! windows over TCP and UDP, and the UDP channel's socket buffers. The
//! client and the server size the same things the same way from here.

use std::time::Duration;

use crate::net::Tuning;
use crate::progress::Progress;

/// How many of a host's `cores` one transfer puts to work on each side:
/// as many as there are, up to 4, and on larger hosts half of them. A
/// data stream (or a UDP channel's worker) costs about a core at each
/// end, and a copy on one host has both ends share them: at 18.4 Gbit/s
/// on loopback, a 16-core host's four streams kept 5.3 cores busy and
/// left the rest idle (issue 43).
pub fn core_share(cores: usize) -> usize {
    cores.min(4).max(cores / 2).max(1)
}

/// This host's [`core_share`].
pub fn host_core_share() -> usize {
    core_share(std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// In-flight window the sending side allows (unacknowledged bytes).
pub const SEND_WINDOW: u64 = 512 << 20;
/// The same over the UDP channel, where the sender holds these bytes in
/// memory until they are acknowledged (to re-send lost chunks): the least,
/// until [`udp_send_window`] sizes it for the path.
pub const UDP_SEND_WINDOW: u64 = 256 << 20;
/// The most the UDP sender holds unacknowledged.
pub const UDP_SEND_WINDOW_MAX: u64 = 1 << 30;

/// The UDP sender's window on a path of round trip `rtt`. A block is held
/// for a round trip at best, and for about one more each time one of its
/// chunks is lost and lost again; a window shorter than that stops the
/// sender while it waits for the slowest block (seen at 600 ms with 1%
/// loss). Four round trips at 2.5 Gbit/s, between [`UDP_SEND_WINDOW`] and
/// [`UDP_SEND_WINDOW_MAX`]. Memory follows the rate actually reached, not
/// the window: a slow path holds little.
pub fn udp_send_window(rtt: Duration) -> u64 {
    let bytes = rtt.as_secs_f64() * 4.0 * 2.5e9 / 8.0;
    (bytes as u64).clamp(UDP_SEND_WINDOW, UDP_SEND_WINDOW_MAX)
}
/// Bounds of the buffers asked for a UDP channel socket (see
/// [`udp_buffer`]).
pub const UDP_BUFFER_MIN: usize = 16 << 20;
pub const UDP_BUFFER_MAX: usize = 128 << 20;

/// Socket buffer for the UDP channel: one bandwidth-delay product at the
/// target rate (the `--rate` cap, else 10 Gbit/s), so that a receiver
/// stalled for as long as a round trip loses nothing, within
/// [`UDP_BUFFER_MIN`]..[`UDP_BUFFER_MAX`].
pub fn udp_buffer(rtt: Duration, rate: Option<u64>) -> usize {
    let target = rate.unwrap_or(10_000_000_000 / 8) as f64;
    ((target * rtt.as_secs_f64()) as usize).clamp(UDP_BUFFER_MIN, UDP_BUFFER_MAX)
}
/// Sizes a UDP channel's buffers and records what the OS granted.
pub fn size_udp_buffers(
    channel: &udp::UdpChannel,
    want: usize,
    tuning: &Tuning,
    progress: &Progress,
) {
    let b = channel.size_buffers(want, tuning.force_buffer.is_some());
    Progress::set(&progress.udp_buffer, b.recv as u64);
    Progress::set(&progress.udp_buffer_capped, b.capped as u64);
    if b.capped {
        tracing::info!(
            "UDP receive buffer capped at {} bytes by net.core.rmem_max; bursts may be dropped (raise it, or run as root)",
            b.recv
        );
    }
}

#[cfg(test)]
mod tests {
    use super::core_share;

    #[test]
    fn a_transfer_uses_up_to_four_cores_and_half_of_a_larger_host() {
        let shares: Vec<usize> = [0, 1, 2, 4, 8, 10, 16, 32, 64]
            .into_iter()
            .map(core_share)
            .collect();
        assert_eq!(shares, [1, 1, 2, 4, 4, 5, 8, 16, 32]);
    }
}
