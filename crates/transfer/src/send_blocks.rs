//! The sending side's block path: take a block from the session, read it,
//! check it for zeros and hash it, encode it as a delta program, a bundle
//! or compressed (P-29 to P-33), and, on TCP, queue it for whichever data
//! stream is free, which seals and writes it (P-14).

use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use rate::TokenBucket;
use session::{block_hash, Next, SenderSession};
use store::Sources;
use wire::{BlockHeader, BLOCK_HEADER_LEN};

use crate::engine::{Shared, POLL};
use connect::error::TransferError;
use connect::framed::{FrameWriter, LEN_PREFIX};
use connect::progress::Progress;

/// A block read and recorded by [`read_block`].
pub(crate) enum Read {
    /// All zeros (P-29), or held by the receiver already (P-35):
    /// announced, not to be sent.
    Announced,
    /// Its hash, and its delta parts if it is to go as a program (P-31).
    Data([u8; 32], Option<(Vec<chunk::Part>, u32)>),
}

/// Reads `block` into `buf[at..]`, hashes it and records it with the
/// session. `None`: the transfer failed (the error is recorded).
pub(crate) fn read_block(
    sh: &Shared<SenderSession>,
    sources: &Sources,
    block: &session::BlockRef,
    buf: &mut Vec<u8>,
    at: usize,
) -> Option<Read> {
    // A block the scan while connecting found all zeros is not read again,
    // but its file is still checked as after a read.
    let zero = if sources.known_zero(block.file, block.offset, block.len) {
        if let Err(e) = sources.check_unchanged(block.file) {
            sh.fail(e.into(), true);
            return None;
        }
        true
    } else {
        buf.resize(at + block.len as usize, 0);
        if let Err(e) = sources.read_block(block.file, block.offset, &mut buf[at..]) {
            sh.fail(e.into(), true);
            return None;
        }
        // A block of zeros has a known hash (P-29): checking is far
        // cheaper than hashing, and nearly every block fails it at once.
        codec::is_zero(&buf[at..])
    };
    let hash = if zero {
        session::zero_hash(block.len)
    } else {
        block_hash(&buf[at..])
    };
    let (parts, kept) = {
        let mut st = sh.lock();
        if let Err(e) = st.block_read(block, hash) {
            drop(st);
            sh.fail(e.into(), true);
            return None;
        }
        // What a resumed partial holds is kept (P-35): even zeros, which
        // the receiver then need not punch again.
        if st.receiver_holds(block, &hash) {
            st.block_kept(block);
            (None, true)
        } else if zero {
            st.block_zero(block);
            (None, false)
        } else {
            (st.block_parts(block), false)
        }
    };
    sh.cv.notify_all();
    if kept {
        Progress::add(&sh.progress.resumed_bytes, block.len as u64);
        return Some(Read::Announced);
    }
    if zero {
        Progress::add(&sh.progress.zero_bytes, block.len as u64);
        return Some(Read::Announced);
    }
    Some(Read::Data(hash, parts))
}

/// Takes the next block from the session, reads it into `buf[at..]`,
/// hashes and encodes it. `None` when there is nothing more to send or the
/// transfer stopped (any error is recorded).
pub(crate) fn read_next_block(
    sh: &Shared<SenderSession>,
    sources: &Sources,
    buf: &mut Vec<u8>,
    at: usize,
) -> Option<(session::BlockRef, [u8; 32], u8)> {
    while !sh.stopped() {
        let block = {
            let mut st = sh.lock();
            match st.next_block(Instant::now()) {
                Next::Send(b) => b,
                Next::Wait => {
                    let _ = sh.cv.wait_timeout(st, POLL);
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
            if crate::dedup::encode(buf, at, &parts) {
                Progress::add(&sh.progress.dedup_bytes, (block.len - literal) as u64);
                (at, delta) = (at + 4, wire::CODEC_DELTA);
            }
        } else if !sh.compression.is_off() {
            // Whole small files go together, to be compressed as one
            // (P-33); the header's hash is then the bundle's.
            let lead = sh.lock().may_lead_bundle(&block, crate::bundle::MEMBER_MAX);
            if lead {
                if let Some(h) = crate::bundle::gather(sh, sources, buf, at, &block) {
                    (at, delta, hash) = (at + 4, wire::CODEC_BUNDLE, h);
                }
            }
        }
        // Compressed in place (P-30): the bytes in `buf[at..]` become what
        // goes on the wire.
        let codec = sh
            .compression
            .encode(buf, at, sh.progress, || sh.data_rate());
        return Some((block, hash, codec | delta));
    }
    None
}

/// A block read, hashed and encoded, with room in front for its frame
/// prefix and header.
pub(crate) type Prepared = (session::BlockRef, [u8; 32], u8, Vec<u8>);

/// Where the data of a prepared block starts in its buffer.
const DATA_AT: usize = LEN_PREFIX + BLOCK_HEADER_LEN;

/// A TCP sender's worker: takes blocks from the session, reads, hashes
/// and encodes them, and queues them for whichever stream is free.
pub(crate) fn prepare_blocks(
    sh: &Shared<SenderSession>,
    sources: &Sources,
    ready: mpsc::SyncSender<Prepared>,
) {
    loop {
        let mut buf = Vec::new();
        let Some((block, hash, codec)) = read_next_block(sh, sources, &mut buf, DATA_AT) else {
            return;
        };
        let mut item = (block, hash, codec, buf);
        // Streams that all failed take nothing more: stop with them. Nor
        // do streams of a finished transfer: a block read just before the
        // last ack (an endgame copy) is not needed any more, and waiting
        // to queue it kept a finished push from exiting.
        loop {
            match ready.try_send(item) {
                Ok(()) => break,
                Err(mpsc::TrySendError::Full(back)) => {
                    if sh.stopped() || sh.is_done() {
                        return;
                    }
                    item = back;
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(mpsc::TrySendError::Disconnected(_)) => return,
            }
        }
    }
}

/// A TCP data stream: seals and writes prepared blocks until none is left.
pub(crate) fn send_blocks(
    sh: &Shared<SenderSession>,
    mut w: FrameWriter,
    ready: &Mutex<mpsc::Receiver<Prepared>>,
    bucket: Option<&Mutex<TokenBucket>>,
) {
    loop {
        let next = ready.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok((block, hash, codec, mut buf)) = next else {
            break;
        };
        if sh.stopped() {
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
        if let Some(b) = bucket {
            let wait = b
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(Instant::now(), buf.len() as u64);
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
        }
        if let Err(e) = w.send_block_in_place(&mut buf) {
            sh.fail_transport(TransferError::lost("sending data", &e));
            break;
        }
    }
    w.shutdown_write();
}
