//! Delta programs (P-31): how the receiver rebuilds one block from bytes it
//! already holds (its basis for the file, its chunk cache) and literal
//! bytes carried in the program. A program is a sequence of pieces whose
//! lengths add up to the block's length; the block's hash still decides
//! whether the result is kept.

use crate::buf::{DecodeError, Reader};

const OP_LITERAL: u8 = 0;
const OP_BASIS: u8 = 1;
const OP_CACHE: u8 = 2;

/// One piece of a block, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Bytes carried in the program.
    Literal(&'a [u8]),
    /// `len` bytes of the receiver's basis for this file, at `from`.
    Basis { from: u64, len: u32 },
    /// `len` bytes of the cached chunk `hash`, starting `skip` bytes in.
    Cache { hash: [u8; 16], skip: u32, len: u32 },
}

impl Piece<'_> {
    pub fn len(&self) -> u32 {
        match self {
            Piece::Literal(b) => b.len() as u32,
            Piece::Basis { len, .. } | Piece::Cache { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Appends the encoding of `pieces` to `out`.
pub fn encode<'a>(pieces: impl IntoIterator<Item = Piece<'a>>, out: &mut Vec<u8>) {
    for p in pieces {
        match p {
            Piece::Literal(b) => {
                out.push(OP_LITERAL);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
            Piece::Basis { from, len } => {
                out.push(OP_BASIS);
                out.extend_from_slice(&from.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
            }
            Piece::Cache { hash, skip, len } => {
                out.push(OP_CACHE);
                out.extend_from_slice(&hash);
                out.extend_from_slice(&skip.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
            }
        }
    }
}

/// Decodes a program for a block of `block_len` bytes: every piece is
/// non-empty and their lengths add up to exactly `block_len`.
pub fn decode(b: &[u8], block_len: u32) -> Result<Vec<Piece<'_>>, DecodeError> {
    let mut r = Reader::new(b);
    let mut pieces = Vec::new();
    let mut total = 0u64;
    while r.remaining() > 0 {
        let piece = match r.u8()? {
            OP_LITERAL => {
                let n = r.u32()? as usize;
                if n > r.remaining() {
                    return Err(DecodeError::Invalid("literal length"));
                }
                Piece::Literal(r.bytes(n)?)
            }
            OP_BASIS => Piece::Basis {
                from: r.u64()?,
                len: r.u32()?,
            },
            OP_CACHE => Piece::Cache {
                hash: r.array()?,
                skip: r.u32()?,
                len: r.u32()?,
            },
            tag => {
                return Err(DecodeError::UnknownTag {
                    what: "delta piece",
                    tag,
                })
            }
        };
        if piece.is_empty() {
            return Err(DecodeError::Invalid("empty delta piece"));
        }
        total += piece.len() as u64;
        if total > block_len as u64 {
            return Err(DecodeError::Invalid("delta program longer than its block"));
        }
        pieces.push(piece);
    }
    if total != block_len as u64 {
        return Err(DecodeError::Invalid("delta program shorter than its block"));
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Owned {
        Literal(Vec<u8>),
        Basis(u64, u32),
        Cache([u8; 16], u32, u32),
    }

    fn arb_piece() -> impl Strategy<Value = Owned> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 1..50).prop_map(Owned::Literal),
            (any::<u64>(), 1u32..100_000).prop_map(|(f, l)| Owned::Basis(f, l)),
            (any::<[u8; 16]>(), any::<u32>(), 1u32..100_000)
                .prop_map(|(h, s, l)| Owned::Cache(h, s, l)),
        ]
    }

    fn borrow(o: &Owned) -> Piece<'_> {
        match o {
            Owned::Literal(b) => Piece::Literal(b),
            Owned::Basis(from, len) => Piece::Basis {
                from: *from,
                len: *len,
            },
            Owned::Cache(hash, skip, len) => Piece::Cache {
                hash: *hash,
                skip: *skip,
                len: *len,
            },
        }
    }

    proptest! {
        #[test]
        fn roundtrip(owned in proptest::collection::vec(arb_piece(), 0..20)) {
            let pieces: Vec<Piece> = owned.iter().map(borrow).collect();
            let total: u32 = pieces.iter().map(|p| p.len()).sum();
            let mut b = Vec::new();
            encode(pieces.iter().copied(), &mut b);
            prop_assert_eq!(decode(&b, total).unwrap(), pieces);
            // Any other block length is refused.
            prop_assert!(decode(&b, total + 1).is_err());
            if total > 0 {
                prop_assert!(decode(&b, total - 1).is_err());
            }
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300), len: u32) {
            let _ = decode(&b, len);
        }
    }
}
