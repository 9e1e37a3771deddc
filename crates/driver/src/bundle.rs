//! Bundles of whole small files (P-33), both ends. The sender's reader,
//! having taken a block that is a whole small file, takes the next blocks
//! too while each is one and they fit, and sends them as one block, so
//! that they are compressed together (a tree of small files compressed one
//! file at a time loses most of what `tar | zstd` gains). The receiver
//! checks the bundle's hash, splits it, and places each member as the one
//! block of its file, under the hash of the member's bytes (authentic
//! because the bundle's hash is).

use std::time::Instant;

use session::{block_hash, BlockRef, BlockVerdict, SenderSession};
use store::Sources;
use wire::bundle::{self, Member, MAX_MEMBERS};
use wire::{BlockHeader, CODEC_BUNDLE, CODEC_NONE};

use crate::engine::{Receiving, Shared};
use crate::send_blocks::{read_block, Read};

/// Largest file that goes in a bundle: any that fits (only files of one
/// block are whole files, P-33).
pub const MEMBER_MAX: u32 = BUNDLE_MAX;
/// Largest bundle (table and bytes, with its 4-byte length). Cut into
/// pieces of this size and compressed one by one with zstd:3, a tar of
/// /usr/share came within 1.2% of `tar | zstd -3` as one stream (1 MiB
/// pieces: 5%). With zstd:9, 8 MiB pieces came to 2.2% less than 4 MiB
/// pieces, but on the UDP channel at 100 Mbit/s such bundles left the
/// controller cut for ten seconds after a spurious early delay baseline
/// (see docs/BENCHMARKS.md), so 4 MiB it stays.
pub const BUNDLE_MAX: u32 = 4 << 20;

/// Adds whole small files after `leader`, whose bytes are `buf[at..]`,
/// while the next block is one and fits. With at least one taken,
/// `buf[at..]` becomes the bundle's length (4 bytes) and the bundle, and
/// the bundle's hash comes back; otherwise nothing changes.
pub(crate) fn gather(
    sh: &Shared<SenderSession>,
    sources: &Sources,
    buf: &mut Vec<u8>,
    at: usize,
    leader: &BlockRef,
) -> Option<[u8; 32]> {
    let budget = BUNDLE_MAX as usize - 4;
    let mut members = vec![Member {
        file: leader.file,
        len: leader.len,
    }];
    let mut data: Vec<u8> = Vec::new();
    while members.len() < MAX_MEMBERS {
        let used = bundle::table_len(members.len() + 1) + leader.len as usize + data.len();
        let room = budget.saturating_sub(used).min(MEMBER_MAX as usize) as u32;
        if room == 0 {
            break;
        }
        let Some(m) = sh.lock().next_bundle_member(room, Instant::now()) else {
            break;
        };
        let start = data.len();
        // A zero file is announced (P-29), not bundled.
        let Read::Data(..) = read_block(sh, sources, &m, &mut data, start)? else {
            data.truncate(start);
            continue;
        };
        members.push(Member {
            file: m.file,
            len: m.len,
        });
    }
    if members.len() == 1 {
        return None;
    }
    let mut out =
        Vec::with_capacity(at + 4 + bundle::table_len(members.len()) + buf.len() + data.len());
    out.extend_from_slice(&buf[..at]);
    out.extend_from_slice(&[0; 4]);
    bundle::encode_table(&members, &mut out);
    out.extend_from_slice(&buf[at..]);
    out.extend_from_slice(&data);
    let total = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&total.to_le_bytes());
    debug_assert!(total as usize <= budget);
    let hash = block_hash(&out[at + 4..]);
    sh.lock()
        .bundled(leader.file, members[1..].iter().map(|m| m.file).collect());
    *buf = out;
    Some(hash)
}

/// Places a received bundle led by the block `h` names: checks the whole
/// bundle against `h.hash`, then places every member as its file's one
/// block. A bundle that does not decode or check out is the leader's block
/// failing its hash (no bytes hash to the bundle's hash): the leader is
/// asked for again, and the sender sends the other members again with it.
/// The leader's verdict comes back.
pub(crate) fn place(rx: &Receiving, h: &BlockHeader, data: &[u8]) -> Option<BlockVerdict> {
    let unbundled = unbundle(rx, h, data);
    let Some(bytes) = unbundled.filter(|b| block_hash(b) == h.hash) else {
        tracing::warn!(
            "a bundle led by file {} did not check out; asking for it again",
            h.file
        );
        return rx.place(h, &[]);
    };
    let members = match bundle::decode(&bytes) {
        Ok(m) if m[0].0.file == h.file && m[0].0.len == h.len => m,
        _ => {
            tracing::warn!(
                "a bundle led by file {} is malformed; asking for it again",
                h.file
            );
            return rx.place(h, &[]);
        }
    };
    let mut leader = None;
    for (m, bytes) in members {
        let mh = BlockHeader {
            file: m.file,
            index: 0,
            offset: 0,
            len: m.len,
            hash: block_hash(bytes),
            codec: CODEC_NONE,
            wire_len: m.len,
        };
        let v = rx.place_hashed(&mh, bytes)?;
        leader.get_or_insert(v);
    }
    leader
}

/// The bundle's bytes: its 4-byte length, then the bundle, decoded with
/// the base codec.
fn unbundle(rx: &Receiving, h: &BlockHeader, data: &[u8]) -> Option<Vec<u8>> {
    let (head, body) = data.split_at_checked(4)?;
    let total = u32::from_le_bytes(head.try_into().ok()?);
    if total > wire::MAX_BLOCK_SIZE {
        return None;
    }
    let base = h.codec & !CODEC_BUNDLE;
    if base == CODEC_NONE && body.len() != total as usize {
        return None;
    }
    Some(crate::compress::decode(base, body, total, rx.sh.progress))
}
