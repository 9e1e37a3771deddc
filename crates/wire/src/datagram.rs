//! Datagrams of the UDP data channel (P-24).
//!
//! Every datagram starts with a 7-byte cleartext prefix, `kind: u8 | seq:
//! u48 LE`, where `seq` counts the datagrams one side sends in its direction
//! (below [`SEQ_LIMIT`]) and doubles as the AEAD nonce, so a datagram can be
//! opened whatever arrived before it. The body that follows is sealed and ends with a 16-byte
//! tag. Data datagrams carry one chunk of a block ([`ChunkHeader`] then
//! bytes); every other kind is a small [`Signal`].

use crate::buf::{DecodeError, Reader, Writer};
use crate::MAX_BLOCK_SIZE;

// A block's length less one, and an offset in it, fit 24 bits.
const _: () = assert!(MAX_BLOCK_SIZE <= 1 << 24);

/// `kind | seq`, in clear and authenticated.
pub const DATAGRAM_PREFIX: usize = 7;
/// Sequence numbers are 48 bits on the wire: a side sends fewer datagrams
/// than this in a session (about 390 PB of 1400-byte datagrams).
pub const SEQ_LIMIT: u64 = 1 << 48;
/// Chunk header without the block's details: `sent_us u32 | file u32 |
/// index u32 | offset u24 | block_len - 1 u24` (protocol 21; 24 bytes
/// before).
pub const CHUNK_HEADER_LEN: usize = 18;
/// Where a chunk header's `offset` lies in it: an integrity-only
/// datagram's covered length depends on it.
pub const CHUNK_OFFSET_AT: usize = 12;
/// The first chunk of a block also carries the block's BLAKE3 hash, its
/// codec and its length in the file ([`FirstChunk`]).
pub const FIRST_CHUNK_HEADER_LEN: usize = CHUNK_HEADER_LEN + 32 + 1 + 4;
/// Most missing-sequence ranges one report carries.
pub const MAX_MISSING: usize = 64;
/// Most stale-block requests one report carries.
pub const MAX_STALE: usize = 16;
/// Smallest datagram payload the channel uses (IPv6's minimum MTU less headers).
pub const MIN_PAYLOAD: u16 = 1200;

/// Sequence numbers below this one belong to set-up (hello, probes); the
/// transfer's datagrams, both ways, count from here, so no number is ever
/// sealed twice under one key.
pub const DATA_SEQ_START: u64 = 1 << 32;

pub const KIND_DATA: u8 = 1;
pub const KIND_REPORT: u8 = 2;
pub const KIND_HELLO: u8 = 3;
pub const KIND_HELLO_ACK: u8 = 4;
pub const KIND_PROBE: u8 = 5;
pub const KIND_PROBE_ACK: u8 = 6;
pub const KIND_PING: u8 = 7;
pub const KIND_STATS: u8 = 8;
pub const KIND_TRAIN: u8 = 9;
pub const KIND_TRAIN_RATE: u8 = 10;
/// A data datagram covered by erasure coding (P-47): a chunk, as
/// [`KIND_DATA`], that the receiver keeps until its group is settled.
pub const KIND_DATA_FEC: u8 = 11;
/// A parity datagram of erasure coding (P-47): [`ParityHeader`] then one
/// recovery shard of its group.
pub const KIND_PARITY: u8 = 12;
/// The highest datagram kind.
pub const KIND_LAST: u8 = KIND_PARITY;

/// Most data datagrams one erasure-coded group covers (12 bits on the wire).
pub const FEC_MAX_GROUP: u16 = 4096;
/// Most parity datagrams one group has (6 bits on the wire).
pub const FEC_MAX_PARITY: u8 = 64;
/// `group − 1 u12 | parity − 1 u6 | index u6`, little-endian in 3 bytes.
pub const PARITY_HEADER_LEN: usize = 3;

/// Most datagrams in one set-up packet train (P-23): a peer's `count` or
/// `index` at or above it is refused by the decoder.
pub const SETUP_TRAIN_MAX: u16 = 64;

