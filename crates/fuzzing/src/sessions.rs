//! The receiving state machines under the fuzzer (S-1 … S-7): bytes are
//! read as a sequence of steps (`hostile::play`), so the fuzzer works
//! on manifests, blocks and datagrams instead of on a decoder's framing.
//! The player checks the rules after every step; a broken one panics.
//!
//! Every read past the end gives zeros, so any input is a valid program
//! and a longer one a longer play.

use hostile::play::{
    play_datagram, play_receiver, DgSetup, DgStep, RawChunk, RxSetup, RxStep, Seq,
};
use session::datagram::MAX_SEQ_AHEAD;
use wire::{BlockHeader, Entry, EntryKind, ErrorCode, Msg};

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        b
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        self.u32() as u64 | (self.u32() as u64) << 32
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.u8() as usize % from.len()]
    }
    fn empty(&self) -> bool {
        self.0.is_empty()
    }
}

const COMPONENTS: &[&str] = &[
    "a", "b", ".ssh", "run42", "f0", "f1", "f2", "x", "..", ".", "", "a\0b",
];

fn path(b: &mut Bytes) -> Vec<u8> {
    match b.u8() % 16 {
        0 => b"/etc/passwd".to_vec(),
        1 => vec![b'f'; 1 + b.u8() as usize * 16],
        n => {
            let parts: Vec<&str> = (0..1 + n % 3).map(|_| b.pick(COMPONENTS)).collect();
            parts.join("/").into_bytes()
        }
    }
}

fn size(b: &mut Bytes, bs: u64) -> u64 {
    match b.u8() % 10 {
        0..=5 => b.u8() as u64 % (4 * bs + 1),
        // Many blocks, within every budget: 4096 of 16 bytes.
        6 => 1 << 16,
        7 => 0xFFFF_FFFF * bs,
        8 => u64::MAX,
        _ => b.u64(),
    }
}

fn entry(b: &mut Bytes, bs: u64, n: u32) -> Entry {
    let id = match b.u8() {
        0..=15 => b.u8() as u32 % 8,
        _ => 100 + n,
    };
    let path = path(b);
    let kind = match b.u8() % 3 {
        0 => EntryKind::Dir {
            mode: 0o755,
            mtime: 0,
            mtime_nsec: 0,
        },
        1 => EntryKind::File {
            size: size(b, bs),
            mode: 0o644,
            mtime: 0,
            mtime_nsec: 0,
        },
        _ => EntryKind::Symlink,
    };
    let target = match (kind, b.u8() % 8) {
        (EntryKind::Symlink, 0) => vec![],
        (EntryKind::Symlink, _) => b"/etc".to_vec(),
        _ => vec![],
    };
    Entry {
        id,
        path,
        kind,
        target,
    }
}

/// A receiving session (P-15) fed a manifest and blocks by a peer.
pub fn receiver(d: &[u8]) {
    let mut b = Bytes(d);
    let (s0, s1) = (b.u8(), b.u8());
    let block_size = [16u32, 64 << 10][s0 as usize & 1];
    let bs = block_size as u64;
    const SOURCES: &[&str] = &["runs/run42", "x", "a", "dir/", "a/..", "/abs/b"];
    let asked = (s1 & 1 == 1).then(|| {
        let n = 1 + (s1 >> 1) as usize % 2;
        let sources = (0..n).map(|i| SOURCES[(s1 as usize >> (2 + i)) % SOURCES.len()]);
        (sources.map(String::from).collect(), s1 & 0x80 == 0)
    });
    let setup = RxSetup {
        block_size,
        // Not the default 2 GiB: libFuzzer's memory limit is 2 GiB too. The
        // property tests play the default (crates/session/tests/hostile.rs).
        budget: [64 << 20, 1 << 20, 20_000][(s0 >> 1) as usize % 3],
        gated: s0 & 8 != 0,
        expect_digests: s0 & 16 != 0,
        dry_run: s0 & 0xE0 == 0xE0,
        asked,
    };
    let mut steps = Vec::new();
    let mut n = 0;
    while !b.empty() && steps.len() < 256 {
        let step = match b.u8() % 16 {
            0..=2 => {
                n += 1;
                RxStep::Entry(entry(&mut b, bs, n))
            }
            3 => RxStep::End {
                right: b.u8() % 8 != 0,
                files: b.u8() as u64,
                bytes: b.u64(),
            },
            4..=6 => RxStep::Block {
                pick: b.u8() as u32,
                index: b.u8() as u32,
                fit: b.u8() % 16 != 0,
                intact: b.u8() % 16 != 0,
            },
            7 => RxStep::RawBlock(BlockHeader {
                file: b.u8() as u32 % 10,
                index: b.u8() as u32,
                offset: b.u64() % (8 * bs),
                len: b.u32() % (2 * block_size),
                hash: [3; 32],
                codec: wire::CODEC_NONE,
                wire_len: 0,
            }),
            8 => RxStep::Zeros {
                pick: b.u8() as u32,
                index: b.u8() as u32,
            },
            9 => RxStep::FileEnd {
                pick: b.u8() as u32,
                right: b.u8() % 16 != 0,
            },
            10 => RxStep::Digest {
                pick: b.u8() as u32,
            },
            11 => RxStep::Answer {
                pick: b.u8() as u32,
                skip: b.u8() % 4 == 0,
            },
            12 => RxStep::Hold {
                pick: b.u8() as u32,
                index: b.u8() as u32 % 8,
            },
            13 => RxStep::Kept {
                pick: b.u8() as u32,
                index: b.u8() as u32,
            },
            _ => RxStep::Msg(match b.u8() % 4 {
                0 => Msg::Digest {
                    file: b.u8() as u32 % 10,
                    digest: [b.u8(); 32],
                },
                1 => Msg::Kept(vec![(b.u8() as u32 % 10, b.u8() as u32 % 10)]),
                2 => Msg::Acks(vec![(0, 0)]),
                _ => Msg::Error {
                    code: ErrorCode::Other,
                    message: "bye".into(),
                },
            }),
        };
        steps.push(step);
    }
    let out = play_receiver(&setup, steps);
    assert!(out.peak_bookkeeping <= setup.budget);
}

