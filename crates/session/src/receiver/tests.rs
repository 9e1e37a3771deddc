//! Units of the receiving session; the limits (P-40) are pinned in
//! `tests/limits.rs` and played by `tests/hostile.rs`.

use super::*;
use crate::digest::{block_hash, FileDigest};
use wire::Entry;

fn file(id: u32, path: &str, size: u64) -> Msg {
    Msg::Entry(Entry {
        id,
        path: path.into(),
        kind: EntryKind::File {
            size,
            mode: 0o600,
            mtime: 0,
            mtime_nsec: 0,
        },
        target: vec![],
    })
}

fn opened(rx: &mut ReceiverSession) {
    while let Some(a) = rx.poll_action() {
        if let Action::OpenFile { id, .. } = a {
            rx.opened(id).unwrap();
        }
    }
}

#[test]
fn refuses_escaping_paths_and_repeated_ids() {
    let mut rx = ReceiverSession::new(16);
    assert!(matches!(
        rx.handle(file(1, "../x", 1)),
        Err(ReceiverError::Path(_))
    ));
    rx.handle(file(2, "a", 1)).unwrap();
    assert!(matches!(
        rx.handle(file(2, "b", 1)),
        Err(ReceiverError::Protocol(_))
    ));
}

#[test]
fn checks_bounds_hashes_and_digest() {
    let mut rx = ReceiverSession::new(4);
    rx.handle(file(1, "f", 6)).unwrap();
    opened(&mut rx);
    let data = b"abcdef";
    let h0 = block_hash(&data[..4]);
    let h1 = block_hash(&data[4..]);
    let hdr = |index: u32, offset: u64, len: u32, hash| BlockHeader {
        file: 1,
        index,
        offset,
        len,
        hash,
        codec: wire::CODEC_NONE,
        wire_len: len,
    };
    // Out of bounds: wrong length, wrong offset, beyond the file.
    assert!(rx.block_arrived(&hdr(0, 0, 3, h0), &h0).is_err());
    assert!(rx.block_arrived(&hdr(1, 3, 2, h1), &h1).is_err());
    assert!(rx.block_arrived(&hdr(2, 8, 0, h1), &h1).is_err());
    // Bad hash: rejected and nacked.
    assert_eq!(
        rx.block_arrived(&hdr(0, 0, 4, h0), &h1).unwrap(),
        BlockVerdict::Rejected
    );
    assert_eq!(rx.poll_control(), Some(Msg::Nack { file: 1, index: 0 }));
    for (i, h) in [(0, h0), (1, h1)] {
        let len = if i == 0 { 4 } else { 2 };
        assert_eq!(
            rx.block_arrived(&hdr(i, i as u64 * 4, len, h), &h).unwrap(),
            BlockVerdict::Write
        );
        rx.block_written(1, i).unwrap();
    }
    // A digest that does not match the verified blocks fails the file.
    assert!(matches!(
        rx.handle(Msg::FileEnd {
            file: 1,
            digest: [0; 32]
        }),
        Err(ReceiverError::Integrity { .. })
    ));
    let mut rx2 = ReceiverSession::new(4);
    rx2.handle(file(1, "f", 6)).unwrap();
    opened(&mut rx2);
    for (i, h) in [(0, h0), (1, h1)] {
        let len = if i == 0 { 4 } else { 2 };
        rx2.block_arrived(&hdr(i, i as u64 * 4, len, h), &h)
            .unwrap();
        rx2.block_written(1, i).unwrap();
    }
    rx2.handle(Msg::FileEnd {
        file: 1,
        digest: FileDigest::of(6, [&h0, &h1]),
    })
    .unwrap();
    assert!(matches!(
        rx2.poll_action(),
        Some(Action::Finalize { id: 1, .. })
    ));
    rx2.placed(1);
    rx2.handle(Msg::ManifestEnd { files: 1, bytes: 6 }).unwrap();
    assert!(matches!(rx2.poll_action(), Some(Action::Finish { .. })));
    assert!(!rx2.is_finished(), "Done waits for directory metadata");
    rx2.complete();
    assert!(rx2.is_finished());
}

