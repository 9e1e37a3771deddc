//! Units of the sending session; what its receiver may make it hold
//! (P-43 R-1 … R-5) is also played by `tests/hostile.rs`.

use super::*;
use wire::EntryKind;

fn dedup() -> wire::SyncOptions {
    wire::SyncOptions {
        dedup: true,
        gated: true,
        ..Default::default()
    }
}

/// A pool of `limit` bytes, shared by sessions.
struct Pool(std::sync::Mutex<u64>, u64);

impl crate::receiver::Pool for Pool {
    fn take(&self, bytes: u64) -> bool {
        let mut used = self.0.lock().unwrap();
        if *used + bytes > self.1 {
            return false;
        }
        *used += bytes;
        true
    }
    fn give(&self, bytes: u64) {
        *self.0.lock().unwrap() -= bytes;
    }
}

/// R-2, R-4: chunks only with dedup, deleted paths only with
/// `--delete`, each a protocol error otherwise; issue 39's daemon
/// kept both without bound.
#[test]
fn answers_are_taken_only_in_the_sessions_that_ask_for_them() {
    let now = Instant::now();
    let chunks = || Msg::Chunks {
        file: wire::CACHE_FILE,
        chunks: vec![([1; 16], 10)],
    };
    let mut tx = SenderSession::new(vec![file_entry(0, b"a", 10)], 4, 1 << 20);
    tx.gate();
    assert!(matches!(
        tx.handle(chunks(), now),
        Err(SenderError::Protocol(_))
    ));
    assert!(matches!(
        tx.handle(Msg::Deleted(vec![b"x".to_vec()]), now),
        Err(SenderError::Protocol(_))
    ));
    let mut ungated = SenderSession::new(vec![file_entry(0, b"a", 10)], 4, 1 << 20);
    ungated.expect(&dedup());
    assert!(ungated.handle(chunks(), now).is_err(), "not gated");
    let have = Msg::Have {
        file: 0,
        blocks: vec![(0, [0; 32])],
    };
    assert!(ungated.handle(have, now).is_err(), "not gated");
}

/// R-2, R-3: what the receiver announces is charged before it is
/// kept; past the budget the session ends with `Limit`.
#[test]
fn chunks_and_held_blocks_past_the_budget_are_refused() {
    let now = Instant::now();
    let mut tx = SenderSession::new(vec![file_entry(0, b"a", 1 << 20)], 4096, 1 << 20);
    tx.gate();
    tx.expect(&dedup());
    let own = tx.bookkeeping();
    tx.admit(own + 100 * CHUNK_COST, None).unwrap();
    let many = |n: usize, at: u8| Msg::Chunks {
        file: wire::CACHE_FILE,
        chunks: (0..n)
            .map(|i| {
                (
                    [
                        at,
                        i as u8,
                        (i >> 8) as u8,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                    ],
                    100,
                )
            })
            .collect(),
    };
    tx.handle(many(60, 1), now).unwrap();
    let e = tx.handle(many(60, 2), now).unwrap_err();
    assert!(
        matches!(e, SenderError::Limit { what: "chunks", .. }),
        "{e}"
    );
    assert_eq!(e.code(), ErrorCode::Limit);
    // Held blocks: the same block announced again and again costs
    // each time, so a flood ends.
    let mut tx = SenderSession::new(vec![file_entry(0, b"a", 1 << 20)], 4096, 1 << 20);
    tx.gate();
    tx.admit(tx.bookkeeping() + 10 * HAVE_COST, None).unwrap();
    let have = || Msg::Have {
        file: 0,
        blocks: (0..4).map(|i| (i, [0; 32])).collect(),
    };
    tx.handle(have(), now).unwrap();
    tx.handle(have(), now).unwrap();
    assert!(matches!(
        tx.handle(have(), now),
        Err(SenderError::Limit {
            what: "held blocks",
            ..
        })
    ));
}

