//! Compression of blocks on their way out and back (P-30), around the
//! sans-IO policy of `codec`: the policy decides per block, this module
//! feeds it the link rate and the timings it needs, and does the work on
//! the thread that read the block (the TCP stream threads, the UDP read
//! workers) with a codec context kept per thread.

use std::cell::RefCell;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use codec::{Auto, Choice, Codec, CodecError, Coder, Mode};
use wire::{CODEC_LZ4, CODEC_NONE, CODEC_ZSTD};

use crate::cpu::{thread_seconds, CpuShare};
use crate::progress::Progress;

thread_local! {
    static CODER: RefCell<(Coder, Vec<u8>)> = RefCell::new((Coder::new(), Vec::new()));
}

fn tag_of(c: Codec) -> u8 {
    match c {
        Codec::None => CODEC_NONE,
        Codec::Lz4 => CODEC_LZ4,
        Codec::Zstd(_) => CODEC_ZSTD,
    }
}

/// How often the link-rate estimate is refreshed.
const METER_EVERY: Duration = Duration::from_millis(100);

/// Weight of a new measurement of the available cores and the overhead:
/// a quarter second is noisy, and a decision that flips each time follows
/// the noise.
const CPU_ALPHA: f64 = 0.5;

/// Input bytes an interval must have seen for its overhead to count: the
/// first intervals of a transfer also walk the tree and shake hands.
const OVERHEAD_MIN_BYTES: u64 = 4 << 20;

/// The process's CPU as the policy needs it: the cores it can have, and
/// what it spends per input byte besides compressing (reading, hashing,
/// sealing, sending), each averaged over intervals of [`CpuShare`].
#[derive(Default)]
struct CpuMeter {
    share: CpuShare,
    cores: Option<f64>,
    overhead: Option<f64>,
    /// Since the last interval: input bytes seen, and CPU seconds spent
    /// compressing them.
    bytes: u64,
    compressed: f64,
}

impl CpuMeter {
    /// Counts a block of `len` input bytes and, when an interval is over,
    /// returns the averaged cores and, if measured, overhead.
    fn measure(&mut self, len: usize) -> Option<(f64, Option<f64>)> {
        self.bytes += len as u64;
        let s = self.share.sample()?;
        let avg = |old: Option<f64>, new: f64| old.map_or(new, |o| o + CPU_ALPHA * (new - o));
        self.cores = Some(avg(self.cores, s.cores));
        if self.bytes >= OVERHEAD_MIN_BYTES {
            let per_byte = (s.used - self.compressed).max(0.0) / self.bytes as f64;
            self.overhead = Some(avg(self.overhead, per_byte));
        }
        tracing::debug!(
            "compression: {:.2} cores available now ({:.2} on average), overhead {:.2} ns/B",
            s.cores,
            self.cores.unwrap_or(0.0),
            self.overhead.unwrap_or(0.0) * 1e9
        );
        (self.bytes, self.compressed) = (0, 0.0);
        Some((self.cores?, self.overhead))
    }
}

/// One sending side's compression.
pub struct Compression {
    policy: Mutex<Auto>,
    /// When the link rate was last given to the policy.
    metered: Mutex<Option<Instant>>,
    /// What this process's CPU does, measured now and then.
    cpu: Mutex<CpuMeter>,
    off: bool,
    /// `--rate`, bytes per second: the link the policy sees is no faster.
    /// TCP's windows say nothing of it (on a fast path they allow far
    /// more), so without this cap a rate-limited transfer was judged to
    /// have a fast link and sent text raw.
    cap: Option<f64>,
}

impl Compression {
    pub fn new(mode: Mode) -> Compression {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Compression {
            // The receiver's cores are not known; assume as many.
            policy: Mutex::new(Auto::new(mode, cores, cores)),
            metered: Mutex::new(None),
            cpu: Mutex::new(CpuMeter::default()),
            off: mode == Mode::Fixed(Codec::None),
            cap: None,
        }
    }

