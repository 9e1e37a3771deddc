//! `--compress auto`: per block, compress only where that raises goodput,
//! and with the codec that raises it most (issue 6).
//!
//! The model is a pipeline whose slowest stage sets the pace. Sending a
//! block of `L` bytes raw takes `L / link`. Compressing it with codec `c`
//! takes the longest of: the sender's work with compressing `L × (1 /
//! compress_c + overhead) / sender_cores` (`overhead`: its reading,
//! hashing, sealing and sending, per byte), sending `L × ratio_c / link`,
//! and decompressing on the receiver's cores `L / (decompress_c ×
//! receiver_cores)`. The policy picks the fastest codec, and compresses
//! only if it beats raw by at least [`MARGIN`] leaving the overhead out
//! (raw costs that too, and more of it: every byte is sealed and sent, and
//! where the receiver shares the host, received), so that a near tie never
//! costs.
//!
//! What it needs, it measures: `ratio_c` is the block's sampled LZ4 ratio
//! ([`crate::estimate`]) times a factor learned for each codec from the
//! blocks it compressed; the codec speeds are learned from their timings
//! (priors until then); the link rate is what the transfer achieves now.
//! A few compressible blocks in each [`EXPLORE`] go to the codec measured
//! least, if it is not far off the best, so every estimate stays current.
//! Long runs of incompressible blocks are sampled less often (one in
//! [`THIN`]), so random data pays almost nothing. All-zero blocks are
//! never sent, in every mode.

use std::time::Duration;

use crate::compress::Codec;
use crate::estimate::sample_ratio;
use crate::zero::is_zero;

/// What `--compress` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Auto,
    /// Every block (but all-zero ones) with this codec; `Codec::None`
    /// sends every block raw.
    Fixed(Codec),
}

impl Mode {
    /// Parses `auto`, `none`, `lz4`, `zstd` or `zstd:LEVEL`.
    pub fn parse(s: &str) -> Option<Mode> {
        if s == "auto" {
            return Some(Mode::Auto);
        }
        Codec::parse(s).map(Mode::Fixed)
    }
}

/// What to do with one block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Choice {
    /// All zeros: send a mark, not the bytes.
    Zero,
    /// Send the bytes as they are.
    Raw,
    /// Compress with this codec.
    Compress(Codec),
}

/// A decision and the sampled ratio it was based on (for
/// [`Auto::record_compress`]); `None` when no sample was taken.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub choice: Choice,
    pub estimate: Option<f64>,
}

/// Compressing must beat sending raw by this fraction.
pub const MARGIN: f64 = 0.03;
/// Above this sampled ratio a block counts as incompressible.
pub const INCOMPRESSIBLE: f64 = 0.95;
/// Incompressible blocks in a row before sampling thins out: mixed data
/// (a tar of text and media) must not lose its compressible blocks.
pub const STEADY_RUN: u32 = 8;
/// Past [`STEADY_RUN`], one incompressible block in this many is sampled.
/// A sample costs about 1% of compressing the block; thinning further
/// (once one in 64) sent 81 MB of a /usr/share tree raw, compressible
/// bundles among them, after runs of gzipped man pages.
pub const THIN: u32 = 4;
/// One compressible block in this many may explore another codec.
pub const EXPLORE: u64 = 32;
/// A block that looks incompressible is still tried with zstd when the
/// sender's cores compress it in at most this share of the time the link
/// takes to carry it: LZ4's sample sees repeats, not the skewed bytes that
/// zstd's entropy coder shrinks, and on such a link the cores are idle.
pub const TRIAL_SHARE: f64 = 0.25;
/// How much worse (predicted) an explored codec may be than the best.
const EXPLORE_SLACK: f64 = 1.3;
/// Weight of a new measurement in the running averages.
const ALPHA: f64 = 0.2;
/// The link rate assumed until one is known: 1 Gbit/s, in bytes/s.
pub const DEFAULT_LINK: f64 = 125e6;

/// What the policy knows of one codec.
#[derive(Debug, Clone)]
struct Stats {
    codec: Codec,
    /// The whole block's ratio over its sampled estimate.
    factor: f64,
    /// Bytes of input per second on one core.
    compress_bps: f64,
    /// Bytes of output per second on one core.
    decompress_bps: f64,
    measured: u32,
}

