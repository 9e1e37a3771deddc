//! The tunnel's byte cache (P-37): both ends of a session keep the recent
//! bytes of every connection in one history per direction, so content that
//! crossed once (in any connection) crosses again as a reference.
//!
//! The sender gives every data frame a position in the history, in the
//! order it encodes frames, and cuts the frame into content-defined chunks;
//! a chunk it sent before, within the last half window, becomes a copy of
//! that earlier position. The receiver keeps frames until no frame still to
//! come can refer to them: every copy in a frame at position `p` starts at
//! `p - window / 2` or later, so a frame ending before `W - window / 2`,
//! where `W` is the end of the positions all received, is needed no more.
//! Frames cross on several lanes and may arrive out of order: a copy of a
//! frame not yet arrived waits for it ([`Resolve::Wait`]), which always
//! comes, since a lane carries frames in the order positions were given.

use std::collections::{BTreeMap, HashMap};

use wire::program::Piece;

/// Chunks of a frame: small, since frames are at most 256 KiB.
const MIN_CHUNK: u32 = 2 << 10;
const AVG_CHUNK: u32 = 8 << 10;
const MAX_CHUNK: u32 = 32 << 10;

/// Most positions a received frame may lie past the end of those all
/// received, and so the most a receiver holds ahead of them (P-39): lanes
/// skew by what one holds up while it repairs a loss, a round trip or two
/// of the session's rate (64 MiB at 1 Gbit/s and 500 ms). A peer past it
/// (one that never sends some position) would otherwise have the receiver
/// hold frames without end.
pub const MAX_AHEAD: u64 = 256 << 20;

/// Frames shorter than this are sent as they are (interactive traffic):
/// cutting them costs more than it could save.
pub const MIN_CACHED_FRAME: usize = 4 << 10;

type ChunkKey = [u8; 16];

fn key(bytes: &[u8]) -> ChunkKey {
    let h = blake3::hash(bytes);
    let mut k = [0u8; 16];
    k.copy_from_slice(&h.as_bytes()[..16]);
    k
}

/// One piece of a planned frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planned {
    /// These bytes of the frame, sent as they are.
    Literal { at: usize, len: usize },
    /// `len` bytes at history position `from`.
    Copy { from: u64, len: u32 },
}

/// The sending side's history.
pub struct SendHistory {
    window: u64,
    next: u64,
    /// Frames still within reach, by position.
    frames: BTreeMap<u64, Vec<u8>>,
    /// Where each chunk was last seen.
    index: HashMap<ChunkKey, (u64, u32)>,
    held: u64,
}

impl SendHistory {
    /// `window`: bytes of history the receiver keeps; copies reach back
    /// half of it.
    pub fn new(window: u64) -> SendHistory {
        SendHistory {
            window: window.max(1 << 20),
            next: 0,
            frames: BTreeMap::new(),
            index: HashMap::new(),
            held: 0,
        }
    }

    /// Gives `data` its position and plans it as literals and copies; the
    /// data enters the history.
    pub fn plan(&mut self, data: &[u8]) -> (u64, Vec<Planned>) {
        let pos = self.next;
        let reach = pos.saturating_sub(self.window / 2);
        let mut plan: Vec<Planned> = Vec::new();
        if data.len() >= MIN_CACHED_FRAME {
            for c in fastcdc::v2020::FastCDC::new(data, MIN_CHUNK, AVG_CHUNK, MAX_CHUNK) {
                let bytes = &data[c.offset..c.offset + c.length];
                let k = key(bytes);
                let earlier = self
                    .index
                    .get(&k)
                    .copied()
                    .filter(|(at, len)| *at >= reach && *len as usize == bytes.len())
                    .filter(|(at, _)| self.bytes_at(*at, bytes.len()) == Some(bytes));
                match earlier {
                    Some((from, len)) => push_copy(&mut plan, from, len),
                    None => push_literal(&mut plan, c.offset, c.length),
                }
                self.index
                    .insert(k, (pos + c.offset as u64, c.length as u32));
            }
        } else if !data.is_empty() {
            plan.push(Planned::Literal {
                at: 0,
                len: data.len(),
            });
        }
        self.next += data.len() as u64;
        self.held += data.len() as u64;
        self.frames.insert(pos, data.to_vec());
        self.evict();
        (pos, plan)
    }

