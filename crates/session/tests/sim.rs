//! Deterministic simulation of whole transfers: the real sender and receiver
//! state machines joined by simulated streams with bandwidth, latency and
//! corruption, on a virtual clock. Gigabytes of transfer run in milliseconds;
//! a failing case prints its seed.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use session::{
    block_hash, Action, BlockRef, BlockVerdict, Next, ReceiverSession, SenderSession,
    DEFAULT_BLOCK_SIZE,
};
use wire::{BlockHeader, Entry, EntryKind, Msg};

/// xorshift64*: small, seeded, good enough for choosing faults.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

enum Event {
    ToReceiver(Msg),
    ToSender(Msg),
    Block {
        stream: usize,
        block: BlockRef,
        corrupt: bool,
    },
    StreamFree(usize),
    Wake,
}

struct Link {
    /// Bytes per second of each stream.
    rates: Vec<f64>,
    one_way: Duration,
    corrupt: f64,
}

struct Outcome {
    elapsed: Duration,
    placed: HashSet<u32>,
    retransmitted: u64,
    corrupted: u64,
    endgame: u64,
    acked_bytes: u64,
}

fn fake_hash(b: &BlockRef, seed: u64) -> [u8; 32] {
    let mut x = [0u8; 24];
    x[..4].copy_from_slice(&b.file.to_le_bytes());
    x[4..8].copy_from_slice(&b.index.to_le_bytes());
    x[8..16].copy_from_slice(&seed.to_le_bytes());
    x[16..].copy_from_slice(&b.offset.to_le_bytes());
    block_hash(&x)
}

fn manifest(sizes: &[u64]) -> Vec<Entry> {
    let mut v = vec![Entry {
        id: 0,
        path: b"top".to_vec(),
        kind: EntryKind::Dir {
            mode: 0o755,
            mtime: 1,
            mtime_nsec: 0,
        },
        target: vec![],
    }];
    for (i, &size) in sizes.iter().enumerate() {
        v.push(Entry {
            id: i as u32 + 1,
            path: format!("top/f{i}").into_bytes(),
            kind: EntryKind::File {
                size,
                mode: 0o644,
                mtime: 2,
                mtime_nsec: 3,
            },
            target: vec![],
        });
    }
    v
}

fn simulate(seed: u64, sizes: &[u64], link: &Link) -> Outcome {
    simulate_gated(seed, sizes, link, None)
}

