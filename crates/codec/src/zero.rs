//! All-zero blocks: sent as a mark, never as bytes, and left as holes by a
//! receiver whose file system supports them.

/// Whether every byte of `block` is zero. Stops at the first non-zero
/// word, so random data costs almost nothing.
pub fn is_zero(block: &[u8]) -> bool {
    let mut words = block.chunks_exact(16);
    for w in &mut words {
        if u128::from_ne_bytes(w.try_into().expect("16 bytes")) != 0 {
            return false;
        }
    }
    words.remainder().iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_any_non_zero_byte() {
        for len in [0usize, 1, 15, 16, 17, 4096, 1 << 20] {
            let mut b = vec![0u8; len];
            assert!(is_zero(&b));
            for at in [0, len / 2, len.saturating_sub(1)] {
                if len > 0 {
                    b[at] = 1;
                    assert!(!is_zero(&b), "len {len} at {at}");
                    b[at] = 0;
                }
            }
        }
    }
}
