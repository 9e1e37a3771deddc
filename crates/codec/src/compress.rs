//! The codecs. A compressed block carries its codec and original length in
//! its header; decompression is bounded by that length. A claim the
//! compressed bytes make that cannot fit it (a zstd frame that declares
//! another size, LZ4 bytes too few to expand that far) is refused before
//! anything is allocated, and nothing is ever allocated or written past
//! the length the caller expects, so a peer cannot make a receiver
//! allocate or write more than one block (issue 23).

use thiserror::Error;

/// How a block's bytes are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// As they are.
    None,
    /// LZ4 block format: fast, modest ratio.
    Lz4,
    /// Zstandard at a level (1..=19 here): slower, better ratio.
    Zstd(i32),
}

/// Levels `--compress zstd:LEVEL` accepts.
pub const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = 1..=19;

/// Most bytes [`Coder::decompress`] produces, whatever its caller asks:
/// twice the largest block (`wire::MAX_BLOCK_SIZE`, 16 MiB), which no
/// caller needs (a block, a bundle, a delta program, packed control
/// messages and tunnel frames are all smaller). A guard against a caller
/// that forgot its own bound; each caller checks a tighter one first.
pub const MAX_DECODED_LEN: usize = 32 << 20;

/// An LZ4 block expands at most 255 times: each byte of a match's length
/// adds at most 255 bytes of output, and a sequence's token and offset (3
/// bytes) at most 19; literals are copied one for one.
const LZ4_MAX_RATIO: usize = 255;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("compressed block is corrupt: {0}")]
    Corrupt(String),
    #[error("compressed block decodes to {got} bytes, its header says {want}")]
    Length { got: usize, want: usize },
    /// Refused before decoding: what the compressed bytes claim cannot be
    /// the expected length, or that length is past every bound.
    #[error("compressed block refused before decoding: {0}")]
    Refused(String),
}

impl Codec {
    /// Parses `none`, `lz4`, `zstd` (level 3) or `zstd:LEVEL`.
    pub fn parse(s: &str) -> Option<Codec> {
        match s {
            "none" => Some(Codec::None),
            "lz4" => Some(Codec::Lz4),
            "zstd" => Some(Codec::Zstd(3)),
            _ => {
                let level: i32 = s.strip_prefix("zstd:")?.parse().ok()?;
                ZSTD_LEVELS.contains(&level).then_some(Codec::Zstd(level))
            }
        }
    }

    pub fn name(self) -> String {
        match self {
            Codec::None => "none".into(),
            Codec::Lz4 => "lz4".into(),
            Codec::Zstd(l) => format!("zstd:{l}"),
        }
    }
}

/// One thread's codec state: zstd contexts are reused from block to block
/// (making one costs more than compressing a small block).
#[derive(Default)]
pub struct Coder {
    zstd_c: Option<(i32, zstd::bulk::Compressor<'static>)>,
    zstd_d: Option<zstd::bulk::Decompressor<'static>>,
}

impl Coder {
    pub fn new() -> Coder {
        Coder::default()
    }

    /// Compresses `input` with `codec` into `out` (cleared first).
    pub fn compress(&mut self, codec: Codec, input: &[u8], out: &mut Vec<u8>) {
        out.clear();
        match codec {
            Codec::None => out.extend_from_slice(input),
            Codec::Lz4 => {
                out.resize(lz4_flex::block::get_maximum_output_size(input.len()), 0);
                let n = lz4_flex::block::compress_into(input, out)
                    .expect("the output has the maximum size lz4 needs");
                out.truncate(n);
            }
            Codec::Zstd(level) => {
                if self.zstd_c.as_ref().map(|(l, _)| *l) != Some(level) {
                    let c = zstd::bulk::Compressor::new(level)
                        .expect("a zstd context at a valid level");
                    self.zstd_c = Some((level, c));
                }
                let (_, c) = self.zstd_c.as_mut().expect("made above");
                out.reserve(zstd::zstd_safe::compress_bound(input.len()));
                c.compress_to_buffer(input, out)
                    .expect("the output has the capacity zstd needs");
            }
        }
    }