/// Writes the cleartext prefix.
pub fn encode_prefix(out: &mut [u8], kind: u8, seq: u64) {
    debug_assert!(seq < SEQ_LIMIT, "the sender stops before SEQ_LIMIT");
    out[0] = kind;
    out[1..DATAGRAM_PREFIX].copy_from_slice(&seq.to_le_bytes()[..DATAGRAM_PREFIX - 1]);
}

/// Reads the cleartext prefix of a received datagram.
pub fn decode_prefix(b: &[u8]) -> Result<(u8, u64), DecodeError> {
    let mut r = Reader::new(b);
    let kind = r.u8()?;
    if !(KIND_DATA..=KIND_LAST).contains(&kind) {
        return Err(DecodeError::UnknownTag {
            what: "datagram kind",
            tag: kind,
        });
    }
    let mut seq = [0u8; 8];
    seq[..DATAGRAM_PREFIX - 1].copy_from_slice(r.bytes(DATAGRAM_PREFIX - 1)?);
    Ok((kind, u64::from_le_bytes(seq)))
}

/// The length of the chunk header at the start of `body` (a data
/// datagram's body), from its offset alone: `None` if too short.
pub fn chunk_header_len(body: &[u8]) -> Option<usize> {
    let off = body.get(CHUNK_OFFSET_AT..CHUNK_OFFSET_AT + 3)?;
    Some(match off == [0, 0, 0] {
        true => FIRST_CHUNK_HEADER_LEN,
        false => CHUNK_HEADER_LEN,
    })
}

/// The shard length of erasure coding for datagrams of `payload` bytes
/// (P-47): what a parity datagram (prefix, parity header, tag) leaves of
/// the payload, rounded down to even. It holds a covered datagram's body
/// less `sent_us`, which is at most `payload − 27` bytes.
pub fn fec_shard_len(payload: usize) -> usize {
    payload.saturating_sub(DATAGRAM_PREFIX + PARITY_HEADER_LEN + crate::TAG_LEN) & !1
}

/// Which group a parity datagram belongs to, and its place in it (P-47).
/// The group is the `group` sequence numbers right before the group's
/// first parity datagram, which is this one's less `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParityHeader {
    /// Data datagrams covered, `1..=FEC_MAX_GROUP`.
    pub group: u16,
    /// Parity datagrams of the group, `1..=FEC_MAX_PARITY`.
    pub parity: u8,
    /// This one's index among them, below `parity`.
    pub index: u8,
}

impl ParityHeader {
    pub fn encode(&self) -> [u8; PARITY_HEADER_LEN] {
        debug_assert!((1..=FEC_MAX_GROUP).contains(&self.group));
        debug_assert!((1..=FEC_MAX_PARITY).contains(&self.parity) && self.index < self.parity);
        let v =
            (self.group as u32 - 1) | (self.parity as u32 - 1) << 12 | (self.index as u32) << 18;
        let b = v.to_le_bytes();
        [b[0], b[1], b[2]]
    }

    pub fn decode(b: &[u8]) -> Result<ParityHeader, DecodeError> {
        let b = b
            .get(..PARITY_HEADER_LEN)
            .ok_or_else(|| DecodeError::Truncated {
                needed: PARITY_HEADER_LEN - b.len(),
            })?;
        let v = u32::from_le_bytes([b[0], b[1], b[2], 0]);
        let h = ParityHeader {
            group: (v & 0xfff) as u16 + 1,
            parity: ((v >> 12) & 0x3f) as u8 + 1,
            index: (v >> 18) as u8,
        };
        if h.index >= h.parity {
            return Err(DecodeError::Invalid(
                "parity index past its group's parity count",
            ));
        }
        Ok(h)
    }

    /// The first sequence number of the group, from this datagram's own;
    /// `None` where it would fall below the transfer's numbers.
    pub fn group_start(&self, seq: u64) -> Option<u64> {
        seq.checked_sub(self.index as u64 + self.group as u64)
            .filter(|&s| s >= DATA_SEQ_START)
    }
}

