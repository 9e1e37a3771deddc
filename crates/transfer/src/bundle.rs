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
use wire::{BlockHeader, ErrorCode, CODEC_BUNDLE, CODEC_NONE};

use crate::engine::{Receiving, Shared};
use crate::send_blocks::{read_block, Read};
use connect::error::TransferError;
use connect::progress::Progress;

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
    let budget = BUNDLE_BODY_MAX as usize;
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

/// Places a received bundle led by the block `h` names: decodes the
/// bundle within its bounds, checks it against `h.hash`, and only then
/// reads its table (the hash covers the encoded bundle's every byte once
/// decoded; no hash of the encoded bytes exists to check before decoding,
/// so the decoder is bounded instead, issue 23). A bundle that does not
/// decode or fails its hash is the leader's block failing its hash (under
/// `--no-encrypt` its bytes may have been altered on the path): the leader
/// is asked for again, and the sender sends the other members again with
/// it. A bundle that passes its hash but whose table is bad, or does not
/// begin with the leader, is the sender's doing: the session ends
/// (`Protocol`). Every member is then placed as its file's one block.
/// The leader's verdict comes back.
pub(crate) fn place(rx: &Receiving, h: &BlockHeader, data: &[u8]) -> Option<BlockVerdict> {
    let bytes = match unbundle(h, data, rx.sh.progress) {
        Ok(b) if block_hash(&b) == h.hash => b,
        Ok(_) => return rx.refuse(h, "a bundle that fails its hash"),
        Err(why) => return rx.refuse(h, &why),
    };
    let members = match split(h, &bytes) {
        Ok(m) => m,
        Err(why) => return malformed(rx, h, &why),
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

/// Ends the session for a bundle that passed its hash but is malformed:
/// its bytes are the sender's, whatever the protection.
fn malformed(rx: &Receiving, h: &BlockHeader, why: &str) -> Option<BlockVerdict> {
    let e = TransferError::new(
        ErrorCode::Protocol,
        format!(
            "the bundle led by file {} passed its hash but {why}",
            h.file
        ),
    );
    rx.sh.fail(e, true);
    None
}

/// Largest bundle a receiver decodes: what a sender fills
/// ([`BUNDLE_MAX`] less the bundle's 4-byte length), whatever the block
/// size. The length is checked before anything is allocated.
pub const BUNDLE_BODY_MAX: u32 = BUNDLE_MAX - 4;

/// The bundle's bytes: its 4-byte length, then the bundle, decoded with
/// the base codec to exactly that length, which is at most
/// [`BUNDLE_BODY_MAX`]. `Err`: why not.
fn unbundle(h: &BlockHeader, data: &[u8], progress: &Progress) -> Result<Vec<u8>, String> {
    let (head, body) = data
        .split_at_checked(4)
        .ok_or("a bundle without its length")?;
    let total = u32::from_le_bytes(head.try_into().expect("4 bytes"));
    if total > BUNDLE_BODY_MAX {
        return Err(format!(
            "a bundle of {total} bytes, past the {BUNDLE_BODY_MAX}-byte bound"
        ));
    }
    let base = h.codec & !CODEC_BUNDLE;
    crate::compress::decode_exact(base, body, total, progress)
        .map_err(|e| format!("a bundle that does not decode: {e}"))
}

/// The members of a bundle that passed its hash, each with its bytes
/// (`wire::bundle::decode`: counts and lengths inside the bundle, no file
/// twice, none empty), the leader first. `Err`: what is wrong.
fn split<'a>(h: &BlockHeader, bytes: &'a [u8]) -> Result<Vec<(Member, &'a [u8])>, String> {
    let members = bundle::decode(bytes).map_err(|e| format!("has a bad table: {e}"))?;
    match members.first() {
        Some((m, _)) if m.file == h.file && m.len == h.len => Ok(members),
        _ => Err("does not begin with its leader".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codec::{Codec, Coder};
    use wire::{CODEC_LZ4, CODEC_ZSTD};

    const MIB: usize = 1 << 20;

    fn leader(codec: u8, len: u32) -> BlockHeader {
        BlockHeader {
            file: 1,
            index: 0,
            offset: 0,
            len,
            hash: [0; 32],
            codec: CODEC_BUNDLE | codec,
            wire_len: 0,
        }
    }

    /// A bundle's payload: its length, then `body` as it is.
    fn payload(total: u32, body: &[u8]) -> Vec<u8> {
        [&total.to_le_bytes()[..], body].concat()
    }

    fn compressed(codec: Codec, data: &[u8]) -> Vec<u8> {
        let mut z = Vec::new();
        Coder::new().compress(codec, data, &mut z);
        z
    }

    fn table(members: &[(u32, u32)]) -> Vec<u8> {
        let m: Vec<Member> = members
            .iter()
            .map(|&(file, len)| Member { file, len })
            .collect();
        let mut out = Vec::new();
        bundle::encode_table(&m, &mut out);
        out
    }

    #[test]
    fn bundles_past_their_bound_are_refused_before_decoding() {
        let p = Progress::default();
        let h = leader(CODEC_ZSTD, 3);
        // A length past what any sender fills, raw or compressed.
        let e = unbundle(&h, &payload(BUNDLE_BODY_MAX + 1, &[]), &p).unwrap_err();
        assert!(e.contains("past the"), "{e}");
        let e = unbundle(&leader(CODEC_NONE, 3), &payload(u32::MAX, b"x"), &p).unwrap_err();
        assert!(e.contains("past the"), "{e}");
        // A zstd bomb: 64 MiB of zeros in a few KiB, for a bundle that
        // says 1 MiB, is refused on the size its frame declares.
        let bomb = compressed(Codec::Zstd(3), &vec![0u8; 64 * MIB]);
        let e = unbundle(&h, &payload(MIB as u32, &bomb), &p).unwrap_err();
        assert!(e.contains("declares 67108864"), "{e}");
        // The bomb claimed at its own size is past the bound.
        let e = unbundle(&h, &payload(64 << 20, &bomb), &p).unwrap_err();
        assert!(e.contains("past the"), "{e}");
        // An LZ4 body too short to reach its length.
        let e = unbundle(&leader(CODEC_LZ4, 3), &payload(MIB as u32, &[0xF0; 9]), &p).unwrap_err();
        assert!(e.contains("cannot expand"), "{e}");
        // Raw bytes of another length than stated; no length at all.
        assert!(unbundle(&leader(CODEC_NONE, 3), &payload(10, b"short"), &p).is_err());
        assert!(unbundle(&h, &[1, 2], &p).is_err());
        // What a sender sends comes back.
        let mut good = table(&[(1, 3), (2, 2)]);
        good.extend_from_slice(b"abcde");
        let z = compressed(Codec::Zstd(3), &good);
        let back = unbundle(&h, &payload(good.len() as u32, &z), &p).unwrap();
        assert_eq!(back, good);
        let members = split(&h, &back).unwrap();
        assert_eq!(members[1].1, b"de");
    }

    #[test]
    fn tables_that_pass_their_frame_or_lose_their_leader_are_refused() {
        let h = leader(CODEC_NONE, 3);
        // A count past the table that follows.
        let mut b = table(&[(1, 3), (2, 2)]);
        b[..2].copy_from_slice(&4096u16.to_le_bytes());
        b.extend_from_slice(b"abcde");
        assert!(split(&h, &b).unwrap_err().contains("bad table"));
        // A member longer than the bytes behind the table.
        let mut b = table(&[(1, 3), (2, 1 << 20)]);
        b.extend_from_slice(b"abcde");
        assert!(split(&h, &b).unwrap_err().contains("bad table"));
        // A member longer than any block.
        let mut b = table(&[(1, 3), (2, wire::MAX_BLOCK_SIZE + 1)]);
        b.extend_from_slice(b"abcde");
        assert!(split(&h, &b).unwrap_err().contains("bad table"));
        // Bytes left over.
        let mut b = table(&[(1, 3), (2, 2)]);
        b.extend_from_slice(b"abcdef");
        assert!(split(&h, &b).is_err());
        // Another leader, or the leader at another length.
        let mut b = table(&[(2, 3), (1, 2)]);
        b.extend_from_slice(b"abcde");
        assert!(split(&h, &b).unwrap_err().contains("leader"));
        assert!(split(&leader(CODEC_NONE, 4), &b).is_err());
        // Nothing at all.
        assert!(split(&h, &[]).is_err());
    }
}
