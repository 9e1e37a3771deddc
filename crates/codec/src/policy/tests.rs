//! The auto policy's decisions on simulated links, CPUs and data.
use super::*;
use crate::compress::Coder;

use crate::samples::{log_text as text, noise};

const MIB: usize = 1 << 20;
const MBIT: f64 = 1e6 / 8.0;

#[test]
fn zero_blocks_are_never_sent_in_any_mode() {
    for mode in [
        Mode::Auto,
        Mode::Fixed(Codec::None),
        Mode::Fixed(Codec::Lz4),
    ] {
        let mut a = Auto::new(mode, 2, 2);
        assert_eq!(a.decide(&vec![0u8; MIB]).choice, Choice::Zero);
    }
}

/// Decides on `block` and, if told to compress, does so and reports
/// it as the driver does; the ratio the block went out at comes back.
fn send(a: &mut Auto, coder: &mut Coder, block: &[u8]) -> f64 {
    let d = a.decide(block);
    let Choice::Compress(c) = d.choice else {
        return 1.0;
    };
    let mut out = Vec::new();
    let t0 = std::time::Instant::now();
    coder.compress(c, block, &mut out);
    a.record_compress(c, block.len(), out.len(), d.estimate, t0.elapsed());
    (out.len() as f64 / block.len() as f64).min(1.0)
}

#[test]
fn random_data_stays_raw_and_is_sampled_less() {
    let mut a = Auto::new(Mode::Auto, 2, 2);
    a.set_link_rate(100.0 * MBIT);
    let mut coder = Coder::new();
    let block = noise(MIB, 7);
    for _ in 0..1000 {
        assert_eq!(send(&mut a, &mut coder, &block), 1.0);
    }
    // Eight in a row, then one in four.
    assert!(
        a.estimates <= 8 + 1000 / THIN as u64,
        "{} samples for 1000 blocks",
        a.estimates
    );
    // At 100 Mbit/s every sampled block is tried, in vain.
    assert_eq!((a.trials, a.trials_won), (a.estimates, 0));
    // A compressible block after the run is found within four blocks.
    let text = text(MIB, 2);
    let found = (0..THIN).any(|_| matches!(a.decide(&text).choice, Choice::Compress(_)));
    assert!(found);
}

/// Bytes drawn from 24 values at random: almost no repeats for LZ4's
/// sample to find, but under 5 bits of entropy per byte for zstd's.
fn skewed(len: usize) -> Vec<u8> {
    noise(len, 3).iter().map(|b| b % 24 + b'a').collect()
}

#[test]
fn blocks_that_look_incompressible_are_tried_where_cores_idle() {
    let block = skewed(MIB);
    let mut coder = Coder::new();
    let mut slow = Auto::new(Mode::Auto, 2, 2);
    slow.set_link_rate(100.0 * MBIT);
    let d = slow.decide(&block);
    assert_eq!(d.estimate, None, "a trial teaches no ratio factor");
    assert!(matches!(d.choice, Choice::Compress(Codec::Zstd(_))));
    // Trials keep finding them compressible: every block is tried.
    for _ in 0..40 {
        assert!(send(&mut slow, &mut coder, &block) < 0.8);
    }
    // A link faster than the cores leaves them raw.
    let mut fast = Auto::new(Mode::Auto, 2, 2);
    fast.set_link_rate(10_000.0 * MBIT);
    for _ in 0..40 {
        assert_eq!(send(&mut fast, &mut coder, &block), 1.0);
    }
}

#[test]
fn slow_links_get_zstd_and_fast_links_with_few_cores_get_raw() {
    let block = text(MIB, 1);
    let mut slow = Auto::new(Mode::Auto, 2, 2);
    slow.set_link_rate(100.0 * MBIT);
    assert!(matches!(
        slow.decide(&block).choice,
        Choice::Compress(Codec::Zstd(_))
    ));

    // At 10 Gbit/s two cores cannot compress fast enough: after a
    // first try of lz4 (whose prior is near), blocks go raw.
    let mut fast = Auto::new(Mode::Auto, 2, 2);
    fast.set_link_rate(10_000.0 * MBIT);
    let mut raw = 0;
    for _ in 0..64 {
        let d = fast.decide(&block);
        if let Choice::Compress(c) = d.choice {
            let z = MIB / 4;
            fast.record_compress(
                c,
                MIB,
                z,
                d.estimate,
                Duration::from_secs_f64(MIB as f64 / 500e6),
            );
        } else {
            raw += 1;
        }
    }
    assert!(raw >= 60, "{raw} of 64 raw");
}

