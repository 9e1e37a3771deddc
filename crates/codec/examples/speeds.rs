//! Measures this machine's codec speeds per core and the cost of the auto
//! policy's sample, the numbers `codec::policy` starts from:
//! `cargo run --release -p codec --example speeds`.

use std::time::Instant;

use codec::{estimate::sample_ratio, is_zero, Codec, Coder};

fn text(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 100);
    let mut i = 1u64;
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

fn noise(len: usize) -> Vec<u8> {
    let mut x = 88172645463325252u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn main() {
    const MIB: usize = 1 << 20;
    const ROUNDS: usize = 64;
    let mut coder = Coder::new();
    let (mut z, mut back) = (Vec::new(), Vec::new());
    for (name, block) in [("text", text(MIB)), ("random", noise(MIB))] {
        for codec in [Codec::Lz4, Codec::Zstd(1), Codec::Zstd(3)] {
            let t = Instant::now();
            for _ in 0..ROUNDS {
                coder.compress(codec, &block, &mut z);
            }
            let c = (ROUNDS * MIB) as f64 / t.elapsed().as_secs_f64();
            let t = Instant::now();
            for _ in 0..ROUNDS {
                coder
                    .decompress(codec, &z, MIB, &mut back)
                    .expect("round trip");
            }
            let d = (ROUNDS * MIB) as f64 / t.elapsed().as_secs_f64();
            println!(
                "{name:6} {:8} ratio {:.3}  compress {:7.0} MB/s  decompress {:7.0} MB/s",
                codec.name(),
                z.len() as f64 / MIB as f64,
                c / 1e6,
                d / 1e6
            );
        }
        let mut scratch = Vec::new();
        let t = Instant::now();
        let mut r = 0.0;
        for _ in 0..ROUNDS * 16 {
            r += sample_ratio(&block, &mut scratch);
        }
        let per = t.elapsed().as_secs_f64() / (ROUNDS * 16) as f64;
        println!(
            "{name:6} sample ratio {:.3} in {:.1} µs per 1 MiB block",
            r / (ROUNDS * 16) as f64,
            per * 1e6
        );
        let t = Instant::now();
        let mut zeros = 0;
        for _ in 0..ROUNDS * 16 {
            zeros += is_zero(&block) as u32;
        }
        println!(
            "{name:6} zero check {:.2} µs per block ({zeros} zero)",
            t.elapsed().as_secs_f64() / (ROUNDS * 16) as f64 * 1e6
        );
    }
    let zero = vec![0u8; MIB];
    let t = Instant::now();
    for _ in 0..ROUNDS {
        assert!(is_zero(&zero));
    }
    println!(
        "zeros  zero check {:.1} µs per 1 MiB block",
        t.elapsed().as_secs_f64() / ROUNDS as f64 * 1e6
    );
}