    /// `len` bytes at `at`, if one frame held holds them all.
    fn bytes_at(&self, at: u64, len: usize) -> Option<&[u8]> {
        let (start, f) = self.frames.range(..=at).next_back()?;
        let off = (at - start) as usize;
        f.get(off..off + len)
    }

    fn evict(&mut self) {
        let reach = self.next.saturating_sub(self.window / 2);
        while let Some((&start, f)) = self.frames.first_key_value() {
            if start + f.len() as u64 > reach {
                break;
            }
            self.held -= f.len() as u64;
            self.frames.pop_first();
        }
        // Index entries of evicted frames are skipped when looked up, and
        // dropped here once they outnumber the live chunks by far.
        if self.index.len() > 4 * (self.held as usize / MIN_CHUNK as usize + 64) {
            self.index.retain(|_, (at, _)| *at >= reach);
        }
    }

    /// Bytes the history holds.
    pub fn held(&self) -> u64 {
        self.held
    }
}

fn push_literal(plan: &mut Vec<Planned>, at: usize, len: usize) {
    if let Some(Planned::Literal { at: a, len: l }) = plan.last_mut() {
        if *a + *l == at {
            *l += len;
            return;
        }
    }
    plan.push(Planned::Literal { at, len });
}

fn push_copy(plan: &mut Vec<Planned>, from: u64, len: u32) {
    if let Some(Planned::Copy { from: f, len: l }) = plan.last_mut() {
        if *f + *l as u64 == from {
            *l += len;
            return;
        }
    }
    plan.push(Planned::Copy { from, len });
}

/// The pieces of a plan, with the literals' bytes, for `wire::program`.
pub fn pieces<'a>(plan: &'a [Planned], data: &'a [u8]) -> impl Iterator<Item = Piece<'a>> {
    plan.iter().map(move |p| match *p {
        Planned::Literal { at, len } => Piece::Literal(&data[at..at + len]),
        Planned::Copy { from, len } => Piece::Basis { from, len },
    })
}

/// What [`RecvHistory::resolve`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolve {
    /// The frame's bytes.
    Ready(Vec<u8>),
    /// A copy names bytes whose frame has not arrived: wait for it.
    Wait,
}

/// Why a frame cannot be rebuilt or kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// The peer broke P-37.
    #[error("tunnel history: {0}")]
    Broken(&'static str),
    /// The frame lies past [`MAX_AHEAD`] of the positions all received:
    /// holding it would pass the receiver's budget (P-39).
    #[error("the peer's tunnel frames ran {} MiB ahead of those received, past the {} MiB the byte cache holds ahead (a lane stalled too long, or the peer skipped a position)", .0 >> 20, MAX_AHEAD >> 20)]
    TooFarAhead(u64),
}

/// The receiving side's history.
pub struct RecvHistory {
    window: u64,
    frames: BTreeMap<u64, Vec<u8>>,
    /// Every position below this was received.
    watermark: u64,
    /// Received ranges past the watermark: start to end.
    ahead: BTreeMap<u64, u64>,
    held: u64,
}

impl RecvHistory {
    pub fn new(window: u64) -> RecvHistory {
        RecvHistory {
            window: window.max(1 << 20),
            frames: BTreeMap::new(),
            watermark: 0,
            ahead: BTreeMap::new(),
            held: 0,
        }
    }

    /// Rebuilds the frame at `pos` of `raw_len` bytes from its program.
    pub fn resolve(
        &self,
        pos: u64,
        raw_len: u32,
        pieces: &[Piece],
    ) -> Result<Resolve, HistoryError> {
        let mut out = Vec::with_capacity(raw_len as usize);
        for p in pieces {
            match *p {
                Piece::Literal(b) => out.extend_from_slice(b),
                Piece::Basis { from, len } => {
                    let end = from
                        .checked_add(len as u64)
                        .ok_or(HistoryError::Broken("copy past the end of positions"))?;
                    if end > pos || from < pos.saturating_sub(self.window / 2) {
                        return Err(HistoryError::Broken("copy outside the frame's reach"));
                    }
                    if !self.received(from, end) {
                        return Ok(Resolve::Wait);
                    }
                    self.copy(from, len as usize, &mut out)?;
                }
                Piece::Cache { .. } => {
                    return Err(HistoryError::Broken("cache copy in a tunnel frame"))
                }
            }
        }
        if out.len() != raw_len as usize {
            return Err(HistoryError::Broken("frame length"));
        }
        Ok(Resolve::Ready(out))
    }

