//! The whole-file digest a sender sends under `--checksum` (P-32), which
//! a receiver computes the same way for the file it has.

use store::Held;

use session::{block_hash, FileDigest};

/// The whole-file digest of `f` as a sender would compute it.
pub(crate) fn file_digest(f: &dyn Held, size: u64, block_size: u32) -> std::io::Result<[u8; 32]> {
    let mut buf = vec![0u8; block_size as usize];
    let mut hashes = Vec::new();
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(block_size as u64) as usize;
        f.read_exact_at(&mut buf[..n], off)?;
        hashes.push(block_hash(&buf[..n]));
        off += n as u64;
    }
    Ok(FileDigest::of(size, hashes.iter()))
}
