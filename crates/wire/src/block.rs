//! The header that precedes a block's bytes inside a sealed data frame (P-10).

use crate::buf::{DecodeError, Reader, Writer};

/// Encoded length of [`BlockHeader`].
pub const BLOCK_HEADER_LEN: usize = 4 + 4 + 8 + 4 + 32 + 1 + 4;

/// How a block's bytes are encoded on the wire (P-30).
pub const CODEC_NONE: u8 = 0;
pub const CODEC_LZ4: u8 = 1;
pub const CODEC_ZSTD: u8 = 2;
/// Flag on a codec: the data is a delta program against chunks the
/// receiver holds (P-31), compressed with the codec in the low bits.
pub const CODEC_DELTA: u8 = 0x80;
/// Flag: the payload is a bundle of whole small files (P-33): a 4-byte
/// length, then the bundle (`wire::bundle`), maybe compressed. The header
/// names the bundle's first file, and its hash covers the whole bundle.
pub const CODEC_BUNDLE: u8 = 0x40;

/// Checks a block's encoding: a known codec; raw bytes exactly as long as
/// the block; compressed bytes shorter than it (a sender never sends a
/// compressed block that did not shrink).
pub fn check_coding(codec: u8, len: u32, wire_len: u32) -> Result<(), DecodeError> {
    if len > crate::MAX_BLOCK_SIZE {
        return Err(DecodeError::Invalid("block length"));
    }
    if codec & CODEC_BUNDLE != 0 {
        // Its length is the bundle's, not the block's.
        return match codec & !CODEC_BUNDLE {
            CODEC_NONE | CODEC_LZ4 | CODEC_ZSTD
                if (4..=crate::MAX_BLOCK_SIZE).contains(&wire_len) =>
            {
                Ok(())
            }
            CODEC_NONE | CODEC_LZ4 | CODEC_ZSTD => {
                Err(DecodeError::Invalid("bundle encoded length"))
            }
            tag => Err(DecodeError::UnknownTag { what: "codec", tag }),
        };
    }
    if codec & CODEC_DELTA != 0 {
        // A delta program (P-31): a 4-byte length, then the program, maybe
        // compressed; sent only when shorter than the block.
        return match codec & !CODEC_DELTA {
            CODEC_NONE | CODEC_LZ4 | CODEC_ZSTD if (4..len).contains(&wire_len) => Ok(()),
            CODEC_NONE | CODEC_LZ4 | CODEC_ZSTD => {
                Err(DecodeError::Invalid("block encoded length"))
            }
            tag => Err(DecodeError::UnknownTag { what: "codec", tag }),
        };
    }
    match codec {
        CODEC_NONE if wire_len == len => Ok(()),
        CODEC_LZ4 | CODEC_ZSTD if wire_len < len => Ok(()),
        CODEC_NONE | CODEC_LZ4 | CODEC_ZSTD => Err(DecodeError::Invalid("block encoded length")),
        tag => Err(DecodeError::UnknownTag { what: "codec", tag }),
    }
}

/// Names where a block's bytes belong, so the receiver writes them in place
/// whatever stream they arrived on and in whatever order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    /// Manifest id of the file.
    pub file: u32,
    /// Block number within the file.
    pub index: u32,
    /// Byte offset of the block in the file (index × block size).
    pub offset: u64,
    /// The block's length in the file.
    pub len: u32,
    /// BLAKE3 of the block's bytes as the sender read them (P-11).
    pub hash: [u8; 32],
    /// One of the `CODEC_*` values (P-30).
    pub codec: u8,
    /// Number of (encoded) bytes that follow the header.
    pub wire_len: u32,
}

impl BlockHeader {
    pub fn encode_into(&self, out: &mut [u8]) {
        let mut w = Writer::new();
        w.u32(self.file)
            .u32(self.index)
            .u64(self.offset)
            .u32(self.len)
            .bytes(&self.hash)
            .u8(self.codec)
            .u32(self.wire_len);
        out[..BLOCK_HEADER_LEN].copy_from_slice(&w.buf);
    }

    /// Decodes the header at the front of `b` and checks that exactly
    /// `wire_len` data bytes follow it, encoded as [`check_coding`] allows.
    pub fn decode(b: &[u8]) -> Result<BlockHeader, DecodeError> {
        let mut r = Reader::new(b);
        let h = BlockHeader {
            file: r.u32()?,
            index: r.u32()?,
            offset: r.u64()?,
            len: r.u32()?,
            hash: r.array()?,
            codec: r.u8()?,
            wire_len: r.u32()?,
        };
        check_coding(h.codec, h.len, h.wire_len)?;
        if r.remaining() != h.wire_len as usize {
            return Err(DecodeError::Invalid("block length"));
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip(file: u32, index: u32, offset: u64, hash: [u8; 32], data in proptest::collection::vec(any::<u8>(), 0..300), codec in 0u8..=2, extra in 1u32..1000) {
            let wire_len = data.len() as u32;
            let len = if codec == CODEC_NONE { wire_len } else { wire_len + extra };
            let h = BlockHeader { file, index, offset, len, hash, codec, wire_len };
            let mut buf = vec![0u8; BLOCK_HEADER_LEN];
            h.encode_into(&mut buf);
            buf.extend_from_slice(&data);
            prop_assert_eq!(BlockHeader::decode(&buf).unwrap(), h);
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = BlockHeader::decode(&b);
        }

        #[test]
        fn codings_are_checked(codec: u8, len in 0u32..=(crate::MAX_BLOCK_SIZE + 1), wire_len: u32) {
            if check_coding(codec, len, wire_len).is_ok() && codec & CODEC_BUNDLE != 0 {
                prop_assert!(codec & !CODEC_BUNDLE <= CODEC_ZSTD && len <= crate::MAX_BLOCK_SIZE);
                prop_assert!((4..=crate::MAX_BLOCK_SIZE).contains(&wire_len));
            } else if check_coding(codec, len, wire_len).is_ok() {
                prop_assert!(codec & !CODEC_DELTA <= CODEC_ZSTD && len <= crate::MAX_BLOCK_SIZE);
                let fits = if codec == CODEC_NONE { wire_len == len } else { wire_len < len };
                prop_assert!(fits);
            }
        }
    }
}