    /// Caps the link rate the policy sees at `--rate` (bytes per second).
    pub fn capped(mut self, cap: Option<u64>) -> Compression {
        self.cap = cap.map(|c| c as f64);
        if let Some(c) = self.cap {
            self.lock().set_link_rate(c);
        }
        self
    }

    /// `--compress none`: nothing is compressed.
    pub fn is_off(&self) -> bool {
        self.off
    }

    /// A receiving side compresses nothing.
    pub fn off() -> Compression {
        Compression::new(Mode::Fixed(Codec::None))
    }

    /// The rate the path carries now, at most every [`METER_EVERY`]: the
    /// UDP channel's pacing rate, or what the TCP connections' windows
    /// allow (`tcp_rate`, from `TCP_INFO`), which does not fall when the
    /// sender is busy compressing.
    fn link_rate(
        &self,
        progress: &Progress,
        tcp_rate: impl FnOnce() -> Option<f64>,
    ) -> Option<f64> {
        let mut m = self.metered.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if m.is_some_and(|at| now.duration_since(at) < METER_EVERY) {
            return None;
        }
        *m = Some(now);
        let udp = Progress::get(&progress.udp_rate);
        if udp > 0 {
            // While the channel still doubles its rate each round trip,
            // the rate now is no measure of the path: a block compressed
            // for it (zstd:9 at the first 100 Mbit/s) leaves rounds
            // later, when the rate is several times higher, and its CPU
            // held the channel back meanwhile. Until the path's rate is
            // known it is taken to be at least the policy's default.
            let startup = Progress::get(&progress.udp_startup) == 1;
            return Some(if startup {
                (udp as f64).max(codec::DEFAULT_LINK)
            } else {
                udp as f64
            });
        }
        tcp_rate()
    }

    fn meter(&self) -> std::sync::MutexGuard<'_, CpuMeter> {
        self.cpu.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Encodes the block in `buf[at..]` in place, if the policy says so
    /// and the result is shorter; returns its `CODEC_*` tag.
    pub fn encode(
        &self,
        buf: &mut Vec<u8>,
        at: usize,
        progress: &Progress,
        tcp_rate: impl FnOnce() -> Option<f64>,
    ) -> u8 {
        if self.off {
            return CODEC_NONE;
        }
        if let Some(rate) = self.link_rate(progress, tcp_rate) {
            let rate = self.cap.map_or(rate, |c| rate.min(c));
            tracing::trace!("compression: link {:.0} Mbit/s", rate * 8e-6);
            self.lock().set_link_rate(rate);
        }
        let len = buf.len() - at;
        let measured = self.meter().measure(len);
        let decision = {
            let mut p = self.lock();
            if let Some((cores, overhead)) = measured {
                p.set_sender_cores(cores);
                if let Some(o) = overhead {
                    p.set_sender_overhead(o);
                }
            }
            p.decide(&buf[at..])
        };
        tracing::trace!("compression: {:?} {:?}", decision.choice, decision.estimate);
        let Choice::Compress(c) = decision.choice else {
            return CODEC_NONE;
        };
        CODER.with_borrow_mut(|(coder, out)| {
            // The speed of a core is what the work cost this thread's CPU,
            // not the wall time it took: a thread kept waiting for a core
            // is what the available cores ([`CpuMeter`]) count.
            let (t0, cpu0) = (Instant::now(), thread_seconds());
            coder.compress(c, &buf[at..], out);
            let took = match (cpu0, thread_seconds()) {
                (Some(a), Some(b)) if b > a => Duration::from_secs_f64(b - a),
                _ => t0.elapsed(),
            };
            tracing::trace!(
                "compression: took {:?} {len} -> {} in {took:?}",
                c,
                out.len()
            );
            self.meter().compressed += took.as_secs_f64();
            self.lock()
                .record_compress(c, len, out.len(), decision.estimate, took);
            if out.len() >= len {
                return CODEC_NONE;
            }
            buf.truncate(at);
            buf.extend_from_slice(out);
            Progress::add(&progress.compressed_in, len as u64);
            Progress::add(&progress.compressed_out, out.len() as u64);
            tag_of(c)
        })
    }

