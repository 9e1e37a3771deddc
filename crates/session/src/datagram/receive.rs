//! The receiving half of the UDP channel (P-25, P-26).
//!
//! Every authenticated datagram's sequence number goes through
//! [`DatagramReceiver::on_seq`]: a jump forward marks the numbers skipped
//! as missing, a late arrival fills its gap (reordering), and a repeat is a
//! duplicate. Chunks are copied into their block's buffer whatever order
//! they come in; a block with all its bytes and its hash is handed out as
//! [`Completed`]. Every report interval, [`DatagramReceiver::poll_reports`]
//! says what arrived (for the rate controller) and which sequence ranges
//! are missing, each range repeated in a few reports in case one is lost,
//! and asks again for blocks that stopped making progress.
//!
//! Every datagram that reaches this side opened under the session's key,
//! so it is the peer's own (P-24); what it claims is still bounded (P-40,
//! S-6, S-7). A sequence number further ahead than any sender can have in
//! flight ends the session ([`DatagramError`]), and so does a chunk of a
//! block the complete manifest does not have. A block gets a buffer only
//! if its file's receiver still wants it, and the buffers of blocks being
//! assembled stay within a byte and a count limit: past them a chunk is
//! dropped like a lost one (the scheduler's endgame sends its block
//! again), since an honest sender's window keeps it well inside.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use thiserror::Error;
use wire::datagram::{
    ChunkHeader, FirstChunk, Report, StaleRange, DATA_SEQ_START, MAX_MISSING, MAX_STALE,
};

use super::reporting::{report_interval, REPORT_INTERVAL, REPORT_REPEATS};
use crate::receiver::Wanted;

/// How far past the highest number seen a datagram's sequence number may
/// be (S-6): 2^26 datagrams, 98 GB at 1472 bytes. A sender stops at its
/// in-flight cap, twice its delivery rate over the round trip and two
/// report intervals: 6 million datagrams at 100 Gbit/s and 300 ms. A jump
/// is one gap, reported as one range, so the limit is what keeps a gap
/// from being expanded into billions of ranges, and `highest` from
/// wrapping.
pub const MAX_SEQ_AHEAD: u64 = 1 << 26;
/// The most bytes of blocks being assembled at once, by default (S-7):
/// 1 GiB, the most the UDP sender holds unacknowledged (its window), so an
/// honest sender never reaches it.
pub const MAX_ASSEMBLY_BYTES: u64 = 1 << 30;
/// The most blocks being assembled at once, by default (S-7): bundles
/// carry small files, so blocks of a few chunks are few.
pub const MAX_ASSEMBLIES: usize = 1 << 18;
/// Bytes an assembly costs besides its buffer, counted against
/// [`MAX_ASSEMBLY_BYTES`].
const ASSEMBLY_COST: u64 = 128;
/// Bytes each range of arrived bytes costs (a B-tree entry), counted too:
/// a sender that sends a block one byte in two makes a range per chunk.
const RANGE_COST: u64 = 32;

/// A datagram no honest sender sends: the session ends.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DatagramError {
    #[error("the sender numbered a datagram {seq}, {ahead} past the highest number received ({highest}); no sender has more than {MAX_SEQ_AHEAD} in flight")]
    TooFarAhead { seq: u64, highest: u64, ahead: u64 },
    #[error("a datagram carries block {index} of file {file}, which the manifest does not have")]
    NoSuchBlock { file: u32, index: u32 },
}

/// A block whose bytes have all arrived; its hash is still to be checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    pub file: u32,
    pub index: u32,
    pub hash: [u8; 32],
    /// How `data` is encoded (P-30), and the block's length in the file.
    pub codec: u8,
    pub len: u32,
    pub data: Vec<u8>,
}

/// Counters for the summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    pub datagrams: u64,
    /// Sequence numbers that never arrived (their chunks were re-sent).
    pub lost: u64,
    pub duplicates: u64,
    pub reordered: u64,
    /// Chunk bytes that arrived, repeats included.
    pub bytes: u64,
    /// Chunks dropped because the assembly limits were reached (S-7).
    pub refused: u64,
}

