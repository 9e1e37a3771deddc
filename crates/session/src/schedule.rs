//! Which block goes next, on whichever stream asks (P-13).
//!
//! Streams pull work when they are ready instead of being assigned a share,
//! so a slow stream simply takes fewer blocks: work stealing with one shared
//! queue. Rejected blocks go to the front. A window caps unacknowledged
//! bytes so a receiver that stalls does not let the sender run ahead
//! without bound. When no fresh block is left, a stream that asks gets a copy
//! of a block that has been in flight far longer than blocks usually take
//! ("endgame"), so one stalled stream cannot hold the whole transfer's tail.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::{block_count, block_len};

/// One block to read and send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockRef {
    pub file: u32,
    pub index: u32,
    pub offset: u64,
    pub len: u32,
}

/// What a stream should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Send(BlockRef),
    /// Nothing to send until an ack, a nack or the endgame timer.
    Wait,
    /// Every block is acknowledged.
    Done,
}

struct Flight {
    block: BlockRef,
    sent_at: Instant,
    copies: u8,
    /// Whether its bytes count against the window: not once it was
    /// announced as zeros, since nothing of it is on the data path.
    counted: bool,
}

pub struct Scheduler {
    block_size: u32,
    /// (file id, size) in send order.
    files: Vec<(u32, u64)>,
    cursor_file: usize,
    cursor_block: u64,
    retry: VecDeque<BlockRef>,
    in_flight: HashMap<(u32, u32), Flight>,
    in_flight_bytes: u64,
    window: u64,
    /// Smoothed time from handing a block out to its ack.
    latency: Option<Duration>,
    /// When a block's first copy was last acknowledged: while acks come,
    /// what is in flight is draining, not stuck.
    last_ack: Option<Instant>,
    /// Files whose blocks wait for the receiver's answer (P-31): the
    /// cursor stops at the first of them.
    held: HashSet<u32>,
    /// Copies sent by the endgame rule.
    pub endgame_copies: u64,
}

impl Scheduler {
    /// `files` lists (file id, size) in the order to send; `window` caps the
    /// bytes handed out and not yet acknowledged.
    pub fn new(files: Vec<(u32, u64)>, block_size: u32, window: u64) -> Scheduler {
        Scheduler {
            block_size,
            files,
            cursor_file: 0,
            cursor_block: 0,
            retry: VecDeque::new(),
            in_flight: HashMap::new(),
            in_flight_bytes: 0,
            window: window.max(block_size as u64),
            latency: None,
            held: HashSet::new(),
            endgame_copies: 0,
            last_ack: None,
        }
    }

    /// Changes the cap on bytes handed out and not yet acknowledged (the
    /// UDP channel sizes it once it knows the round trip).
    pub fn set_window(&mut self, window: u64) {
        self.window = window.max(self.block_size as u64);
    }

    /// Holds every file with blocks until [`Scheduler::release`] or
    /// [`Scheduler::skip`] names it.
    pub fn hold_all(&mut self) {
        self.held = self
            .files
            .iter()
            .filter(|(_, size)| *size > 0)
            .map(|(f, _)| *f)
            .collect();
    }

    pub fn release(&mut self, file: u32) {
        self.held.remove(&file);
    }

    /// The file is not to be sent at all. Only a file still held can be
    /// skipped: none of its blocks has gone out.
    pub fn skip(&mut self, file: u32) -> bool {
        if !self.held.remove(&file) {
            return false;
        }
        if let Some(f) = self.files.iter_mut().find(|(id, _)| *id == file) {
            f.1 = 0;
        }
        true
    }

    pub fn is_held(&self, file: u32) -> bool {
        self.held.contains(&file)
    }

    fn fresh(&mut self) -> Option<BlockRef> {
        while let Some(&(file, size)) = self.files.get(self.cursor_file) {
            if self.held.contains(&file) {
                return None;
            }
            if self.cursor_block < block_count(size, self.block_size) {
                let index = self.cursor_block;
                self.cursor_block += 1;
                return Some(BlockRef {
                    file,
                    index: index as u32,
                    offset: index * self.block_size as u64,
                    len: block_len(size, self.block_size, index),
                });
            }
            self.cursor_file += 1;
            self.cursor_block = 0;
        }
        None
    }