/// Priors: speeds of one core of a current x86 server (a 2-core AMD EPYC
/// VM measured 840/510/435 MB/s compressing log text with lz4/zstd:1/
/// zstd:3, `cargo run --release -p codec --example speeds`; real data is
/// slower), factors typical of text. The first measurement replaces them.
fn priors() -> Vec<Stats> {
    let s = |codec, factor, c, d| Stats {
        codec,
        factor,
        compress_bps: c,
        decompress_bps: d,
        measured: 0,
    };
    vec![
        s(Codec::Lz4, 0.9, 600e6, 2500e6),
        s(
            Codec::Zstd(1),
            ZSTD_PRIOR * zstd_level_factor(1),
            400e6,
            1200e6,
        ),
        s(Codec::Zstd(3), ZSTD_PRIOR, 250e6, 1200e6),
        // For slow links with cores to spare: on a real tree (/usr/share in
        // 1 MiB pieces) zstd:6 came within 1% of `tar | zstd -3` as one
        // stream, where zstd:3 was 5% behind.
        s(
            Codec::Zstd(6),
            ZSTD_PRIOR * zstd_level_factor(6),
            90e6,
            1200e6,
        ),
        // Slower links still: 2.4% less than zstd:6 on that tree (4 MiB
        // pieces), at 0.7 of its speed.
        s(
            Codec::Zstd(9),
            ZSTD_PRIOR * zstd_level_factor(9),
            63e6,
            1200e6,
        ),
    ]
}

/// A zstd level's output size relative to zstd:3's on the same data, as
/// measured on a tar of /usr/share cut into 1 MiB pieces (levels 1 … 6)
/// and 4 MiB pieces (level 9: 0.952 and 0.929 of zstd:3 for levels 6 and
/// 9 there).
fn zstd_level_factor(level: i32) -> f64 {
    match level {
        ..=1 => 1.06,
        2..=3 => 1.0,
        4..=6 => 0.959,
        _ => 0.935,
    }
}

/// zstd:3's prior factor, which the zstd levels share (see
/// [`zstd_level_factor`]).
const ZSTD_PRIOR: f64 = 0.55;

/// A running average; the first measurement replaces the prior.
fn ewma(old: f64, new: f64, measured: u32) -> f64 {
    if measured == 0 {
        new
    } else {
        old + ALPHA * (new - old)
    }
}

/// The auto policy of one transfer (one per sending side).
#[derive(Debug, Clone)]
pub struct Auto {
    mode: Mode,
    stats: Vec<Stats>,
    /// The factor the zstd levels share, as zstd:3's (see
    /// [`Auto::record_compress`]), and how often it was measured.
    zstd_factor: f64,
    zstd_measured: u32,
    link_bps: f64,
    sender_cores: f64,
    /// CPU seconds the sender spends on an input byte besides compressing
    /// it (see [`Auto::set_sender_overhead`]).
    overhead: f64,
    receiver_cores: f64,
    incompressible_run: u32,
    skip_left: u32,
    /// Trials that shrank their block below [`INCOMPRESSIBLE`], and all
    /// trials (see [`TRIAL_SHARE`]).
    pub trials_won: u64,
    pub trials: u64,
    compressible_seen: u64,
    /// Blocks met while no codec could win (see `decide`).
    hopeless_seen: u64,
    /// Samples taken so far (each costs [`crate::estimate::SAMPLES`] small
    /// LZ4 runs).
    pub estimates: u64,
    scratch: Vec<u8>,
}

impl Auto {
    /// `sender_cores` and `receiver_cores`: cores each side gives to
    /// compression.
    pub fn new(mode: Mode, sender_cores: usize, receiver_cores: usize) -> Auto {
        Auto {
            mode,
            stats: priors(),
            zstd_factor: ZSTD_PRIOR,
            zstd_measured: 0,
            link_bps: DEFAULT_LINK,
            sender_cores: sender_cores.max(1) as f64,
            overhead: 0.0,
            receiver_cores: receiver_cores.max(1) as f64,
            incompressible_run: 0,
            skip_left: 0,
            trials_won: 0,
            trials: 0,
            compressible_seen: 0,
            hopeless_seen: 0,
            estimates: 0,
            scratch: Vec::new(),
        }
    }

    /// The rate the path carries now, bytes per second (the transfer's
    /// recent goodput, or the UDP channel's rate). Ignored if not positive.
    pub fn set_link_rate(&mut self, bytes_per_sec: f64) {
        if bytes_per_sec > 0.0 && bytes_per_sec.is_finite() {
            self.link_bps = bytes_per_sec;
        }
    }

