//! A TCP data stream of the sending side (P-14): takes prepared blocks
//! from the queue whichever stream is free, fills in the header, paces
//! them under `--rate`, seals and writes them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use rate::TokenBucket;
use session::SenderSession;
use wire::BlockHeader;

use connect::error::TransferError;
use connect::framed::{FrameWriter, LEN_PREFIX};
use connect::progress::Mark;

use super::prepare::{Buffers, Prepared, DATA_AT};
use crate::shared::Shared;

/// A TCP data stream: seals and writes prepared blocks until none is left.
/// `pending`: blocks queued or being written (`prepare::prepare_blocks`).
pub(crate) fn send_blocks<'a>(
    sh: &'a Shared<'a, SenderSession>,
    mut w: FrameWriter,
    ready: &Mutex<mpsc::Receiver<Prepared>>,
    bucket: Option<&Mutex<TokenBucket>>,
    (buffers, pending): (&Buffers, &'a AtomicUsize),
) {
    loop {
        let next = ready.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok((block, hash, codec, mut buf)) = next else {
            break;
        };
        let _written = Written(sh, pending);
        // A block taken after the last ack is not needed.
        if sh.stopped() || sh.is_done() {
            break;
        }
        let header = BlockHeader {
            file: block.file,
            index: block.index,
            offset: block.offset,
            len: block.len,
            hash,
            codec,
            wire_len: (buf.len() - DATA_AT) as u32,
        };
        header.encode_into(&mut buf[LEN_PREFIX..]);
        // `--rate`, and a key's `rate=` shared by its sessions (issue 39),
        // reserved at once: the longer wait holds, never both.
        let ours = bucket.map_or(Duration::ZERO, |b| {
            b.lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(Instant::now(), buf.len() as u64)
        });
        let wait = ours.max(sh.progress.control.delay(buf.len() as u64));
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        // Data leaves as the write begins: a stream's write returns only
        // once the block is nearly sent (`STREAM_NOTSENT`).
        let timeline = &sh.progress.timeline;
        timeline.mark(Mark::FirstData);
        if let Err(e) = w.send_block_in_place(&mut buf) {
            sh.fail_transport(TransferError::lost("sending data", &e));
            break;
        }
        buffers.give(buf);
    }
    w.shutdown_write();
}

/// A queued block's count in `pending`, given back when its write is
/// over or given up. The last one, once every block is handed out, marks
/// that every block has been sent once (the timeline's `last_fresh`; a
/// block still being read then, which workers far ahead of the link make
/// rare, is written after the mark).
struct Written<'a>(&'a Shared<'a, SenderSession>, &'a AtomicUsize);

impl Drop for Written<'_> {
    fn drop(&mut self) {
        let Written(sh, pending) = *self;
        let timeline = &sh.progress.timeline;
        if pending.fetch_sub(1, Ordering::AcqRel) == 1
            && !timeline.reached(Mark::LastFresh)
            && sh.lock().all_handed_out()
        {
            timeline.mark(Mark::LastFresh);
        }
    }
}