#[test]
fn many_cores_make_zstd_pay_even_on_fast_links() {
    // Seed 004: parallel compression won on a 48-core box.
    let block = text(MIB, 2);
    let mut a = Auto::new(Mode::Auto, 48, 48);
    a.set_link_rate(10_000.0 * MBIT);
    assert!(matches!(
        a.decide(&block).choice,
        Choice::Compress(Codec::Zstd(_))
    ));
}

#[test]
fn measured_slow_cpus_turn_compression_off() {
    let block = text(MIB, 3);
    let mut a = Auto::new(Mode::Auto, 2, 2);
    a.set_link_rate(1000.0 * MBIT);
    assert!(matches!(a.decide(&block).choice, Choice::Compress(_)));
    // Every codec measured at 20 MB/s on a core: 2 cores cannot feed
    // a 1 Gbit/s link.
    for _ in 0..30 {
        for c in [Codec::Lz4, Codec::Zstd(1), Codec::Zstd(3)] {
            a.record_compress(
                c,
                MIB,
                MIB / 5,
                Some(0.3),
                Duration::from_secs_f64(MIB as f64 / 20e6),
            );
        }
    }
    assert_eq!(a.decide(&block).choice, Choice::Raw);
}

/// The codec most of 64 decisions on `block` chose (exploration
/// aside).
fn usual_choice(a: &mut Auto, block: &[u8]) -> Choice {
    let mut seen: Vec<(Choice, usize)> = Vec::new();
    for _ in 0..64 {
        let c = a.decide(block).choice;
        match seen.iter_mut().find(|(k, _)| *k == c) {
            Some((_, n)) => *n += 1,
            None => seen.push((c, 1)),
        }
    }
    seen.into_iter().max_by_key(|(_, n)| *n).unwrap().0
}

/// Teaches `a`, ten times over, each codec's speed on one core (bytes a
/// second, by CPU time) and output ratio on blocks sampled at `est`.
fn learn(a: &mut Auto, est: f64, codecs: &[(Codec, f64, f64)]) {
    for _ in 0..10 {
        for &(c, bps, ratio) in codecs {
            let out = (MIB as f64 * ratio) as usize;
            let t = Duration::from_secs_f64(MIB as f64 / bps);
            a.record_compress(c, MIB, out, Some(est), t);
        }
    }
}

#[test]
fn cores_busy_elsewhere_turn_zstd_into_lz4_then_raw() {
    let block = text(MIB, 4);
    let mut a = Auto::new(Mode::Auto, 2, 2);
    a.set_link_rate(1000.0 * MBIT);
    // Speeds on one core as measured on a tree of real files.
    let est = crate::estimate::sample_ratio(&block, &mut Vec::new());
    learn(
        &mut a,
        est,
        &[
            (Codec::Lz4, 450e6, 0.55),
            (Codec::Zstd(1), 220e6, 0.42),
            (Codec::Zstd(3), 140e6, 0.40),
            (Codec::Zstd(6), 50e6, 0.38),
            (Codec::Zstd(9), 30e6, 0.37),
        ],
    );
    // Two free cores: zstd:1 fits in the CPU and sends the fewest
    // bytes the link can carry in time.
    assert_eq!(
        usual_choice(&mut a, &block),
        Choice::Compress(Codec::Zstd(1))
    );
    // Most of both cores taken by other work (the receiver and an
    // emulator on one test machine): the cheaper codec goes faster.
    a.set_sender_cores(0.8);
    assert_eq!(usual_choice(&mut a, &block), Choice::Compress(Codec::Lz4));
    // A sliver of a core: even lz4 cannot keep up with the link.
    a.set_sender_cores(0.2);
    assert_eq!(usual_choice(&mut a, &block), Choice::Raw);
    // Not a measurement: ignored.
    a.set_sender_cores(0.0);
    a.set_sender_cores(f64::NAN);
    assert_eq!(usual_choice(&mut a, &block), Choice::Raw);
}