    /// A block of `len` bytes took `elapsed` to compress into `out_len`
    /// bytes; its sampled estimate was `estimate`.
    pub fn record_compress(
        &mut self,
        codec: Codec,
        len: usize,
        out_len: usize,
        estimate: Option<f64>,
        elapsed: Duration,
    ) {
        let Some(i) = self.stats.iter().position(|s| s.codec == codec) else {
            return;
        };
        // A trial on a block the sample called incompressible: one that
        // proved otherwise has every block sampled again. Trials teach
        // nothing else: zstd runs through random data ten times faster
        // than through text, and the ratio says nothing of the factor.
        if estimate.is_none() && self.mode == Mode::Auto {
            self.trials += 1;
            if out_len as f64 <= len as f64 * INCOMPRESSIBLE {
                self.trials_won += 1;
                self.incompressible_run = 0;
                self.skip_left = 0;
            }
            return;
        }
        if let Some(est) = estimate.filter(|e| *e > 0.01) {
            let actual = (out_len as f64 / len.max(1) as f64 / est).clamp(0.05, 2.0);
            match codec {
                // The zstd levels learn one factor between them: each level
                // is tried on other blocks, and a tree mixes blocks that
                // compress 2:1 with others that do not at all, so factors
                // learned apart put the levels in any order.
                Codec::Zstd(level) => {
                    let shared = actual / zstd_level_factor(level);
                    self.zstd_factor = ewma(self.zstd_factor, shared, self.zstd_measured);
                    self.zstd_measured += 1;
                    for o in &mut self.stats {
                        if let Codec::Zstd(l) = o.codec {
                            o.factor = self.zstd_factor * zstd_level_factor(l);
                        }
                    }
                }
                _ => {
                    let s = &mut self.stats[i];
                    s.factor = ewma(s.factor, actual, s.measured);
                }
            }
        }
        let s = &mut self.stats[i];
        let secs = elapsed.as_secs_f64();
        let mut scale = None;
        if secs > 0.0 && len > 0 {
            let bps = len as f64 / secs;
            if s.measured == 0 {
                scale = Some(bps / s.compress_bps);
            }
            s.compress_bps = ewma(s.compress_bps, bps, s.measured);
        }
        s.measured += 1;
        // A CPU slower or faster than the priors is so for every codec:
        // scale the priors of the codecs not measured yet alike.
        if let Some(k) = scale {
            for o in self.stats.iter_mut().filter(|o| o.measured == 0) {
                o.compress_bps *= k;
            }
        }
    }

    /// The receiver took `elapsed` to decompress `len` bytes of output
    /// (reported back by the receiver).
    /// zstd decodes at about the same speed whatever the level, so a zstd
    /// measurement counts for every zstd level the policy weighs.
    pub fn record_decompress(&mut self, codec: Codec, len: usize, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        if secs <= 0.0 || len == 0 {
            return;
        }
        let family = std::mem::discriminant(&codec);
        for s in self
            .stats
            .iter_mut()
            .filter(|s| std::mem::discriminant(&s.codec) == family)
        {
            s.decompress_bps = ewma(s.decompress_bps, len as f64 / secs, s.measured.min(1));
        }
    }

    /// The cores the sender's compression can have now (see the driver's
    /// `cpu` module): fewer than it has where other work takes them, and
    /// then a codec that needs more CPU than is left slows the transfer.
    /// Ignored if not positive.
    pub fn set_sender_cores(&mut self, cores: f64) {
        if cores > 0.0 && cores.is_finite() {
            self.sender_cores = cores;
        }
    }

    /// CPU seconds the sender spends per input byte besides compressing:
    /// reading, hashing, sealing and sending it (measured by the driver).
    /// Where the cores are few or busy, this work is what lz4's lighter
    /// touch leaves room for: on a tree of small files it cost three
    /// times what lz4 did. Ignored if negative or not finite.
    pub fn set_sender_overhead(&mut self, secs_per_byte: f64) {
        if secs_per_byte >= 0.0 && secs_per_byte.is_finite() {
            self.overhead = secs_per_byte;
        }
    }

    /// The cores the receiver decompresses on, once it has said.
    pub fn set_receiver_cores(&mut self, cores: usize) {
        self.receiver_cores = cores.max(1) as f64;
    }