    /// The receiver's report of its decompression speed (P-30).
    pub fn record_decode(&self, msg: &wire::Msg) {
        let wire::Msg::DecodeSpeed {
            cores,
            lz4_bytes,
            lz4_micros,
            zstd_bytes,
            zstd_micros,
        } = *msg
        else {
            return;
        };
        let mut p = self.lock();
        p.set_receiver_cores(cores as usize);
        for (c, bytes, us) in [
            (Codec::Lz4, lz4_bytes, lz4_micros),
            (Codec::Zstd(3), zstd_bytes, zstd_micros),
        ] {
            if bytes > 0 && us > 0 {
                p.record_decompress(c, bytes as usize, Duration::from_micros(us));
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Auto> {
        self.policy.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a receiver tells the sender about its decompression (P-30): the
/// bytes and time since the last report, at most once a second.
#[derive(Default)]
pub struct DecodeMeter {
    last: Option<Instant>,
    sent: [u64; 4],
}

impl DecodeMeter {
    /// A report at most once a second, of what was decoded since the last.
    const EVERY: Duration = Duration::from_secs(1);

    fn totals(progress: &Progress) -> [u64; 4] {
        [
            Progress::get(&progress.decoded_lz4),
            Progress::get(&progress.decoded_lz4_us),
            Progress::get(&progress.decoded_zstd),
            Progress::get(&progress.decoded_zstd_us),
        ]
    }

    /// When the next report is due: none while nothing was decoded since
    /// the last, so that an idle writer sleeps.
    pub fn due(&self, progress: &Progress) -> Option<Instant> {
        if Self::totals(progress) == self.sent {
            return None;
        }
        Some(self.last.map_or_else(Instant::now, |t| t + Self::EVERY))
    }

    pub fn report(&mut self, progress: &Progress) -> Option<wire::Msg> {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Self::EVERY)
        {
            return None;
        }
        let totals = Self::totals(progress);
        if totals == self.sent {
            return None;
        }
        self.last = Some(now);
        let d: Vec<u64> = totals.iter().zip(self.sent).map(|(t, s)| t - s).collect();
        self.sent = totals;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Some(wire::Msg::DecodeSpeed {
            cores: cores.min(u16::MAX as usize) as u16,
            lz4_bytes: d[0],
            lz4_micros: d[1],
            zstd_bytes: d[2],
            zstd_micros: d[3],
        })
    }
}

// No block, bundle or delta program is longer than the codec's guard.
const _: () = assert!(2 * wire::MAX_BLOCK_SIZE as usize <= codec::MAX_DECODED_LEN);

/// The codec a received block's base tag names (`CODEC_NONE`, `_LZ4`,
/// `_ZSTD`; flags cleared); `None` for any other.
fn codec_of(tag: u8) -> Option<Codec> {
    match tag {
        CODEC_NONE => Some(Codec::None),
        CODEC_LZ4 => Some(Codec::Lz4),
        // Any level: the frame says how to decode it.
        CODEC_ZSTD => Some(Codec::Zstd(3)),
        _ => None,
    }
}

/// Decodes received bytes encoded with the base codec `tag` to exactly
/// `len` bytes (P-30): a block, a bundle (P-33) or a delta program (P-31).
/// `len` is the caller's bound, already checked against the session's
/// (a block's length against its block size, a bundle's against
/// `BUNDLE_MAX`, a program's against its block's length); a claim the
/// bytes make that cannot fit it is refused before anything is allocated
/// (`codec::check_claim`), and nothing is written past it. The bytes are
/// not authenticated under `--no-encrypt`, so a failure here is the
/// block's, to be asked for again, not the peer's. No hash of the encoded
/// bytes exists to check first (the block hash is of the file's bytes,
/// P-11, whatever codec carried them): the block hash after decoding is
/// the check, and these bounds keep bytes not yet checked from costing
/// more than the block (issue 23).
pub fn decode_exact(
    tag: u8,
    data: &[u8],
    len: u32,
    progress: &Progress,
) -> Result<Vec<u8>, CodecError> {
    let Some(c) = codec_of(tag) else {
        return Err(CodecError::Refused(format!("unknown codec {tag}")));
    };
    if c == Codec::None {
        codec::check_claim(c, data, len as usize)?;
        return Ok(data.to_vec());
    }
    CODER.with_borrow_mut(|(coder, _)| {
        let mut out = Vec::new();
        let t0 = Instant::now();
        coder.decompress(c, data, len as usize, &mut out)?;
        let us = t0.elapsed().as_micros() as u64;
        let (bytes, micros) = match c {
            Codec::Lz4 => (&progress.decoded_lz4, &progress.decoded_lz4_us),
            _ => (&progress.decoded_zstd, &progress.decoded_zstd_us),
        };
        Progress::add(bytes, len as u64);
        Progress::add(micros, us);
        Progress::add(&progress.compressed_in, len as u64);
        Progress::add(&progress.compressed_out, data.len() as u64);
        Ok(out)
    })
}

/// Decodes a received block of `len` bytes encoded with `codec`, as
/// [`decode_exact`] does. Bytes that do not decode come back as zeros of
/// the right length, so the block fails its hash and is asked for again
/// like any damaged block.
pub fn decode(codec: u8, data: &[u8], len: u32, progress: &Progress) -> Vec<u8> {
    decode_exact(codec, data, len, progress).unwrap_or_else(|e| {
        tracing::warn!("a compressed block did not decode ({e}); asking for it again");
        vec![0u8; (len as usize).min(codec::MAX_DECODED_LEN)]
    })
}

/// Checks a delta block's payload before anything of it is decoded
/// (P-31): `u32 program_len`, then the program encoded with the base
/// codec `tag`. A sender sends a program only when it is shorter than its
/// block, so one longer than the block (`len`) is refused, as is a claim
/// of the encoded program that cannot fit its length.
pub fn check_program(tag: u8, data: &[u8], len: u32) -> Result<(), String> {
    let (head, body) = data
        .split_at_checked(4)
        .ok_or("a delta program without its length")?;
    let plen = u32::from_le_bytes(head.try_into().expect("4 bytes"));
    if plen > len {
        return Err(format!(
            "a delta program of {plen} bytes for a block of {len}"
        ));
    }
    let c = codec_of(tag).ok_or_else(|| format!("unknown codec {tag}"))?;
    codec::check_claim(c, body, plen as usize).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_cross_the_wire() {
        for m in [
            Mode::Auto,
            Mode::Fixed(Codec::None),
            Mode::Fixed(Codec::Lz4),
            Mode::Fixed(Codec::Zstd(7)),
        ] {
            let (k, l) = m.to_wire();
            assert_eq!(Mode::from_wire(k, l), m);
        }
    }

    #[test]
    fn a_rate_cap_is_the_link_the_policy_sees() {
        let p = Progress::default();
        let text: Vec<u8> = (0..60_000)
            .flat_map(|i| format!("GET /item/{} HTTP/1.1 200 {}\n", i % 500, i % 7).into_bytes())
            .collect();
        // TCP's windows claim 20 Gbit/s: no core keeps up, text goes raw.
        let fast = || Some(2.5e9);
        let open = Compression::new(Mode::Auto);
        let mut buf = text.clone();
        assert_eq!(open.encode(&mut buf, 0, &p, fast), CODEC_NONE);
        // Under --rate 100M the same text is worth compressing.
        let capped = Compression::new(Mode::Auto).capped(Some(12_500_000));
        let mut buf = text.clone();
        assert_ne!(capped.encode(&mut buf, 0, &p, fast), CODEC_NONE);
        assert!(buf.len() < text.len() / 2);
    }

    #[test]
    fn encodes_in_place_and_decodes_back() {
        let p = Progress::default();
        let c = Compression::new(Mode::Fixed(Codec::Zstd(3)));
        let text: Vec<u8> = b"header"
            .iter()
            .copied()
            .chain((0..50_000).flat_map(|i| format!("line {} of the log\n", i % 100).into_bytes()))
            .collect();
        let mut buf = b"HDR".to_vec();
        buf.extend_from_slice(&text[6..]);
        let original = buf[3..].to_vec();
        let tag = c.encode(&mut buf, 3, &p, || None);
        assert_eq!(tag, CODEC_ZSTD);
        assert!(buf.len() - 3 < original.len() / 4);
        let back = decode(tag, &buf[3..], original.len() as u32, &p);
        assert_eq!(back, original);
        // Garbage decodes to zeros, which the block hash then refuses.
        assert_eq!(decode(CODEC_LZ4, b"junk", 10, &p), vec![0u8; 10]);
        // Off: nothing changes.
        let mut raw = original.clone();
        assert_eq!(
            Compression::off().encode(&mut raw, 0, &p, || None),
            CODEC_NONE
        );
        assert_eq!(raw, original);
    }

    const MIB: usize = 1 << 20;

    fn compressed(codec: Codec, data: &[u8]) -> Vec<u8> {
        let mut z = Vec::new();
        Coder::new().compress(codec, data, &mut z);
        z
    }

    #[test]
    fn compressed_bombs_are_refused_before_decoding() {
        let p = Progress::default();
        // 64 MiB of zeros in a few KiB, sent as a 1 MiB block.
        let bomb = compressed(Codec::Zstd(3), &vec![0u8; 64 * MIB]);
        let e = decode_exact(CODEC_ZSTD, &bomb, MIB as u32, &p).unwrap_err();
        assert!(matches!(e, CodecError::Refused(_)), "{e}");
        let bomb = compressed(Codec::Lz4, &vec![0u8; 64 * MIB]);
        assert!(decode_exact(CODEC_LZ4, &bomb, MIB as u32, &p).is_err());
        assert!(decode_exact(CODEC_LZ4, &bomb[..20], MIB as u32, &p).is_err());
        // Raw bytes of another length; a codec nobody knows.
        assert!(decode_exact(CODEC_NONE, b"abc", 4, &p).is_err());
        assert!(decode_exact(9, b"abc", 3, &p).is_err());
        // Nothing was counted as decoded.
        assert_eq!(Progress::get(&p.decoded_zstd), 0);
        assert_eq!(Progress::get(&p.decoded_lz4), 0);
    }

    /// A delta block's payload: the program's length, then the program
    /// encoded with `codec`.
    fn delta(plen: u32, body: &[u8]) -> Vec<u8> {
        [&plen.to_le_bytes()[..], body].concat()
    }

    #[test]
    fn delta_programs_are_never_longer_than_their_block() {
        let len = 1 << 20;
        let mut prog = Vec::new();
        wire::program::encode(
            [
                wire::program::Piece::Literal(b"new bytes"),
                wire::program::Piece::Basis {
                    from: 0,
                    len: len - 9,
                },
            ],
            &mut prog,
        );
        let plen = prog.len() as u32;
        assert!(check_program(CODEC_NONE, &delta(plen, &prog), len).is_ok());
        let z = compressed(Codec::Zstd(3), &prog);
        assert!(check_program(CODEC_ZSTD, &delta(plen, &z), len).is_ok());
        // A program longer than the block it rebuilds, raw or compressed.
        let e = check_program(CODEC_NONE, &delta(len + 1, &vec![0; len as usize + 1]), len)
            .unwrap_err();
        assert!(e.contains("for a block of"), "{e}");
        let bomb = compressed(Codec::Zstd(3), &vec![0u8; 64 * MIB]);
        assert!(check_program(CODEC_ZSTD, &delta(64 << 20, &bomb), len).is_err());
        // A length that is not the program's.
        assert!(check_program(CODEC_NONE, &delta(plen + 1, &prog), len).is_err());
        assert!(check_program(CODEC_ZSTD, &delta(plen - 1, &z), len).is_err());
        let e = check_program(CODEC_ZSTD, &delta(len, &bomb), len).unwrap_err();
        assert!(e.contains("declares"), "{e}");
        assert!(check_program(CODEC_LZ4, &delta(len, &[0xF0; 8]), len).is_err());
        // No length at all; a codec nobody knows.
        assert!(check_program(CODEC_NONE, &[0, 0], len).is_err());
        assert!(check_program(7, &delta(plen, &prog), len).is_err());
    }
}
