//! The sender's read stage (P-14, P-29, P-35): reads a block at its
//! offset, checks it for zeros (or trusts the zero scan), hashes it and
//! records it with the session, which says whether the receiver holds it
//! already, whether it is zeros to announce, or what of it to send.

use session::{block_hash, SenderSession};
use store::BlockSource;

use connect::progress::Progress;

use crate::shared::Shared;

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
    sources: &dyn BlockSource,
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
    let (parts, kept, wake) = {
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
            (None, true, true)
        } else if zero {
            st.block_zero(block);
            (None, false, true)
        } else {
            // A block to send changes nothing a sleeper waits on (the
            // schedule, a plan) unless it completed its file's digest,
            // which the control loop sends. Waking every sleeper for each
            // block was five context switches a small file.
            (st.block_parts(block), false, st.has_control())
        }
    };
    if wake {
        sh.cv.notify_all();
    }
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
