//! Block hashes and whole-file digests (P-11, P-12).
//!
//! A block's hash is plain BLAKE3 of its bytes. A file's digest is a keyed
//! BLAKE3 (derive-key mode) over the file size and the block hashes in
//! order, so the receiver checks the whole file from the blocks it verified,
//! without reading the file back.

/// BLAKE3 of a block's bytes.
pub fn block_hash(data: &[u8]) -> [u8; 32] {
    *blake3::hash(data).as_bytes()
}

/// BLAKE3 of `len` zero bytes: the hash a block announced as zeros has
/// (P-29). The last length asked is remembered per thread, since nearly
/// every block has the transfer's block size.
pub fn zero_hash(len: u32) -> [u8; 32] {
    use std::cell::Cell;
    thread_local! {
        static LAST: Cell<Option<(u32, [u8; 32])>> = const { Cell::new(None) };
    }
    if let Some((l, h)) = LAST.get().filter(|(l, _)| *l == len) {
        debug_assert_eq!(l, len);
        return h;
    }
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    let mut hasher = blake3::Hasher::new();
    let mut left = len as usize;
    while left > 0 {
        let n = left.min(ZEROS.len());
        hasher.update(&ZEROS[..n]);
        left -= n;
    }
    let h = *hasher.finalize().as_bytes();
    LAST.set(Some((len, h)));
    h
}

/// Accumulates a file's digest from its block hashes in order.
pub struct FileDigest(blake3::Hasher);

impl FileDigest {
    pub fn new(size: u64) -> FileDigest {
        let mut h = blake3::Hasher::new_derive_key("haul 2026-11 file digest v1");
        h.update(&size.to_le_bytes());
        FileDigest(h)
    }

    pub fn push(&mut self, block_hash: &[u8; 32]) {
        self.0.update(block_hash);
    }

    pub fn finish(&self) -> [u8; 32] {
        *self.0.finalize().as_bytes()
    }

    /// Digest of a file given all its block hashes.
    pub fn of<'a>(size: u64, hashes: impl IntoIterator<Item = &'a [u8; 32]>) -> [u8; 32] {
        let mut d = FileDigest::new(size);
        for h in hashes {
            d.push(h);
        }
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_hash_is_the_hash_of_zeros() {
        for len in [0u32, 1, 65_535, 65_536, 1 << 20, (1 << 20) + 7, 1 << 20] {
            assert_eq!(
                zero_hash(len),
                block_hash(&vec![0u8; len as usize]),
                "len {len}"
            );
        }
    }
}