#[test]
fn files_of_one_block_or_none_need_no_digest() {
    let mut rx = ReceiverSession::new(4);
    rx.handle(file(1, "one", 3)).unwrap();
    rx.handle(file(2, "empty", 0)).unwrap();
    let mut finalized = Vec::new();
    let mut finalized_in = |rx: &mut ReceiverSession| {
        while let Some(a) = rx.poll_action() {
            match a {
                Action::OpenFile { id, .. } => rx.opened(id).unwrap(),
                Action::Finalize { id, .. } => finalized.push(id),
                _ => {}
            }
        }
    };
    finalized_in(&mut rx);
    let h = block_hash(b"abc");
    assert!(
        matches!(
            rx.handle(Msg::FileEnd {
                file: 1,
                digest: FileDigest::of(3, [&h])
            }),
            Err(ReceiverError::Protocol(_))
        ),
        "a one-block file's digest is never sent (P-12)"
    );
    let hdr = BlockHeader {
        file: 1,
        index: 0,
        offset: 0,
        len: 3,
        hash: h,
        codec: wire::CODEC_NONE,
        wire_len: 3,
    };
    assert_eq!(rx.block_arrived(&hdr, &h).unwrap(), BlockVerdict::Write);
    rx.block_written(1, 0).unwrap();
    finalized_in(&mut rx);
    finalized.sort();
    assert_eq!(finalized, [1, 2]);
}

#[test]
fn gated_answers_are_batched_and_skips_finish_the_transfer() {
    let mut rx = ReceiverSession::new(4);
    rx.gate();
    rx.announce_cache(vec![([9; 16], 4)]);
    rx.handle(file(1, "a", 6)).unwrap();
    rx.handle(file(2, "b", 6)).unwrap();
    rx.handle(file(3, "c", 6)).unwrap();
    rx.handle(Msg::ManifestEnd {
        files: 3,
        bytes: 18,
    })
    .unwrap();
    rx.ready(1, vec![([1; 16], 6)]);
    rx.ready(2, vec![]);
    rx.skip(3).unwrap();
    assert!(rx.skip(3).is_err(), "skipped twice");
    let msgs: Vec<Msg> = std::iter::from_fn(|| rx.poll_control()).collect();
    assert_eq!(
        msgs,
        vec![
            Msg::Chunks {
                file: wire::CACHE_FILE,
                chunks: vec![([9; 16], 4)]
            },
            Msg::Chunks {
                file: 1,
                chunks: vec![([1; 16], 6)]
            },
            Msg::Ready(vec![1, 2]),
            Msg::Skip(vec![3]),
        ]
    );
    assert_eq!((rx.files_skipped, rx.bytes_skipped), (1, 6));

    // A dry run lists what it would take and finishes at once.
    let mut dry = ReceiverSession::new(4);
    dry.gate();
    dry.dry_run();
    dry.handle(file(1, "a", 6)).unwrap();
    dry.handle(Msg::ManifestEnd { files: 1, bytes: 6 }).unwrap();
    dry.ready(1, vec![]);
    dry.deleted(vec![b"x".to_vec()]);
    assert!(std::iter::from_fn(|| dry.poll_action()).any(|a| matches!(a, Action::Finish { .. })));
    dry.complete();
    assert!(dry.is_finished());
    assert_eq!(dry.files_listed, 1);
}

#[test]
fn manifest_totals_must_match() {
    let mut rx = ReceiverSession::new(4);
    rx.handle(file(1, "f", 6)).unwrap();
    assert!(rx.handle(Msg::ManifestEnd { files: 1, bytes: 7 }).is_err());
}

/// P-43: each announcement of the sender is taken once, and only where
/// the session uses it; every other kind is a protocol error that names
/// the kind, never quoting the message.
#[test]
fn announcements_are_taken_once_and_only_where_they_belong() {
    let mut rx = ReceiverSession::new(4);
    rx.handle(file(1, "f", 6)).unwrap();
    rx.handle(Msg::ManifestEnd { files: 1, bytes: 6 }).unwrap();
    assert!(matches!(
        rx.handle(Msg::ManifestEnd { files: 1, bytes: 6 }),
        Err(ReceiverError::Protocol(m)) if m.contains("twice")
    ));
    let digest = FileDigest::of(6, [[0; 32], [1; 32]].iter());
    rx.handle(Msg::FileEnd { file: 1, digest })
        .unwrap_or_default();
    assert!(
        rx.handle(Msg::FileEnd { file: 1, digest }).is_err(),
        "twice"
    );
    assert!(
        rx.handle(Msg::Digest { file: 1, digest }).is_err(),
        "a digest no --checksum asked for"
    );
    let big = Msg::Deleted(vec![vec![b'x'; 4000]; 1024]);
    match rx.handle(big) {
        Err(ReceiverError::Protocol(m)) => assert!(m.len() < 200 && m.contains("Deleted"), "{m}"),
        other => panic!("{other:?}"),
    }
    for m in [
        Msg::Acks(vec![]),
        Msg::Welcome,
        Msg::Ready(vec![1]),
        Msg::Have {
            file: 1,
            blocks: vec![],
        },
    ] {
        assert!(matches!(rx.handle(m), Err(ReceiverError::Protocol(_))));
    }
}
