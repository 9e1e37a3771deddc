//! Structure-aware property tests of the receiving state machines (S-1 …
//! S-7): proptest strategies make plausible but hostile peers (entries of
//! absurd sizes, repeated paths, links and then entries inside them,
//! blocks at wrong offsets and indices, sequence numbers far ahead or at
//! 2^64, chunks of blocks nobody announced, headers that contradict each
//! other), and `hostile::play` plays them against a `ReceiverSession`
//! and a `DatagramReceiver`, checking its rules after every step. Here a
//! counting allocator also checks that what the heap grows by stays within
//! the budget and the assembly limit.
//!
//! `PROPTEST_CASES=100000 cargo test --release -p hostile --test sessions`
//! runs longer; docs/RELIABILITY.md has the figures.

use hostile::play::{
    play_datagram, play_receiver, DgSetup, DgStep, RawChunk, RxSetup, RxStep, Seq,
};
use proptest::prelude::*;
use session::datagram::MAX_SEQ_AHEAD;
use wire::{BlockHeader, Entry, EntryKind, ErrorCode, Msg};

// ---- the heap, counted per thread (the other test's thread allocates too)

#[path = "../../session/tests/common/counting.rs"]
mod counting;
use counting::{Counting, LIVE, PEAK};

#[global_allocator]
static ALLOC: Counting = Counting;

/// The most this thread held at once above what it held before `f`.
fn heap_peak_of(f: impl FnOnce()) -> usize {
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    f();
    (PEAK.with(|p| p.get()) - base).max(0) as usize
}

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        // PROPTEST_CASES, when set, wins.
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(n),
        ..ProptestConfig::default()
    }
}

// ---- receiving sessions

const DIRS: &[&str] = &["a", "b", ".ssh", "run42"];
const LEAVES: &[&str] = &[
    "a", "b", ".ssh", "run42", "f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9",
];

fn odd() -> impl Strategy<Value = String> {
    proptest::sample::select(&["..", ".", "", "a\0b"][..]).prop_map(str::to_string)
}

/// Paths over a small alphabet, so that repeats and entries under earlier
/// ones are common; now and then one `components` refuses.
fn path() -> impl Strategy<Value = Vec<u8>> {
    let dir =
        prop_oneof![200 => proptest::sample::select(DIRS).prop_map(str::to_string), 1 => odd()];
    let leaf =
        prop_oneof![200 => proptest::sample::select(LEAVES).prop_map(str::to_string), 1 => odd()];
    prop_oneof![
        300 => (proptest::collection::vec(dir, 0..3), leaf).prop_map(|(mut c, l)| {
            c.push(l);
            c.join("/").into_bytes()
        }),
        1 => Just(b"/etc/passwd".to_vec()),
        1 => (1usize..200).prop_map(|n| vec![b'f'; n * 20]),
    ]
}

fn size(bs: u32) -> impl Strategy<Value = u64> {
    let bs = bs as u64;
    prop_oneof![
        40 => 0..4 * bs + 1,
        2 => Just(1u64 << 20),
        1 => Just(0xFFFF_FFFF * bs),
        1 => Just(u64::MAX),
        1 => any::<u64>(),
    ]
}

/// An entry; its id is replaced by a fresh one, mostly (see `rx_case`).
fn entry(bs: u32) -> impl Strategy<Value = Entry> {
    let kind = prop_oneof![
        3 => Just(EntryKind::Dir { mode: 0o755, mtime: 0, mtime_nsec: 0 }),
        5 => size(bs).prop_map(|size| EntryKind::File { size, mode: 0o644, mtime: 0, mtime_nsec: 0 }),
        2 => Just(EntryKind::Symlink),
    ];
    (
        0u32..8,
        path(),
        kind,
        prop_oneof![20 => Just(b"/etc".to_vec()), 1 => Just(vec![])],
    )
        .prop_map(|(id, path, kind, target)| Entry {
            id,
            path,
            target: if kind == EntryKind::Symlink {
                target
            } else {
                vec![]
            },
            kind,
        })
}

