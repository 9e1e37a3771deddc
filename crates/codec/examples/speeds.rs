//! Measures this machine's codec speeds per core and the cost of the auto
//! policy's sample, the numbers `codec::policy` starts from:
//! `cargo run --release -p codec --example speeds`.

use std::time::Instant;

use codec::samples::{log_text, noise};
use codec::{estimate::sample_ratio, is_zero, Codec, Coder};

fn main() {
    const MIB: usize = 1 << 20;
    const ROUNDS: usize = 64;
    let mut coder = Coder::new();
    let (mut z, mut back) = (Vec::new(), Vec::new());
    for (name, block) in [
        ("text", log_text(MIB, 1)),
        ("random", noise(MIB, 88172645463325252)),
    ] {
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
