//! Delta programs (P-31): a block sent as literals and copies of what the
//! receiver holds (its basis, its chunk cache). [`encode`] builds one on
//! the sender when it is shorter; [`apply`] runs one on the receiver. Pure:
//! the copies are read through the functions the receiver passes in.

use chunk::Part;
use wire::program::{self, Piece};

/// Runs a delta program for a block of `len` bytes: literals from the
/// program, copies through `basis(from, out)` and `cache(hash, skip,
/// out)`. Returns the block and how many of its bytes were copied.
pub(crate) fn apply(
    prog: &[u8],
    len: u32,
    basis: impl Fn(u64, &mut [u8]) -> Result<(), String>,
    cache: impl Fn(&[u8; 16], u32, &mut [u8]) -> Result<(), String>,
) -> Result<(Vec<u8>, u64), String> {
    let pieces = program::decode(prog, len).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(len as usize);
    let mut copied = 0u64;
    for p in pieces {
        let at = out.len();
        match p {
            Piece::Literal(b) => out.extend_from_slice(b),
            Piece::Basis { from, len } => {
                out.resize(at + len as usize, 0);
                basis(from, &mut out[at..])?;
                copied += len as u64;
            }
            Piece::Cache { hash, skip, len } => {
                out.resize(at + len as usize, 0);
                cache(&hash, skip, &mut out[at..])?;
                copied += len as u64;
            }
        }
    }
    Ok((out, copied))
}

