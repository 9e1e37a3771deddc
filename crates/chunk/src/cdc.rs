//! Content-defined chunking. Sizes: 16 KiB minimum, 64 KiB on average,
//! 256 KiB at most: a 4 GiB file has about 65 000 chunks, whose hashes
//! (32 bytes each) are 2 MiB, 0.05% of the file.

/// Smallest chunk (but a file's last).
pub const MIN_CHUNK: u32 = 16 << 10;
/// Chunk size FastCDC aims for.
pub const AVG_CHUNK: u32 = 64 << 10;
/// Largest chunk.
pub const MAX_CHUNK: u32 = 256 << 10;

/// One chunk of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRef {
    pub offset: u64,
    pub len: u32,
    /// BLAKE3 of the chunk's bytes.
    pub hash: [u8; 32],
}

/// The chunks of `data`, in order; they cover it exactly.
pub fn chunks(data: &[u8]) -> Vec<ChunkRef> {
    fastcdc::v2020::FastCDC::new(data, MIN_CHUNK, AVG_CHUNK, MAX_CHUNK)
        .map(|c| ChunkRef {
            offset: c.offset as u64,
            len: c.length as u32,
            hash: *blake3::hash(&data[c.offset..c.offset + c.length]).as_bytes(),
        })
        .collect()
}

/// The chunks of everything `source` yields, read as it goes (a file of
/// any size is never held in memory); the same chunks as [`chunks`] gives
/// for the same bytes. `each` sees every chunk's bytes as it is cut.
pub fn chunks_of(
    source: impl std::io::Read,
    mut each: impl FnMut(&ChunkRef, &[u8]),
) -> std::io::Result<Vec<ChunkRef>> {
    let mut out = Vec::new();
    for c in fastcdc::v2020::StreamCDC::new(source, MIN_CHUNK, AVG_CHUNK, MAX_CHUNK) {
        let c = c.map_err(|e| match e {
            fastcdc::v2020::Error::IoError(e) => e,
            other => std::io::Error::other(other.to_string()),
        })?;
        let r = ChunkRef {
            offset: c.offset,
            len: c.length as u32,
            hash: *blake3::hash(&c.data).as_bytes(),
        };
        each(&r, &c.data);
        out.push(r);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_data_within_bounds() {
        let data: Vec<u8> = (0..3_000_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let c = chunks(&data);
        let mut next = 0u64;
        for (i, ch) in c.iter().enumerate() {
            assert_eq!(ch.offset, next);
            assert!(ch.len <= MAX_CHUNK);
            if i + 1 < c.len() {
                assert!(ch.len >= MIN_CHUNK);
            }
            next += ch.len as u64;
        }
        assert_eq!(next, data.len() as u64);
        assert!(chunks(&[]).is_empty());
        let streamed = chunks_of(&data[..], |_, _| {}).unwrap();
        assert_eq!(streamed, c);
    }
}
