//! The codecs. A compressed block carries its codec and original length in
//! its header (on the wire, later); decompression checks that length, so
//! a peer cannot make a receiver allocate or write more than one block.

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

#[derive(Debug, Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("compressed block is corrupt: {0}")]
    Corrupt(String),
    #[error("compressed block decodes to {got} bytes, its header says {want}")]
    Length { got: usize, want: usize },
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
    /// into `out` (cleared first).
    pub fn decompress(
        &mut self,
        codec: Codec,
        input: &[u8],
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        out.clear();
        let got = match codec {
            Codec::None => {
                out.extend_from_slice(input);
                input.len()
            }
            Codec::Lz4 => {
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
                out.reserve(len);
                // Capacity bounds the output: a frame that claims more fails.
                let mut bounded = Vec::with_capacity(len);
                let n = d
                    .decompress_to_buffer(input, &mut bounded)
                    .map_err(|e| CodecError::Corrupt(e.to_string()))?;
                *out = bounded;
                n
            }
        };
        if got != len {
            return Err(CodecError::Length { got, want: len });
        }
        out.truncate(len);
        Ok(())
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

    proptest! {
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
            }
        }
    }
}
