//! Message ones of pinned starts answered (P-48, S-9), so that a recorded
//! one replayed is never answered again.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

/// How far a pinned start's clock may stand from this host's for it to be
/// answered (P-48, S-9). Farther, it is closed and the client handshakes
/// in full: a round trip, never a failure.
pub const EARLY_WINDOW: u64 = 120;
/// Most message ones remembered (S-9): about 2 MiB. Full, pinned starts
/// are closed (and clients handshake in full) until old ones age out.
pub const MAX_REMEMBERED: usize = 1 << 16;

/// Message ones answered, by their ephemeral key, for as long as a replay
/// of them could still pass the clock check.
#[derive(Default)]
pub(super) struct Replays {
    seen: Mutex<Remembered>,
}

/// The ephemeral keys remembered, and when each was first seen, oldest
/// first.
#[derive(Default)]
struct Remembered {
    keys: HashSet<[u8; 32]>,
    order: VecDeque<(u64, [u8; 32])>,
}

impl Replays {
    /// Whether a message one stamped `time` and naming `ephemeral` is
    /// fresh at `now`: recent, and the first with that key. It is
    /// remembered from now on.
    pub(super) fn first(&self, ephemeral: &[u8; 32], time: u64, now: u64) -> bool {
        if time.abs_diff(now) > EARLY_WINDOW {
            return false;
        }
        let mut guard = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let Remembered { keys: set, order } = &mut *guard;
        // Stamped within the window of its first sight, a message one
        // passes the clock check for at most twice the window after it.
        while order
            .front()
            .is_some_and(|(at, _)| at + 2 * EARLY_WINDOW < now)
        {
            let (_, old) = order.pop_front().expect("checked");
            set.remove(&old);
        }
        if set.len() >= MAX_REMEMBERED || !set.insert(*ephemeral) {
            return false;
        }
        order.push_back((now, *ephemeral));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_one_is_taken_once_and_only_while_recent() {
        let r = Replays::default();
        let now = 1_800_000_000;
        assert!(r.first(&[1; 32], now, now));
        assert!(!r.first(&[1; 32], now, now + 1), "a replay");
        assert!(r.first(&[2; 32], now - EARLY_WINDOW, now));
        assert!(!r.first(&[3; 32], now - EARLY_WINDOW - 1, now), "too old");
        assert!(
            !r.first(&[3; 32], now + EARLY_WINDOW + 1, now),
            "from the future"
        );
        // Forgotten only once no clock check could pass it again.
        let later = now + 2 * EARLY_WINDOW + 1;
        assert!(!r.first(&[1; 32], now, later), "the clock check holds it");
        assert!(r.first(&[1; 32], later, later));
    }

    #[test]
    fn remembering_is_bounded() {
        let r = Replays::default();
        let now = 1_800_000_000;
        for i in 0..MAX_REMEMBERED as u32 {
            let mut e = [0u8; 32];
            e[..4].copy_from_slice(&i.to_le_bytes());
            assert!(r.first(&e, now, now));
        }
        assert!(!r.first(&[0xff; 32], now, now), "full: asked again");
        let later = now + 2 * EARLY_WINDOW + 1;
        assert!(r.first(&[0xff; 32], later, later), "aged out");
    }
}
