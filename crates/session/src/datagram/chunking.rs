//! Cutting blocks into datagram chunks, apart from `mod.rs` so `send` need not import its parent.

/// Chunk bytes a datagram of `payload` bytes (UDP payload) carries.
pub fn chunk_capacity(payload: usize, first: bool) -> usize {
    let header = if first {
        wire::datagram::FIRST_CHUNK_HEADER_LEN
    } else {
        wire::datagram::CHUNK_HEADER_LEN
    };
    payload - wire::datagram::DATAGRAM_PREFIX - header - wire::TAG_LEN
}

/// How a block of `len` bytes is cut for datagrams of `payload` bytes:
/// `(offset, len)` of each chunk. The first chunk is shorter because it
/// carries the block hash.
pub fn chunks(len: u32, payload: usize) -> impl Iterator<Item = (u32, u32)> {
    let first = chunk_capacity(payload, true) as u32;
    let rest = chunk_capacity(payload, false) as u32;
    let mut off = 0u32;
    std::iter::from_fn(move || {
        if off >= len {
            return None;
        }
        let cap = if off == 0 { first } else { rest };
        let n = cap.min(len - off);
        let c = (off, n);
        off += n;
        Some(c)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_a_block_exactly() {
        for len in [1u32, 100, 8000, 1 << 20, (1 << 20) + 17] {
            let v: Vec<_> = chunks(len, 1472).collect();
            assert_eq!(v[0].0, 0);
            assert!(v[0].1 as usize <= chunk_capacity(1472, true));
            let mut next = 0;
            for (o, n) in &v {
                assert_eq!(*o, next);
                next += n;
            }
            assert_eq!(next, len);
        }
    }
}