#[test]
fn the_senders_other_work_favours_the_cheaper_codec_but_never_raw() {
    let block = text(MIB, 5);
    let est = crate::estimate::sample_ratio(&block, &mut Vec::new());
    let mut a = Auto::new(Mode::Auto, 2, 2);
    a.set_link_rate(1000.0 * MBIT);
    a.set_sender_cores(0.8);
    // A tree of small files, one core's speeds by CPU time: zstd fast
    // enough to look free beside the link.
    learn(
        &mut a,
        est,
        &[
            (Codec::Lz4, 1000e6, 0.58),
            (Codec::Zstd(1), 600e6, 0.42),
            (Codec::Zstd(3), 420e6, 0.40),
            (Codec::Zstd(6), 250e6, 0.38),
            (Codec::Zstd(9), 200e6, 0.37),
        ],
    );
    let zstd = usual_choice(&mut a, &block);
    assert!(matches!(zstd, Choice::Compress(Codec::Zstd(_))), "{zstd:?}");
    // Reading, hashing, sealing and sending cost 3 ns a byte (measured
    // on such a tree): the sender is the bottleneck, and lz4 leaves
    // it most room.
    a.set_sender_overhead(3e-9);
    assert_eq!(usual_choice(&mut a, &block), Choice::Compress(Codec::Lz4));
    // Even where that work alone outlasts the link, compressing still
    // beats raw, which costs that work too and sends every byte.
    a.set_sender_overhead(30e-9);
    assert_eq!(usual_choice(&mut a, &block), Choice::Compress(Codec::Lz4));
    // Not a measurement: ignored.
    a.set_sender_overhead(-1.0);
    a.set_sender_overhead(f64::INFINITY);
    assert_eq!(usual_choice(&mut a, &block), Choice::Compress(Codec::Lz4));
}

#[test]
fn a_link_faster_than_any_codec_is_not_sampled() {
    // 40 Gbit/s and two cores at the priors' speeds: compressing
    // cannot pay even for a block that vanished, so 31 blocks in 32
    // are sent raw without a sample.
    // Random data at 40 Gbit/s: hopeless whatever the codecs measure.
    let block = noise(MIB, 8);
    let mut a = Auto::new(Mode::Auto, 2, 2);
    a.set_link_rate(40_000.0 * MBIT);
    for _ in 0..320 {
        assert_eq!(a.decide(&block).choice, Choice::Raw);
    }
    assert_eq!(a.estimates, 10);
    let block = text(MIB, 8);
    // At 1 Gbit/s every block is judged again.
    a.set_link_rate(1_000.0 * MBIT);
    assert!(matches!(a.decide(&block).choice, Choice::Compress(_)));
    assert_eq!(a.estimates, 11);
}

#[test]
fn zstd_levels_keep_their_order_whatever_blocks_they_met() {
    // zstd:6 meets a block that barely compresses, zstd:3 one that
    // compresses well: learned apart, zstd:6 would look worse.
    let mut a = Auto::new(Mode::Auto, 2, 2);
    let t = Duration::from_millis(5);
    a.record_compress(Codec::Zstd(3), MIB, MIB / 4, Some(0.5), t);
    a.record_compress(Codec::Zstd(6), MIB, MIB * 9 / 10, Some(0.95), t);
    a.record_compress(Codec::Zstd(9), MIB, MIB * 9 / 10, Some(0.96), t * 2);
    let f = |c| a.stats.iter().find(|s| s.codec == c).unwrap().factor;
    assert!(f(Codec::Zstd(9)) < f(Codec::Zstd(6)));
    assert!(f(Codec::Zstd(6)) < f(Codec::Zstd(3)));
    assert!(f(Codec::Zstd(3)) < f(Codec::Zstd(1)));
    // At 100 Mbit/s with the cores to spare, the strongest level wins
    // (the others measured too, so none is tried for being new).
    a.record_compress(Codec::Zstd(1), MIB, MIB * 27 / 100, Some(0.5), t / 2);
    a.record_compress(Codec::Lz4, MIB, MIB / 2, Some(0.5), t / 4);
    a.set_link_rate(100.0 * MBIT);
    let block = text(MIB, 3);
    let mut chosen = std::collections::HashMap::new();
    for _ in 0..64 {
        if let Choice::Compress(c) = a.decide(&block).choice {
            *chosen.entry(c).or_insert(0) += 1;
        }
    }
    let top = chosen.iter().max_by_key(|(_, n)| **n).map(|(c, _)| *c);
    assert_eq!(top, Some(Codec::Zstd(9)), "{chosen:?}");
}

