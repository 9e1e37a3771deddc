//! The UDP data channel without I/O (P-24 to P-26): blocks cut into chunks
//! that fit one datagram, each datagram numbered, the receiver reporting
//! what arrived and what is missing, and the sender re-sending what was
//! reported while fresh chunks keep the pipe full.
//!
//! - [`DatagramSender`]: chunking, sequence numbers, the retransmission
//!   queue (served before fresh chunks), and the rate controller fed by
//!   the receiver's reports.
//! - [`DatagramReceiver`]: loss detection from sequence gaps, block
//!   assembly from chunks in any order, periodic reports, and requests for
//!   blocks that stopped making progress.
//!
//! Blocks complete here only as bytes; the block hash is checked by the
//! [`crate::ReceiverSession`] exactly as for blocks that came over TCP.

mod receive;
mod send;

use std::time::Duration;

pub use receive::{
    Completed, DatagramError, DatagramReceiver, ReceiverStats, MAX_ASSEMBLIES, MAX_ASSEMBLY_BYTES,
    MAX_SEQ_AHEAD,
};
pub use send::{ChunkTransmit, DatagramSender, SenderStats};

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
/// How many reports repeat a missing range, against lost reports.
pub const REPORT_REPEATS: u8 = 3;

/// Chunk bytes a datagram of `payload` bytes (UDP payload) carries.
pub fn chunk_capacity(payload: usize, first: bool) -> usize {
    let header = if first {
        wire::datagram::FIRST_CHUNK_HEADER_LEN
    } else {
        wire::datagram::CHUNK_HEADER_LEN
    };
    payload - wire::datagram::DATAGRAM_PREFIX - header - wire::TAG_LEN
}

/// How a block of `len` bytes is cut for datagrams of `payload` bytes:
/// `(offset, len)` of each chunk. The first chunk is shorter because it
/// carries the block hash.
pub fn chunks(len: u32, payload: usize) -> impl Iterator<Item = (u32, u32)> {
    let first = chunk_capacity(payload, true) as u32;
    let rest = chunk_capacity(payload, false) as u32;
    let mut off = 0u32;
    std::iter::from_fn(move || {
        if off >= len {
            return None;
        }
        let cap = if off == 0 { first } else { rest };
        let n = cap.min(len - off);
        let c = (off, n);
        off += n;
        Some(c)
    })
}

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

    #[test]
    fn chunks_cover_a_block_exactly() {
        for len in [1u32, 100, 8000, 1 << 20, (1 << 20) + 17] {
            let v: Vec<_> = chunks(len, 1472).collect();
            assert_eq!(v[0].0, 0);
            assert!(v[0].1 as usize <= chunk_capacity(1472, true));
            let mut next = 0;
            for (o, n) in &v {
                assert_eq!(*o, next);
                next += n;
            }
            assert_eq!(next, len);
        }
    }
}