/// Where a chunk's bytes belong: block `index` of `file`, at `offset` within
/// the block of `block_len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Sender's clock in microseconds, modulo 2^32 (it wraps every 71
    /// minutes), for one-way delay differences.
    pub sent_us: u32,
    pub file: u32,
    pub index: u32,
    pub offset: u32,
    pub block_len: u32,
    /// Present exactly when `offset == 0`.
    pub first: Option<FirstChunk>,
}

/// What the first chunk of a block says of the whole block (P-24, P-30).
/// `block_len` of its chunks counts encoded bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstChunk {
    /// BLAKE3 of the block's bytes as read (P-11).
    pub hash: [u8; 32],
    /// One of the `CODEC_*` values.
    pub codec: u8,
    /// The block's length in the file.
    pub len: u32,
}

impl ChunkHeader {
    pub fn encoded_len(&self) -> usize {
        if self.first.is_some() {
            FIRST_CHUNK_HEADER_LEN
        } else {
            CHUNK_HEADER_LEN
        }
    }

    /// Writes the header at the start of `out`; returns its length.
    pub fn encode_into(&self, out: &mut [u8]) -> usize {
        // offset < block_len <= MAX_BLOCK_SIZE = 2^24: both fit 24 bits,
        // the length less one.
        debug_assert!(self.offset < self.block_len && self.block_len <= MAX_BLOCK_SIZE);
        out[..4].copy_from_slice(&self.sent_us.to_le_bytes());
        out[4..8].copy_from_slice(&self.file.to_le_bytes());
        out[8..12].copy_from_slice(&self.index.to_le_bytes());
        out[12..15].copy_from_slice(&self.offset.to_le_bytes()[..3]);
        out[15..18].copy_from_slice(&(self.block_len - 1).to_le_bytes()[..3]);
        let h = CHUNK_HEADER_LEN;
        if let Some(f) = &self.first {
            out[h..h + 32].copy_from_slice(&f.hash);
            out[h + 32] = f.codec;
            out[h + 33..h + 37].copy_from_slice(&f.len.to_le_bytes());
        }
        self.encoded_len()
    }

    /// Decodes the header at the start of a data body; the chunk's bytes
    /// follow it and must fit inside the block.
    pub fn decode(b: &[u8]) -> Result<(ChunkHeader, usize), DecodeError> {
        let mut r = Reader::new(b);
        let sent_us = r.u32()?;
        let file = r.u32()?;
        let index = r.u32()?;
        let offset = u24(&mut r)?;
        let block_len = u24(&mut r)? + 1;
        if block_len == 0 || block_len > MAX_BLOCK_SIZE || offset >= block_len {
            return Err(DecodeError::Invalid("chunk outside its block"));
        }
        let first = if offset == 0 {
            let f = FirstChunk {
                hash: r.array()?,
                codec: r.u8()?,
                len: r.u32()?,
            };
            crate::block::check_coding(f.codec, f.len, block_len)?;
            Some(f)
        } else {
            None
        };
        let h = ChunkHeader {
            sent_us,
            file,
            index,
            offset,
            block_len,
            first,
        };
        let len = h.encoded_len();
        let data = b.len() - len;
        if data == 0 || offset as u64 + data as u64 > block_len as u64 {
            return Err(DecodeError::Invalid("chunk outside its block"));
        }
        Ok((h, len))
    }
}

fn u24(r: &mut Reader) -> Result<u32, DecodeError> {
    let b = r.bytes(3)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], 0]))
}

/// Missing bytes of a block that stopped making progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleRange {
    pub file: u32,
    pub index: u32,
    pub offset: u32,
    pub len: u32,
}

/// The receiver's periodic report (P-25): what arrived in the last
/// interval, for the rate controller, and what is missing, for
/// retransmission.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    pub interval_us: u32,
    /// Datagram bytes (UDP payload) that arrived in the interval, the unit
    /// the sender paces in.
    pub bytes: u64,
    pub packets: u32,
    /// Sequence numbers found missing in the interval.
    pub lost: u32,
    pub longest_run: u32,
    /// Smallest (receiver clock − sender timestamp) in the interval, µs;
    /// only differences between reports mean anything.
    pub min_owd_us: i64,
    /// Datagrams the receiver's socket dropped so far (overload).
    pub dropped: u64,
    /// The sender need not remember sequence numbers below this one.
    pub floor: u64,
    /// The next sequence number the receiver expects: every number below it
    /// arrived or was found missing (and reported).
    pub highest: u64,
    /// The bottleneck's rate in datagram bytes per second, measured from
    /// the spacing of packet trains (P-25); 0 when the interval had none.
    pub train_rate: u64,
    /// Ranges `(first seq, count)` that did not arrive.
    pub missing: Vec<(u64, u32)>,
    /// Blocks waiting for bytes whose loss went unreported.
    pub stale: Vec<StaleRange>,
}