struct Missing {
    end: u64,
    detected: Duration,
    reported: u8,
    /// When it was last reported.
    last: Duration,
}

struct Assembly {
    buf: Vec<u8>,
    /// Disjoint, non-touching `[start, end)` ranges that have arrived, by
    /// start: a chunk costs a logarithm, however many came before it.
    have: BTreeMap<u32, u32>,
    first: Option<FirstChunk>,
    last: Duration,
}

impl Assembly {
    /// Adds `[start, end)`; returns by how many the ranges grew (1 at
    /// most, or fewer: it may join several).
    fn insert(&mut self, mut start: u32, mut end: u32) -> isize {
        let before = self.have.len() as isize;
        if let Some((&s, &e)) = self.have.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
            }
        }
        while let Some((&s, &e)) = self.have.range(start..=end).next() {
            self.have.remove(&s);
            end = end.max(e);
        }
        self.have.insert(start, end);
        self.have.len() as isize - before
    }

    fn complete(&self) -> bool {
        self.first.is_some()
            && self.have.len() == 1
            && self.have.first_key_value() == Some((&0, &(self.buf.len() as u32)))
    }

    fn holes(&self) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        let mut at = 0;
        for (&s, &e) in &self.have {
            if s > at {
                out.push((at, s));
            }
            at = e;
        }
        if (at as usize) < self.buf.len() {
            out.push((at, self.buf.len() as u32));
        }
        if out.is_empty() && self.first.is_none() {
            // Everything but the first chunk's hash: ask for the start.
            out.push((0, 1));
        }
        out
    }
}

#[derive(Default)]
struct Interval {
    bytes: u64,
    packets: u32,
    lost: u32,
    run: u32,
    min_owd: Option<i64>,
}

/// The longest a missing range is kept and reported (P-25).
const MISSING_KEPT_MAX: Duration = Duration::from_secs(1);

pub struct DatagramReceiver {
    rtt: Duration,
    /// Next sequence number expected: everything below arrived or is missing.
    highest: u64,
    missing: BTreeMap<u64, Missing>,
    assemblies: HashMap<(u32, u32), Assembly>,
    /// Bytes the assemblies hold, with [`ASSEMBLY_COST`] each, and the limits.
    assembly_bytes: u64,
    max_assembly_bytes: u64,
    max_assemblies: usize,
    completed: HashSet<(u32, u32)>,
    interval: Interval,
    interval_start: Duration,
    /// The bottleneck's rate from packet trains: the driver tells it of
    /// each data datagram ([`super::train::TrainMeter::on_datagram`]), as only it
    /// knows the datagram's length on the wire.
    pub trains: super::train::TrainMeter,
    pub stats: ReceiverStats,
    /// Datagrams the socket dropped, as the driver last read it.
    pub dropped: u64,
}

impl DatagramReceiver {
    pub fn new(rtt: Duration, now: Duration) -> Self {
        DatagramReceiver {
            rtt,
            highest: DATA_SEQ_START,
            missing: BTreeMap::new(),
            assemblies: HashMap::new(),
            assembly_bytes: 0,
            max_assembly_bytes: MAX_ASSEMBLY_BYTES,
            max_assemblies: MAX_ASSEMBLIES,
            completed: HashSet::new(),
            interval: Interval::default(),
            interval_start: now,
            trains: super::train::TrainMeter::default(),
            stats: ReceiverStats::default(),
            dropped: 0,
        }
    }

    /// Other limits on the blocks being assembled than [`MAX_ASSEMBLY_BYTES`]
    /// and [`MAX_ASSEMBLIES`] (S-7).
    pub fn limit_assemblies(&mut self, bytes: u64, blocks: usize) {
        self.max_assembly_bytes = bytes;
        self.max_assemblies = blocks;
    }

    /// Bytes the blocks being assembled hold, as counted against the limit.
    pub fn assembly_bytes(&self) -> u64 {
        self.assembly_bytes
    }

