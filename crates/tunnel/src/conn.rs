//! One tunnelled connection as the mux sees it: the bytes its local
//! socket gave us on their way to the peer, and the bytes the peer sent on
//! their way to the local socket, reassembled by offset (P-37).

use std::collections::{BTreeMap, VecDeque};

use crate::MuxError;

/// Bytes in and out of one connection, for `haul tunnel --stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Bytes the local socket gave the tunnel (sent towards the peer).
    pub from_app: u64,
    /// Bytes the tunnel gave the local socket (received from the peer).
    pub to_app: u64,
    /// Bytes this connection's frames took on the lanes, sent and received
    /// (after compression, before sealing).
    pub wire_out: u64,
    pub wire_in: u64,
}

/// Towards the peer.
#[derive(Debug, Default)]
pub(crate) struct Outgoing {
    /// Bytes accepted from the local socket and not yet framed, starting at
    /// offset `framed`.
    pub buf: VecDeque<u8>,
    pub framed: u64,
    /// The peer's credit: the offset it accepts bytes up to.
    pub credit: u64,
    /// The local socket reached end of file.
    pub eof: bool,
    pub fin_sent: bool,
    /// In the round-robin of connections with bytes to frame.
    pub in_ring: bool,
}

impl Outgoing {
    /// Bytes that may be framed now.
    pub fn frameable(&self) -> usize {
        let allowed = self.credit.saturating_sub(self.framed);
        (self.buf.len() as u64).min(allowed) as usize
    }

    pub fn wants_fin(&self) -> bool {
        self.eof && self.buf.is_empty() && !self.fin_sent
    }
}

/// From the peer.
#[derive(Debug, Default)]
pub(crate) struct Incoming {
    /// Contiguous bytes not yet taken by the local socket.
    pub ready: VecDeque<Vec<u8>>,
    pub ready_len: u64,
    /// Offset of the next byte expected in order (end of `ready`).
    pub next: u64,
    /// Out-of-order pieces past `next`, by offset.
    pub pending: BTreeMap<u64, Vec<u8>>,
    /// Bytes the local socket took.
    pub taken: u64,
    /// The credit we gave the peer.
    pub credit: u64,
    /// Where the peer's stream ends, once its `Fin` arrived.
    pub fin_at: Option<u64>,
    /// The local socket was told of the end.
    pub eof_taken: bool,
}

impl Incoming {
    /// Places `data` at `offset`, then moves what became contiguous to
    /// `ready`. Fails on bytes past the credit or the end, or overlapping
    /// bytes already held.
    pub fn place(&mut self, offset: u64, data: Vec<u8>) -> Result<(), MuxError> {
        let end = offset + data.len() as u64;
        if end > self.credit {
            return Err(MuxError::Protocol("tunnel data past the credit given"));
        }
        if self.fin_at.is_some_and(|f| end > f) {
            return Err(MuxError::Protocol("tunnel data past the stream's end"));
        }
        if offset < self.next {
            return Err(MuxError::Protocol("tunnel data sent twice"));
        }
        let before = self.pending.range(..=offset).next_back();
        if before.is_some_and(|(o, d)| o + d.len() as u64 > offset) {
            return Err(MuxError::Protocol("tunnel data sent twice"));
        }
        let after = self.pending.range(offset..).next();
        if after.is_some_and(|(o, _)| *o < end) {
            return Err(MuxError::Protocol("tunnel data sent twice"));
        }
        self.pending.insert(offset, data);
        while let Some(piece) = self.pending.remove(&self.next) {
            self.next += piece.len() as u64;
            self.ready_len += piece.len() as u64;
            self.ready.push_back(piece);
        }
        Ok(())
    }

    pub fn set_fin(&mut self, end: u64) -> Result<(), MuxError> {
        let held = self
            .pending
            .last_key_value()
            .map_or(self.next, |(o, d)| o + d.len() as u64);
        if end < held || self.fin_at.is_some_and(|f| f != end) {
            return Err(MuxError::Protocol("tunnel stream end before its data"));
        }
        self.fin_at = Some(end);
        Ok(())
    }

    /// Every byte up to the end was taken.
    pub fn at_end(&self) -> bool {
        self.fin_at == Some(self.taken)
    }

    /// Takes up to `max` contiguous bytes.
    pub fn take(&mut self, max: usize) -> Vec<u8> {
        let Some(front) = self.ready.front_mut() else {
            return Vec::new();
        };
        let piece = if front.len() <= max {
            self.ready.pop_front().expect("front exists")
        } else {
            let rest = front.split_off(max);
            std::mem::replace(front, rest)
        };
        self.ready_len -= piece.len() as u64;
        self.taken += piece.len() as u64;
        piece
    }

    /// Bytes held in the mux: ready and out of order.
    pub fn held(&self) -> u64 {
        self.ready_len + self.pending.values().map(|d| d.len() as u64).sum::<u64>()
    }
}

#[derive(Debug, Default)]
pub(crate) struct Conn {
    pub out: Outgoing,
    pub inc: Incoming,
    /// Why the connection was reset, once it was (by either side).
    pub reset: Option<String>,
    /// A reset of ours whose frame is still to be sent.
    pub reset_unsent: bool,
    /// The local side was told of the reset.
    pub reset_taken: bool,
    /// A control frame (credit, fin, reset) is owed to the peer.
    pub dirty: bool,
    /// The credit last sent, to send a new one only when it moved.
    pub credit_sent: u64,
    pub stats: ConnStats,
}

impl Conn {
    /// Nothing more can happen on this connection: both directions ended
    /// and the local side knows, or a reset was sent and taken.
    pub fn finished(&self) -> bool {
        if self.reset.is_some() {
            return self.reset_taken && !self.reset_unsent;
        }
        self.out.fin_sent && self.inc.eof_taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inc(credit: u64) -> Incoming {
        Incoming {
            credit,
            ..Incoming::default()
        }
    }

    #[test]
    fn pieces_out_of_order_come_out_in_order() {
        let mut i = inc(100);
        i.place(3, b"def".to_vec()).unwrap();
        assert_eq!(i.ready_len, 0);
        i.place(0, b"abc".to_vec()).unwrap();
        assert_eq!(i.ready_len, 6);
        assert_eq!(i.take(2), b"ab", "cut to the most asked for");
        assert_eq!(i.take(100), b"c", "one piece at a time");
        assert_eq!(i.take(100), b"def");
        assert_eq!(i.taken, 6);
    }

    #[test]
    fn overlaps_and_bytes_past_credit_or_end_are_refused() {
        let mut i = inc(10);
        i.place(2, b"cd".to_vec()).unwrap();
        assert!(i.place(3, b"x".to_vec()).is_err());
        assert!(i.place(1, b"xy".to_vec()).is_err());
        assert!(i.place(8, b"xyz".to_vec()).is_err(), "past credit");
        i.place(0, b"ab".to_vec()).unwrap();
        assert!(i.place(1, b"b".to_vec()).is_err(), "already delivered");
        i.set_fin(6).unwrap();
        assert!(i.place(5, b"xy".to_vec()).is_err(), "past the end");
        assert!(i.set_fin(7).is_err(), "the end moved");
        let mut j = inc(10);
        j.place(4, b"ef".to_vec()).unwrap();
        assert!(j.set_fin(5).is_err(), "end before data held");
    }
}
