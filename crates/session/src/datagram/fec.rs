//! Erasure coding over the tail's datagrams (P-47), without I/O.
//!
//! A loss in the last round trip of a transfer is known a round trip after
//! it went, and its re-send takes half another: the transfer's end waits
//! for it. So once every block has been read ([`DatagramSender::set_tail`]),
//! the sender covers its data datagrams with Reed-Solomon parity sent right
//! behind each group, and the receiver rebuilds what a group lost from what
//! arrived, without a round trip.
//!
//! - A group is up to [`FEC_MAX_GROUP`] consecutive sequence numbers, all
//!   covered data datagrams; its `parity` parity datagrams take the numbers
//!   right after it.
//! - A shard is a covered datagram's body less `sent_us` (its plaintext:
//!   header, then chunk bytes), padded with zeros to [`fec_shard_len`].
//!   Every shard that goes into a decode was authenticated (its datagram
//!   opened under the session key), so what the decode gives back is what
//!   the sender sealed.
//! - A rebuilt chunk's length is not sent: it is the length P-24's cutting
//!   gives (`min(capacity, block_len − offset)`), and the padding past it
//!   must be zeros.
//!
//! [`DatagramSender::set_tail`]: super::DatagramSender::set_tail

use std::collections::BTreeMap;
use std::time::Duration;

use wire::datagram::{fec_shard_len, ChunkHeader, ParityHeader, FEC_MAX_GROUP, FEC_MAX_PARITY};

use super::chunking::chunk_capacity;

/// Most data datagrams a sender puts in one group.
pub const GROUP_TARGET: usize = 1024;
/// A group is closed once its first datagram is this old, or a
/// sixteenth of the round trip if longer, so its parity follows it closely
/// at low rates too ([`group_age`]).
pub const GROUP_MAX_AGE: Duration = Duration::from_millis(5);

/// How old a group's first datagram may grow on a path of round trip
/// `rtt`: a decode waits for it, so a small share of the round trip; at
/// low rates it bounds how small groups (each with at least one parity
/// datagram) become.
pub fn group_age(rtt: Duration) -> Duration {
    GROUP_MAX_AGE.max(rtt / 16)
}

/// Fresh bytes still queued at which coverage starts: what leaves in a
/// round trip and the reports' delay (`window`), a quarter more. A loss
/// before that is repaired in time by a re-send; coverage over more
/// would spend parity for nothing.
pub fn cover_from(rate: u64, window: Duration) -> u64 {
    (rate as f64 * window.as_secs_f64() * 1.25) as u64
}
/// Bytes of covered datagrams a receiver keeps for groups not yet settled
/// (S-8): past it, the oldest go.
pub const FEC_HELD_MAX: usize = 32 << 20;
/// Groups a receiver keeps parity for at once (S-8): past it, the oldest go.
pub const FEC_GROUPS_MAX: usize = 32;

/// How many parity datagrams a group of `group` gets where a share `loss`
/// of the datagrams sent so far was reported lost: the losses expected,
/// three standard deviations more, and one.
pub fn parity_for(group: usize, loss: f64) -> usize {
    let expected = group as f64 * loss.clamp(0.0, 1.0);
    ((expected + 3.0 * expected.sqrt() + 1.0).ceil() as usize).clamp(1, FEC_MAX_PARITY as usize)
}

/// The group size for `loss`: [`GROUP_TARGET`], halved while its parity
/// would pass [`FEC_MAX_PARITY`] (at 10% loss, 256).
pub fn group_for(loss: f64) -> usize {
    let mut k = GROUP_TARGET;
    while k > 64 && parity_for(k, loss) >= FEC_MAX_PARITY as usize {
        k /= 2;
    }
    k
}

/// One group's parity, ready to send: datagram `index` gets
/// `shards[index]` and the next sequence number.
pub struct Parity {
    pub header: ParityHeader,
    pub shards: Vec<Vec<u8>>,
}

/// The sender's side: gathers a group's shards and makes its parity.
pub struct FecEncoder {
    shard_len: usize,
    max_age: Duration,
    next_seq: Option<u64>,
    shards: Vec<Vec<u8>>,
    /// The last group's shard buffers, for the next group to fill.
    spare: Vec<Vec<u8>>,
    opened: Duration,
}

impl FecEncoder {
    /// For datagrams of `payload` bytes, groups closed at `max_age`
    /// ([`group_age`]).
    pub fn new(payload: usize, max_age: Duration) -> FecEncoder {
        FecEncoder {
            shard_len: fec_shard_len(payload),
            max_age,
            next_seq: None,
            shards: Vec::new(),
            spare: Vec::new(),
            opened: Duration::ZERO,
        }
    }