/// R-1: the sources' own bookkeeping, which a pulling client chooses
/// (paths and block size), is checked against the budget and taken
/// from the shared memory, and given back when the session ends.
#[test]
fn sources_past_the_budget_or_the_shared_memory_are_refused() {
    let big = vec![file_entry(0, b"big", 1 << 40)];
    let mut tx = SenderSession::new(big, 64 << 10, 1 << 20);
    let e = tx.admit(256 << 20, None).unwrap_err();
    assert!(
        matches!(
            e,
            SenderError::TooLarge {
                blocks: 16_777_216,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("--block-size"), "{e}");
    let pool = Arc::new(Pool(std::sync::Mutex::new(0), 1 << 20));
    let shared: Arc<dyn crate::receiver::Pool> = pool.clone();
    let mut a = SenderSession::new(vec![file_entry(0, b"a", 1 << 30)], 64 << 10, 1 << 20);
    let mut b = SenderSession::new(vec![file_entry(0, b"b", 1 << 30)], 64 << 10, 1 << 20);
    a.admit(1 << 20, Some(shared.clone())).unwrap();
    assert!(matches!(
        b.admit(1 << 20, Some(shared.clone())),
        Err(SenderError::Busy { .. })
    ));
    drop(a);
    assert_eq!(*pool.0.lock().unwrap(), 0);
    b.admit(1 << 20, Some(shared)).unwrap();
}

/// R-4: deleted paths are kept to show up to a bound, and counted
/// past it.
#[test]
fn deleted_paths_are_kept_to_a_bound_and_counted_past_it() {
    let now = Instant::now();
    let mut tx = SenderSession::new(vec![file_entry(0, b"a", 10)], 4, 1 << 20);
    tx.expect(&wire::SyncOptions {
        delete: true,
        ..Default::default()
    });
    let message = |len: usize| Msg::Deleted(vec![vec![b'p'; len]; wire::DELETED_PER_MESSAGE]);
    for _ in 0..20 {
        tx.handle(message(10), now).unwrap();
    }
    assert_eq!(tx.deleted.len(), DELETED_KEPT);
    assert_eq!(tx.deleted_count(), 20 * wire::DELETED_PER_MESSAGE as u64);
    // Long paths reach the bound on bytes first.
    let mut tx = SenderSession::new(vec![file_entry(0, b"a", 10)], 4, 1 << 20);
    tx.expect(&wire::SyncOptions {
        delete: true,
        ..Default::default()
    });
    for _ in 0..2 {
        tx.handle(message(4000), now).unwrap();
    }
    assert_eq!(tx.deleted.len(), DELETED_KEPT_BYTES / 4000);
    assert_eq!(tx.deleted_count(), 2 * wire::DELETED_PER_MESSAGE as u64);
}

/// A manifest entry for a file of `size` bytes.
fn file_entry(id: u32, path: &[u8], size: u64) -> Entry {
    Entry {
        id,
        path: path.to_vec(),
        kind: EntryKind::File {
            size,
            mode: 0,
            mtime: 0,
            mtime_nsec: 0,
        },
        target: vec![],
    }
}

#[test]
fn detects_a_source_that_changed_between_reads() {
    let e = file_entry(0, b"f", 8);
    let mut tx = SenderSession::new(vec![e], 4, 1 << 20);
    let now = Instant::now();
    let Next::Send(b) = tx.next_block(now) else {
        panic!()
    };
    tx.block_read(&b, [1; 32]).unwrap();
    tx.handle(
        Msg::Nack {
            file: 0,
            index: b.index,
        },
        now,
    )
    .unwrap();
    let Next::Send(again) = tx.next_block(now) else {
        panic!()
    };
    assert_eq!(again, b);
    assert!(matches!(
        tx.block_read(&again, [2; 32]),
        Err(SenderError::SourceChanged { .. })
    ));
}

#[test]
fn bundles_take_whole_small_files_and_fail_together() {
    // Files of 3, 5, 20 (two blocks of 16) and 2 bytes.
    let entries = vec![
        file_entry(0, b"a", 3),
        file_entry(1, b"b", 5),
        file_entry(2, b"big", 20),
        file_entry(3, b"c", 2),
    ];
    let mut tx = SenderSession::new(entries, 16, 1 << 20);
    let now = Instant::now();
    let Next::Send(a) = tx.next_block(now) else {
        panic!()
    };
    assert!(tx.may_lead_bundle(&a, 8));
    assert!(!tx.may_lead_bundle(&a, 2), "larger than asked");
    // b fits; big is two blocks: the bundle stops there.
    let b = tx.next_bundle_member(8, now).unwrap();
    assert_eq!((b.file, b.index, b.len), (1, 0, 5));
    assert_eq!(tx.next_bundle_member(64, now), None);
    tx.block_read(&a, [1; 32]).unwrap();
    tx.block_read(&b, [2; 32]).unwrap();
    tx.bundled(0, vec![1]);
    // The bundle fails: the leader and its member both go again, alone.
    tx.handle(Msg::Nack { file: 0, index: 0 }, now).unwrap();
    let mut again = vec![];
    for _ in 0..2 {
        let Next::Send(r) = tx.next_block(now) else {
            panic!()
        };
        again.push(r.file);
        assert!(!tx.may_lead_bundle(&r, 8), "re-sent blocks go alone");
    }
    again.sort();
    assert_eq!(again, [0, 1]);
    // Re-sends waiting: no member is taken.
    tx.handle(Msg::Nack { file: 1, index: 0 }, now).unwrap();
    assert_eq!(tx.next_bundle_member(64, now), None);
    // A gated session never bundles.
    let mut gated = SenderSession::new(vec![file_entry(0, b"a", 3)], 16, 1 << 20);
    gated.gate();
    gated.handle(Msg::Ready(vec![0]), now).unwrap();
    if let Next::Send(g) = gated.next_block(now) {
        assert!(!gated.may_lead_bundle(&g, 8));
    }
}

#[test]
fn zero_blocks_are_announced_in_batches_after_the_manifest() {
    let e = file_entry(0, b"z", 12);
    let mut tx = SenderSession::new(vec![e], 4, 1 << 20);
    let now = Instant::now();
    for _ in 0..3 {
        let Next::Send(b) = tx.next_block(now) else {
            panic!()
        };
        tx.block_read(&b, [0; 32]).unwrap();
        tx.block_zero(&b);
    }
    let msgs: Vec<Msg> = std::iter::from_fn(|| tx.poll_control()).collect();
    // Entry, ManifestEnd, then the zeros of blocks 0 and 1 in one
    // message, FileEnd (block 2 completed the file), block 2's zeros.
    assert!(matches!(msgs[0], Msg::Entry(_)));
    assert!(matches!(msgs[1], Msg::ManifestEnd { .. }));
    assert_eq!(msgs[2], Msg::Zeros(vec![(0, 0), (0, 1)]));
    assert!(matches!(msgs[3], Msg::FileEnd { file: 0, .. }));
    assert_eq!(msgs[4], Msg::Zeros(vec![(0, 2)]));
}

#[test]
fn a_gated_file_waits_for_its_answer_then_goes_as_a_delta() {
    // Two files of 3 blocks of 4 bytes; the receiver holds the first
    // file's chunks and nothing of the second.
    let data = b"abcdefghijkl";
    let mut tx = SenderSession::new(
        vec![file_entry(0, b"a", 12), file_entry(1, b"b", 12)],
        4,
        1 << 20,
    );
    tx.gate();
    tx.expect(&dedup());
    let now = Instant::now();
    assert_eq!(tx.next_block(now), Next::Wait, "held until answered");
    let ours = chunk::chunks(data);
    let ids: Vec<_> = ours
        .iter()
        .map(|c| (chunk::short(&c.hash), c.len))
        .collect();
    tx.handle(
        Msg::Chunks {
            file: 0,
            chunks: ids,
        },
        now,
    )
    .unwrap();
    tx.handle(Msg::Ready(vec![0, 1]), now).unwrap();
    // File 0 is cut into chunks first; file 1 waits behind it.
    assert_eq!(tx.poll_plan(), Some(0));
    assert_eq!(tx.poll_plan(), None);
    assert_eq!(tx.next_block(now), Next::Wait);
    tx.planned(0, &ours).unwrap();
    let Next::Send(b) = tx.next_block(now) else {
        panic!()
    };
    let (parts, literal) = tx.block_parts(&b).expect("a delta");
    assert_eq!(literal, 0);
    assert_eq!(parts, vec![chunk::Part::Basis { from: 0, len: 4 }]);
    // A block the receiver rejected goes whole the second time.
    tx.block_read(&b, [1; 32]).unwrap();
    tx.handle(Msg::Nack { file: 0, index: 0 }, now).unwrap();
    assert!(tx.block_parts(&b).is_none());
    // A plan that does not cover the file means it changed.
    let mut other = SenderSession::new(vec![file_entry(0, b"a", 12)], 4, 1 << 20);
    other.gate();
    other.expect(&dedup());
    other
        .handle(
            Msg::Chunks {
                file: 0,
                chunks: vec![([0; 16], 12)],
            },
            now,
        )
        .unwrap();
    other.handle(Msg::Ready(vec![0]), now).unwrap();
    assert_eq!(other.poll_plan(), Some(0));
    assert!(matches!(
        other.planned(0, &chunk::chunks(b"short")),
        Err(SenderError::SourceChanged { .. })
    ));
}

#[test]
fn a_resumed_file_keeps_the_blocks_the_receiver_holds_as_the_sender_has_them() {
    use crate::receiver::{Action, BlockVerdict, ReceiverSession};
    let data = b"abcdefghijkl";
    let hash = |i: usize| crate::block_hash(&data[i * 4..i * 4 + 4]);
    let now = Instant::now();
    let mut tx = SenderSession::new(vec![file_entry(0, b"f", 12)], 4, 1 << 20);
    let mut rx = ReceiverSession::new(4);
    tx.gate();
    rx.gate();
    let pass = |from: &mut dyn FnMut() -> Option<Msg>, to: &mut dyn FnMut(Msg)| {
        while let Some(m) = from() {
            to(m);
        }
    };
    pass(&mut || tx.poll_control(), &mut |m| rx.handle(m).unwrap());
    assert!(matches!(
        rx.poll_action(),
        Some(Action::OpenFile { id: 0, .. })
    ));
    rx.opened(0).unwrap();
    // The partial holds block 0 as the source has it, and block 2 of
    // another version; block 1 is past its end.
    rx.hold(0, vec![(0, hash(0)), (2, [7; 32]), (9, [0; 32])]);
    rx.ready(0, Vec::new());
    pass(&mut || rx.poll_control(), &mut |m| {
        tx.handle(m, now).unwrap()
    });
    let mut sent = Vec::new();
    while let Next::Send(b) = tx.next_block(now) {
        let h = hash(b.index as usize);
        tx.block_read(&b, h).unwrap();
        if tx.receiver_holds(&b, &h) {
            tx.block_kept(&b);
            continue;
        }
        sent.push(b.index);
        let header = wire::BlockHeader {
            file: 0,
            index: b.index,
            offset: b.offset,
            len: b.len,
            hash: h,
            codec: wire::CODEC_NONE,
            wire_len: b.len,
        };
        assert_eq!(rx.block_arrived(&header, &h).unwrap(), BlockVerdict::Write);
        rx.block_written(0, b.index).unwrap();
    }
    assert_eq!(sent, vec![1, 2], "the stale block 2 goes again");
    assert_eq!(tx.kept_bytes, 4);
    pass(&mut || tx.poll_control(), &mut |m| rx.handle(m).unwrap());
    assert_eq!(rx.bytes_kept, 4);
    // The digest covered the kept block's hash: the file is released.
    assert!(matches!(
        rx.poll_action(),
        Some(Action::Finalize { id: 0, .. })
    ));
    rx.placed(0);
    pass(&mut || rx.poll_control(), &mut |m| {
        tx.handle(m, now).unwrap()
    });
    assert_eq!(tx.acked_bytes, 12);
    // A Kept for a block the receiver never held breaks the protocol.
    assert!(rx.handle(Msg::Kept(vec![(0, 1)])).is_err());
    // And held blocks for a file not waiting for them.
    assert!(tx
        .handle(
            Msg::Have {
                file: 0,
                blocks: vec![(0, [0; 32])]
            },
            now
        )
        .is_err());
}

#[test]
fn skipped_and_dry_run_files_are_done_without_blocks() {
    let now = Instant::now();
    let mut tx = SenderSession::new(
        vec![file_entry(0, b"a", 10), file_entry(1, b"b", 10)],
        4,
        1 << 20,
    );
    tx.gate();
    tx.handle(Msg::Skip(vec![0]), now).unwrap();
    assert!(tx.handle(Msg::Skip(vec![0]), now).is_err(), "skipped twice");
    tx.handle(Msg::Ready(vec![1]), now).unwrap();
    assert!(matches!(
        tx.next_block(now),
        Next::Send(BlockRef { file: 1, .. })
    ));
    assert!(
        tx.handle(Msg::Skip(vec![1]), now).is_err(),
        "a released file cannot be skipped"
    );
    assert_eq!((tx.skipped_files, tx.skipped_bytes), (1, 10));

    let mut dry = SenderSession::new(
        vec![file_entry(0, b"a", 10), file_entry(1, b"b", 0)],
        4,
        1 << 20,
    );
    dry.dry_run();
    dry.expect(&wire::SyncOptions {
        delete: true,
        ..Default::default()
    });
    dry.handle(Msg::Ready(vec![0, 1]), now).unwrap();
    assert_eq!(dry.listed, vec!["a".to_string(), "b".to_string()]);
    assert_eq!(dry.next_block(now), Next::Wait, "nothing is sent");
    dry.handle(Msg::Deleted(vec![b"old".to_vec()]), now)
        .unwrap();
    dry.handle(Msg::Done(Summary::default()), now).unwrap();
    assert_eq!(dry.deleted, vec!["old".to_string()]);
}

#[test]
fn notes_are_kept_to_their_limit_without_control_characters() {
    let now = Instant::now();
    let mut tx = SenderSession::new(vec![file_entry(0, b"a", 10)], 4, 1 << 20);
    for i in 0..wire::MAX_NOTES + 5 {
        let text = format!("a: note {i}\x1b[2J\r");
        let kind = wire::NoteKind::PartialHeld;
        tx.handle(Msg::Note { kind, text }, now).unwrap();
    }
    assert_eq!(tx.notes.len(), wire::MAX_NOTES);
    assert_eq!(tx.notes[0].1, "a: note 0\u{fffd}[2J\u{fffd}");
}

#[test]
fn a_receivers_notes_stop_at_the_limit_with_a_last_one_saying_so() {
    use crate::receiver::ReceiverSession;
    let mut rx = ReceiverSession::new(4);
    for i in 0..wire::MAX_NOTES + 5 {
        rx.note(wire::NoteKind::PartialStale, format!("f{i}: stale"));
    }
    let sent: Vec<Msg> = std::iter::from_fn(|| rx.poll_control())
        .filter(|m| matches!(m, Msg::Note { .. }))
        .collect();
    assert_eq!(sent.len(), wire::MAX_NOTES);
    assert!(
        matches!(&sent[wire::MAX_NOTES - 1], Msg::Note { text, .. } if text.contains("left out")),
        "{sent:?}"
    );
    assert_eq!(rx.notes.len(), wire::MAX_NOTES);
}

#[test]
fn announces_manifest_and_no_digest_for_an_empty_file() {
    let e = file_entry(3, b"empty", 0);
    let mut tx = SenderSession::new(vec![e], 4, 1 << 20);
    assert!(matches!(tx.poll_control(), Some(Msg::Entry(_))));
    assert_eq!(
        tx.poll_control(),
        Some(Msg::ManifestEnd { files: 1, bytes: 0 })
    );
    assert!(matches!(
        tx.handle(Msg::Done(Summary::default()), Instant::now()),
        Err(SenderError::Protocol(_))
    ));
    tx.handle(Msg::FileDone { file: 3 }, Instant::now())
        .unwrap();
    tx.handle(Msg::Done(Summary::default()), Instant::now())
        .unwrap();
    assert_eq!(tx.next_block(Instant::now()), Next::Done);
}
