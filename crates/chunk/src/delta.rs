//! Rebuilding a file from chunks the receiver already holds (P-31).
//!
//! The receiver announces the chunks of its basis for a file (the
//! destination's old version or a `--basis` file) in order, and those of
//! its chunk cache. The sender cuts its source into chunks the same way and
//! looks each up: a chunk of the basis becomes a copy from the basis at its
//! offset, a cached chunk a copy from the cache by hash, any other chunk
//! literal bytes. The plan is then cut at block boundaries, so each block
//! travels as its own small program. Correctness never rests on the
//! index: the receiver's block and file hashes still check the result.

use std::collections::HashMap;

use crate::cdc::ChunkRef;

/// The 16-byte prefix of a chunk's BLAKE3 hash that names it on the wire.
pub fn short(hash: &[u8; 32]) -> [u8; 16] {
    let mut s = [0u8; 16];
    s.copy_from_slice(&hash[..16]);
    s
}

/// What the receiver said it holds, as the sender records it.
#[derive(Debug, Default, Clone)]
pub struct Known {
    /// Basis chunks by short hash: offset in the basis, length.
    basis: HashMap<[u8; 16], (u64, u32)>,
    /// Where the next announced basis chunk starts.
    basis_end: u64,
    /// Cached chunks by short hash: length.
    cache: HashMap<[u8; 16], u32>,
}

impl Known {
    /// The next chunks of the basis, in order. The lengths are the
    /// receiver's word: offsets saturate rather than wrap (a copy past
    /// the basis's end fails at the receiver and is sent again whole).
    pub fn add_basis(&mut self, chunks: &[([u8; 16], u32)]) {
        for &(hash, len) in chunks {
            self.basis.entry(hash).or_insert((self.basis_end, len));
            self.basis_end = self.basis_end.saturating_add(len as u64);
        }
    }

    /// Chunks of the receiver's cache.
    pub fn add_cache(&mut self, chunks: &[([u8; 16], u32)]) {
        for &(hash, len) in chunks {
            self.cache.insert(hash, len);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.basis.is_empty() && self.cache.is_empty()
    }

    /// Bytes of basis announced.
    pub fn basis_len(&self) -> u64 {
        self.basis_end
    }
}

/// Where a stretch of the source comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// Sent over the wire.
    Literal,
    /// The basis at this offset.
    Basis(u64),
    /// The cached chunk with this short hash, from its start.
    Cache([u8; 16]),
}

/// A stretch of the source and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Offset in the source.
    pub at: u64,
    pub len: u64,
    pub from: From,
}

/// A piece of one block: `len` bytes at `at` within the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Literal { at: u32, len: u32 },
    Basis { from: u64, len: u32 },
    Cache { hash: [u8; 16], skip: u32, len: u32 },
}

/// How to rebuild a source from what the receiver holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// In source order, covering it exactly.
    pub spans: Vec<Span>,
    /// Source bytes that must be sent.
    pub literal_bytes: u64,
    /// Source bytes the receiver copies from what it holds.
    pub copied_bytes: u64,
}

impl Plan {
    /// The plan for a source of chunks `source` (in order, covering it)
    /// against the receiver's basis for this file and its cache.
    pub fn new(source: &[ChunkRef], basis: &Known, cache: &Known) -> Plan {
        let mut plan = Plan::default();
        for c in source {
            let len = c.len as u64;
            let key = short(&c.hash);
            let from = match (basis.basis.get(&key), cache.cache.get(&key)) {
                (Some(&(off, l)), _) if l == c.len => From::Basis(off),
                (_, Some(&l)) if l == c.len => From::Cache(key),
                _ => From::Literal,
            };
            if from == From::Literal {
                plan.literal_bytes += len;
            } else {
                plan.copied_bytes += len;
            }
            plan.push(Span {
                at: c.offset,
                len,
                from,
            });
        }
        plan
    }

    /// Appends `s`, merging it into the last span where they continue
    /// each other (cached chunks stay separate: each is named by hash).
    fn push(&mut self, s: Span) {
        if let Some(last) = self.spans.last_mut() {
            let joins = match (last.from, s.from) {
                (From::Literal, From::Literal) => true,
                (From::Basis(a), From::Basis(b)) => a.checked_add(last.len) == Some(b),
                _ => false,
            };
            if joins && last.at + last.len == s.at {
                last.len += s.len;
                return;
            }
        }
        self.spans.push(s);
    }

    /// Whether anything at all comes from the receiver's side.
    pub fn copies_anything(&self) -> bool {
        self.copied_bytes > 0
    }