/// What a peer does once the manifest is under way: mostly what an honest
/// sender does, now and then something no honest sender does.
fn rx_step(bs: u32) -> impl Strategy<Value = RxStep> {
    let bs64 = bs as u64;
    prop_oneof![
        // Honest, or nearly.
        40 => (any::<u32>(), 0u32..8, prop::bool::weighted(0.97), prop::bool::weighted(0.95))
            .prop_map(|(pick, index, fit, intact)| RxStep::Block { pick, index, fit, intact }),
        6 => (any::<u32>(), 0u32..8).prop_map(|(pick, index)| RxStep::Zeros { pick, index }),
        8 => (any::<u32>(), prop::bool::weighted(0.95))
            .prop_map(|(pick, right)| RxStep::FileEnd { pick, right }),
        4 => any::<u32>().prop_map(|pick| RxStep::Digest { pick }),
        6 => (any::<u32>(), prop::bool::weighted(0.3)).prop_map(|(pick, skip)| RxStep::Answer { pick, skip }),
        3 => (any::<u32>(), 0u32..8).prop_map(|(pick, index)| RxStep::Hold { pick, index }),
        3 => (any::<u32>(), 0u32..8).prop_map(|(pick, index)| RxStep::Kept { pick, index }),
        // Hostile.
        1 => entry(bs).prop_map(RxStep::Entry),
        1 => (0u32..10, 0u32..10, 0u64..8 * bs64, 0u32..2 * bs)
            .prop_map(|(file, index, offset, len)| RxStep::RawBlock(BlockHeader {
                file, index, offset, len, hash: [3; 32], codec: wire::CODEC_NONE, wire_len: len,
            })),
        1 => (any::<bool>(), 0u64..10, any::<u64>())
            .prop_map(|(right, files, bytes)| RxStep::End { right, files, bytes }),
        1 => prop_oneof![
            (0u32..10, any::<[u8; 32]>()).prop_map(|(file, digest)| Msg::Digest { file, digest }),
            proptest::collection::vec((0u32..10, 0u32..10), 0..4).prop_map(Msg::Kept),
            Just(Msg::Acks(vec![(0, 0)])),
            Just(Msg::Error { code: ErrorCode::Other, message: "bye".into() }),
        ]
        .prop_map(RxStep::Msg),
    ]
}

fn rx_setup() -> impl Strategy<Value = RxSetup> {
    let asked = prop_oneof![
        3 => Just(None),
        1 => (
            proptest::collection::vec(
                proptest::sample::select(&["runs/run42", "x", "a", "dir/", "a/..", "/abs/b"][..]),
                1..3,
            ),
            prop::bool::weighted(0.8),
        )
            .prop_map(|(s, r)| Some((s.into_iter().map(String::from).collect(), r))),
    ];
    (
        prop_oneof![Just(16u32), Just(64 << 10)],
        prop_oneof![
            Just(session::DEFAULT_BUDGET),
            Just(1u64 << 20),
            Just(20_000)
        ],
        any::<bool>(),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.1),
        asked,
    )
        .prop_map(
            |(block_size, budget, gated, expect_digests, dry_run, asked)| RxSetup {
                block_size,
                budget,
                gated,
                expect_digests,
                dry_run,
                asked,
            },
        )
}

/// A manifest of up to 12 entries, mostly with fresh ids, its end (with
/// the right totals, mostly), then up to 48 other steps.
fn rx_case() -> impl Strategy<Value = (RxSetup, Vec<RxStep>)> {
    rx_setup().prop_flat_map(|setup| {
        let bs = setup.block_size;
        let entries = proptest::collection::vec((entry(bs), prop::bool::weighted(0.95)), 0..12);
        let end = prop_oneof![
            8 => Just(Some(RxStep::End { right: true, files: 0, bytes: 0 })),
            1 => Just(None),
        ];
        let rest = proptest::collection::vec(rx_step(bs), 0..48);
        (Just(setup), entries, end, rest).prop_map(|(setup, entries, end, rest)| {
            let mut steps: Vec<RxStep> = entries
                .into_iter()
                .enumerate()
                .map(|(i, (mut e, fresh))| {
                    if fresh {
                        e.id = 100 + i as u32;
                    }
                    RxStep::Entry(e)
                })
                .collect();
            steps.extend(end);
            steps.extend(rest);
            (setup, steps)
        })
    })
}

proptest! {
    #![proptest_config(cases(3000))]

    /// Whatever the peer sends: no panic, the session's rules hold at
    /// every step (`hostile::play`), the bookkeeping stays within the
    /// budget, and so does the heap (with 1 MiB for the player's own
    /// records); an error is a `ReceiverError` with a code.
    #[test]
    fn a_hostile_sender_never_breaks_a_receiving_session((setup, steps) in rx_case()) {
        let budget = setup.budget;
        let mut out = None;
        let peak = heap_peak_of(|| out = Some(play_receiver(&setup, steps)));
        let out = out.unwrap();
        prop_assert!(out.peak_bookkeeping <= budget);
        prop_assert!((peak as u64) <= budget / 4 * 5 + (1 << 20), "heap grew by {peak}, budget {budget}");
        if let Some(e) = out.error {
            let _ = e.code();
            prop_assert!(!e.to_string().is_empty());
        }
    }
}

// ---- sending sessions (P-43 R-1 … R-5): a hostile receiver's answers

