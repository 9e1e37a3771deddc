//! The sender's pipeline, one block at a time on a pool of workers: take
//! the next block from the session, `read` it (with the zero check and
//! hash), make it a delta program against what the receiver holds
//! (`crate::delta`), or gather small files into a bundle (`bundle`), and
//! compress it in place (`crate::compress`). What comes out is queued for
//! the TCP streams (`tcp`) or handed to the UDP channel (`udp`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

use session::{Next, SenderSession};
use store::BlockSource;
use wire::BLOCK_HEADER_LEN;

use connect::framed::LEN_PREFIX;
use connect::progress::Progress;

use super::read::{read_block, Read};
use crate::compress::Compression;
use crate::shared::Shared;

/// Takes the next block from the session, reads it into `buf[at..]`,
/// hashes and encodes it. `None` when there is nothing more to send or the
/// transfer stopped (any error is recorded).
pub(crate) fn read_next_block(
    sh: &Shared<SenderSession>,
    sources: &dyn BlockSource,
    compression: &Compression,
    buf: &mut Vec<u8>,
    at: usize,
) -> Option<(session::BlockRef, [u8; 32], u8)> {
    while !sh.stopped() {
        let block = {
            let mut st = sh.lock();
            match st.next_block(Instant::now()) {
                Next::Send(b) => b,
                Next::Wait => {
                    let due = st.poll_timeout();
                    drop(sh.wait(st, due));
                    continue;
                }
                Next::Done => return None,
            }
        };
        // Zeros are announced on the control connection, not sent (P-29);
        // this stream goes on to the next block.
        let Read::Data(hash, parts) = read_block(sh, sources, &block, buf, at)? else {
            continue;
        };
        // A delta program against what the receiver holds (P-31), when
        // shorter: it replaces the block, and is what may be compressed.
        let (mut at, mut delta, mut hash) = (at, 0, hash);
        if let Some((parts, literal)) = parts {
            if crate::delta::encode(buf, at, &parts) {
                Progress::add(&sh.progress.dedup_bytes, (block.len - literal) as u64);
                (at, delta) = (at + 4, wire::CODEC_DELTA);
            }
        } else if !compression.is_off() {
            // Whole small files go together, to be compressed as one
            // (P-33); the header's hash is then the bundle's.
            let lead = sh.lock().may_lead_bundle(&block, crate::bundle::MEMBER_MAX);
            if lead {
                if let Some(h) = super::bundle::gather(sh, sources, buf, at, &block) {
                    (at, delta, hash) = (at + 4, wire::CODEC_BUNDLE, h);
                }
            }
        }
        // Compressed in place (P-30): the bytes in `buf[at..]` become what
        // goes on the wire.
        let codec = compression.encode(buf, at, sh.progress, || sh.data_rate());
        return Some((block, hash, codec | delta));
    }
    None
}

/// A block read, hashed and encoded, with room in front for its frame
/// prefix and header.
pub(crate) type Prepared = (session::BlockRef, [u8; 32], u8, Vec<u8>);

/// Where the data of a prepared block starts in its buffer.
pub(crate) const DATA_AT: usize = LEN_PREFIX + BLOCK_HEADER_LEN;

/// Frame buffers the TCP streams have written, for the workers to read
/// the next blocks into. A fresh buffer of a block's size is zeroed by
/// `resize` and, past the allocator's threshold, mapped and unmapped for
/// every block; a buffer kept at its length is neither (P-19). At most
/// `cap` are kept, so a run holds no more than it did.
pub(crate) struct Buffers {
    kept: Mutex<Vec<Vec<u8>>>,
    cap: usize,
}

impl Buffers {
    pub(crate) fn new(cap: usize) -> Buffers {
        Buffers {
            kept: Mutex::new(Vec::new()),
            cap,
        }
    }

    /// A buffer to read a block into: one written already, if any. Its
    /// bytes are stale; `read_block` sizes it and overwrites what it keeps.
    pub(crate) fn take(&self) -> Vec<u8> {
        self.kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default()
    }

    /// A buffer whose frame is written.
    pub(crate) fn give(&self, buf: Vec<u8>) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() < self.cap {
            kept.push(buf);
        }
    }
}

/// A TCP sender's worker: takes blocks from the session, reads, hashes
/// and encodes them, and queues them for whichever stream is free.
pub(crate) fn prepare_blocks(
    sh: &Shared<SenderSession>,
    sources: &dyn BlockSource,
    compression: &Compression,
    (buffers, pending): (&Buffers, &AtomicUsize),
    ready: mpsc::SyncSender<Prepared>,
) {
    loop {
        let mut buf = buffers.take();
        let Some((block, hash, codec)) =
            read_next_block(sh, sources, compression, &mut buf, DATA_AT)
        else {
            return;
        };
        // Nothing more is sent once the transfer stopped or is done: a
        // block read just before the last ack (an endgame copy) is not
        // needed any more. The queue is bounded: the worker sleeps until a
        // stream takes a block, or until the last stream has ended (a
        // finished push must not wait on it).
        if sh.stopped() || sh.is_done() {
            return;
        }
        // Counted before it is queued, so that the last one written sees
        // it (`tcp::Written`).
        pending.fetch_add(1, Ordering::AcqRel);
        if ready.send((block, hash, codec, buf)).is_err() {
            return;
        }
    }
}