/// With `skip_every: Some(n)` the receiver answers every file before it
/// is sent (P-31), skipping (P-32) each non-empty file whose id is a
/// multiple of `n`.
fn simulate_gated(seed: u64, sizes: &[u64], link: &Link, skip_every: Option<u32>) -> Outcome {
    let mut rng = Rng(seed | 1);
    let t0 = Instant::now();
    let mut now = t0;
    let bs = DEFAULT_BLOCK_SIZE;
    let mut tx = SenderSession::new(manifest(sizes), bs, 256 << 20);
    let mut rx = ReceiverSession::new(bs);
    if skip_every.is_some() {
        tx.gate();
        rx.gate();
    }
    let skipped = |id: u32| -> bool {
        skip_every.is_some_and(|n| id.is_multiple_of(n) && sizes[id as usize - 1] > 0)
    };
    let mut queue: BTreeMap<(Instant, u64), Event> = BTreeMap::new();
    let mut seq = 0u64;
    let mut push = |q: &mut BTreeMap<(Instant, u64), Event>, at: Instant, e: Event| {
        seq += 1;
        q.insert((at, seq), e);
    };
    let mut idle: Vec<bool> = vec![true; link.rates.len()];
    let mut placed = HashSet::new();
    let mut corrupted = 0;
    let mut steps = 0u64;
    loop {
        steps += 1;
        assert!(
            steps < 10_000_000,
            "seed {seed}: simulation did not converge"
        );
        // Drain both sides' outputs.
        while let Some(a) = rx.poll_action() {
            match a {
                Action::OpenFile { id, size, .. } => {
                    if skipped(id) {
                        rx.skip(id).unwrap();
                    } else {
                        rx.opened(id).unwrap();
                        if skip_every.is_some() && size > 0 {
                            rx.ready(id, vec![]);
                        }
                    }
                }
                Action::Finalize { id, .. } => {
                    placed.insert(id);
                    rx.placed(id);
                }
                Action::Finish { .. } => rx.complete(),
                Action::MakeDir { .. } | Action::MakeSymlink { .. } => {}
            }
        }
        while let Some(m) = tx.poll_control() {
            push(&mut queue, now + link.one_way, Event::ToReceiver(m));
        }
        while let Some(m) = rx.poll_control() {
            push(&mut queue, now + link.one_way, Event::ToSender(m));
        }
        if let Some(summary) = tx.finished() {
            let skipped_ids: Vec<u32> = (1..=sizes.len() as u32).filter(|&i| skipped(i)).collect();
            assert_eq!(summary.files as usize, sizes.len() - skipped_ids.len());
            assert_eq!(tx.skipped_files as usize, skipped_ids.len());
            let skipped_bytes: u64 = skipped_ids.iter().map(|&i| sizes[i as usize - 1]).sum();
            assert_eq!(
                tx.acked_bytes,
                sizes.iter().sum::<u64>() - skipped_bytes,
                "seed {seed}: every byte sent acknowledged once"
            );
            return Outcome {
                elapsed: now - t0,
                placed,
                retransmitted: tx.retransmitted,
                corrupted,
                endgame: tx.endgame_copies(),
                acked_bytes: tx.acked_bytes,
            };
        }
        // Idle streams pull work.
        let mut waiting = false;
        for (s, is_idle) in idle.iter_mut().enumerate() {
            if !*is_idle {
                continue;
            }
            match tx.next_block(now) {
                Next::Send(b) => {
                    *is_idle = false;
                    tx.block_read(&b, fake_hash(&b, seed)).unwrap();
                    let tx_time = Duration::from_secs_f64(b.len as f64 / link.rates[s]);
                    let corrupt = rng.chance(link.corrupt);
                    push(
                        &mut queue,
                        now + tx_time + link.one_way,
                        Event::Block {
                            stream: s,
                            block: b,
                            corrupt,
                        },
                    );
                    push(&mut queue, now + tx_time, Event::StreamFree(s));
                }
                Next::Wait => waiting = true,
                Next::Done => {}
            }
        }
        if waiting && queue.is_empty() {
            push(&mut queue, now + Duration::from_millis(50), Event::Wake);
        }
        let ((at, _), ev) = queue
            .pop_first()
            .unwrap_or_else(|| panic!("seed {seed}: deadlock, nothing in flight"));
        now = at;
        match ev {
            Event::ToReceiver(m) => rx.handle(m).unwrap(),
            Event::ToSender(m) => tx.handle(m, now).unwrap(),
            Event::StreamFree(s) => idle[s] = true,
            Event::Wake => {}
            Event::Block {
                stream,
                block,
                corrupt,
            } => {
                let real = fake_hash(&block, seed);
                let h = BlockHeader {
                    file: block.file,
                    index: block.index,
                    offset: block.offset,
                    len: block.len,
                    hash: real,
                    codec: wire::CODEC_NONE,
                    wire_len: block.len,
                };
                let computed = if corrupt {
                    corrupted += 1;
                    [0xEE; 32]
                } else {
                    real
                };
                match rx.block_arrived(&h, &computed).unwrap() {
                    BlockVerdict::Write => rx.block_written(block.file, block.index).unwrap(),
                    BlockVerdict::NotReady => {
                        push(
                            &mut queue,
                            now + Duration::from_millis(1),
                            Event::Block {
                                stream,
                                block,
                                corrupt,
                            },
                        );
                    }
                    BlockVerdict::Duplicate | BlockVerdict::Rejected => {}
                }
            }
        }
    }
}

const MB: f64 = 1e6;

#[test]
fn ten_gigabytes_over_four_streams_at_150ms() {
    let link = Link {
        rates: vec![25.0 * MB; 4],
        one_way: Duration::from_millis(75),
        corrupt: 0.0,
    };
    let out = simulate(1, &[10_000_000_000], &link);
    let ideal = 10e9 / (100.0 * MB);
    let secs = out.elapsed.as_secs_f64();
    assert!(secs < ideal * 1.02 + 1.0, "took {secs} s, ideal {ideal} s");
    assert_eq!(out.placed.len(), 1);
}

