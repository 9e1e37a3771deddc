use proptest::prelude::*;

use super::*;

fn file(id: u32, path: &str, size: u64) -> Entry {
    Entry {
        id,
        path: path.as_bytes().to_vec(),
        kind: EntryKind::File {
            size,
            mode: 0o644,
            mtime: 1_700_000_000,
            mtime_nsec: 0,
        },
        target: Vec::new(),
    }
}

fn dir(id: u32, path: &str) -> Entry {
    Entry {
        id,
        path: path.as_bytes().to_vec(),
        kind: EntryKind::Dir {
            mode: 0o755,
            mtime: 0,
            mtime_nsec: 0,
        },
        target: Vec::new(),
    }
}

/// Every file's bytes, shard by shard, cover the file exactly once.
fn check(entries: &[Entry], plan: &Plan) {
    let bs = plan.block_size as u64;
    let mut covered: Vec<Vec<(u64, u64)>> = vec![Vec::new(); entries.len()];
    let total: u64 = entries.iter().map(|e| weight(&e.kind)).sum();
    for i in 0..plan.count {
        let shares = plan.shares(i).unwrap();
        let pieces = shares
            .iter()
            .filter(|(_, s)| matches!(s, Share::Piece { .. }))
            .count();
        assert!(pieces <= wire::MAX_PIECES, "shard {i} has {pieces} pieces");
        let mut w = 0u64;
        for &(k, share) in shares {
            let size = match entries[k].kind {
                EntryKind::File { size, .. } => size,
                _ => 0,
            };
            let (o, l) = match share {
                Share::Whole => (0, size),
                Share::Piece { offset, len } => {
                    assert_eq!(offset % bs, 0, "piece offsets are block-aligned");
                    assert!(len > 0);
                    assert!(offset + len == size || len % bs == 0);
                    (offset, len)
                }
            };
            w += l + FILE_COST;
            covered[k].push((o, l));
        }
        // Balanced within a block and a file's cost at either end, or a
        // whole small file that cannot be cut.
        let fair = total / plan.count as u64;
        let small = entries
            .iter()
            .map(|e| match e.kind {
                EntryKind::File { size, .. } if size < 2 * bs => weight(&e.kind),
                EntryKind::Symlink => FILE_COST,
                _ => 0,
            })
            .max()
            .unwrap_or(0);
        let slack = 2 * (bs + FILE_COST + small) + plan.count as u64;
        assert!(
            w.abs_diff(fair) <= slack,
            "shard {i} weighs {w}, fair {fair}, slack {slack}"
        );
        let view = plan.view(i, entries).unwrap();
        assert_eq!(view.pieces.len(), pieces);
    }
    for (k, e) in entries.iter().enumerate() {
        match e.kind {
            EntryKind::File { size, .. } => {
                let mut c = covered[k].clone();
                c.sort();
                let mut at = 0;
                for (o, l) in c {
                    assert_eq!(o, at, "{:?} covered with a gap or overlap", e.path);
                    at += l;
                }
                assert_eq!(at, size);
            }
            EntryKind::Dir { .. } => assert!(covered[k].is_empty()),
            EntryKind::Symlink => assert_eq!(covered[k].len(), 1),
        }
    }
}

#[test]
fn one_large_file_is_cut_into_equal_block_aligned_pieces() {
    let entries = vec![file(0, "big", 100 << 20)];
    let plan = Plan::new(&entries, 4, 1 << 20, b"").unwrap();
    check(&entries, &plan);
    let lens: Vec<u64> = (0..4)
        .map(|i| match plan.shares(i).unwrap()[0].1 {
            Share::Piece { len, .. } => len,
            Share::Whole => 0,
        })
        .collect();
    assert_eq!(lens.iter().sum::<u64>(), 100 << 20);
    assert!(
        lens.iter().all(|&l| l.abs_diff(25 << 20) <= 1 << 20),
        "{lens:?}"
    );
}

#[test]
fn many_small_files_are_spread_by_count_too() {
    let mut entries = vec![dir(0, "d")];
    for i in 1..=1000 {
        entries.push(file(i, &format!("d/f{i:04}"), 10));
    }
    let plan = Plan::new(&entries, 10, 1 << 20, b"").unwrap();
    check(&entries, &plan);
    for i in 0..10 {
        let v = plan.view(i, &entries).unwrap();
        assert_eq!(v.files, 100);
        assert!(v.pieces.is_empty());
        assert_eq!(v.entries[0].path, b"d", "every shard makes the directories");
    }
}

#[test]
fn the_id_changes_with_anything_the_shards_must_agree_on() {
    let a = vec![file(0, "x", 5 << 20), file(1, "y", 1)];
    let id = |e: &[Entry], n, ctx: &[u8]| Plan::new(e, n, 1 << 20, ctx).unwrap().id;
    assert_eq!(id(&a, 4, b"dst"), id(&a.clone(), 4, b"dst"));
    assert_ne!(id(&a, 4, b"dst"), id(&a, 3, b"dst"));
    assert_ne!(id(&a, 4, b"dst"), id(&a, 4, b"other"));
    let mut b = a.clone();
    if let EntryKind::File { mtime, .. } = &mut b[1].kind {
        *mtime += 1;
    }
    assert_ne!(id(&a, 4, b"dst"), id(&b, 4, b"dst"));
}

#[test]
fn more_shards_than_files_leaves_some_empty() {
    let entries = vec![file(0, "a", 10), file(1, "b", 10)];
    let plan = Plan::new(&entries, 8, 1 << 20, b"").unwrap();
    check(&entries, &plan);
    assert!(Plan::new(&entries, 0, 1 << 20, b"").is_err());
    assert!(plan.shares(8).is_err());
}

proptest! {
    #[test]
    fn any_manifest_is_covered_exactly_once(
        sizes in proptest::collection::vec(prop_oneof![0u64..100, 0u64..(40 << 20)], 0..40),
        count in 1u32..20,
        bs_shift in 16u32..22,
    ) {
        let entries: Vec<Entry> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| file(i as u32, &format!("f{i}"), s))
            .collect();
        let plan = Plan::new(&entries, count, 1 << bs_shift, b"").unwrap();
        check(&entries, &plan);
    }
}