#[test]
fn a_slow_receiver_turns_compression_off() {
    // 1 Gbit/s and a text block: worth compressing, until the receiver
    // reports that it decompresses at 10 MB/s on one core.
    let block = text(MIB, 7);
    let mut a = Auto::new(Mode::Auto, 2, 2);
    a.set_link_rate(125e6);
    assert!(matches!(a.decide(&block).choice, Choice::Compress(_)));
    a.set_receiver_cores(1);
    for c in [Codec::Lz4, Codec::Zstd(3)] {
        a.record_decompress(c, MIB, Duration::from_millis(100));
    }
    assert_eq!(a.decide(&block).choice, Choice::Raw);
}

#[test]
fn fixed_modes_are_obeyed() {
    let block = noise(MIB, 4);
    let mut a = Auto::new(Mode::Fixed(Codec::Zstd(9)), 2, 2);
    assert_eq!(a.decide(&block).choice, Choice::Compress(Codec::Zstd(9)));
    let mut n = Auto::new(Mode::parse("none").unwrap(), 2, 2);
    assert_eq!(n.decide(&text(MIB, 5)).choice, Choice::Raw);
    assert_eq!(Mode::parse("auto"), Some(Mode::Auto));
    assert_eq!(Mode::parse("zstd:5"), Some(Mode::Fixed(Codec::Zstd(5))));
    assert_eq!(Mode::parse("brotli"), None);
}

/// The pipeline model with true costs: how long a data set takes with
/// a given way of choosing, on a simulated link and CPUs.
struct World {
    link: f64,
    cores: f64,
    /// Of those, the cores the sender can have (others' work takes
    /// the rest); the receiver has all of them.
    free: f64,
    /// CPU seconds the sender spends per byte besides compressing.
    overhead: f64,
    /// True bytes per second per core: (compress, decompress).
    speed: Speeds,
}

impl World {
    fn block_time(
        &self,
        block: &[u8],
        choice: Choice,
        size: impl FnOnce(Codec) -> usize,
    ) -> (f64, usize, f64) {
        let l = block.len() as f64;
        match choice {
            Choice::Zero => (0.0, 0, 0.0),
            Choice::Raw | Choice::Compress(Codec::None) => (
                (l / self.link).max(l * self.overhead / self.free),
                block.len(),
                0.0,
            ),
            Choice::Compress(c) => {
                let z = size(c);
                let (cs, ds) = (self.speed)(c);
                let t = (l * (1.0 / cs + self.overhead) / self.free)
                    .max(z as f64 / self.link)
                    .max(l / (ds * self.cores));
                (t, z, l / cs)
            }
        }
    }

    /// Total time of `blocks` (sent [`ROUNDS`] times over, a longer
    /// transfer) under `mode`, feeding the policy the times it would
    /// have measured.
    fn run(&self, mode: Mode, blocks: &[Vec<u8>], sizes: &mut Sizes) -> f64 {
        let mut a = Auto::new(mode, self.cores as usize, self.cores as usize);
        a.set_link_rate(self.link);
        a.set_sender_cores(self.free);
        a.set_sender_overhead(self.overhead);
        let mut total = 0.0;
        for (i, b) in std::iter::repeat_n(blocks, ROUNDS).flatten().enumerate() {
            let i = i % blocks.len();
            let d = a.decide(b);
            let (t, out, cpu) = self.block_time(b, d.choice, |c| sizes.of(i, b, c));
            if let Choice::Compress(c) = d.choice {
                a.record_compress(c, b.len(), out, d.estimate, Duration::from_secs_f64(cpu));
                let ds = (self.speed)(c).1;
                a.record_decompress(c, b.len(), Duration::from_secs_f64(b.len() as f64 / ds));
            }
            total += t;
        }
        total
    }
}