    pub fn len(&self) -> usize {
        self.shards.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// Adds covered datagram `seq`, whose body less `sent_us` is `header`
    /// then `data`. The caller closes the group ([`Self::finish`]) before
    /// any other number is taken, so a group's numbers follow each other.
    pub fn add(&mut self, now: Duration, seq: u64, header: &[u8], data: &[u8]) {
        debug_assert!(
            self.next_seq.is_none_or(|n| n == seq),
            "a group's numbers follow each other"
        );
        debug_assert!(header.len() + data.len() <= self.shard_len);
        if self.shards.is_empty() {
            self.opened = now;
        }
        let mut s = self.spare.pop().unwrap_or_default();
        s.clear();
        s.extend_from_slice(header);
        s.extend_from_slice(data);
        s.resize(self.shard_len, 0);
        self.shards.push(s);
        self.next_seq = Some(seq + 1);
    }

    /// Whether the group should close now: `target` datagrams, or its
    /// first is as old as allowed.
    pub fn due(&self, now: Duration, target: usize) -> bool {
        !self.shards.is_empty()
            && (self.shards.len() >= target.min(FEC_MAX_GROUP as usize)
                || now.saturating_sub(self.opened) >= self.max_age)
    }

    /// Closes the group with `parity` parity datagrams (at most
    /// [`FEC_MAX_PARITY`]); `None` when it is empty.
    pub fn finish(&mut self, parity: usize) -> Option<Parity> {
        if self.shards.is_empty() {
            return None;
        }
        let shards = std::mem::take(&mut self.shards);
        self.next_seq = None;
        let parity = parity.clamp(1, FEC_MAX_PARITY as usize);
        let made = reed_solomon_simd::encode(shards.len(), parity, &shards)
            .expect("group and parity counts within the coder's range, shards even and equal");
        let group = shards.len() as u16;
        self.spare = shards;
        Some(Parity {
            header: ParityHeader {
                group,
                parity: parity as u8,
                index: 0,
            },
            shards: made,
        })
    }
}

/// Parity received for one group.
struct Group {
    size: u16,
    parity: u8,
    shards: BTreeMap<u8, Vec<u8>>,
}

/// The receiver's side: keeps covered datagrams and parity, bounded, and
/// rebuilds what a group lost once enough of it is in.
pub struct FecDecoder {
    shard_len: usize,
    held: BTreeMap<u64, Vec<u8>>,
    held_bytes: usize,
    groups: BTreeMap<u64, Group>,
    pub recovered: u64,
}

impl FecDecoder {
    pub fn new(payload: usize) -> FecDecoder {
        FecDecoder {
            shard_len: fec_shard_len(payload),
            held: BTreeMap::new(),
            held_bytes: 0,
            groups: BTreeMap::new(),
            recovered: 0,
        }
    }

    /// Bytes kept for groups not yet settled.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// A covered datagram arrived: `content` is its body less `sent_us`.
    /// Returns what its group can now rebuild, `(seq, content)`.
    pub fn on_covered(&mut self, seq: u64, content: &[u8]) -> Vec<(u64, Vec<u8>)> {
        if content.len() > self.shard_len || self.held.contains_key(&seq) {
            return Vec::new();
        }
        self.held.insert(seq, content.to_vec());
        self.held_bytes += content.len();
        while self.held_bytes > FEC_HELD_MAX {
            let Some((_, c)) = self.held.pop_first() else {
                break;
            };
            self.held_bytes -= c.len();
        }
        match self.group_of(seq) {
            Some(start) => self.try_rebuild(start),
            None => Vec::new(),
        }
    }

    /// A parity datagram arrived. Returns what its group can now rebuild.
    pub fn on_parity(&mut self, seq: u64, h: &ParityHeader, shard: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let Some(start) = h.group_start(seq) else {
            return Vec::new();
        };
        if shard.len() != self.shard_len {
            return Vec::new();
        }
        let g = self.groups.entry(start).or_insert_with(|| Group {
            size: h.group,
            parity: h.parity,
            shards: BTreeMap::new(),
        });
        // Another shape for the same start contradicts the first: ignored.
        if (g.size, g.parity) != (h.group, h.parity) {
            return Vec::new();
        }
        g.shards.entry(h.index).or_insert_with(|| shard.to_vec());
        while self.groups.len() > FEC_GROUPS_MAX {
            self.groups.pop_first();
        }
        self.try_rebuild(start)
    }

    fn group_of(&self, seq: u64) -> Option<u64> {
        let (&start, g) = self.groups.range(..=seq).next_back()?;
        (seq < start + g.size as u64).then_some(start)
    }

