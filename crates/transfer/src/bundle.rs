//! Bundles of whole small files (P-33): their bounds, and how a received
//! bundle is decoded and split, the same for every receiver. The sender's
//! stage that gathers them is `sender::bundle`; the receiver's that places
//! their members is `receiver::decode`.

use wire::bundle::{self, Member};
use wire::{BlockHeader, CODEC_BUNDLE};

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

/// Largest bundle a receiver decodes: what a sender fills
/// ([`BUNDLE_MAX`] less the bundle's 4-byte length), whatever the block
/// size. The length is checked before anything is allocated.
pub const BUNDLE_BODY_MAX: u32 = BUNDLE_MAX - 4;

/// The bundle's bytes: its 4-byte length, then the bundle, decoded with
/// the base codec to exactly that length, which is at most
/// [`BUNDLE_BODY_MAX`]. `Err`: why not.
pub(crate) fn unbundle(
    h: &BlockHeader,
    data: &[u8],
    progress: &Progress,
) -> Result<Vec<u8>, String> {
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
pub(crate) fn split<'a>(
    h: &BlockHeader,
    bytes: &'a [u8],
) -> Result<Vec<(Member, &'a [u8])>, String> {
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
    use wire::{CODEC_LZ4, CODEC_NONE, CODEC_ZSTD};

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
