//! `haul taste`: what each compression mode would make of a sample of the
//! user's data on a given link, before a transfer (issue 8; seed 004 has
//! its author "taste" every data set by hand first).
//!
//! [`Tasting::add`] takes sample blocks: it notes the all-zero ones (never
//! sent, P-29) and compresses the others with every codec, timing both
//! directions on one core. [`Tasting::goodput`] then applies the model of
//! [`crate::policy`]: a pipeline paced by its slowest stage (compressing on
//! the sender's cores, the link carrying the compressed bytes,
//! decompressing on the receiver's cores). `auto` takes, per block, the
//! choice that keeps the busiest stage least busy. No clock is read here: the
//! caller measures and passes each duration in.

use std::time::Duration;

use crate::compress::Codec;
use crate::zero::is_zero;

/// The codecs a tasting tries; `--compress zstd` is level 3.
pub const CODECS: [Codec; 5] = [
    Codec::Lz4,
    Codec::Zstd(1),
    Codec::Zstd(3),
    Codec::Zstd(6),
    Codec::Zstd(9),
];

/// One codec on one sample block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trial {
    pub codec: Codec,
    /// Compressed bytes.
    pub out: usize,
    /// Time to compress the block on one core.
    pub compress: Duration,
    /// Time to decompress it on one core.
    pub decompress: Duration,
}

/// One sample block: its length, and every codec's trial unless all zeros.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub len: usize,
    pub zero: bool,
    pub trials: Vec<Trial>,
}

/// The sample so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tasting {
    pub blocks: Vec<Block>,
}

/// What a tasting says of one codec over the whole sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CodecTaste {
    pub codec: Codec,
    /// Compressed over original bytes, of the blocks that are not zeros.
    pub ratio: f64,
    /// Bytes of input per second on one core.
    pub compress_bps: f64,
    /// Bytes of output per second on one core.
    pub decompress_bps: f64,
}

/// The machines at both ends and the link between them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setting {
    /// Link rate in bytes per second.
    pub link: f64,
    pub sender_cores: usize,
    pub receiver_cores: usize,
}

impl Tasting {
    /// Adds a block measured by the caller: `trials` holds one trial per
    /// codec of [`CODECS`] (ignored for a block of zeros).
    pub fn add(&mut self, data: &[u8], trials: impl FnOnce() -> Vec<Trial>) {
        let zero = is_zero(data);
        self.blocks.push(Block {
            len: data.len(),
            zero,
            trials: if zero { Vec::new() } else { trials() },
        });
    }

    /// Bytes sampled.
    pub fn bytes(&self) -> u64 {
        self.blocks.iter().map(|b| b.len as u64).sum()
    }

    /// The share of sampled bytes in all-zero blocks.
    pub fn zero_fraction(&self) -> f64 {
        let zero: u64 = self
            .blocks
            .iter()
            .filter(|b| b.zero)
            .map(|b| b.len as u64)
            .sum();
        ratio(zero as f64, self.bytes() as f64, 0.0)
    }

    /// Each codec over the blocks that are not zeros; `None` if all are.
    pub fn codec(&self, codec: Codec) -> Option<CodecTaste> {
        let (mut len, mut out, mut c, mut d) = (0f64, 0f64, 0f64, 0f64);
        for (b, t) in self.trials_of(codec) {
            len += b.len as f64;
            out += t.out as f64;
            c += t.compress.as_secs_f64();
            d += t.decompress.as_secs_f64();
        }
        (len > 0.0).then(|| CodecTaste {
            codec,
            ratio: out / len,
            compress_bps: ratio(len, c, f64::INFINITY),
            decompress_bps: ratio(len, d, f64::INFINITY),
        })
    }

    fn trials_of(&self, codec: Codec) -> impl Iterator<Item = (&Block, &Trial)> {
        self.blocks
            .iter()
            .filter_map(move |b| b.trials.iter().find(|t| t.codec == codec).map(|t| (b, t)))
    }

    /// Estimated goodput (original bytes per second) of a mode on `at`:
    /// `Codec::None` sends every block raw, another codec compresses
    /// every block, and `None` is auto, which takes per block whichever
    /// keeps the pipeline's busiest stage least busy, so it may mix raw
    /// and compressed blocks, or the best fixed mode where that is
    /// faster. All-zero blocks cost nothing in every mode.
    pub fn goodput(&self, mode: Option<Codec>, at: Setting) -> f64 {
        if mode.is_none() {
            // A greedy choice may miss a balance one fixed codec strikes;
            // auto can settle on that codec, so its aim is the better one.
            let fixed = std::iter::once(Codec::None)
                .chain(CODECS)
                .map(|c| self.pipeline(Some(c), at));
            return fixed.fold(self.pipeline(None, at), f64::max);
        }
        self.pipeline(mode, at)
    }

