//! The header that precedes a block's bytes inside a sealed data frame (P-10).

use crate::buf::{DecodeError, Reader, Writer};

/// Encoded length of [`BlockHeader`].
pub const BLOCK_HEADER_LEN: usize = 4 + 4 + 8 + 4 + 32;

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
    /// Number of data bytes that follow the header.
    pub len: u32,
    /// BLAKE3 of the block's bytes as the sender read them (P-11).
    pub hash: [u8; 32],
}

impl BlockHeader {
    pub fn encode_into(&self, out: &mut [u8]) {
        let mut w = Writer::new();
        w.u32(self.file)
            .u32(self.index)
            .u64(self.offset)
            .u32(self.len)
            .bytes(&self.hash);
        out[..BLOCK_HEADER_LEN].copy_from_slice(&w.buf);
    }

    /// Decodes the header at the front of `b` and checks that exactly `len`
    /// data bytes follow it.
    pub fn decode(b: &[u8]) -> Result<BlockHeader, DecodeError> {
        let mut r = Reader::new(b);
        let h = BlockHeader {
            file: r.u32()?,
            index: r.u32()?,
            offset: r.u64()?,
            len: r.u32()?,
            hash: r.array()?,
        };
        if r.remaining() != h.len as usize {
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
        fn roundtrip(file: u32, index: u32, offset: u64, hash: [u8; 32], data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let h = BlockHeader { file, index, offset, len: data.len() as u32, hash };
            let mut buf = vec![0u8; BLOCK_HEADER_LEN];
            h.encode_into(&mut buf);
            buf.extend_from_slice(&data);
            prop_assert_eq!(BlockHeader::decode(&buf).unwrap(), h);
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = BlockHeader::decode(&b);
        }
    }
}
