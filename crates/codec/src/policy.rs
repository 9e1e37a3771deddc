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
    /// `--compress` as a request carries it: kind and zstd level (P-30).
    pub fn to_wire(self) -> (u8, u8) {
        use wire::{COMPRESS_AUTO, COMPRESS_LZ4, COMPRESS_NONE, COMPRESS_ZSTD};
        match self {
            Mode::Auto => (COMPRESS_AUTO, 0),
            Mode::Fixed(Codec::None) => (COMPRESS_NONE, 0),
            Mode::Fixed(Codec::Lz4) => (COMPRESS_LZ4, 0),
            Mode::Fixed(Codec::Zstd(l)) => (COMPRESS_ZSTD, l.clamp(1, 19) as u8),
        }
    }

    /// The mode a request's fields name (already checked by the decoder).
    pub fn from_wire(kind: u8, level: u8) -> Mode {
        use wire::{COMPRESS_LZ4, COMPRESS_NONE, COMPRESS_ZSTD};
        match kind {
            COMPRESS_NONE => Mode::Fixed(Codec::None),
            COMPRESS_LZ4 => Mode::Fixed(Codec::Lz4),
            COMPRESS_ZSTD => Mode::Fixed(Codec::Zstd(level as i32)),
            _ => Mode::Auto,
        }
    }

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
mod tests;