    fn pipeline(&self, mode: Option<Codec>, at: Setting) -> f64 {
        // Seconds of each pipeline stage over the sample.
        let (mut send, mut link, mut recv) = (0f64, 0f64, 0f64);
        let s = at.sender_cores.max(1) as f64;
        let r = at.receiver_cores.max(1) as f64;
        let stages = |b: &Block, t: Option<&Trial>| match t {
            None => (0.0, b.len as f64 / at.link, 0.0),
            Some(t) => (
                t.compress.as_secs_f64() / s,
                t.out as f64 / at.link,
                t.decompress.as_secs_f64() / r,
            ),
        };
        for b in self.blocks.iter().filter(|b| !b.zero) {
            let (cs, ls, rs) = match mode {
                Some(Codec::None) => stages(b, None),
                Some(c) => stages(b, b.trials.iter().find(|t| t.codec == c)),
                // The choice that keeps the busiest stage least busy so
                // far: a pipeline is as fast as its slowest stage, so a
                // block may go raw while the cores are behind, and
                // compressed while the link is.
                None => std::iter::once(None)
                    .chain(b.trials.iter().map(Some))
                    .map(|t| stages(b, t))
                    .min_by(|x, y| {
                        let after =
                            |v: &(f64, f64, f64)| (send + v.0).max(link + v.1).max(recv + v.2);
                        after(x).total_cmp(&after(y))
                    })
                    .expect("raw is always a choice"),
            };
            (send, link, recv) = (send + cs, link + ls, recv + rs);
        }
        ratio(self.bytes() as f64, send.max(link).max(recv), f64::INFINITY)
    }
}

fn ratio(a: f64, b: f64, if_zero: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        if_zero
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(codec: Codec, out: usize, c_ms: u64, d_ms: u64) -> Trial {
        Trial {
            codec,
            out,
            compress: Duration::from_millis(c_ms),
            decompress: Duration::from_millis(d_ms),
        }
    }

    const MIB: usize = 1 << 20;

    /// One zero block and one block lz4 halves in 2 ms (500 MB/s) and
    /// zstd:9 quarters in 20 ms.
    fn sample() -> Tasting {
        let mut t = Tasting::default();
        t.add(&vec![0u8; MIB], Vec::new);
        t.add(&vec![1u8; MIB], || {
            vec![
                trial(Codec::Lz4, MIB / 2, 2, 1),
                trial(Codec::Zstd(9), MIB / 4, 20, 2),
            ]
        });
        t
    }

    #[test]
    fn zeros_are_counted_and_cost_nothing() {
        let t = sample();
        assert_eq!(t.zero_fraction(), 0.5);
        let lz4 = t.codec(Codec::Lz4).unwrap();
        assert_eq!(lz4.ratio, 0.5);
        assert!((lz4.compress_bps - MIB as f64 / 0.002).abs() < 1.0);
        // Raw at 1 MB/s: two MiB of file in the time of one on the link.
        let slow = Setting {
            link: 1e6,
            sender_cores: 1,
            receiver_cores: 1,
        };
        let raw = t.goodput(Some(Codec::None), slow);
        assert!((raw - 2e6).abs() < 1.0, "{raw}");
    }

    #[test]
    fn the_best_mode_follows_the_link() {
        let t = sample();
        let at = |link| Setting {
            link,
            sender_cores: 1,
            receiver_cores: 1,
        };
        // A slow link: the strongest compression wins, and auto takes it.
        let slow = at(10e6);
        assert!(t.goodput(Some(Codec::Zstd(9)), slow) > t.goodput(Some(Codec::Lz4), slow));
        assert_eq!(t.goodput(None, slow), t.goodput(Some(Codec::Zstd(9)), slow));
        // A fast link: zstd:9's 20 ms per MiB is slower than sending raw,
        // and auto sends raw or lz4, never worse than either.
        let fast = at(10e9);
        let raw = t.goodput(Some(Codec::None), fast);
        assert!(t.goodput(Some(Codec::Zstd(9)), fast) < raw);
        assert!(t.goodput(None, fast) >= raw);
        // More cores lift the compressing stage.
        let many = Setting {
            sender_cores: 16,
            receiver_cores: 16,
            ..fast
        };
        assert!(t.goodput(Some(Codec::Zstd(9)), many) > t.goodput(Some(Codec::Zstd(9)), fast));
    }

    #[test]
    fn auto_mixes_raw_and_compressed_blocks_where_that_balances_the_pipeline() {
        // lz4 halves each block in 10 ms on the one core; the link carries
        // a raw block in about 10.5 ms. All raw or all lz4 takes about 21
        // or 20 ms; one of each, about 15.7 ms.
        let mut t = Tasting::default();
        for _ in 0..2 {
            t.add(&vec![1u8; MIB], || vec![trial(Codec::Lz4, MIB / 2, 10, 1)]);
        }
        let at = Setting {
            link: 100e6,
            sender_cores: 1,
            receiver_cores: 1,
        };
        let best = t
            .goodput(Some(Codec::None), at)
            .max(t.goodput(Some(Codec::Lz4), at));
        let auto = t.goodput(None, at);
        assert!(auto > 1.2 * best, "auto {auto}, best fixed {best}");
    }

    #[test]
    fn an_all_zero_sample_has_no_codec_figures_and_no_limit() {
        let mut t = Tasting::default();
        t.add(&[0u8; 4096], Vec::new);
        assert!(t.codec(Codec::Lz4).is_none());
        assert_eq!(t.zero_fraction(), 1.0);
        assert!(t
            .goodput(
                None,
                Setting {
                    link: 1e6,
                    sender_cores: 1,
                    receiver_cores: 1
                }
            )
            .is_infinite());
    }
}