/// What a receiver may answer, valid or not: acks and nacks of any block,
/// floods of chunks and held blocks, answers for files that are not
/// waiting, deleted paths, notes, and messages no receiver sends.
fn tx_msg(files: u32) -> impl Strategy<Value = Msg> {
    let file = prop_oneof![10 => 0..files + 1, 1 => Just(wire::CACHE_FILE), 1 => any::<u32>()];
    let index = prop_oneof![10 => 0u32..8, 1 => any::<u32>()];
    let chunk = (any::<[u8; 16]>(), 0u32..1 << 20);
    prop_oneof![
        20 => proptest::collection::vec((file.clone(), index.clone()), 0..8).prop_map(Msg::Acks),
        10 => (file.clone(), index.clone()).prop_map(|(file, index)| Msg::Nack { file, index }),
        5 => file.clone().prop_map(|file| Msg::FileDone { file }),
        20 => (file.clone(), proptest::collection::vec(chunk, 0..2000))
            .prop_map(|(file, chunks)| Msg::Chunks { file, chunks }),
        20 => (file.clone(), proptest::collection::vec((index.clone(), any::<[u8; 32]>()), 0..wire::HAVE_PER_MESSAGE))
            .prop_map(|(file, blocks)| Msg::Have { file, blocks }),
        5 => proptest::collection::vec(file.clone(), 0..4).prop_map(Msg::Ready),
        5 => proptest::collection::vec(file.clone(), 0..4).prop_map(Msg::Skip),
        10 => (1usize..wire::DELETED_PER_MESSAGE, 1usize..4096)
            .prop_map(|(n, len)| Msg::Deleted(vec![vec![b'd'; len]; n])),
        3 => ".{0,100}".prop_map(|text| Msg::Note { kind: wire::NoteKind::Other, text }),
        1 => Just(Msg::Done(wire::Summary::default())),
        1 => Just(Msg::Welcome),
        1 => (file, index).prop_map(|(file, index)| Msg::Zeros(vec![(file, index)])),
    ]
}

proptest! {
    #![proptest_config(cases(300))]

    /// Whatever the receiver answers: no panic, the bookkeeping stays
    /// within the budget the session was admitted with, and the heap too
    /// (with 4 MiB for the deleted paths kept to show and 1 MiB for the
    /// player); an error is a `SenderError` with a code.
    #[test]
    fn a_hostile_receiver_never_breaks_a_sending_session(
        sizes in proptest::collection::vec(0u64..1 << 20, 1..6),
        (gated, dedup, delete) in (any::<bool>(), any::<bool>(), any::<bool>()),
        budget_kib in 64u64..4096,
        msgs in proptest::collection::vec(tx_msg(6), 1..40),
    ) {
        let entries: Vec<Entry> = sizes.iter().enumerate().map(|(i, &size)| Entry {
            id: i as u32,
            path: format!("f{i}").into_bytes(),
            kind: EntryKind::File { size, mode: 0o644, mtime: 0, mtime_nsec: 0 },
            target: vec![],
        }).collect();
        let mut tx = session::SenderSession::new(entries, 4096, 1 << 20);
        if gated {
            tx.gate();
        }
        tx.expect(&wire::SyncOptions { dedup, delete, gated, ..Default::default() });
        let budget = tx.bookkeeping() + (budget_kib << 10);
        tx.admit(budget, None).unwrap();
        let now = std::time::Instant::now();
        let mut error = None;
        let peak = heap_peak_of(|| {
            for m in msgs {
                if let Err(e) = tx.handle(m, now) {
                    error = Some(e);
                    break;
                }
                assert!(tx.bookkeeping() <= budget);
            }
        });
        prop_assert!(tx.bookkeeping() <= budget);
        prop_assert!((peak as u64) <= budget / 4 * 5 + (5 << 20), "heap grew by {peak}, budget {budget}");
        if let Some(e) = error {
            let _ = e.code();
            prop_assert!(!e.to_string().is_empty());
        }
    }
}

// ---- the datagram receiver

fn seq() -> impl Strategy<Value = Seq> {
    prop_oneof![
        200 => Just(Seq::Next),
        30 => (1u64..50).prop_map(Seq::Ahead),
        30 => (1u64..50).prop_map(Seq::Behind),
        1 => (MAX_SEQ_AHEAD - 2..MAX_SEQ_AHEAD + 3).prop_map(Seq::Ahead),
        1 => (0u64..3).prop_map(|n| Seq::Abs(u64::MAX - n)),
        1 => any::<u64>().prop_map(Seq::Abs),
    ]
}

