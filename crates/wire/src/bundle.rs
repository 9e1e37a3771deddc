//! Bundles (P-33): several whole small files carried as one block, so that
//! they are compressed together, as `tar | zstd` compresses a tree, instead
//! of each on its own. The block's header names the first file (the
//! leader); its payload is a bundle: a table naming every member, leader
//! first, then the members' bytes in order. The header's hash covers the
//! whole bundle, so the table is as authentic as the bytes, and each
//! member's own hash is computed by the receiver from its bytes: the table
//! carries no hashes, which would not compress.

use crate::buf::{DecodeError, Reader};

/// Most files in one bundle: 32 KiB of table. (256, in version 5, cut
/// bundles of a tree's small files at 1.7 MB on average.)
pub const MAX_MEMBERS: usize = 4096;

/// Bytes one member takes in the table.
pub const MEMBER_LEN: usize = 4 + 4;

/// One file in a bundle: the whole file, its block 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub file: u32,
    pub len: u32,
}

/// Bytes of the table for `members` members.
pub fn table_len(members: usize) -> usize {
    2 + members * MEMBER_LEN
}

/// Appends the table for `members` to `out`; the members' bytes follow it,
/// in the same order.
pub fn encode_table(members: &[Member], out: &mut Vec<u8>) {
    assert!((1..=MAX_MEMBERS).contains(&members.len()));
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    for m in members {
        out.extend_from_slice(&m.file.to_le_bytes());
        out.extend_from_slice(&m.len.to_le_bytes());
    }
}

/// Splits a bundle into its members and their bytes. Fails unless the table
/// is well formed, names 1 to [`MAX_MEMBERS`] files with no file twice and
/// none empty (an empty file has no block), and
/// the bytes that follow are exactly as long as the members together.
pub fn decode(bundle: &[u8]) -> Result<Vec<(Member, &[u8])>, DecodeError> {
    let mut r = Reader::new(bundle);
    let count = r.u16()? as usize;
    if count == 0 || count > MAX_MEMBERS {
        return Err(DecodeError::Invalid("bundle member count"));
    }
    let mut members = Vec::with_capacity(count);
    for _ in 0..count {
        let m = Member {
            file: r.u32()?,
            len: r.u32()?,
        };
        if m.len == 0 || m.len > crate::MAX_BLOCK_SIZE {
            return Err(DecodeError::Invalid("bundle member length"));
        }
        if members.iter().any(|o: &Member| o.file == m.file) {
            return Err(DecodeError::Invalid("bundle names a file twice"));
        }
        members.push(m);
    }
    let mut out = Vec::with_capacity(count);
    for m in members {
        let bytes = r.bytes(m.len as usize)?;
        out.push((m, bytes));
    }
    r.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bundle(members: &[(u32, Vec<u8>)]) -> Vec<u8> {
        let table: Vec<Member> = members
            .iter()
            .map(|(f, b)| Member {
                file: *f,
                len: b.len() as u32,
            })
            .collect();
        let mut out = Vec::new();
        encode_table(&table, &mut out);
        for (_, b) in members {
            out.extend_from_slice(b);
        }
        out
    }

    #[test]
    fn members_come_back_in_order() {
        let b = bundle(&[
            (7, b"seven".to_vec()),
            (2, b"2".to_vec()),
            (9, b"nine!".to_vec()),
        ]);
        assert_eq!(b.len(), table_len(3) + 11);
        let got = decode(&b).unwrap();
        let files: Vec<u32> = got.iter().map(|(m, _)| m.file).collect();
        assert_eq!(files, [7, 2, 9]);
        assert_eq!(got[0].1, b"seven");
        assert_eq!(got[1].1, b"2");
        assert_eq!(got[2].1, b"nine!");
    }

    #[test]
    fn malformed_bundles_are_refused() {
        let good = bundle(&[(1, b"ab".to_vec()), (2, b"cd".to_vec())]);
        // Short, long, empty table, a file twice, an empty member.
        assert!(decode(&good[..good.len() - 1]).is_err());
        assert!(decode(&[&good[..], b"x"].concat()).is_err());
        assert!(decode(&[0, 0]).is_err());
        assert!(decode(&bundle(&[(1, b"a".to_vec()), (1, b"b".to_vec())])).is_err());
        assert!(decode(&bundle(&[(1, b"a".to_vec()), (2, vec![])])).is_err());
        let mut many = ((MAX_MEMBERS + 1) as u16).to_le_bytes().to_vec();
        many.extend(vec![0u8; (MAX_MEMBERS + 1) * MEMBER_LEN]);
        assert!(decode(&many).is_err());
    }

    proptest! {
        #[test]
        fn decoding_never_panics(b in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let _ = decode(&b);
        }

        #[test]
        fn encoded_bundles_decode(
            sizes in proptest::collection::vec(1usize..300, 1..20),
            seed in any::<u8>(),
        ) {
            let members: Vec<(u32, Vec<u8>)> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| (i as u32 * 3 + 1, vec![seed ^ i as u8; n]))
                .collect();
            let b = bundle(&members);
            let got = decode(&b).unwrap();
            prop_assert_eq!(got.len(), members.len());
            for ((m, bytes), (f, want)) in got.iter().zip(&members) {
                prop_assert_eq!(m.file, *f);
                prop_assert_eq!(*bytes, &want[..]);
            }
        }
    }
}