    /// Gaps waiting to be reported.
    pub fn gaps(&self) -> usize {
        self.missing.len()
    }

    /// How long a gap waits before it is reported, in case the datagram
    /// was only overtaken.
    fn reorder_grace(&self) -> Duration {
        (self.rtt / 32).max(Duration::from_millis(2))
    }

    /// How long an incomplete block may go without a new chunk before its
    /// missing bytes are asked for by name.
    fn stale_after(&self) -> Duration {
        self.rtt * 2 + REPORT_INTERVAL * 10
    }

    /// An authenticated datagram of `len` bytes (UDP payload) numbered
    /// `seq` arrived. Returns false for a duplicate. The interval's byte
    /// count is in datagram bytes, the unit the sender paces in. A number
    /// more than [`MAX_SEQ_AHEAD`] past the highest is an error (S-6).
    pub fn on_seq(&mut self, now: Duration, seq: u64, len: usize) -> Result<bool, DatagramError> {
        if seq >= self.highest {
            let ahead = seq - self.highest;
            let next = seq.checked_add(1);
            if ahead > MAX_SEQ_AHEAD || next.is_none() {
                return Err(DatagramError::TooFarAhead {
                    seq,
                    highest: self.highest,
                    ahead,
                });
            }
        }
        self.stats.datagrams += 1;
        self.interval.packets += 1;
        self.interval.bytes += len as u64;
        if seq >= self.highest {
            if seq > self.highest {
                let gap = seq - self.highest;
                self.missing.insert(
                    self.highest,
                    Missing {
                        end: seq,
                        detected: now,
                        reported: 0,
                        last: now,
                    },
                );
                self.stats.lost += gap;
                self.interval.lost = self.interval.lost.saturating_add(gap as u32);
                self.interval.run = self.interval.run.max(gap.min(u32::MAX as u64) as u32);
            }
            self.highest = seq + 1;
            return Ok(true);
        }
        // Below the highest: a gap being filled late, or a repeat.
        let Some((&start, m)) = self.missing.range(..=seq).next_back() else {
            self.stats.duplicates += 1;
            return Ok(false);
        };
        if seq >= m.end {
            self.stats.duplicates += 1;
            return Ok(false);
        }
        let (end, detected, reported, last) = (m.end, m.detected, m.reported, m.last);
        self.missing.remove(&start);
        if start < seq {
            self.missing.insert(
                start,
                Missing {
                    end: seq,
                    detected,
                    reported,
                    last,
                },
            );
        }
        if seq + 1 < end {
            self.missing.insert(
                seq + 1,
                Missing {
                    end,
                    detected,
                    reported,
                    last,
                },
            );
        }
        self.stats.lost = self.stats.lost.saturating_sub(1);
        self.stats.reordered += 1;
        self.interval.lost = self.interval.lost.saturating_sub(1);
        Ok(true)
    }

    /// A chunk arrived (after [`DatagramReceiver::on_seq`]); `now_us` is
    /// this side's clock for the one-way delay. Returns the block once all
    /// its bytes are in.
    ///
    /// `wanted` says whether the manifest has the block and still lacks
    /// it (`ReceiverSession::wanted`); it is asked only for a block that
    /// has no buffer yet, once per block rather than per chunk (S-7).
    pub fn on_chunk(
        &mut self,
        now: Duration,
        now_us: u64,
        h: &ChunkHeader,
        data: &[u8],
        wanted: impl FnOnce(u32, u32) -> Wanted,
    ) -> Result<Option<Completed>, DatagramError> {
        // Both clocks start with the session, within seconds of each
        // other: their difference, taken modulo 2^32 as the sender's clock
        // is sent, is exact as a signed 32-bit count (P-24).
        let owd = i64::from((now_us as u32).wrapping_sub(h.sent_us) as i32);
        self.interval.min_owd = Some(self.interval.min_owd.map_or(owd, |m| m.min(owd)));
        self.on_rebuilt_chunk(now, h, data, wanted)
    }

