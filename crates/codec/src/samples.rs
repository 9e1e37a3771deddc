//! Data with known character, for the policy's tests and the speed
//! example: log-like text that compresses about as real logs do, and
//! noise that does not compress at all.

/// `len` bytes of access-log lines, varied by `seed`.
pub fn log_text(len: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 100);
    let mut i = seed;
    while out.len() < len {
        i = i
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.extend_from_slice(
            format!(
                "2026-11-22T12:{:02}:{:02} host{} GET /api/v1/items/{} 200 {} ms\n",
                (i >> 8) % 60,
                (i >> 16) % 60,
                (i >> 24) % 8,
                (i >> 32) % 100_000,
                (i >> 48) % 500
            )
            .as_bytes(),
        );
    }
    out.truncate(len);
    out
}

/// `len` bytes of xorshift noise from `seed`.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