fn raw_chunk() -> impl Strategy<Value = RawChunk> {
    let block_len = prop_oneof![
        10 => 1u32..5000,
        1 => Just(16u32 << 20),
        1 => Just((16u32 << 20) + 1),
        1 => any::<u32>(),
    ];
    (
        block_len,
        prop_oneof![4 => 0u32..5000, 1 => any::<u32>()],
        prop_oneof![4 => 1u32..1500, 1 => Just(0u32), 1 => 1u32..70_000],
        any::<bool>(),
    )
        .prop_map(|(block_len, offset, len, first)| {
            // Mostly a chunk inside its block, as decoded ones are.
            let offset = match block_len {
                0 => offset,
                n if offset < u32::MAX / 2 => offset % n,
                _ => offset,
            };
            RawChunk {
                offset,
                block_len,
                len,
                first: first || offset == 0,
            }
        })
}

fn dg_step() -> impl Strategy<Value = DgStep> {
    let chunk = (
        seq(),
        0u32..4,
        prop::bool::weighted(0.01),
        0u32..6,
        0u32..6,
        prop_oneof![12 => Just(None), 1 => raw_chunk().prop_map(Some)],
    )
        .prop_map(|(seq, pick, stray, index, part, raw)| DgStep::Chunk {
            seq,
            pick,
            stray,
            index,
            part,
            raw,
        });
    prop_oneof![
        16 => chunk,
        2 => seq().prop_map(DgStep::Signal),
        3 => (0u32..300).prop_map(|ms| DgStep::Tick { ms }),
        1 => (0u32..4, 0u32..6).prop_map(|(pick, index)| DgStep::Reopen { pick, index }),
    ]
}

fn dg_case() -> impl Strategy<Value = (DgSetup, Vec<DgStep>)> {
    let setup = (
        proptest::collection::vec(1u32..6, 0..4),
        prop::bool::weighted(0.7),
        prop_oneof![
            Just(session::datagram::MAX_ASSEMBLY_BYTES),
            Just(20u64 << 20),
            Just(8 << 10)
        ],
        prop_oneof![
            Just(session::datagram::MAX_ASSEMBLIES),
            Just(2usize),
            Just(8)
        ],
    )
        .prop_map(|(files, complete, max_bytes, max_blocks)| DgSetup {
            files,
            complete,
            max_bytes,
            max_blocks,
        });
    (setup, proptest::collection::vec(dg_step(), 0..96))
}

proptest! {
    #![proptest_config(cases(3000))]

    /// Whatever the peer sends on the UDP channel: no panic, no wrap, no
    /// gap expanded, no error but for a number too far ahead or a block
    /// outside the complete manifest, assemblies within their limits, and
    /// the heap within them too (1 MiB for gaps, ranges and the player).
    #[test]
    fn a_hostile_sender_never_breaks_the_datagram_receiver((setup, steps) in dg_case()) {
        let limit = setup.max_bytes;
        let mut out = None;
        let peak = heap_peak_of(|| out = Some(play_datagram(&setup, steps)));
        let out = out.unwrap();
        // The player's own 64 KiB of chunk bytes, and the receiver's gaps.
        prop_assert!((peak as u64) <= limit + (1 << 20), "heap grew by {peak}, limit {limit}");
        if let Some(e) = out.error {
            prop_assert!(!e.to_string().is_empty());
        }
    }
}

/// How deep the strategies reach: how plays end, and what they did.
/// `cargo test -p session --test hostile -- --ignored --nocapture`.
#[test]
#[ignore]
fn what_the_strategies_reach() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    let (mut fin, mut finalized, mut written) = (0, 0, 0);
    for _ in 0..3000 {
        let (setup, steps) = rx_case().new_tree(&mut runner).unwrap().current();
        let out = play_receiver(&setup, steps);
        fin += out.finished as usize;
        finalized += out.finalized;
        written += out.blocks_written;
        let k = match &out.error {
            None => "none".to_string(),
            Some(session::ReceiverError::Protocol(m)) => m
                .split(|c: char| c.is_ascii_digit())
                .next()
                .unwrap()
                .to_string(),
            Some(e) => format!("{:?}", e)
                .split(['(', ' ', '{'])
                .next()
                .unwrap()
                .to_string(),
        };
        *kinds.entry(k).or_default() += 1;
    }
    eprintln!("rx: {kinds:?} finished {fin} finalized {finalized} written {written}");
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    let (mut completed, mut refused, mut reports) = (0, 0, 0);
    for _ in 0..3000 {
        let (setup, steps) = dg_case().new_tree(&mut runner).unwrap().current();
        let out = play_datagram(&setup, steps);
        completed += out.completed;
        refused += out.refused;
        reports += out.reports;
        let k = match &out.error {
            None => "none".to_string(),
            Some(e) => format!("{:?}", e)
                .split(['(', ' ', '{'])
                .next()
                .unwrap()
                .to_string(),
        };
        *kinds.entry(k).or_default() += 1;
    }
    eprintln!("dg: {kinds:?} completed {completed} refused {refused} reports {reports}");
}