/// Every datagram kind except data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    Report(Report),
    /// Client → server: the session this UDP flow belongs to.
    Hello([u8; 16]),
    HelloAck([u8; 16]),
    /// Path-MTU probe of `size` bytes in all (padded); answered in kind.
    Probe(u16),
    ProbeAck(u16),
    /// Sent by an idle sender so that a lost tail shows as a gap.
    Ping,
    /// The sender's counters, for the receiver's summary.
    Stats {
        sent: u64,
        retransmitted: u64,
        rate: u64,
    },
    /// Set-up's packet train (P-23): datagram `index` of the `count` of
    /// train `train`, `size` bytes in all (padded), sent back to back so
    /// that their arrival spacing measures the bottleneck. Not answered in
    /// kind.
    Train {
        size: u16,
        train: u16,
        index: u16,
        count: u16,
    },
    /// Server → client: the rate, in datagram bytes per second, that the
    /// client's train `train` arrived at; 0 when it could not be measured.
    TrainRate {
        train: u16,
        rate: u64,
    },
}

impl Signal {
    pub fn kind(&self) -> u8 {
        match self {
            Signal::Report(_) => KIND_REPORT,
            Signal::Hello(_) => KIND_HELLO,
            Signal::HelloAck(_) => KIND_HELLO_ACK,
            Signal::Probe(_) => KIND_PROBE,
            Signal::ProbeAck(_) => KIND_PROBE_ACK,
            Signal::Ping => KIND_PING,
            Signal::Stats { .. } => KIND_STATS,
            Signal::Train { .. } => KIND_TRAIN,
            Signal::TrainRate { .. } => KIND_TRAIN_RATE,
        }
    }