    /// The next fresh block, if it is a whole file of at most `max_len`
    /// bytes, the window has room for it, and no re-send waits: a member
    /// for a bundle (P-33). `None` leaves the scheduler as it was.
    pub fn next_whole_file(&mut self, max_len: u32, now: Instant) -> Option<BlockRef> {
        if !self.retry.is_empty() {
            return None;
        }
        let (_, size, b) = self.peek_fresh()?;
        let whole = b == 0 && size <= self.block_size as u64 && size <= max_len as u64;
        if !whole || self.in_flight_bytes + size > self.window {
            return None;
        }
        let block = self.fresh().expect("peeked");
        match self.launch(block, now) {
            Next::Send(b) => Some(b),
            _ => None,
        }
    }

    /// Every block has been handed out at least once: only re-sends and
    /// endgame copies can follow.
    pub fn all_handed_out(&self) -> bool {
        self.peek_unsent().is_none()
    }

    /// The first file with a block never handed out, from the cursor:
    /// (file, size, that block's index).
    fn peek_unsent(&self) -> Option<(u32, u64, u64)> {
        let mut b = self.cursor_block;
        for &(file, size) in self.files.get(self.cursor_file..)? {
            if b < block_count(size, self.block_size) {
                return Some((file, size, b));
            }
            b = 0;
        }
        None
    }

    /// [`Scheduler::peek_unsent`], unless its file is held (P-31): what
    /// [`Scheduler::fresh`] would hand out next.
    fn peek_fresh(&self) -> Option<(u32, u64, u64)> {
        self.peek_unsent()
            .filter(|(file, ..)| !self.held.contains(file))
    }

    fn peek_fresh_len(&self) -> Option<u32> {
        self.peek_fresh()
            .map(|(_, size, b)| block_len(size, self.block_size, b))
    }

    fn launch(&mut self, block: BlockRef, now: Instant) -> Next {
        self.in_flight_bytes += block.len as u64;
        self.in_flight.insert(
            (block.file, block.index),
            Flight {
                block,
                sent_at: now,
                copies: 1,
                counted: true,
            },
        );
        Next::Send(block)
    }

    /// The next block for a stream that is ready to send.
    pub fn next(&mut self, now: Instant) -> Next {
        // Re-sends go first and ignore the window: they replace bytes that
        // were already counted against it when first sent.
        if let Some(b) = self.retry.pop_front() {
            return self.launch(b, now);
        }
        if let Some(len) = self.peek_fresh_len() {
            if self.in_flight.is_empty() || self.in_flight_bytes + len as u64 <= self.window {
                let b = self.fresh().expect("peeked");
                return self.launch(b, now);
            }
            return Next::Wait;
        }
        if self.in_flight.is_empty() {
            return Next::Done;
        }
        // Endgame: copy the oldest straggler once.
        let patience = self.endgame_patience();
        let last_ack = self.last_ack;
        let straggler = self
            .in_flight
            .values_mut()
            .filter(|f| {
                let waiting_since = last_ack.map_or(f.sent_at, |a| a.max(f.sent_at));
                f.copies == 1 && now.saturating_duration_since(waiting_since) >= patience
            })
            .min_by_key(|f| f.sent_at);
        if let Some(f) = straggler {
            f.copies += 1;
            self.endgame_copies += 1;
            return Next::Send(f.block);
        }
        Next::Wait
    }