    /// Whether every position in `from..end` was received.
    fn received(&self, from: u64, end: u64) -> bool {
        if end <= self.watermark {
            return true;
        }
        let mut at = from.max(self.watermark);
        while at < end {
            match self.ahead.range(..=at).next_back() {
                Some((_, &e)) if e > at => at = e,
                _ => return false,
            }
        }
        true
    }

    fn copy(&self, mut from: u64, mut len: usize, out: &mut Vec<u8>) -> Result<(), HistoryError> {
        while len > 0 {
            let (start, f) = self
                .frames
                .range(..=from)
                .next_back()
                .ok_or(HistoryError::Broken("copy of bytes no longer held"))?;
            let off = (from - start) as usize;
            let avail = f.len().checked_sub(off).filter(|a| *a > 0);
            let Some(avail) = avail else {
                return Err(HistoryError::Broken("copy of bytes no longer held"));
            };
            let n = avail.min(len);
            out.extend_from_slice(&f[off..off + n]);
            from += n as u64;
            len -= n;
        }
        Ok(())
    }

    /// Keeps the frame at `pos`, once rebuilt.
    pub fn insert(&mut self, pos: u64, data: Vec<u8>) -> Result<(), HistoryError> {
        let end = pos + data.len() as u64;
        if data.is_empty() {
            return Err(HistoryError::Broken("empty frame"));
        }
        let ahead = end - self.watermark.min(pos);
        if ahead > MAX_AHEAD {
            return Err(HistoryError::TooFarAhead(ahead));
        }
        if pos < self.watermark
            || self
                .ahead
                .range(..end)
                .next_back()
                .is_some_and(|(_, e)| *e > pos)
        {
            return Err(HistoryError::Broken("position given twice"));
        }
        self.held += data.len() as u64;
        self.frames.insert(pos, data);
        self.ahead.insert(pos, end);
        while let Some(e) = self.ahead.remove(&self.watermark) {
            self.watermark = e;
        }
        let keep_from = self.watermark.saturating_sub(self.window / 2);
        while let Some((&start, f)) = self.frames.first_key_value() {
            if start + f.len() as u64 > keep_from {
                break;
            }
            self.held -= f.len() as u64;
            self.frames.pop_first();
        }
        Ok(())
    }