#[test]
fn corrupted_blocks_are_fetched_again_and_files_complete() {
    for seed in 1..=20 {
        let link = Link {
            rates: vec![50.0 * MB; 3],
            one_way: Duration::from_millis(20),
            corrupt: 0.05,
        };
        let sizes = [0, 1, 4 << 20, (4 << 20) + 1, 300_000_000];
        let out = simulate(seed, &sizes, &link);
        assert_eq!(out.placed.len(), sizes.len(), "seed {seed}");
        assert_eq!(
            out.retransmitted, out.corrupted,
            "seed {seed}: every rejected block re-sent once"
        );
    }
}

#[test]
fn a_slow_stream_does_not_hold_the_others_back() {
    // One stream is 100x slower than the other three.
    let link = Link {
        rates: vec![40.0 * MB, 40.0 * MB, 40.0 * MB, 0.4 * MB],
        one_way: Duration::from_millis(50),
        corrupt: 0.0,
    };
    let out = simulate(7, &[2_000_000_000], &link);
    let fast_only = 2e9 / (120.0 * MB);
    let secs = out.elapsed.as_secs_f64();
    // Without work stealing the slow stream's quarter would take 1250 s.
    assert!(
        secs < fast_only * 1.1 + 1.0,
        "took {secs} s, fast streams alone need {fast_only} s"
    );
    assert!(out.endgame <= 1, "endgame copies: {}", out.endgame);
}

#[test]
fn ten_thousand_small_files_are_pipelined() {
    // 10,000 files of 10 kB at 150 ms RTT: must not take 10,000 round trips.
    let link = Link {
        rates: vec![10.0 * MB; 4],
        one_way: Duration::from_millis(75),
        corrupt: 0.0,
    };
    let sizes = vec![10_000u64; 10_000];
    let out = simulate(3, &sizes, &link);
    let secs = out.elapsed.as_secs_f64();
    assert!(secs < 10.0, "took {secs} s for 100 MB of small files");
    assert_eq!(out.placed.len(), 10_000);
}

#[test]
fn corruption_with_a_straggler_stream_still_completes() {
    // Nacks race endgame copies here; every file must still complete and
    // every byte be acknowledged exactly once.
    for seed in 1..=30 {
        let link = Link {
            rates: vec![30.0 * MB, 30.0 * MB, 0.3 * MB],
            one_way: Duration::from_millis(40),
            corrupt: 0.1,
        };
        let sizes = [50_000_000, 3, 12 << 20];
        let out = simulate(seed, &sizes, &link);
        assert_eq!(out.placed.len(), sizes.len(), "seed {seed}");
        assert_eq!(out.acked_bytes, sizes.iter().sum::<u64>());
    }
}

#[test]
fn answered_files_cost_one_round_trip_not_one_per_file() {
    // 10,000 small files at 150 ms RTT again, each answered by the
    // receiver before it is sent, a third skipped as already in place.
    let link = Link {
        rates: vec![10.0 * MB; 4],
        one_way: Duration::from_millis(75),
        corrupt: 0.0,
    };
    let sizes = vec![10_000u64; 10_000];
    let plain = simulate(3, &sizes, &link).elapsed.as_secs_f64();
    let out = simulate_gated(3, &sizes, &link, Some(3));
    let secs = out.elapsed.as_secs_f64();
    assert!(secs < plain + 0.5, "gated {secs} s against {plain} s");
    assert_eq!(out.placed.len(), 10_000 - 3333);
    // With corruption and big files, skipped files stay skipped.
    for seed in 1..=5 {
        let link = Link {
            rates: vec![50.0 * MB; 3],
            one_way: Duration::from_millis(20),
            corrupt: 0.05,
        };
        let sizes = [0, 1, 4 << 20, (4 << 20) + 1, 300_000_000, 5];
        let out = simulate_gated(seed, &sizes, &link, Some(2));
        assert_eq!(out.placed.len(), 3, "seed {seed}");
    }
}