    /// When [`Scheduler::next`] next has something to hand out that no
    /// ack, nack or release brings: the endgame's copy of the oldest
    /// straggler. `None` while only those can bring work (fresh blocks
    /// wait for room in the window, or nothing is in flight), so that a
    /// driver waiting on [`Next::Wait`] sleeps until this, or until the
    /// session is handed a message.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.retry.is_empty() || self.peek_fresh_len().is_some() {
            return None;
        }
        let patience = self.endgame_patience();
        self.in_flight
            .values()
            .filter(|f| f.copies == 1)
            .map(|f| self.last_ack.map_or(f.sent_at, |a| a.max(f.sent_at)) + patience)
            .min()
    }

    /// How long a block must wait, with no first copy of any block
    /// acknowledged meanwhile, before the endgame copies it. A block queued
    /// behind others in a stream's socket buffer waits its turn while acks
    /// for the others come; copying it only queued it again elsewhere (a
    /// resumed 16 MiB file, whose first acks were for small delta
    /// programs, sent 11 of its blocks twice at 60 ms).
    pub fn endgame_patience(&self) -> Duration {
        let base = self.latency.unwrap_or(Duration::from_secs(1));
        (base * 4).max(Duration::from_millis(200))
    }

    /// The block was found to be zeros and announced on the control
    /// connection (P-29): it waits for its ack like any other, but no longer
    /// holds room in the window, which bounds what the data path carries.
    pub fn announced(&mut self, file: u32, index: u32) {
        if let Some(f) = self.in_flight.get_mut(&(file, index)) {
            if f.counted {
                f.counted = false;
                self.in_flight_bytes -= f.block.len as u64;
            }
        }
    }

    fn uncount(&mut self, f: &Flight) {
        if f.counted {
            self.in_flight_bytes -= f.block.len as u64;
        }
    }

    /// The receiver verified and stored the block.
    pub fn acked(&mut self, file: u32, index: u32, now: Instant) {
        let Some(f) = self.in_flight.remove(&(file, index)) else {
            return;
        };
        self.uncount(&f);
        // An announced block (zeros, or kept on resume) never took the
        // data path: its quick ack says nothing of how fast that drains (a
        // resume whose kept blocks were acked in one round trip copied
        // every block it then sent).
        if !f.counted {
            return;
        }
        if f.copies == 1 {
            self.last_ack = Some(now);
        }
        let sample = now.saturating_duration_since(f.sent_at);
        self.latency = Some(match self.latency {
            None => sample,
            Some(l) => (l * 7 + sample) / 8,
        });
    }

    /// The receiver rejected the block: send it again first.
    pub fn nacked(&mut self, file: u32, index: u32) -> bool {
        match self.in_flight.remove(&(file, index)) {
            Some(f) => {
                self.uncount(&f);
                self.retry.push_back(f.block);
                true
            }
            None => false,
        }
    }

    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_every_block_once_then_done() {
        let now = Instant::now();
        let mut s = Scheduler::new(vec![(0, 10), (1, 0), (2, 25)], 10, 1000);
        let mut got = vec![];
        while let Next::Send(b) = s.next(now) {
            got.push((b.file, b.index, b.offset, b.len));
        }
        assert_eq!(
            got,
            vec![(0, 0, 0, 10), (2, 0, 0, 10), (2, 1, 10, 10), (2, 2, 20, 5)]
        );
        for (f, i, _, _) in &got {
            s.acked(*f, *i, now);
        }
        assert_eq!(s.next(now), Next::Done);
    }

    #[test]
    fn the_endgame_timer_is_the_one_deadline_and_fires_when_due() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(vec![(0, 20)], 10, 15);
        assert!(matches!(s.next(t0), Next::Send(_)));
        // A fresh block waits for room in the window: an ack brings it,
        // no timer.
        assert_eq!(s.next(t0), Next::Wait);
        assert_eq!(s.poll_timeout(), None);
        s.acked(0, 0, t0);
        let t1 = t0 + Duration::from_millis(5);
        assert!(matches!(s.next(t1), Next::Send(BlockRef { index: 1, .. })));
        // Everything handed out: the straggler's copy is due after the
        // patience since the last ack, not before.
        let due = s.poll_timeout().expect("an endgame deadline");
        assert_eq!(due, t1 + s.endgame_patience());
        assert_eq!(s.next(due - Duration::from_millis(1)), Next::Wait);
        assert!(matches!(s.next(due), Next::Send(BlockRef { index: 1, .. })));
        // Copied once: no deadline left, only its ack.
        assert_eq!(s.poll_timeout(), None);
        assert_eq!(s.next(due + Duration::from_secs(60)), Next::Wait);
        s.acked(0, 1, due);
        assert_eq!((s.next(due), s.poll_timeout()), (Next::Done, None));
    }

    #[test]
    fn window_limits_unacked_bytes_and_nacks_go_first() {
        let now = Instant::now();
        let mut s = Scheduler::new(vec![(0, 100)], 10, 30);
        for _ in 0..3 {
            assert!(matches!(s.next(now), Next::Send(_)));
        }
        assert_eq!(s.next(now), Next::Wait);
        assert!(s.nacked(0, 1));
        assert_eq!(
            s.next(now),
            Next::Send(BlockRef {
                file: 0,
                index: 1,
                offset: 10,
                len: 10
            })
        );
        s.acked(0, 0, now);
        assert!(matches!(s.next(now), Next::Send(BlockRef { index: 3, .. })));
    }

    #[test]
    fn announced_zeros_free_the_window_but_still_wait_for_acks() {
        let now = Instant::now();
        let mut s = Scheduler::new(vec![(0, 50)], 10, 20);
        assert!(matches!(s.next(now), Next::Send(BlockRef { index: 0, .. })));
        assert!(matches!(s.next(now), Next::Send(BlockRef { index: 1, .. })));
        assert_eq!(s.next(now), Next::Wait, "the window is full");
        s.announced(0, 0);
        s.announced(0, 0);
        assert_eq!(s.in_flight_bytes(), 10, "announced once, counted once");
        assert!(matches!(s.next(now), Next::Send(BlockRef { index: 2, .. })));
        assert_eq!(s.next(now), Next::Wait);
        s.acked(0, 0, now);
        assert_eq!(s.in_flight_bytes(), 20, "its ack frees nothing twice");
        // A nacked announcement goes again, and counts again.
        s.announced(0, 1);
        assert!(s.nacked(0, 1));
        assert_eq!(s.in_flight_bytes(), 10);
        assert!(matches!(s.next(now), Next::Send(BlockRef { index: 1, .. })));
        assert_eq!(s.in_flight_bytes(), 20);
    }

    #[test]
    fn held_files_wait_and_skipped_files_send_nothing() {
        let now = Instant::now();
        let mut s = Scheduler::new(vec![(0, 10), (1, 20), (2, 10)], 10, 1000);
        s.hold_all();
        assert_eq!(
            s.next(now),
            Next::Done,
            "nothing released, nothing in flight"
        );
        s.release(1);
        assert_eq!(s.next(now), Next::Done, "file 0 comes first");
        assert!(s.skip(0));
        assert!(!s.skip(1), "released files cannot be skipped");
        let Next::Send(b) = s.next(now) else { panic!() };
        assert_eq!((b.file, b.index), (1, 0));
        let Next::Send(b) = s.next(now) else { panic!() };
        assert_eq!((b.file, b.index), (1, 1));
        assert!(matches!(s.next(now), Next::Wait), "file 2 is held");
        s.release(2);
        let Next::Send(b) = s.next(now) else { panic!() };
        assert_eq!(b.file, 2);
    }

    #[test]
    fn endgame_copies_a_straggler_once() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(vec![(0, 20)], 10, 1000);
        let Next::Send(a) = s.next(t0) else { panic!() };
        let Next::Send(_) = s.next(t0) else { panic!() };
        s.acked(0, 1, t0 + Duration::from_millis(10));
        assert_eq!(s.next(t0 + Duration::from_millis(20)), Next::Wait);
        let late = t0 + Duration::from_secs(5);
        assert_eq!(s.next(late), Next::Send(a));
        assert_eq!(s.next(late), Next::Wait);
        s.acked(0, 0, late);
        assert_eq!(s.next(late), Next::Done);
    }

    #[test]
    fn announced_blocks_say_nothing_of_the_data_path() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut s = Scheduler::new(vec![(0, 4 << 20)], 1 << 20, 64 << 20);
        let mut out = Vec::new();
        for _ in 0..4 {
            let Next::Send(b) = s.next(t0) else { panic!() };
            out.push(b);
        }
        // Blocks 0 and 1 are kept (announced) and acked in one round trip.
        s.announced(0, 0);
        s.announced(0, 1);
        s.acked(0, 0, ms(60));
        s.acked(0, 1, ms(60));
        // Blocks 2 and 3 are still on their way through slow start: no
        // copies at 400 ms, as there would be if 60 ms were the latency.
        assert_eq!(s.next(ms(400)), Next::Wait);
        assert_eq!(s.endgame_copies, 0);
    }

    #[test]
    fn blocks_queued_behind_others_are_not_stragglers() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        // Ten blocks of 100 bytes; the first acks come fast (small delta
        // programs), then acks drain 100 bytes every 100 ms.
        let mut s = Scheduler::new(vec![(0, 1000)], 100, 1 << 20);
        let blocks: Vec<BlockRef> = (0..10)
            .map(|_| match s.next(t0) {
                Next::Send(b) => b,
                other => panic!("{other:?}"),
            })
            .collect();
        s.acked(0, 0, t0 + ms(10));
        s.acked(0, 1, t0 + ms(20));
        // Acks keep coming every 100 ms: the rest are draining, though
        // they have waited past the 200 ms the latency alone allows.
        for b in &blocks[2..9] {
            let at = t0 + ms(100 * b.index as u64);
            s.acked(b.file, b.index, at);
            assert_eq!(s.next(at + ms(50)), Next::Wait, "block {}", b.index);
        }
        // Then nothing: the last block is stuck, and is copied once the
        // acks have stopped for longer than the patience.
        assert_eq!(s.next(t0 + ms(900)), Next::Wait);
        let late = t0 + ms(800) + s.endgame_patience() + ms(1);
        assert_eq!(s.next(late), Next::Send(blocks[9]));
    }
}