    /// The parts of the block at `offset` of `len` bytes, in order, and
    /// how many of its bytes are literal.
    pub fn block(&self, offset: u64, len: u32) -> (Vec<Part>, u32) {
        let end = offset + len as u64;
        let first = self.spans.partition_point(|s| s.at + s.len <= offset);
        let mut parts = Vec::new();
        let mut literal = 0u32;
        for s in &self.spans[first..] {
            if s.at >= end {
                break;
            }
            let lo = s.at.max(offset);
            let hi = (s.at + s.len).min(end);
            let n = (hi - lo) as u32;
            let skip = lo - s.at;
            parts.push(match s.from {
                From::Literal => {
                    literal += n;
                    Part::Literal {
                        at: (lo - offset) as u32,
                        len: n,
                    }
                }
                From::Basis(b) => Part::Basis {
                    from: b.saturating_add(skip),
                    len: n,
                },
                From::Cache(hash) => Part::Cache {
                    hash,
                    skip: skip as u32,
                    len: n,
                },
            });
        }
        (parts, literal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cdc::chunks;
    use proptest::prelude::*;

    use codec::samples::noise;

    fn ids(c: &[ChunkRef]) -> Vec<([u8; 16], u32)> {
        c.iter().map(|c| (short(&c.hash), c.len)).collect()
    }

    /// Rebuilds `source` block by block as a receiver holding `basis` and
    /// a cache of `cached` would.
    fn rebuild(source: &[u8], basis: &[u8], cached: &[u8], block: u32) -> (Vec<u8>, Plan) {
        let mut known = Known::default();
        known.add_basis(&ids(&chunks(basis)));
        let cache: HashMap<[u8; 16], &[u8]> = chunks(cached)
            .iter()
            .map(|c| {
                let o = c.offset as usize;
                (short(&c.hash), &cached[o..o + c.len as usize])
            })
            .collect();
        known.add_cache(&ids(&chunks(cached)));
        let plan = Plan::new(&chunks(source), &known, &known);
        let mut out = Vec::with_capacity(source.len());
        for start in (0..source.len()).step_by(block as usize) {
            let len = (source.len() - start).min(block as usize) as u32;
            let (parts, literal) = plan.block(start as u64, len);
            let mut counted = 0;
            for p in parts {
                match p {
                    Part::Literal { at, len } => {
                        counted += len;
                        let o = start + at as usize;
                        out.extend_from_slice(&source[o..o + len as usize]);
                    }
                    Part::Basis { from, len } => {
                        out.extend_from_slice(&basis[from as usize..from as usize + len as usize])
                    }
                    Part::Cache { hash, skip, len } => {
                        let c = cache[&hash];
                        out.extend_from_slice(&c[skip as usize..(skip + len) as usize]);
                    }
                }
            }
            assert_eq!(counted, literal);
            assert_eq!(out.len(), start + len as usize);
        }
        (out, plan)
    }

    const MIB: usize = 1 << 20;

    #[test]
    fn an_append_sends_only_the_tail() {
        let old = noise(64 * MIB, 1);
        let mut new = old.clone();
        new.extend_from_slice(&noise(MIB, 2));
        let (out, plan) = rebuild(&new, &old, &[], 1 << 20);
        assert!(out == new);
        // The appended MiB and at most the old last chunk, re-cut.
        assert!(
            plan.literal_bytes <= (MIB + 2 * crate::MAX_CHUNK as usize) as u64,
            "{} literal bytes",
            plan.literal_bytes
        );
    }

    #[test]
    fn an_insertion_in_the_middle_sends_about_what_was_inserted() {
        let old = noise(64 * MIB, 3);
        let mut new = old[..32 * MIB].to_vec();
        new.extend_from_slice(&noise(MIB, 4));
        new.extend_from_slice(&old[32 * MIB..]);
        let (out, plan) = rebuild(&new, &old, &[], 1 << 20);
        assert!(out == new);
        let fraction = plan.literal_bytes as f64 / new.len() as f64;
        // 1 MiB in 65 MiB is 1.5%; the chunks the insertion cuts add a
        // few hundred KiB at most.
        assert!(fraction < 0.02, "{:.4} of the file sent", fraction);
        // An unchanged stretch is one span.
        assert!(plan.spans.len() <= 5, "{:?}", plan.spans);
    }

    #[test]
    fn chunks_come_from_the_cache_when_the_basis_lacks_them() {
        let a = noise(3 * MIB, 5);
        let b = noise(2 * MIB, 6);
        let mut source = b.clone();
        source.extend_from_slice(&a);
        // The basis is `a`; `b` was seen in an earlier transfer.
        let (out, plan) = rebuild(&source, &a, &b, 1 << 20);
        assert!(out == source);
        assert!(plan.literal_bytes <= 2 * crate::MAX_CHUNK as u64);
        assert!(plan.spans.iter().any(|s| matches!(s.from, From::Cache(_))));
    }

    #[test]
    fn no_basis_sends_everything_and_identical_sends_nothing() {
        let data = noise(5 * MIB, 5);
        let (out, plan) = rebuild(&data, &[], &[], 1 << 20);
        assert!(out == data);
        assert_eq!(plan.literal_bytes, data.len() as u64);
        assert!(!plan.copies_anything());
        let (out, plan) = rebuild(&data, &data, &[], 1 << 20);
        assert!(out == data);
        assert_eq!(plan.literal_bytes, 0);
        assert_eq!(
            plan.spans,
            vec![Span {
                at: 0,
                len: data.len() as u64,
                from: From::Basis(0)
            }]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any source against any basis and any cache rebuilds byte-exact,
        /// whatever the block size.
        #[test]
        fn any_source_basis_and_cache_rebuild_exactly(
            seed in any::<u64>(),
            base_len in 0usize..600_000,
            cache_len in 0usize..300_000,
            edits in proptest::collection::vec((0usize..600_000, 0usize..70_000, any::<bool>()), 0..6),
            block in 1u32..300_000,
        ) {
            let basis = noise(base_len, seed);
            let cached = noise(cache_len, seed ^ 99);
            let mut source = basis.clone();
            for (i, (at, len, insert)) in edits.into_iter().enumerate() {
                let at = at.min(source.len());
                if insert {
                    let bytes = if i % 2 == 0 {
                        noise(len, seed ^ (i as u64 + 7))
                    } else {
                        cached[..len.min(cached.len())].to_vec()
                    };
                    source.splice(at..at, bytes);
                } else {
                    let end = (at + len).min(source.len());
                    source.drain(at..end);
                }
            }
            let (out, plan) = rebuild(&source, &basis, &cached, block);
            prop_assert!(out == source);
            prop_assert_eq!(plan.literal_bytes + plan.copied_bytes, source.len() as u64);
        }
    }
}
