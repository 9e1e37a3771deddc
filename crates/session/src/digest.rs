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