    /// Seconds one block of `len` bytes holds the pipeline, raw.
    pub fn raw_time(&self, len: usize) -> f64 {
        len as f64 / self.link_bps
    }

    /// Seconds one block of `len` bytes with sampled ratio `estimate`
    /// holds the pipeline when compressed with `codec`.
    pub fn predicted_time(&self, codec: Codec, len: usize, estimate: f64) -> Option<f64> {
        self.time_with(codec, len, estimate, self.overhead)
    }

    /// [`Auto::predicted_time`] with the sender's other work per byte
    /// taken to be `overhead`.
    fn time_with(&self, codec: Codec, len: usize, estimate: f64, overhead: f64) -> Option<f64> {
        let s = self.stats.iter().find(|s| s.codec == codec)?;
        let l = len as f64;
        let ratio = (estimate * s.factor).clamp(0.0, 1.05);
        Some(
            (l * (1.0 / s.compress_bps + overhead) / self.sender_cores)
                .max(l * ratio / self.link_bps)
                .max(l / (s.decompress_bps * self.receiver_cores)),
        )
    }

    /// The strongest zstd level that compresses and decompresses a block of
    /// `len` bytes in at most [`TRIAL_SHARE`] of the time the link takes
    /// to carry it raw, if any. Only sampled blocks are tried, so trials
    /// thin out with samples in a long incompressible run; on random data
    /// zstd's low levels run at gigabytes a second, and zstd:9 at a tenth
    /// of that, which a link slow enough for it leaves idle anyway.
    fn trial_codec(&self, len: usize) -> Option<Codec> {
        let l = len as f64;
        let link = l / self.link_bps;
        // Within the share, and within what the sender's other work leaves
        // of the link's time: a sender that already keeps the link waiting
        // has no time for trials.
        let budget = (link * TRIAL_SHARE).min(link - l * self.overhead / self.sender_cores);
        if budget <= 0.0 {
            return None;
        }
        self.stats
            .iter()
            .filter(|s| matches!(s.codec, Codec::Zstd(_)))
            .filter(|s| {
                l / (s.compress_bps * self.sender_cores) <= budget
                    && l / (s.decompress_bps * self.receiver_cores) <= budget
            })
            .max_by_key(|s| match s.codec {
                Codec::Zstd(level) => level,
                _ => 0,
            })
            .map(|s| s.codec)
    }

    /// Whether no codec would beat raw on a block of `len` bytes even if
    /// it compressed to nothing.
    fn hopeless(&self, len: usize) -> bool {
        let raw = self.raw_time(len) * (1.0 - MARGIN);
        self.stats.iter().all(|s| {
            self.time_with(s.codec, len, 0.0, 0.0)
                .is_none_or(|t| t >= raw)
        })
    }

