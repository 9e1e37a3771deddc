//! A cheap guess of how well a block compresses: LZ4 over a few samples
//! spread through it, three per MiB. On a 1 MiB block this reads 12 KiB, about 1% of what
//! compressing the whole block costs. Samples lack the context a whole
//! block has, so the guess errs on the side of "compresses less"; the
//! policy learns the real ratio of each codec against it.

/// Bytes in one sample.
pub const SAMPLE: usize = 4096;
/// Samples per MiB of block (at least this many in all): a 1 MiB block's
/// start, middle and end.
pub const SAMPLES: usize = 3;
/// Most samples in one block. A bundle of small files (4 MiB of anything
/// from text to gzip) needs more than three to be judged: with three, its
/// compressed members made whole bundles of text look incompressible.
pub const MAX_SAMPLES: usize = 24;

/// Compressed size over original size of the samples, in `0.0..=~1.01`
/// (incompressible data grows a little).
pub fn sample_ratio(block: &[u8], scratch: &mut Vec<u8>) -> f64 {
    let samples = (SAMPLES * block.len().div_ceil(1 << 20)).clamp(SAMPLES, MAX_SAMPLES);
    if block.len() <= SAMPLE * samples {
        return ratio_of(block, scratch);
    }
    let step = (block.len() - SAMPLE) / (samples - 1);
    let (mut inp, mut out) = (0usize, 0usize);
    for i in 0..samples {
        let s = &block[i * step..i * step + SAMPLE];
        inp += s.len();
        out += compressed_len(s, scratch);
    }
    out as f64 / inp.max(1) as f64
}

fn ratio_of(b: &[u8], scratch: &mut Vec<u8>) -> f64 {
    if b.is_empty() {
        return 1.0;
    }
    compressed_len(b, scratch) as f64 / b.len() as f64
}

fn compressed_len(b: &[u8], scratch: &mut Vec<u8>) -> usize {
    scratch.resize(lz4_flex::block::get_maximum_output_size(b.len()), 0);
    lz4_flex::block::compress_into(b, scratch).expect("scratch has the maximum size")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_text_from_noise() {
        let mut scratch = Vec::new();
        let mut x = 88172645463325252u64;
        let noise: Vec<u8> = (0..1 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(sample_ratio(&noise, &mut scratch) > 0.99);
        let text: Vec<u8> = (0..40_000)
            .flat_map(|i| format!("INFO request {i} served in {} ms\n", i % 97).into_bytes())
            .collect();
        assert!(sample_ratio(&text, &mut scratch) < 0.5);
        assert!(sample_ratio(&[0u8; 100], &mut scratch) < 0.3);
        assert_eq!(sample_ratio(&[], &mut scratch), 1.0);
    }
}