fn seq(b: &mut Bytes) -> Seq {
    match b.u8() {
        0..=179 => Seq::Next,
        180..=209 => Seq::Ahead(1 + b.u8() as u64 % 50),
        210..=239 => Seq::Behind(1 + b.u8() as u64 % 50),
        240..=245 => Seq::Ahead(MAX_SEQ_AHEAD - 2 + b.u8() as u64 % 5),
        246..=250 => Seq::Abs(u64::MAX - b.u8() as u64 % 3),
        _ => Seq::Abs(b.u64()),
    }
}

/// The UDP channel's receiver (P-25) fed datagrams by a peer.
pub fn datagram_receiver(d: &[u8]) {
    let mut b = Bytes(d);
    let s0 = b.u8();
    let files = (0..s0 % 4).map(|_| 1 + b.u8() as u32 % 5).collect();
    let setup = DgSetup {
        files,
        complete: s0 & 4 != 0,
        max_bytes: [session::datagram::MAX_ASSEMBLY_BYTES, 20 << 20, 8 << 10]
            [(s0 >> 3) as usize % 3],
        max_blocks: [session::datagram::MAX_ASSEMBLIES, 2, 8][(s0 >> 5) as usize % 3],
    };
    let mut steps = Vec::new();
    while !b.empty() && steps.len() < 512 {
        let step = match b.u8() % 16 {
            0..=10 => {
                let (seq, pick, stray) = (seq(&mut b), b.u8() as u32 % 4, b.u8() == 0xFF);
                let (index, part) = (b.u8() as u32 % 6, b.u8() as u32 % 6);
                let raw = (b.u8() % 8 == 0).then(|| {
                    // Past the largest block, and large ones; a block of
                    // exactly the largest size costs a 16 MiB buffer a
                    // run, which the property tests play instead.
                    let block_len = match b.u8() % 8 {
                        0 => 1 << 20,
                        1 => (16 << 20) + 1,
                        2 => b.u32(),
                        _ => 1 + b.u32() % 5000,
                    };
                    let offset = match b.u8() % 4 {
                        0 => b.u32(),
                        _ => b.u32() % block_len.max(1),
                    };
                    let len = match b.u8() % 6 {
                        0 => 0,
                        1 => b.u32() % 70_000,
                        _ => 1 + b.u32() % 1500,
                    };
                    RawChunk {
                        offset,
                        block_len,
                        len,
                        first: offset == 0 || b.u8() & 1 == 1,
                    }
                });
                DgStep::Chunk {
                    seq,
                    pick,
                    stray,
                    index,
                    part,
                    raw,
                }
            }
            11 | 12 => DgStep::Signal(seq(&mut b)),
            13 | 14 => DgStep::Tick {
                ms: b.u8() as u32 * 2,
            },
            _ => DgStep::Reopen {
                pick: b.u8() as u32 % 4,
                index: b.u8() as u32 % 6,
            },
        };
        steps.push(step);
    }
    let out = play_datagram(&setup, steps);
    assert!(out.completed <= out.steps);
}