    /// Rebuilds group `start`'s missing datagrams once the parity in
    /// covers them; the group and what it held are then let go.
    fn try_rebuild(&mut self, start: u64) -> Vec<(u64, Vec<u8>)> {
        let Some(g) = self.groups.get(&start) else {
            return Vec::new();
        };
        let end = start + g.size as u64;
        let present = self.held.range(start..end).count();
        let missing = g.size as usize - present;
        if missing > g.shards.len() {
            return Vec::new();
        }
        let g = self.groups.remove(&start).expect("looked up above");
        // The group's members leave the store: moved, not copied.
        let mut rest = self.held.split_off(&end);
        let members: Vec<(u64, Vec<u8>)> = self.held.split_off(&start).into_iter().collect();
        self.held.append(&mut rest);
        self.held_bytes -= members.iter().map(|(_, c)| c.len()).sum::<usize>();
        if missing == 0 {
            return Vec::new();
        }
        let shard_len = self.shard_len;
        let originals = members.into_iter().map(|(s, mut c)| {
            c.resize(shard_len, 0);
            ((s - start) as usize, c)
        });
        let recovery = g.shards.iter().map(|(&i, s)| (i as usize, s));
        let Ok(rebuilt) =
            reed_solomon_simd::decode(g.size as usize, g.parity as usize, originals, recovery)
        else {
            return Vec::new();
        };
        self.recovered += rebuilt.len() as u64;
        rebuilt
            .into_iter()
            .map(|(i, c)| (start + i as u64, c))
            .collect()
    }
}

/// A rebuilt shard as the chunk its datagram carried: the header (with
/// `sent_us` 0) and the chunk's bytes, their length from P-24's cutting
/// for datagrams of `payload` bytes. `None` unless the header decodes and
/// everything past the chunk is padding.
pub fn rebuilt_chunk(payload: usize, shard: &[u8]) -> Option<(ChunkHeader, Vec<u8>)> {
    let mut body = vec![0u8; 4];
    body.extend_from_slice(shard);
    let n = wire::datagram::chunk_header_len(&body)?;
    let raw = |at: usize| {
        let b = body.get(at..at + 3)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], 0]))
    };
    let offset = raw(wire::datagram::CHUNK_OFFSET_AT)?;
    let block_len = raw(wire::datagram::CHUNK_OFFSET_AT + 3)? + 1;
    let cap = chunk_capacity(payload, offset == 0) as u32;
    let len = cap.min(block_len.checked_sub(offset)?) as usize;
    let end = n.checked_add(len).filter(|&e| e <= body.len())?;
    if body[end..].iter().any(|&b| b != 0) {
        return None;
    }
    let (h, hn) = ChunkHeader::decode(&body[..end]).ok()?;
    Some((h, body[hn..end].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::datagram::{FirstChunk, DATA_SEQ_START};

    const P: usize = 1472;

    /// The shards of `n` covered datagrams of a 1 MiB block, as the
    /// sender would cut them, from `DATA_SEQ_START`.
    fn group(n: usize) -> Vec<(u64, Vec<u8>)> {
        let block: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + 3) as u8).collect();
        super::super::chunks(block.len() as u32, P)
            .take(n)
            .enumerate()
            .map(|(i, (off, len))| {
                let h = ChunkHeader {
                    sent_us: 99,
                    file: 1,
                    index: 2,
                    offset: off,
                    block_len: block.len() as u32,
                    first: (off == 0).then_some(FirstChunk {
                        hash: [5; 32],
                        codec: wire::CODEC_NONE,
                        len: block.len() as u32,
                    }),
                };
                let mut b = vec![0u8; 64];
                let hn = h.encode_into(&mut b);
                b.truncate(hn);
                b.extend_from_slice(&block[off as usize..(off + len) as usize]);
                (DATA_SEQ_START + i as u64, b[4..].to_vec())
            })
            .collect()
    }

    fn encode(members: &[(u64, Vec<u8>)], parity: usize) -> Parity {
        let mut e = FecEncoder::new(P, GROUP_MAX_AGE);
        for (s, c) in members {
            e.add(Duration::ZERO, *s, &c[..10], &c[10..]);
        }
        e.finish(parity).unwrap()
    }

    #[test]
    fn a_group_that_lost_no_more_than_its_parity_is_rebuilt_exactly() {
        let members = group(100);
        let parity = encode(&members, 4);
        let mut d = FecDecoder::new(P);
        let lost = [0usize, 17, 50, 99];
        for (i, (s, c)) in members.iter().enumerate() {
            if !lost.contains(&i) {
                assert!(d.on_covered(*s, c).is_empty());
            }
        }
        let first_parity = DATA_SEQ_START + 100;
        let mut got = Vec::new();
        for (i, shard) in parity.shards.iter().enumerate() {
            let h = ParityHeader {
                index: i as u8,
                ..parity.header
            };
            got.extend(d.on_parity(first_parity + i as u64, &h, shard));
        }
        got.sort();
        assert_eq!(got.len(), 4);
        for ((s, c), &i) in got.iter().zip(&lost) {
            assert_eq!(*s, members[i].0);
            let (h, data) = rebuilt_chunk(P, c).expect("a rebuilt chunk decodes");
            assert_eq!(h.sent_us, 0);
            let mut want = vec![0u8; 4];
            want.extend_from_slice(&members[i].1);
            let (wh, wn) = ChunkHeader::decode(&want).unwrap();
            assert_eq!((h.offset, h.first), (wh.offset, wh.first));
            assert_eq!(data, want[wn..]);
        }
        assert_eq!(d.held_bytes(), 0, "a settled group is let go of");
        assert_eq!(d.recovered, 4);
    }

    #[test]
    fn more_losses_than_parity_rebuild_nothing_and_late_arrivals_complete_it() {
        let members = group(20);
        let parity = encode(&members, 1);
        let mut d = FecDecoder::new(P);
        for (s, c) in &members[2..] {
            d.on_covered(*s, c);
        }
        let h = parity.header;
        assert!(d
            .on_parity(DATA_SEQ_START + 20, &h, &parity.shards[0])
            .is_empty());
        // One of the two overtaken arrives: the parity now covers the other.
        let got = d.on_covered(members[0].0, &members[0].1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, members[1].0);
    }

    #[test]
    fn hostile_parity_is_bounded_and_never_panics() {
        let mut d = FecDecoder::new(P);
        let shard = vec![1u8; fec_shard_len(P)];
        for g in 0..(FEC_GROUPS_MAX as u64 * 3) {
            let h = ParityHeader {
                group: FEC_MAX_GROUP,
                parity: FEC_MAX_PARITY,
                index: 0,
            };
            let seq = DATA_SEQ_START + g * 5000 + FEC_MAX_GROUP as u64;
            assert!(d.on_parity(seq, &h, &shard).is_empty());
            // A wrong length, and a group below the transfer's numbers.
            assert!(d.on_parity(seq, &h, &shard[1..]).is_empty());
            assert!(d.on_parity(5, &h, &shard).is_empty());
        }
        assert!(d.groups.len() <= FEC_GROUPS_MAX);
        for s in 0..40_000u64 {
            d.on_covered(DATA_SEQ_START + s, &shard);
        }
        assert!(d.held_bytes() <= FEC_HELD_MAX);
        // A "rebuilt" shard of garbage is refused, not trusted.
        assert!(rebuilt_chunk(P, &shard).is_none());
        assert!(rebuilt_chunk(P, &[]).is_none());
    }

    proptest::proptest! {
        /// Whatever an authenticated but hostile sender numbers, sizes and
        /// claims, the decoder never panics and stays within S-8.
        #[test]
        fn a_hostile_sender_never_breaks_the_decoder(
            steps in proptest::collection::vec(
                (proptest::prelude::any::<bool>(), 0u64..6000, 0u16..4096, 1u8..=64, proptest::prelude::any::<u8>(), 0usize..1500),
                0..120,
            )
        ) {
            let mut d = FecDecoder::new(P);
            let s_len = fec_shard_len(P);
            for (covered, at, group, parity, fill, len) in steps {
                let seq = DATA_SEQ_START + at;
                let got = if covered {
                    d.on_covered(seq, &vec![fill; len])
                } else {
                    let h = ParityHeader { group: group + 1, parity, index: fill % parity };
                    let shard = vec![fill; if len % 3 == 0 { len } else { s_len }];
                    d.on_parity(seq, &h, &shard)
                };
                for (_, shard) in got {
                    proptest::prop_assert_eq!(shard.len(), s_len);
                    let _ = rebuilt_chunk(P, &shard);
                }
                proptest::prop_assert!(d.held_bytes() <= FEC_HELD_MAX);
                proptest::prop_assert!(d.groups.len() <= FEC_GROUPS_MAX);
            }
        }
    }

    #[test]
    fn parity_grows_with_loss_and_groups_shrink_to_fit_it() {
        assert_eq!(parity_for(1024, 0.0), 1);
        assert!((4..=8).contains(&parity_for(1024, 0.001)));
        assert!((15..=30).contains(&parity_for(1024, 0.01)));
        assert_eq!(group_for(0.01), 1024);
        let k = group_for(0.1);
        assert!(k < 1024 && parity_for(k, 0.1) < FEC_MAX_PARITY as usize);
    }
}