    /// Decompresses `input`, which must decode to exactly `len` bytes,
    /// into `out` (cleared first). `len` is the caller's bound, checked
    /// against the session's limits before the call: nothing here
    /// allocates or writes more than `len` bytes (nor more than
    /// [`MAX_DECODED_LEN`]), and a claim that cannot fit `len` is refused
    /// before anything is allocated. zstd input must be one frame that
    /// declares its content size (as [`Coder::compress`] writes it).
    pub fn decompress(
        &mut self,
        codec: Codec,
        input: &[u8],
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        out.clear();
        check_claim(codec, input, len)?;
        let e = match self.decode_into(codec, input, len, out) {
            Ok(n) if n == len && out.len() == len => return Ok(()),
            Ok(n) => CodecError::Length { got: n, want: len },
            Err(e) => e,
        };
        // Nothing of a block that failed is handed out.
        out.clear();
        Err(e)
    }

    /// Decodes `input` (its claim checked) into `out` (empty), which never
    /// grows past `len`; returns the bytes decoded.
    fn decode_into(
        &mut self,
        codec: Codec,
        input: &[u8],
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, CodecError> {
        Ok(match codec {
            Codec::None => {
                out.extend_from_slice(input);
                input.len()
            }
            Codec::Lz4 => {
                // The block format writes into the slice it is given and
                // fails rather than pass its end.
                out.resize(len, 0);
                lz4_flex::block::decompress_into(input, out)
                    .map_err(|e| CodecError::Corrupt(e.to_string()))?
            }
            Codec::Zstd(_) => {
                if self.zstd_d.is_none() {
                    let d = zstd::bulk::Decompressor::new()
                        .map_err(|e| CodecError::Corrupt(e.to_string()))?;
                    self.zstd_d = Some(d);
                }
                let d = self.zstd_d.as_mut().expect("made above");
                // Capacity bounds the output (a `Vec<u8>` made with a
                // capacity has exactly that one): a frame that yields more
                // fails, whatever it declared.
                let mut bounded = Vec::with_capacity(len);
                let n = d
                    .decompress_to_buffer(input, &mut bounded)
                    .map_err(|e| CodecError::Corrupt(e.to_string()))?;
                *out = bounded;
                n
            }
        })
    }
}

/// Refuses, without allocating anything, input that cannot decode to
/// `len` bytes with `codec`: a length past [`MAX_DECODED_LEN`]; raw bytes
/// of another length; an LZ4 block too short to expand to `len`; zstd
/// input that is not exactly one frame declaring `len` bytes.
pub fn check_claim(codec: Codec, input: &[u8], len: usize) -> Result<(), CodecError> {
    if len > MAX_DECODED_LEN {
        return Err(CodecError::Refused(format!(
            "{len} bytes is past the {MAX_DECODED_LEN}-byte bound"
        )));
    }
    match codec {
        Codec::None if input.len() != len => Err(CodecError::Length {
            got: input.len(),
            want: len,
        }),
        Codec::None => Ok(()),
        Codec::Lz4 if len > input.len().saturating_mul(LZ4_MAX_RATIO) => Err(CodecError::Refused(
            format!("{} LZ4 bytes cannot expand to {len}", input.len()),
        )),
        Codec::Lz4 => Ok(()),
        Codec::Zstd(_) => {
            let declared = match zstd::zstd_safe::get_frame_content_size(input) {
                Ok(Some(n)) => n,
                Ok(None) => {
                    return Err(CodecError::Refused(
                        "the zstd frame does not declare its size".into(),
                    ))
                }
                Err(_) => return Err(CodecError::Corrupt("no zstd frame header".into())),
            };
            if declared != len as u64 {
                return Err(CodecError::Refused(format!(
                    "the zstd frame declares {declared} bytes, {len} were expected"
                )));
            }
            // One frame and nothing after it: a second frame would
            // declare its own size, unchecked here.
            match zstd::zstd_safe::find_frame_compressed_size(input) {
                Ok(n) if n == input.len() => Ok(()),
                Ok(n) => Err(CodecError::Refused(format!(
                    "{} bytes follow the zstd frame",
                    input.len().saturating_sub(n)
                ))),
                Err(_) => Err(CodecError::Corrupt("truncated zstd frame".into())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CODECS: [Codec; 4] = [Codec::None, Codec::Lz4, Codec::Zstd(1), Codec::Zstd(3)];

    #[test]
    fn names_parse_back() {
        for c in CODECS {
            assert_eq!(Codec::parse(&c.name()), Some(c));
        }
        assert_eq!(Codec::parse("zstd"), Some(Codec::Zstd(3)));
        assert_eq!(Codec::parse("zstd:0"), None);
        assert_eq!(Codec::parse("zstd:20"), None);
        assert_eq!(Codec::parse("gzip"), None);
    }

    #[test]
    fn compresses_text_and_refuses_wrong_lengths() {
        let text: Vec<u8> = (0..20_000)
            .flat_map(|i| {
                format!("2026-11-22 12:00:{:02} GET /data/{i} 200\n", i % 60).into_bytes()
            })
            .collect();
        let mut c = Coder::new();
        let (mut z, mut back) = (Vec::new(), Vec::new());
        for codec in [Codec::Lz4, Codec::Zstd(3)] {
            c.compress(codec, &text, &mut z);
            assert!(
                z.len() * 4 < text.len(),
                "{codec:?}: {} of {}",
                z.len(),
                text.len()
            );
            c.decompress(codec, &z, text.len(), &mut back).unwrap();
            assert_eq!(back, text);
            assert!(c.decompress(codec, &z, text.len() - 1, &mut back).is_err());
            assert!(c.decompress(codec, &z, text.len() + 1, &mut back).is_err());
        }
    }

    fn zstd(data: &[u8], with_size: bool) -> Vec<u8> {
        let mut c = zstd::bulk::Compressor::new(3).unwrap();
        c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(with_size))
            .unwrap();
        c.compress(data).unwrap()
    }

    /// Rewrites the content size a zstd frame declares (4-byte field:
    /// frames of 64 KiB .. 4 GiB as `compress` writes them).
    fn declare(frame: &mut [u8], size: u32) {
        let fhd = frame[4];
        assert_eq!(fhd >> 6, 2, "a 4-byte content size field");
        let single = (fhd >> 5) & 1 == 1;
        let dict = [0, 1, 2, 4][(fhd & 3) as usize];
        let at = 5 + usize::from(!single) + dict;
        frame[at..at + 4].copy_from_slice(&size.to_le_bytes());
    }

    #[test]
    fn zstd_bombs_are_refused_before_decoding() {
        const MIB: usize = 1 << 20;
        let mut c = Coder::new();
        let mut out = vec![7u8; 10];
        // 64 MiB of zeros in a few KiB, for a 1 MiB block: the frame's
        // declared size says so before anything is allocated.
        let bomb = zstd(&vec![0u8; 64 * MIB], true);
        assert!(bomb.len() < 8 << 10, "{}", bomb.len());
        let e = c
            .decompress(Codec::Zstd(3), &bomb, MIB, &mut out)
            .unwrap_err();
        assert!(matches!(e, CodecError::Refused(_)), "{e}");
        assert!(e.to_string().contains("declares 67108864 bytes"), "{e}");
        assert!(out.is_empty() && out.capacity() < MIB);
        // The same, claimed as the expected length, is past every bound.
        let e = c
            .decompress(Codec::Zstd(3), &bomb, 64 * MIB, &mut out)
            .unwrap_err();
        assert!(matches!(e, CodecError::Refused(_)), "{e}");
        // A frame that does not declare its size is refused.
        let quiet = zstd(&vec![0u8; 2 * MIB], false);
        assert!(matches!(
            zstd::zstd_safe::get_frame_content_size(&quiet),
            Ok(None)
        ));
        let e = c
            .decompress(Codec::Zstd(3), &quiet, MIB, &mut out)
            .unwrap_err();
        assert!(e.to_string().contains("does not declare"), "{e}");
        // A frame that lies, declaring the expected 1 MiB but holding
        // 2 MiB, fails without writing past the 1 MiB.
        let mut liar = zstd(&vec![0u8; 2 * MIB], true);
        declare(&mut liar, MIB as u32);
        assert!(matches!(
            zstd::zstd_safe::get_frame_content_size(&liar),
            Ok(Some(n)) if n == MIB as u64
        ));
        assert!(c.decompress(Codec::Zstd(3), &liar, MIB, &mut out).is_err());
        assert!(out.len() <= MIB && out.capacity() <= MIB);
        // A second frame behind a good one (declaring its own size).
        let good = zstd(&vec![1u8; MIB], true);
        c.decompress(Codec::Zstd(3), &good, MIB, &mut out).unwrap();
        assert_eq!(out, vec![1u8; MIB]);
        let two = [&good[..], &zstd(&vec![2u8; 64 * MIB], true)[..]].concat();
        let e = c
            .decompress(Codec::Zstd(3), &two, MIB, &mut out)
            .unwrap_err();
        assert!(e.to_string().contains("follow the zstd frame"), "{e}");
        // Truncated: refused.
        assert!(c
            .decompress(Codec::Zstd(3), &good[..good.len() / 2], MIB, &mut out)
            .is_err());
        assert!(c
            .decompress(Codec::Zstd(3), &good[..3], MIB, &mut out)
            .is_err());
    }

    #[test]
    fn lz4_bombs_are_refused_before_decoding() {
        const MIB: usize = 1 << 20;
        let mut c = Coder::new();
        let mut out = Vec::new();
        // LZ4 expands at most 255 times: a few bytes cannot be a block.
        let e = c
            .decompress(Codec::Lz4, &[0xF0; 16], MIB, &mut out)
            .unwrap_err();
        assert!(matches!(e, CodecError::Refused(_)), "{e}");
        assert!(out.capacity() < MIB);
        // 16 MiB of zeros (about 64 KiB of LZ4) claimed as 1 MiB: the
        // output stops at 1 MiB and the block fails.
        let mut bomb = Vec::new();
        c.compress(Codec::Lz4, &vec![0u8; 16 * MIB], &mut bomb);
        assert!(bomb.len() < 100 << 10, "{}", bomb.len());
        assert!(c.decompress(Codec::Lz4, &bomb, MIB, &mut out).is_err());
        assert!(out.len() <= MIB && out.capacity() <= MIB);
        // What LZ4 can reach, it reaches: the ratio bound refuses no block.
        c.decompress(Codec::Lz4, &bomb, 16 * MIB, &mut out).unwrap();
        assert!(16 * MIB <= bomb.len() * LZ4_MAX_RATIO);
        // Past the codec's guard, whatever the input.
        let e = c
            .decompress(Codec::Lz4, &bomb, MAX_DECODED_LEN + 1, &mut out)
            .unwrap_err();
        assert!(matches!(e, CodecError::Refused(_)), "{e}");
        // Raw bytes of another length are refused before they are copied.
        let e = c.decompress(Codec::None, b"abc", 4, &mut out).unwrap_err();
        assert_eq!(e, CodecError::Length { got: 3, want: 4 });
        assert!(out.is_empty());
    }

    proptest! {
        /// The most compressible input at any length decodes within the
        /// ratio bound: the bound never refuses what LZ4 wrote.
        #[test]
        fn lz4_ratio_bound_holds_for_runs(len in 0usize..300_000, byte: u8) {
            let mut c = Coder::new();
            let (mut z, mut back) = (Vec::new(), Vec::new());
            let data = vec![byte; len];
            c.compress(Codec::Lz4, &data, &mut z);
            prop_assert!(check_claim(Codec::Lz4, &z, len).is_ok());
            c.decompress(Codec::Lz4, &z, len, &mut back).unwrap();
            prop_assert_eq!(back, data);
        }

        #[test]
        fn any_bytes_round_trip(data in proptest::collection::vec(any::<u8>(), 0..70_000), pick in 0usize..4) {
            let codec = CODECS[pick];
            let mut c = Coder::new();
            let (mut z, mut back) = (Vec::new(), Vec::new());
            c.compress(codec, &data, &mut z);
            c.decompress(codec, &z, data.len(), &mut back).unwrap();
            prop_assert_eq!(back, data);
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..4096), len in 0usize..100_000, pick in 1usize..4) {
            let mut c = Coder::new();
            let mut out = Vec::new();
            if c.decompress(CODECS[pick], &data, len, &mut out).is_ok() {
                prop_assert_eq!(out.len(), len);
            } else {
                prop_assert!(out.is_empty());
            }
            prop_assert!(out.capacity() <= len.max(data.len()));
        }
    }
}