    /// Bytes the history holds.
    pub fn held(&self) -> u64 {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codec::samples::noise;

    fn rebuild(rx: &mut RecvHistory, pos: u64, data: &[u8], plan: &[Planned]) -> Vec<u8> {
        let mut program = Vec::new();
        wire::program::encode(pieces(plan, data), &mut program);
        let decoded = wire::program::decode(&program, data.len() as u32).unwrap();
        let Resolve::Ready(out) = rx.resolve(pos, data.len() as u32, &decoded).unwrap() else {
            panic!("all it names has arrived")
        };
        rx.insert(pos, out.clone()).unwrap();
        out
    }

    #[test]
    fn repeated_content_crosses_as_copies() {
        let (mut tx, mut rx) = (SendHistory::new(8 << 20), RecvHistory::new(8 << 20));
        let a = noise(200_000, 1);
        let (p0, plan0) = tx.plan(&a);
        assert!(plan0.iter().all(|p| matches!(p, Planned::Literal { .. })));
        assert_eq!(rebuild(&mut rx, p0, &a, &plan0), a);
        // The same bytes again, shifted by a header: nearly all copies.
        let mut b = b"another connection: ".to_vec();
        b.extend_from_slice(&a[..150_000]);
        let (p1, plan1) = tx.plan(&b);
        let literal: usize = plan1
            .iter()
            .map(|p| match p {
                Planned::Literal { len, .. } => *len,
                _ => 0,
            })
            .sum();
        assert!(literal < 40_000, "{literal} literal bytes of {}", b.len());
        assert_eq!(rebuild(&mut rx, p1, &b, &plan1), b);
    }

    #[test]
    fn a_copy_of_a_frame_not_yet_arrived_waits_for_it() {
        let (mut tx, mut rx) = (SendHistory::new(8 << 20), RecvHistory::new(8 << 20));
        let a = noise(50_000, 2);
        let (p0, plan0) = tx.plan(&a);
        let (p1, plan1) = tx.plan(&a);
        let mut program = Vec::new();
        wire::program::encode(pieces(&plan1, &a), &mut program);
        let decoded = wire::program::decode(&program, a.len() as u32).unwrap();
        assert_eq!(rx.resolve(p1, a.len() as u32, &decoded), Ok(Resolve::Wait));
        assert_eq!(rebuild(&mut rx, p0, &a, &plan0), a);
        assert!(matches!(
            rx.resolve(p1, a.len() as u32, &decoded),
            Ok(Resolve::Ready(d)) if d == a
        ));
    }

    #[test]
    fn copies_reach_back_half_the_window_and_memory_stays_bounded() {
        let window = 1 << 20;
        let (mut tx, mut rx) = (SendHistory::new(window), RecvHistory::new(window));
        let first = noise(100_000, 3);
        let (p, plan) = tx.plan(&first);
        rebuild(&mut rx, p, &first, &plan);
        for i in 0..20 {
            let d = noise(60_000, 100 + i);
            let (p, plan) = tx.plan(&d);
            rebuild(&mut rx, p, &d, &plan);
        }
        // The first frame is past reach: sent again as literals.
        let (p, plan) = tx.plan(&first);
        assert!(plan.iter().all(|p| matches!(p, Planned::Literal { .. })));
        rebuild(&mut rx, p, &first, &plan);
        assert!(tx.held() <= window / 2 + 100_000, "{}", tx.held());
        assert!(rx.held() <= window / 2 + 100_000, "{}", rx.held());
    }

    #[test]
    fn bad_programs_are_refused() {
        let rx = RecvHistory::new(1 << 20);
        let copy = |from, len| vec![Piece::Basis { from, len }];
        assert!(
            rx.resolve(100, 10, &copy(95, 10)).is_err(),
            "past its own start"
        );
        assert!(
            rx.resolve(10 << 20, 10, &copy(0, 10)).is_err(),
            "out of reach"
        );
        assert_eq!(
            rx.resolve(100, 10, &copy(0, 10)),
            Ok(Resolve::Wait),
            "not arrived"
        );
        let mut rx = RecvHistory::new(1 << 20);
        rx.insert(0, vec![1; 10]).unwrap();
        assert!(rx.insert(5, vec![1; 10]).is_err(), "overlap");
        assert!(rx.resolve(100, 11, &copy(0, 10)).is_err(), "wrong length");
        assert_eq!(
            rx.resolve(100, 10, &copy(0, 10)),
            Ok(Resolve::Ready(vec![1; 10]))
        );
    }

    /// A peer that never sends some position cannot make the receiver
    /// hold frames past [`MAX_AHEAD`] of it (P-39); once the position
    /// comes, the same frame fits.
    #[test]
    fn a_peer_that_skips_a_position_is_refused_past_the_budget() {
        let mut rx = RecvHistory::new(1 << 20);
        rx.insert(1, vec![1; 100]).unwrap();
        let e = rx.insert(MAX_AHEAD - 50, vec![1; 100]).unwrap_err();
        assert_eq!(e, HistoryError::TooFarAhead(MAX_AHEAD + 50));
        assert!(e.to_string().contains("256 MiB"), "{e}");
        assert_eq!(rx.held(), 100, "nothing of the refused frame is kept");
        rx.insert(0, vec![1]).unwrap();
        rx.insert(MAX_AHEAD - 50, vec![1; 100]).unwrap();
    }
}