    /// Decides what to do with `block`.
    pub fn decide(&mut self, block: &[u8]) -> Decision {
        let plain = |choice| Decision {
            choice,
            estimate: None,
        };
        if is_zero(block) {
            return plain(Choice::Zero);
        }
        match self.mode {
            Mode::Fixed(Codec::None) => return plain(Choice::Raw),
            Mode::Fixed(c) => return plain(Choice::Compress(c)),
            Mode::Auto => {}
        }
        if self.skip_left > 0 {
            self.skip_left -= 1;
            return plain(Choice::Raw);
        }
        // Where no codec could win even on a block that vanished to
        // nothing (a link faster than the cores compress: loopback, a
        // LAN), sampling is wasted: look again only now and then, in case
        // the link slows or the codecs prove faster than believed.
        if self.hopeless(block.len()) {
            // The first such block is judged, then one in EXPLORE.
            self.hopeless_seen += 1;
            if self.hopeless_seen % EXPLORE != 1 {
                return plain(Choice::Raw);
            }
        }
        let est = sample_ratio(block, &mut self.scratch);
        self.estimates += 1;
        let decision = |choice| Decision {
            choice,
            estimate: Some(est),
        };
        if est > INCOMPRESSIBLE {
            self.incompressible_run = self.incompressible_run.saturating_add(1);
            let beyond = self.incompressible_run.saturating_sub(STEADY_RUN);
            self.skip_left = if beyond > 0 { THIN - 1 } else { 0 };
            // A trial carries no estimate: its ratio says nothing of how
            // the codec does on what the sample calls compressible.
            if let Some(c) = self.trial_codec(block.len()) {
                return plain(Choice::Compress(c));
            }
            return decision(Choice::Raw);
        }
        self.incompressible_run = 0;
        self.compressible_seen += 1;
        let len = block.len();
        let raw = self.raw_time(len);
        let mut timed: Vec<(Codec, f64, u32)> = self
            .stats
            .iter()
            .filter_map(|s| Some((s.codec, self.predicted_time(s.codec, len, est)?, s.measured)))
            .collect();
        timed.sort_by(|a, b| a.1.total_cmp(&b.1));
        let Some(&(best, best_time, _)) = timed.first() else {
            return decision(Choice::Raw);
        };
        // Codecs never measured are tried at once, the others now and
        // then, if their prediction is near the best way (raw included):
        // priors and old measurements must not hide a codec that now wins.
        let near = best_time.min(raw) * EXPLORE_SLACK;
        let candidates = timed.iter().filter(|(_, t, _)| *t <= near);
        let unmeasured = candidates.clone().any(|(_, _, m)| *m == 0);
        if unmeasured || self.compressible_seen.is_multiple_of(EXPLORE) {
            if let Some(&(c, _, _)) = candidates.min_by_key(|(_, _, m)| *m) {
                return decision(Choice::Compress(c));
            }
        }
        let bare = self.time_with(best, len, est, 0.0).unwrap_or(best_time);
        if bare > raw * (1.0 - MARGIN) {
            return decision(Choice::Raw);
        }
        decision(Choice::Compress(best))
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn cores_busy_elsewhere_turn_zstd_into_lz4_then_raw() {
        let block = text(MIB, 4);
        let mut a = Auto::new(Mode::Auto, 2, 2);
        a.set_link_rate(1000.0 * MBIT);
        // Speeds on one core as measured on a tree of real files.
        let est = crate::estimate::sample_ratio(&block, &mut Vec::new());
        for _ in 0..10 {
            for (c, bps, ratio) in [
                (Codec::Lz4, 450e6, 0.55),
                (Codec::Zstd(1), 220e6, 0.42),
                (Codec::Zstd(3), 140e6, 0.40),
                (Codec::Zstd(6), 50e6, 0.38),
                (Codec::Zstd(9), 30e6, 0.37),
            ] {
                let out = (MIB as f64 * ratio) as usize;
                let t = Duration::from_secs_f64(MIB as f64 / bps);
                a.record_compress(c, MIB, out, Some(est), t);
            }
        }
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
        for _ in 0..10 {
            for (c, bps, ratio) in [
                (Codec::Lz4, 1000e6, 0.58),
                (Codec::Zstd(1), 600e6, 0.42),
                (Codec::Zstd(3), 420e6, 0.40),
                (Codec::Zstd(6), 250e6, 0.38),
                (Codec::Zstd(9), 200e6, 0.37),
            ] {
                let out = (MIB as f64 * ratio) as usize;
                let t = Duration::from_secs_f64(MIB as f64 / bps);
                a.record_compress(c, MIB, out, Some(est), t);
            }
        }
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
        speed: fn(Codec) -> (f64, f64),
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
        for link_mbit in [100.0, 1000.0, 10_000.0] {
            for (cpu_name, speed, cores, free, overhead) in [
                (
                    "fast x2",
                    fast_cpu as fn(Codec) -> (f64, f64),
                    2.0,
                    2.0,
                    0.0,
                ),
                (
                    "slow x2",
                    slow_cpu as fn(Codec) -> (f64, f64),
                    2.0,
                    2.0,
                    0.0,
                ),
                (
                    "fast x48",
                    fast_cpu as fn(Codec) -> (f64, f64),
                    48.0,
                    48.0,
                    0.0,
                ),
                (
                    "busy x2",
                    fast_cpu as fn(Codec) -> (f64, f64),
                    2.0,
                    0.7,
                    0.0,
                ),
                // Reading, hashing, sealing at 3 ns a byte, as on a tree.
                (
                    "busy+io",
                    fast_cpu as fn(Codec) -> (f64, f64),
                    2.0,
                    0.7,
                    3e-9,
                ),
                (
                    "fast+io",
                    fast_cpu as fn(Codec) -> (f64, f64),
                    2.0,
                    2.0,
                    1e-9,
                ),
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
}