    /// A chunk that erasure coding rebuilt (P-47), after
    /// [`DatagramReceiver::on_seq`]: as [`DatagramReceiver::on_chunk`],
    /// but it says nothing of the path's delay.
    pub fn on_rebuilt_chunk(
        &mut self,
        now: Duration,
        h: &ChunkHeader,
        data: &[u8],
        wanted: impl FnOnce(u32, u32) -> Wanted,
    ) -> Result<Option<Completed>, DatagramError> {
        self.stats.bytes += data.len() as u64;
        let key = (h.file, h.index);
        if self.completed.contains(&key) {
            return Ok(None);
        }
        let end = h.offset as usize + data.len();
        if data.is_empty() || h.block_len == 0 || h.block_len > wire::MAX_BLOCK_SIZE {
            // Never decoded so (P-24); refused here too, before any buffer.
            return Ok(None);
        }
        if !self.assemblies.contains_key(&key) {
            match wanted(h.file, h.index) {
                Wanted::Yes | Wanted::NotYet => {}
                Wanted::Already => return Ok(None),
                Wanted::Never => {
                    return Err(DatagramError::NoSuchBlock {
                        file: h.file,
                        index: h.index,
                    })
                }
            }
            let cost = h.block_len as u64 + ASSEMBLY_COST;
            if self.assemblies.len() >= self.max_assemblies
                || self.assembly_bytes + cost > self.max_assembly_bytes
            {
                self.stats.refused += 1;
                return Ok(None);
            }
            if end > h.block_len as usize {
                return Ok(None);
            }
            self.assembly_bytes += cost;
            self.assemblies.insert(
                key,
                Assembly {
                    buf: vec![0; h.block_len as usize],
                    have: BTreeMap::new(),
                    first: None,
                    last: now,
                },
            );
        }
        let a = self
            .assemblies
            .get_mut(&key)
            .expect("present or just added");
        if a.buf.len() != h.block_len as usize || end > a.buf.len() {
            // The sender's own header contradicts an earlier one: ignore it;
            // the block hash decides in the end.
            return Ok(None);
        }
        if self.assembly_bytes + RANGE_COST > self.max_assembly_bytes {
            self.stats.refused += 1;
            return Ok(None);
        }
        a.buf[h.offset as usize..end].copy_from_slice(data);
        let grew = a.insert(h.offset, end as u32);
        self.assembly_bytes = self
            .assembly_bytes
            .wrapping_add_signed(grew as i64 * RANGE_COST as i64);
        if h.first.is_some() {
            a.first = h.first;
        }
        a.last = now;
        if !a.complete() {
            return Ok(None);
        }
        let a = self.assemblies.remove(&key).expect("present");
        self.assembly_bytes -= a.buf.len() as u64 + ASSEMBLY_COST + RANGE_COST;
        self.completed.insert(key);
        let first = a.first.expect("complete blocks have their first chunk");
        Ok(Some(Completed {
            file: h.file,
            index: h.index,
            hash: first.hash,
            codec: first.codec,
            len: first.len,
            data: a.buf,
        }))
    }

    /// The block failed its hash and will be sent again: accept its chunks.
    pub fn reopen(&mut self, file: u32, index: u32) {
        self.completed.remove(&(file, index));
    }

    /// Datagrams the sender has numbered up to the last one that arrived.
    pub fn numbered(&self) -> u64 {
        self.highest - DATA_SEQ_START
    }

    /// Blocks being assembled.
    pub fn pending_blocks(&self) -> usize {
        self.assemblies.len()
    }

    /// How often to call [`DatagramReceiver::poll_reports`].
    pub fn report_interval(&self) -> Duration {
        report_interval(self.rtt)
    }