    /// The body, before sealing. Probes are padded so that the whole
    /// datagram (prefix, body and tag) is `size` bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Signal::Report(r) => {
                w.u32(r.interval_us)
                    .u64(r.bytes)
                    .u32(r.packets)
                    .u32(r.lost)
                    .u32(r.longest_run)
                    .i64(r.min_owd_us)
                    .u64(r.dropped)
                    .u64(r.floor)
                    .u64(r.highest)
                    .u64(r.train_rate);
                w.u8(r.missing.len().min(MAX_MISSING) as u8);
                for (start, count) in r.missing.iter().take(MAX_MISSING) {
                    w.u64(*start).u32(*count);
                }
                w.u8(r.stale.len().min(MAX_STALE) as u8);
                for s in r.stale.iter().take(MAX_STALE) {
                    w.u32(s.file).u32(s.index).u32(s.offset).u32(s.len);
                }
            }
            Signal::Hello(s) | Signal::HelloAck(s) => {
                w.bytes(s);
            }
            Signal::Probe(size) | Signal::ProbeAck(size) => {
                w.u16(*size);
                let body = (*size as usize).saturating_sub(DATAGRAM_PREFIX + crate::TAG_LEN);
                let pad = body.saturating_sub(2);
                w.bytes(&vec![0; pad]);
            }
            Signal::Ping => {}
            Signal::Stats {
                sent,
                retransmitted,
                rate,
            } => {
                w.u64(*sent).u64(*retransmitted).u64(*rate);
            }
            Signal::Train {
                size,
                train,
                index,
                count,
            } => {
                w.u16(*size).u16(*train).u16(*index).u16(*count);
                let body = (*size as usize).saturating_sub(DATAGRAM_PREFIX + crate::TAG_LEN);
                w.bytes(&vec![0; body.saturating_sub(8)]);
            }
            Signal::TrainRate { train, rate } => {
                w.u16(*train).u64(*rate);
            }
        }
        w.buf
    }

    pub fn decode(kind: u8, b: &[u8]) -> Result<Signal, DecodeError> {
        let mut r = Reader::new(b);
        let s = match kind {
            KIND_REPORT => {
                let mut rep = Report {
                    interval_us: r.u32()?,
                    bytes: r.u64()?,
                    packets: r.u32()?,
                    lost: r.u32()?,
                    longest_run: r.u32()?,
                    min_owd_us: r.i64()?,
                    dropped: r.u64()?,
                    floor: r.u64()?,
                    highest: r.u64()?,
                    train_rate: r.u64()?,
                    ..Report::default()
                };
                let n = r.u8()? as usize;
                if n > MAX_MISSING {
                    return Err(DecodeError::Invalid("too many missing ranges"));
                }
                for _ in 0..n {
                    rep.missing.push((r.u64()?, r.u32()?));
                }
                let n = r.u8()? as usize;
                if n > MAX_STALE {
                    return Err(DecodeError::Invalid("too many stale blocks"));
                }
                for _ in 0..n {
                    rep.stale.push(StaleRange {
                        file: r.u32()?,
                        index: r.u32()?,
                        offset: r.u32()?,
                        len: r.u32()?,
                    });
                }
                Signal::Report(rep)
            }
            KIND_HELLO => Signal::Hello(r.array()?),
            KIND_HELLO_ACK => Signal::HelloAck(r.array()?),
            KIND_PROBE | KIND_PROBE_ACK => {
                let size = r.u16()?;
                // Padding is authenticated with the rest; its content is unused.
                let _ = r.bytes(r.remaining())?;
                if kind == KIND_PROBE {
                    Signal::Probe(size)
                } else {
                    Signal::ProbeAck(size)
                }
            }
            KIND_PING => Signal::Ping,
            KIND_STATS => Signal::Stats {
                sent: r.u64()?,
                retransmitted: r.u64()?,
                rate: r.u64()?,
            },
            KIND_TRAIN => {
                let (size, train, index, count) = (r.u16()?, r.u16()?, r.u16()?, r.u16()?);
                if count > SETUP_TRAIN_MAX || index >= count {
                    return Err(DecodeError::Invalid("set-up train car out of range"));
                }
                let _ = r.bytes(r.remaining())?;
                Signal::Train {
                    size,
                    train,
                    index,
                    count,
                }
            }
            KIND_TRAIN_RATE => Signal::TrainRate {
                train: r.u16()?,
                rate: r.u64()?,
            },
            tag => {
                return Err(DecodeError::UnknownTag {
                    what: "signal kind",
                    tag,
                })
            }
        };
        r.finish()?;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_report() -> impl Strategy<Value = Report> {
        (
            (any::<u32>(), any::<u64>(), any::<u32>(), any::<u32>()),
            (
                any::<u32>(),
                any::<i64>(),
                any::<u64>(),
                any::<(u64, u64, u64)>(),
            ),
            proptest::collection::vec((any::<u64>(), any::<u32>()), 0..=MAX_MISSING),
            proptest::collection::vec(any::<(u32, u32, u32, u32)>(), 0..=MAX_STALE),
        )
            .prop_map(
                |((i, b, p, l), (run, owd, d, (f, hi, train)), missing, stale)| Report {
                    interval_us: i,
                    bytes: b,
                    packets: p,
                    lost: l,
                    longest_run: run,
                    min_owd_us: owd,
                    dropped: d,
                    floor: f,
                    highest: hi,
                    train_rate: train,
                    missing,
                    stale: stale
                        .into_iter()
                        .map(|(file, index, offset, len)| StaleRange {
                            file,
                            index,
                            offset,
                            len,
                        })
                        .collect(),
                },
            )
    }

    fn arb_signal() -> impl Strategy<Value = Signal> {
        prop_oneof![
            arb_report().prop_map(Signal::Report),
            any::<[u8; 16]>().prop_map(Signal::Hello),
            any::<[u8; 16]>().prop_map(Signal::HelloAck),
            (0u16..9000).prop_map(Signal::Probe),
            (0u16..9000).prop_map(Signal::ProbeAck),
            Just(Signal::Ping),
            any::<(u64, u64, u64)>().prop_map(|(sent, retransmitted, rate)| Signal::Stats {
                sent,
                retransmitted,
                rate
            }),
            (any::<u16>(), any::<u16>(), 1..=SETUP_TRAIN_MAX).prop_flat_map(
                |(size, train, count)| {
                    (0..count).prop_map(move |index| Signal::Train {
                        size,
                        train,
                        index,
                        count,
                    })
                }
            ),
            any::<(u16, u64)>().prop_map(|(train, rate)| Signal::TrainRate { train, rate }),
        ]
    }

    #[test]
    fn a_train_car_out_of_range_is_refused() {
        for (index, count) in [(0, SETUP_TRAIN_MAX + 1), (3, 3), (u16::MAX, u16::MAX)] {
            let mut w = Writer::new();
            w.u16(1400).u16(0).u16(index).u16(count);
            assert!(
                Signal::decode(KIND_TRAIN, &w.buf).is_err(),
                "{index}/{count}"
            );
        }
        let car = Signal::Train {
            size: 1400,
            train: 2,
            index: 5,
            count: 64,
        };
        assert_eq!(DATAGRAM_PREFIX + car.encode().len() + crate::TAG_LEN, 1400);
    }

    #[test]
    fn probe_fills_its_size() {
        let body = Signal::Probe(8972).encode();
        assert_eq!(DATAGRAM_PREFIX + body.len() + crate::TAG_LEN, 8972);
    }

    proptest! {
        #[test]
        fn signal_roundtrip(s in arb_signal()) {
            prop_assert_eq!(Signal::decode(s.kind(), &s.encode()).unwrap(), s);
        }

        #[test]
        fn signal_decode_never_panics(kind in 0u8..14, b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Signal::decode(kind, &b);
            let _ = decode_prefix(&b);
        }

        #[test]
        fn chunk_roundtrip(sent_us: u32, file: u32, index: u32, block_len in 1u32..=MAX_BLOCK_SIZE, off: u32, hash: [u8; 32], data in 1usize..2000) {
            let offset = off % block_len;
            let data = data.min((block_len - offset) as usize);
            let first = (offset == 0).then_some(FirstChunk { hash, codec: crate::CODEC_NONE, len: block_len });
            let h = ChunkHeader { sent_us, file, index, offset, block_len, first };
            let mut b = vec![0u8; FIRST_CHUNK_HEADER_LEN + data];
            let n = h.encode_into(&mut b);
            b.truncate(n + data);
            prop_assert_eq!(ChunkHeader::decode(&b).unwrap(), (h, n));
            prop_assert_eq!(chunk_header_len(&b), Some(n));
        }

        #[test]
        fn parity_header_roundtrip(group in 1..=FEC_MAX_GROUP, parity in 1..=FEC_MAX_PARITY, i: u8) {
            let h = ParityHeader { group, parity, index: i % parity };
            prop_assert_eq!(ParityHeader::decode(&h.encode()).unwrap(), h);
        }

        #[test]
        fn parity_header_decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..6), seq: u64) {
            if let Ok(h) = ParityHeader::decode(&b) {
                prop_assert!(h.index < h.parity && h.parity <= FEC_MAX_PARITY && h.group <= FEC_MAX_GROUP);
                if let Some(s) = h.group_start(seq) {
                    prop_assert!(s >= DATA_SEQ_START && s + h.group as u64 + h.index as u64 == seq);
                }
            }
        }

        #[test]
        fn prefix_roundtrip(kind in KIND_DATA..=KIND_LAST, seq in 0..SEQ_LIMIT) {
            let mut b = [0u8; DATAGRAM_PREFIX];
            encode_prefix(&mut b, kind, seq);
            prop_assert_eq!(decode_prefix(&b).unwrap(), (kind, seq));
        }

        #[test]
        fn chunk_decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..100)) {
            if let Ok((h, n)) = ChunkHeader::decode(&b) {
                prop_assert!(h.offset as usize + b.len() - n <= h.block_len as usize);
            }
        }
    }
}