/// Replaces the block in `buf[at..]` with `[program length][program]`
/// built from `parts`, if that is shorter by a margin; returns whether it
/// did. The caller may then compress the program in place (from `at + 4`).
pub(crate) fn encode(buf: &mut Vec<u8>, at: usize, parts: &[Part]) -> bool {
    let block = &buf[at..];
    let pieces = parts.iter().map(|p| match *p {
        Part::Literal { at, len } => Piece::Literal(&block[at as usize..(at + len) as usize]),
        Part::Basis { from, len } => Piece::Basis { from, len },
        Part::Cache { hash, skip, len } => Piece::Cache { hash, skip, len },
    });
    let mut out = vec![0u8; 4];
    program::encode(pieces, &mut out);
    if out.len() + 64 >= block.len() {
        return false;
    }
    let plen = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&plen.to_le_bytes());
    buf.truncate(at);
    buf.extend_from_slice(&out);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use chunk::{chunks, short, Known, Plan};
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn noise(n: usize, seed: u64) -> Vec<u8> {
        codec::samples::noise(n, seed)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Any source, basis and cache: every block sent as a program
        /// (as the sender encodes it) rebuilds byte-exact at the receiver.
        #[test]
        fn programs_rebuild_every_block_exactly(
            seed in any::<u64>(),
            base_len in 0usize..400_000,
            cache_len in 0usize..200_000,
            cut in 0usize..400_000,
            insert_len in 0usize..90_000,
            block in 65_536u32..300_000,
        ) {
            let basis = noise(base_len, seed);
            let cached = noise(cache_len, seed ^ 5);
            let cut = cut.min(basis.len());
            let mut source = basis[..cut].to_vec();
            source.extend_from_slice(&noise(insert_len, seed ^ 9));
            source.extend_from_slice(&cached);
            source.extend_from_slice(&basis[cut..]);
            let ids = |d: &[u8]| -> Vec<([u8; 16], u32)> {
                chunks(d).iter().map(|c| (short(&c.hash), c.len)).collect()
            };
            let (mut b, mut c) = (Known::default(), Known::default());
            b.add_basis(&ids(&basis));
            c.add_cache(&ids(&cached));
            let by_hash: HashMap<[u8; 16], Vec<u8>> = chunks(&cached)
                .iter()
                .map(|ch| {
                    let o = ch.offset as usize;
                    (short(&ch.hash), cached[o..o + ch.len as usize].to_vec())
                })
                .collect();
            let plan = Plan::new(&chunks(&source), &b, &c);
            let mut sent = 0usize;
            for start in (0..source.len()).step_by(block as usize) {
                let len = (source.len() - start).min(block as usize);
                let bytes = &source[start..start + len];
                let (parts, _) = plan.block(start as u64, len as u32);
                let mut buf = bytes.to_vec();
                if !encode(&mut buf, 0, &parts) {
                    prop_assert_eq!(&buf[..], bytes);
                    sent += len;
                    continue;
                }
                sent += buf.len();
                let plen = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
                prop_assert_eq!(plen, buf.len() - 4);
                let (out, _) = apply(
                    &buf[4..],
                    len as u32,
                    |from, o| {
                        let f = from as usize;
                        o.copy_from_slice(&basis[f..f + o.len()]);
                        Ok(())
                    },
                    |h, skip, o| {
                        let ch = by_hash.get(h).ok_or("missing")?;
                        o.copy_from_slice(&ch[skip as usize..skip as usize + o.len()]);
                        Ok(())
                    },
                )
                .unwrap();
                prop_assert!(out == bytes);
            }
            // What crossed is about what was new.
            prop_assert!(sent <= insert_len + source.len() / 4 + 3 * chunk::MAX_CHUNK as usize);
        }
    }

    /// What a delta program asks of the receiver is checked against the
    /// block and what it holds: pieces past the block's length, copies
    /// of chunks it does not hold or past a chunk's end, basis offsets
    /// past the basis. Each is an error (the block is then asked for
    /// whole), and nothing is allocated past the block.
    #[test]
    fn delta_programs_naming_what_is_not_there_fail() {
        use wire::program::{encode, Piece};
        let basis = vec![7u8; 1000];
        let chunk = [9u8; 100];
        let read_basis = |from: u64, out: &mut [u8]| -> Result<(), String> {
            let end = from.checked_add(out.len() as u64).ok_or("overflow")?;
            let b = basis
                .get(from as usize..end as usize)
                .ok_or("past the basis")?;
            out.copy_from_slice(b);
            Ok(())
        };
        let read_cache = |hash: &[u8; 16], skip: u32, out: &mut [u8]| -> Result<(), String> {
            if hash != &[1; 16] {
                return Err("not in the cache".into());
            }
            let end = skip as usize + out.len();
            out.copy_from_slice(chunk.get(skip as usize..end).ok_or("past the chunk")?);
            Ok(())
        };
        let run = |pieces: &[Piece], len: u32| {
            let mut prog = Vec::new();
            encode(pieces.iter().copied(), &mut prog);
            apply(&prog, len, read_basis, read_cache)
        };
        let good = [
            Piece::Literal(b"ab"),
            Piece::Basis { from: 10, len: 20 },
            Piece::Cache {
                hash: [1; 16],
                skip: 50,
                len: 50,
            },
        ];
        let (out, copied) = run(&good, 72).unwrap();
        assert_eq!((out.len(), copied), (72, 70));
        // Pieces that add up past the block, or short of it.
        assert!(run(&good, 71).is_err());
        assert!(run(&good, 73).is_err());
        let huge = [Piece::Basis {
            from: 0,
            len: u32::MAX,
        }];
        assert!(run(&huge, 1 << 20).is_err());
        // A basis offset past the basis, or at the end of u64.
        let e = run(&[Piece::Basis { from: 990, len: 20 }], 20).unwrap_err();
        assert!(e.contains("past the basis"), "{e}");
        assert!(run(
            &[Piece::Basis {
                from: u64::MAX,
                len: 20
            }],
            20
        )
        .is_err());
        // A chunk not held, or past its end.
        let e = run(
            &[Piece::Cache {
                hash: [2; 16],
                skip: 0,
                len: 10,
            }],
            10,
        )
        .unwrap_err();
        assert!(e.contains("not in the cache"), "{e}");
        assert!(run(
            &[Piece::Cache {
                hash: [1; 16],
                skip: 95,
                len: 10,
            }],
            10,
        )
        .is_err());
        // Not a program.
        assert!(apply(&[9, 9, 9], 3, read_basis, read_cache).is_err());
        assert!(apply(&[], 3, read_basis, read_cache).is_err());
    }
}