    /// The reports to send now (call once per report interval): the
    /// first carries the interval's figures, all carry missing ranges and
    /// stale-block requests.
    pub fn poll_reports(&mut self, now: Duration) -> Vec<Report> {
        let grace = self.reorder_grace();
        // A round trip, but never more than a second: the round trip is
        // the peer's to inflate, and the ranges tracked cost memory.
        let keep = self.rtt.min(MISSING_KEPT_MAX);
        let spread = keep / 4;
        let mut missing = Vec::new();
        let mut done = Vec::new();
        for (&start, m) in self.missing.iter_mut() {
            let age = now.saturating_sub(m.detected);
            if age < grace {
                continue;
            }
            // After the first rounds, again every quarter round trip until
            // it is a round trip old: a report lost three times in a row
            // (one in a thousand at 10% loss) left its datagrams to the
            // stale-block request, half a second later, and at the end of
            // a transfer nothing else was left to wait for.
            if m.reported >= REPORT_REPEATS {
                if age >= keep {
                    done.push(start);
                    continue;
                }
                if now.saturating_sub(m.last) < spread {
                    continue;
                }
            }
            let mut s = start;
            while s < m.end {
                let n = (m.end - s).min(u32::MAX as u64);
                missing.push((s, n as u32));
                s += n;
            }
            m.reported = m.reported.saturating_add(1);
            m.last = now;
        }
        for s in done {
            self.missing.remove(&s);
        }
        let stale_after = self.stale_after();
        let mut stale = Vec::new();
        for (&(file, index), a) in self.assemblies.iter_mut() {
            if now.saturating_sub(a.last) < stale_after {
                continue;
            }
            a.last = now;
            for (s, e) in a.holes() {
                stale.push(StaleRange {
                    file,
                    index,
                    offset: s,
                    len: e - s,
                });
            }
        }
        let floor = self.missing.keys().next().copied().unwrap_or(self.highest);
        let iv = std::mem::take(&mut self.interval);
        let first = Report {
            interval_us: now.saturating_sub(self.interval_start).as_micros() as u32,
            bytes: iv.bytes,
            packets: iv.packets,
            lost: iv.lost,
            longest_run: iv.run,
            min_owd_us: iv.min_owd.unwrap_or(0),
            dropped: self.dropped,
            floor,
            highest: self.highest,
            train_rate: self.trains.take(),
            missing: Vec::new(),
            stale: Vec::new(),
        };
        self.interval_start = now;
        let mut out = vec![first];
        let mut missing = missing.into_iter().peekable();
        let mut stale = stale.into_iter().peekable();
        loop {
            let r = out.last_mut().expect("at least one");
            while r.missing.len() < MAX_MISSING {
                match missing.next() {
                    Some(m) => r.missing.push(m),
                    None => break,
                }
            }
            while r.stale.len() < MAX_STALE {
                match stale.next() {
                    Some(s) => r.stale.push(s),
                    None => break,
                }
            }
            if missing.peek().is_none() && stale.peek().is_none() {
                break;
            }
            out.push(Report {
                dropped: self.dropped,
                floor,
                highest: self.highest,
                ..Report::default()
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yes(_: u32, _: u32) -> Wanted {
        Wanted::Yes
    }

    fn header(offset: u32, block_len: u32) -> ChunkHeader {
        ChunkHeader {
            sent_us: 0,
            file: 1,
            index: 2,
            offset,
            block_len,
            first: (offset == 0).then_some(FirstChunk {
                hash: [9; 32],
                codec: wire::CODEC_NONE,
                len: block_len,
            }),
        }
    }

    #[test]
    fn one_way_delays_hold_across_the_senders_clock_wrapping() {
        let t = Duration::from_millis;
        let mut r = DatagramReceiver::new(t(100), t(0));
        // The sender's clock (sent modulo 2^32) 3 ms before and 2 ms after
        // it wraps, 71.6 minutes in; the receiver's started 4 ms later, and
        // the path takes 5 ms, then 4.5.
        let sends = [((1u64 << 32) - 3_000, 5_000), ((1u64 << 32) + 2_000, 4_500)];
        for (i, (sent, path)) in sends.into_iter().enumerate() {
            let mut h = header(0, 100);
            h.index = i as u32;
            h.sent_us = sent as u32;
            r.on_chunk(t(0), sent - 4_000 + path, &h, &[0; 100], yes)
                .unwrap();
        }
        assert_eq!(r.poll_reports(t(20)).remove(0).min_owd_us, 500);
    }

    #[test]
    fn gaps_are_reported_after_grace_a_few_times_and_late_arrivals_fill_them() {
        let t = Duration::from_millis;
        let mut r = DatagramReceiver::new(t(100), t(0));
        let s0 = DATA_SEQ_START;
        for s in [0, 1, 5, 6, 3] {
            assert!(r.on_seq(t(0), s0 + s, 100).unwrap());
        }
        assert!(!r.on_seq(t(0), s0 + 5, 100).unwrap());
        assert_eq!(r.stats.lost, 2);
        assert_eq!(r.stats.reordered, 1);
        // Within the reorder grace nothing is reported yet.
        assert!(r.poll_reports(t(1))[0].missing.is_empty());
        // Three rounds in a row, then every quarter round trip until the
        // ranges are a round trip old.
        let gaps = vec![(s0 + 2, 1), (s0 + 4, 1)];
        for _ in 0..REPORT_REPEATS {
            let rep = r.poll_reports(t(20)).remove(0);
            assert_eq!(rep.missing, gaps);
            assert_eq!(rep.floor, s0 + 2);
        }
        assert!(r.poll_reports(t(40)).remove(0).missing.is_empty());
        for at in [45, 70, 95] {
            let rep = r.poll_reports(t(at)).remove(0);
            assert_eq!(rep.missing, gaps, "at {at} ms");
            assert_eq!(rep.floor, s0 + 2);
        }
        // Then forgotten: the floor passes them.
        let rep = r.poll_reports(t(100)).remove(0);
        assert!(rep.missing.is_empty());
        assert_eq!(rep.floor, s0 + 7);
    }

    #[test]
    fn assembles_out_of_order_and_asks_for_a_stalled_block() {
        let t = Duration::from_millis;
        let mut r = DatagramReceiver::new(t(10), t(0));
        assert!(r
            .on_chunk(t(0), 0, &header(100, 300), &[2; 100], yes)
            .unwrap()
            .is_none());
        assert!(r
            .on_chunk(t(0), 0, &header(200, 300), &[3; 100], yes)
            .unwrap()
            .is_none());
        let stale = r.poll_reports(t(1000)).remove(0).stale;
        assert_eq!(
            stale,
            vec![StaleRange {
                file: 1,
                index: 2,
                offset: 0,
                len: 100
            }]
        );
        let done = r
            .on_chunk(t(0), 0, &header(0, 300), &[1; 100], yes)
            .unwrap()
            .unwrap();
        assert_eq!(&done.data[..100], &[1; 100]);
        assert_eq!(&done.data[200..], &[3; 100]);
        assert_eq!(done.hash, [9; 32]);
        // Chunks of a completed block are ignored until it is reopened.
        assert!(r
            .on_chunk(t(0), 0, &header(0, 300), &[1; 100], yes)
            .unwrap()
            .is_none());
        assert_eq!(r.pending_blocks(), 0);
        r.reopen(1, 2);
        assert!(r
            .on_chunk(t(0), 0, &header(0, 300), &[1; 100], yes)
            .unwrap()
            .is_none());
        assert_eq!(r.pending_blocks(), 1);
    }

    #[test]
    fn many_gaps_spread_over_several_reports() {
        let t = Duration::from_millis;
        let mut r = DatagramReceiver::new(t(10), t(0));
        for s in 0..200u64 {
            r.on_seq(t(0), DATA_SEQ_START + s * 2, 100).unwrap();
        }
        let reps = r.poll_reports(t(50));
        assert_eq!(reps.iter().map(|r| r.missing.len()).sum::<usize>(), 199);
        assert!(reps.iter().all(|r| r.missing.len() <= MAX_MISSING));
        assert_eq!(reps[0].packets, 200);
        assert!(reps[1..].iter().all(|r| r.interval_us == 0));
    }
}