/// Rounds over the 24 distinct blocks: 384 MiB, a short transfer. The
/// first try of each codec costs up to one block; longer transfers
/// amortize it further.
const ROUNDS: usize = 16;

/// Compressed sizes of a data set's blocks, each computed once.
#[derive(Default)]
struct Sizes {
    known: std::collections::HashMap<(usize, Codec), usize>,
    coder: Coder,
}

impl Sizes {
    fn of(&mut self, i: usize, block: &[u8], c: Codec) -> usize {
        if let Some(&n) = self.known.get(&(i, c)) {
            return n;
        }
        let mut z = Vec::new();
        self.coder.compress(c, block, &mut z);
        self.known.insert((i, c), z.len());
        z.len()
    }
}

/// True bytes per second per core of each codec: (compress, decompress).
type Speeds = fn(Codec) -> (f64, f64);

fn fast_cpu(c: Codec) -> (f64, f64) {
    match c {
        Codec::Lz4 => (700e6, 3000e6),
        Codec::Zstd(1) => (400e6, 1000e6),
        Codec::Zstd(3) => (200e6, 1000e6),
        Codec::Zstd(6) => (70e6, 1000e6),
        Codec::Zstd(9) => (49e6, 1000e6),
        _ => (f64::INFINITY, f64::INFINITY),
    }
}

fn slow_cpu(c: Codec) -> (f64, f64) {
    let (a, b) = fast_cpu(c);
    (a / 8.0, b / 8.0)
}

/// On every simulated cell (link rate × CPU × data), auto is at most
/// 3% slower than the best fixed choice of none, lz4 and zstd.
#[test]
fn auto_is_within_three_percent_of_the_best_fixed_choice() {
    let blocks = 24;
    let data: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("text", (0..blocks).map(|i| text(MIB, i as u64)).collect()),
        (
            "random",
            (0..blocks).map(|i| noise(MIB, i as u64 + 1)).collect(),
        ),
        ("zeros", (0..blocks).map(|_| vec![0u8; MIB]).collect()),
        (
            "mixed",
            (0..blocks)
                .map(|i| match i % 3 {
                    0 => text(MIB, i as u64),
                    1 => noise(MIB, i as u64 + 1),
                    _ => vec![0u8; MIB],
                })
                .collect(),
        ),
    ];
    let fixed = [
        Mode::Fixed(Codec::None),
        Mode::Fixed(Codec::Lz4),
        Mode::Fixed(Codec::Zstd(1)),
        Mode::Fixed(Codec::Zstd(3)),
        Mode::Fixed(Codec::Zstd(6)),
        Mode::Fixed(Codec::Zstd(9)),
    ];
    let mut sizes: Vec<Sizes> = data.iter().map(|_| Sizes::default()).collect();
    let (fast, slow): (Speeds, Speeds) = (fast_cpu, slow_cpu);
    for link_mbit in [100.0, 1000.0, 10_000.0] {
        for (cpu_name, speed, cores, free, overhead) in [
            ("fast x2", fast, 2.0, 2.0, 0.0),
            ("slow x2", slow, 2.0, 2.0, 0.0),
            ("fast x48", fast, 48.0, 48.0, 0.0),
            ("busy x2", fast, 2.0, 0.7, 0.0),
            // Reading, hashing, sealing at 3 ns a byte, as on a tree.
            ("busy+io", fast, 2.0, 0.7, 3e-9),
            ("fast+io", fast, 2.0, 2.0, 1e-9),
        ] {
            let w = World {
                link: link_mbit * MBIT,
                cores,
                free,
                overhead,
                speed,
            };
            for ((name, blocks), sizes) in data.iter().zip(sizes.iter_mut()) {
                let best = fixed
                    .iter()
                    .map(|m| w.run(*m, blocks, sizes))
                    .fold(f64::INFINITY, f64::min);
                let auto = w.run(Mode::Auto, blocks, sizes);
                println!(
                    "{name:7} {link_mbit:6} Mbit/s {cpu_name:9}: auto/best fixed {:.3}",
                    auto / best.max(1e-12)
                );
                assert!(
                    auto <= best * 1.03 + 1e-9,
                    "{name} at {link_mbit} Mbit/s, {cpu_name}: auto {auto:.4} s, best fixed {best:.4} s"
                );
            }
        }
    }
}
