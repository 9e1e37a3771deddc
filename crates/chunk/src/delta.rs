//! Rebuilding a file from chunks the receiver already holds.
//!
//! The receiver's basis (the destination's old version, a `--basis` file,
//! later its chunk cache) is indexed by chunk hash. The source's chunks are
//! looked up in it: each found chunk becomes a copy from the basis, each
//! other a literal range of the source that must cross the wire. Adjacent
//! operations are merged, so an unchanged stretch is one copy. Correctness
//! never rests on the index: a chunk is copied only if its hash matches,
//! and the transfer's block and file hashes still check the result.

use std::collections::HashMap;

use crate::cdc::ChunkRef;

/// Where the chunks of a basis are, by hash.
#[derive(Debug, Default, Clone)]
pub struct Index {
    by_hash: HashMap<[u8; 32], (u64, u32)>,
}

impl Index {
    pub fn new(basis: &[ChunkRef]) -> Index {
        let mut by_hash = HashMap::with_capacity(basis.len());
        for c in basis {
            by_hash.entry(c.hash).or_insert((c.offset, c.len));
        }
        Index { by_hash }
    }

    pub fn find(&self, c: &ChunkRef) -> Option<u64> {
        self.by_hash
            .get(&c.hash)
            .filter(|(_, len)| *len == c.len)
            .map(|(off, _)| *off)
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

/// One step of rebuilding the source, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `len` bytes from the basis at `from`.
    Copy { from: u64, len: u64 },
    /// `len` bytes of the source at `offset`, sent over the wire.
    Literal { offset: u64, len: u64 },
}

/// How to rebuild a source from a basis.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub ops: Vec<Op>,
    /// Source bytes that must be sent.
    pub literal_bytes: u64,
    /// Source bytes taken from the basis.
    pub copied_bytes: u64,
}

impl Plan {
    /// The plan for a source of chunks `source` against `index`.
    pub fn new(source: &[ChunkRef], index: &Index) -> Plan {
        let mut plan = Plan::default();
        for c in source {
            let len = c.len as u64;
            let op = match index.find(c) {
                Some(from) => {
                    plan.copied_bytes += len;
                    Op::Copy { from, len }
                }
                None => {
                    plan.literal_bytes += len;
                    Op::Literal {
                        offset: c.offset,
                        len,
                    }
                }
            };
            plan.push(op);
        }
        plan
    }

    /// Appends `op`, merging it into the last one where they continue
    /// each other.
    fn push(&mut self, op: Op) {
        match (self.ops.last_mut(), op) {
            (Some(Op::Copy { from, len }), Op::Copy { from: f, len: l }) if *from + *len == f => {
                *len += l
            }
            (Some(Op::Literal { offset, len }), Op::Literal { offset: o, len: l })
                if *offset + *len == o =>
            {
                *len += l
            }
            _ => self.ops.push(op),
        }
    }
}

/// Rebuilds the source: copies from `basis`, literals from `literal`
/// (offset and length in the source), in order.
pub fn apply<'a>(
    plan: &Plan,
    basis: &[u8],
    mut literal: impl FnMut(u64, u64) -> &'a [u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity((plan.copied_bytes + plan.literal_bytes) as usize);
    for op in &plan.ops {
        match *op {
            Op::Copy { from, len } => {
                out.extend_from_slice(&basis[from as usize..(from + len) as usize])
            }
            Op::Literal { offset, len } => out.extend_from_slice(literal(offset, len)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cdc::chunks;
    use proptest::prelude::*;

    use codec::samples::noise;

    fn rebuild(source: &[u8], basis: &[u8]) -> (Vec<u8>, Plan) {
        let plan = Plan::new(&chunks(source), &Index::new(&chunks(basis)));
        let out = apply(&plan, basis, |o, l| &source[o as usize..(o + l) as usize]);
        (out, plan)
    }

    const MIB: usize = 1 << 20;

    #[test]
    fn an_append_sends_only_the_tail() {
        let old = noise(64 * MIB, 1);
        let mut new = old.clone();
        new.extend_from_slice(&noise(MIB, 2));
        let (out, plan) = rebuild(&new, &old);
        assert!(out == new);
        println!(
            "append: {} literal bytes for a 1 MiB append",
            plan.literal_bytes
        );
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
        let (out, plan) = rebuild(&new, &old);
        assert!(out == new);
        let fraction = plan.literal_bytes as f64 / new.len() as f64;
        println!(
            "insertion: {} literal bytes ({:.3}% of the file) in {} operations",
            plan.literal_bytes,
            fraction * 100.0,
            plan.ops.len()
        );
        // 1 MiB in 65 MiB is 1.5%; the chunks the insertion cuts add a
        // few hundred KiB at most.
        assert!(fraction < 0.02, "{:.4} of the file sent", fraction);
        // An unchanged stretch is one operation.
        assert!(plan.ops.len() <= 5, "{:?}", plan.ops);
    }

    #[test]
    fn no_basis_sends_everything_and_identical_sends_nothing() {
        let data = noise(5 * MIB, 5);
        let (out, plan) = rebuild(&data, &[]);
        assert!(out == data);
        assert_eq!(plan.literal_bytes, data.len() as u64);
        let (out, plan) = rebuild(&data, &data);
        assert!(out == data);
        assert_eq!(plan.literal_bytes, 0);
        assert_eq!(
            plan.ops,
            vec![Op::Copy {
                from: 0,
                len: data.len() as u64
            }]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any source against any basis rebuilds byte-exact.
        #[test]
        fn any_source_and_basis_rebuild_exactly(
            seed in any::<u64>(),
            base_len in 0usize..600_000,
            edits in proptest::collection::vec((0usize..600_000, 0usize..70_000, any::<bool>()), 0..6),
        ) {
            let basis = noise(base_len, seed);
            let mut source = basis.clone();
            for (i, (at, len, insert)) in edits.into_iter().enumerate() {
                let at = at.min(source.len());
                if insert {
                    let bytes = noise(len, seed ^ (i as u64 + 7));
                    source.splice(at..at, bytes);
                } else {
                    let end = (at + len).min(source.len());
                    source.drain(at..end);
                }
            }
            let (out, plan) = rebuild(&source, &basis);
            prop_assert!(out == source);
            prop_assert_eq!(plan.literal_bytes + plan.copied_bytes, source.len() as u64);
        }
    }
}
