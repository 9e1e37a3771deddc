//! What a hostile peer can make the receiving state machines hold (S-1 …
//! S-7, docs/PROTOCOL.md "Security properties and limits"), each limit
//! pinned by the case that once aborted a receiver (issue 23). A counting
//! allocator shows that refusals come before any allocation.

use std::time::Duration;

use session::datagram::{DatagramError, DatagramReceiver, MAX_SEQ_AHEAD};
use session::{
    Action, Asked, ReceiverError, ReceiverSession, Wanted, DEFAULT_BLOCK_SIZE, DEFAULT_BUDGET,
};
use wire::datagram::{ChunkHeader, FirstChunk, DATA_SEQ_START};
use wire::{Entry, EntryKind, ErrorCode, Msg};

// ---- an allocator that counts, per thread, what the code under test takes

#[path = "common/counting.rs"]
mod counting;
use counting::{Counting, LIVE, PEAK};

#[global_allocator]
static ALLOC: Counting = Counting;

/// The most this thread held at once above what it held before `f`.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(|p| p.get()) - base;
    (out, peak.max(0) as usize)
}

// ---- manifests

fn entry(id: u32, path: &str, kind: EntryKind) -> Msg {
    Msg::Entry(Entry {
        id,
        path: path.into(),
        kind,
        target: if kind == EntryKind::Symlink {
            b"/etc".to_vec()
        } else {
            vec![]
        },
    })
}

fn file(id: u32, path: &str, size: u64) -> Msg {
    entry(
        id,
        path,
        EntryKind::File {
            size,
            mode: 0o644,
            mtime: 0,
            mtime_nsec: 0,
        },
    )
}

fn dir(id: u32, path: &str) -> Msg {
    entry(
        id,
        path,
        EntryKind::Dir {
            mode: 0o755,
            mtime: 0,
            mtime_nsec: 0,
        },
    )
}

fn link(id: u32, path: &str) -> Msg {
    entry(id, path, EntryKind::Symlink)
}

const KIB64: u32 = 64 << 10;

// ---- S-1: the bookkeeping budget

#[test]
fn a_file_of_2_pow_32_minus_1_blocks_is_refused_without_allocating() {
    // Issue 23's 39-byte entry: 64 KiB blocks, 0xFFFF_FFFF of them, which
    // once took 132 GiB before anything was checked.
    let mut rx = ReceiverSession::new(KIB64);
    let size = 0xFFFF_FFFF * KIB64 as u64;
    let (r, peak) = peak_of(|| rx.handle(file(1, "huge", size)));
    match r {
        Err(ReceiverError::TooLarge {
            ref path,
            ref what,
            need,
            limit,
        }) => {
            assert_eq!(path, "huge");
            assert!(what.contains("4294967295 blocks"), "{what}");
            assert_eq!(limit, DEFAULT_BUDGET);
            assert!(need > 0xFFFF_FFFF * 33, "{need}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.unwrap_err().code(), ErrorCode::BadRequest);
    assert!(peak < 16 << 10, "{peak} bytes allocated to refuse it");
    assert_eq!(rx.bookkeeping(), 0);
    assert!(rx.poll_action().is_none());
}

#[test]
fn a_file_of_2_pow_48_blocks_is_refused_without_allocating() {
    for (bs, size) in [(16, 1u64 << 52), (KIB64, u64::MAX), (1 << 24, u64::MAX)] {
        let mut rx = ReceiverSession::new(bs);
        let (r, peak) = peak_of(|| rx.handle(file(1, "huge", size)));
        assert!(
            matches!(r, Err(ReceiverError::TooLarge { .. })),
            "{bs} {size}: {r:?}"
        );
        assert!(peak < 16 << 10, "{peak} bytes allocated to refuse it");
    }
}

#[test]
fn many_medium_files_add_up_against_one_budget() {
    // 100 files of 1 GiB each in 64 KiB blocks: 16384 blocks, 540 KB of
    // bookkeeping each. A budget of 20 MB takes 36 of them, then refuses.
    let mut rx = ReceiverSession::new(KIB64);
    rx.set_budget(20_000_000);
    let mut accepted = 0;
    let err = loop {
        match rx.handle(file(accepted + 1, &format!("f{accepted}"), 1 << 30)) {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        assert!(rx.bookkeeping() <= 20_000_000);
    };
    assert_eq!(accepted, 36, "{err}");
    let ReceiverError::TooLarge { path, need, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(path, "f36");
    assert!(*need > 20_000_000);
    assert!(err.to_string().contains("--block-size"), "{err}");
    // Directories and links count too.
    let mut rx = ReceiverSession::new(KIB64);
    rx.set_budget(10_000);
    let refused = (0..1000).find_map(|i| rx.handle(dir(i, &format!("d{i}"))).err());
    assert!(matches!(refused, Some(ReceiverError::TooLarge { .. })));
    assert!(rx.bookkeeping() <= 10_000);
}

#[test]
fn a_hundred_terabytes_in_16_mib_blocks_fits_the_default_budget() {
    // 100 files of 1 TB: 5.96 million blocks of 16 MiB.
    let mut rx = ReceiverSession::new(16 << 20);
    for i in 0..100 {
        rx.handle(file(i, &format!("part{i:03}"), 1_000_000_000_000))
            .unwrap();
    }
    rx.handle(Msg::ManifestEnd {
        files: 100,
        bytes: 100_000_000_000_000,
    })
    .unwrap();
    eprintln!("100 TB: {} bytes", rx.bookkeeping());
    assert!(rx.bookkeeping() < 200_000_000, "{}", rx.bookkeeping());
    // And 60 TiB in the default 1 MiB blocks (the budget's figure).
    let blocks = (60u64 << 40) / DEFAULT_BLOCK_SIZE as u64;
    assert!(blocks * session::receiver::BLOCK_COST < DEFAULT_BUDGET);
}

#[test]
fn millions_of_small_files_fit_the_default_budget() {
    // 100 000 files of 1 KiB in 1 000 directories, paths of about 50
    // bytes; what they cost, scaled, leaves room for 3.5 million (540
    // bytes an entry when written: 4 million).
    let (mut rx, held) = peak_of(|| ReceiverSession::new(DEFAULT_BLOCK_SIZE));
    let mut id = 0;
    let live = LIVE.with(|l| l.get());
    for d in 0..1000 {
        let top = format!("project/src/module-{d:04}/generated");
        rx.handle(dir(id, &top)).unwrap();
        id += 1;
        for f in 0..100 {
            let p = format!("{top}/file-{f:04}.dat");
            rx.handle(file(id, &p, 1024)).unwrap();
            id += 1;
        }
    }
    let per_entry = rx.bookkeeping() / id as u64;
    let heap = LIVE.with(|l| l.get()) - live + held as isize;
    eprintln!(
        "{per_entry} bytes an entry; heap {heap}, counted {}",
        rx.bookkeeping()
    );
    assert!(
        per_entry * 3_500_000 < DEFAULT_BUDGET,
        "{per_entry} bytes an entry"
    );
    // What is counted is what is held: the budget bounds the heap.
    assert!(
        heap as u64 <= rx.bookkeeping() * 5 / 4,
        "heap {heap}, counted {}",
        rx.bookkeeping()
    );
}

// ---- S-3: the manifest's shape

#[test]
fn a_path_named_twice_is_refused() {
    let mut rx = ReceiverSession::new(KIB64);
    rx.handle(file(1, "a", 10)).unwrap();
    let e = rx.handle(file(2, "a", 10)).unwrap_err();
    assert!(matches!(e, ReceiverError::Manifest { .. }), "{e:?}");
    assert!(e.to_string().contains("twice"), "{e}");
    assert_eq!(e.code(), ErrorCode::Protocol);
    let mut rx = ReceiverSession::new(KIB64);
    rx.handle(dir(1, "d")).unwrap();
    assert!(rx.handle(dir(2, "d")).is_err());
}

#[test]
fn an_entry_under_an_earlier_symlink_is_refused() {
    let mut rx = ReceiverSession::new(KIB64);
    rx.handle(dir(1, "x")).unwrap();
    rx.handle(link(2, "x/ssh")).unwrap();
    for (id, p) in [(3, "x/ssh/authorized_keys"), (4, "x/ssh/deep/er")] {
        let e = rx.handle(file(id, p, 10)).unwrap_err();
        assert!(
            e.to_string()
                .contains("\"x/ssh\", which the manifest sent as a symlink"),
            "{e}"
        );
    }
    assert!(rx.handle(dir(5, "x/ssh/d")).is_err());
    // Nothing was made for the refused entries.
    let made: Vec<_> = std::iter::from_fn(|| rx.poll_action()).collect();
    assert_eq!(made.len(), 2);
}

#[test]
fn an_entry_under_an_earlier_file_is_refused() {
    let mut rx = ReceiverSession::new(KIB64);
    rx.handle(file(1, "f", 10)).unwrap();
    let e = rx.handle(file(2, "f/g", 10)).unwrap_err();
    assert!(e.to_string().contains("sent as a file"), "{e}");
}

#[test]
fn a_file_or_link_where_earlier_entries_lie_is_refused() {
    // Children first, then their directory as a link: the link would
    // stand where the children were placed.
    let mut rx = ReceiverSession::new(KIB64);
    rx.handle(file(1, "d/f", 10)).unwrap();
    assert!(rx.handle(link(2, "d")).is_err());
    assert!(rx.handle(file(3, "d", 1)).is_err());
    rx.handle(dir(4, "d")).unwrap();
}

// ---- S-5: a pull takes only what it asked for

fn pull(sources: &[&str], recursive: bool) -> ReceiverSession {
    let mut rx = ReceiverSession::new(KIB64);
    rx.expect(Asked::new(sources, recursive));
    rx
}

#[test]
fn a_pull_refuses_names_it_did_not_ask_for() {
    // `haul cp -r HOST:runs/run42 ~/`: run42 and what is in it, nothing else.
    let mut rx = pull(&["runs/run42"], true);
    rx.handle(dir(1, "run42")).unwrap();
    rx.handle(file(2, "run42/out.h5", 10)).unwrap();
    for (id, p) in [(3, ".ssh/authorized_keys"), (4, ".bashrc"), (5, "run4")] {
        let e = rx.handle(file(id, p, 10)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("the server sent {p:?}, which was not asked for (asked for \"run42\")")
        );
        assert_eq!(e.code(), ErrorCode::Protocol);
    }
    assert!(rx.handle(dir(6, ".ssh")).is_err());
    // Several sources, `.` and `..` inside them.
    let mut rx = pull(&["a/x", "/abs/y", "../z", "p/./q/../w"], true);
    for (id, p) in [(1, "x"), (2, "y"), (3, "z"), (4, "w")] {
        rx.handle(file(id, p, 1)).unwrap();
    }
    assert!(rx.handle(file(5, "q", 1)).is_err());
}

#[test]
fn a_pull_without_r_takes_only_top_level_files_and_links() {
    let mut rx = pull(&["data/big.tar"], false);
    assert!(matches!(
        rx.handle(dir(1, "big.tar")),
        Err(ReceiverError::NotAsked { .. })
    ));
    assert!(rx.handle(file(2, "big.tar/x", 1)).is_err());
    rx.handle(file(3, "big.tar", 1)).unwrap();
}

#[test]
fn a_contents_pull_takes_any_name_but_the_shape_rules_still_hold() {
    // `HOST:dir/`, `HOST:.` and `HOST:a/..`: the names are the server's.
    for src in ["dir/", "dir/.", ".", "a/..", ""] {
        let mut rx = pull(&[src], true);
        rx.handle(dir(1, "anything")).unwrap();
        rx.handle(link(2, "anything/l")).unwrap();
        assert!(rx.handle(file(3, "anything/l/x", 1)).is_err(), "{src}");
    }
}

// ---- S-7 (the receiver's side): what the UDP channel may assemble

#[test]
fn wanted_says_which_blocks_the_udp_channel_may_assemble() {
    let mut rx = ReceiverSession::new(KIB64);
    rx.handle(file(1, "f", 3 * KIB64 as u64)).unwrap();
    assert_eq!(rx.wanted(1, 0), Wanted::Yes);
    assert_eq!(rx.wanted(1, 3), Wanted::Never, "past the file's end");
    assert_eq!(rx.wanted(2, 0), Wanted::NotYet, "the manifest goes on");
    rx.handle(Msg::ManifestEnd {
        files: 1,
        bytes: 3 * KIB64 as u64,
    })
    .unwrap();
    assert_eq!(rx.wanted(2, 0), Wanted::Never);
    while let Some(a) = rx.poll_action() {
        if let Action::OpenFile { id, .. } = a {
            rx.opened(id).unwrap();
        }
    }
    let data = vec![7u8; KIB64 as usize];
    let hash = session::block_hash(&data);
    let h = wire::BlockHeader {
        file: 1,
        index: 1,
        offset: KIB64 as u64,
        len: KIB64,
        hash,
        codec: wire::CODEC_NONE,
        wire_len: KIB64,
    };
    rx.block_arrived(&h, &hash).unwrap();
    assert_eq!(rx.wanted(1, 1), Wanted::Already, "being written");
    rx.block_written(1, 1).unwrap();
    assert_eq!(rx.wanted(1, 1), Wanted::Already);
    assert!(rx.block_written(1, 9).is_err(), "no panic past the end");
}

// ---- S-6, S-7: the datagram receiver

fn chunk(file: u32, index: u32, offset: u32, block_len: u32) -> ChunkHeader {
    ChunkHeader {
        sent_us: 0,
        file,
        index,
        offset,
        block_len,
        first: (offset == 0).then_some(FirstChunk {
            hash: [1; 32],
            codec: wire::CODEC_NONE,
            len: block_len,
        }),
    }
}

fn yes(_: u32, _: u32) -> Wanted {
    Wanted::Yes
}

#[test]
fn a_sequence_number_near_2_pow_64_is_refused_without_expanding_gaps() {
    let t = Duration::from_millis;
    let mut r = DatagramReceiver::new(t(50), t(0));
    r.on_seq(t(0), DATA_SEQ_START, 100).unwrap();
    for seq in [
        u64::MAX - 1,
        u64::MAX,
        DATA_SEQ_START + 1 + MAX_SEQ_AHEAD + 1,
    ] {
        let (res, peak) = peak_of(|| r.on_seq(t(1), seq, 100));
        assert!(
            matches!(res, Err(DatagramError::TooFarAhead { .. })),
            "{seq}: {res:?}"
        );
        assert!(peak < 1024, "{peak}");
    }
    assert_eq!(r.numbered(), 1, "highest neither moved nor wrapped");
    assert_eq!(r.gaps(), 0);
    let (reports, peak) = peak_of(|| r.poll_reports(t(100)));
    assert!(reports.iter().all(|r| r.missing.is_empty()));
    assert!(peak < 64 << 10, "{peak}");
}

#[test]
fn a_jump_within_the_window_is_one_gap_and_one_reported_range() {
    let t = Duration::from_millis;
    let mut r = DatagramReceiver::new(t(50), t(0));
    let far = DATA_SEQ_START + MAX_SEQ_AHEAD;
    assert!(r.on_seq(t(0), far, 100).unwrap());
    assert_eq!(r.gaps(), 1);
    let (reports, peak) = peak_of(|| r.poll_reports(t(100)));
    let ranges: Vec<_> = reports.iter().flat_map(|r| r.missing.clone()).collect();
    assert_eq!(ranges, vec![(DATA_SEQ_START, MAX_SEQ_AHEAD as u32)]);
    assert!(peak < 64 << 10, "{peak}");
}

#[test]
fn chunks_of_blocks_outside_the_complete_manifest_end_the_session() {
    let t = Duration::from_millis;
    let mut r = DatagramReceiver::new(t(50), t(0));
    let never = |_, _| Wanted::Never;
    let e = r
        .on_chunk(t(0), 0, &chunk(9, 4, 0, 1000), &[0; 100], never)
        .unwrap_err();
    assert_eq!(e, DatagramError::NoSuchBlock { file: 9, index: 4 });
    assert_eq!(r.pending_blocks(), 0);
}

#[test]
fn chunks_of_stored_blocks_get_no_buffer() {
    let t = Duration::from_millis;
    let mut r = DatagramReceiver::new(t(50), t(0));
    let already = |_, _| Wanted::Already;
    let got = r.on_chunk(t(0), 0, &chunk(1, 0, 0, 1 << 24), &[0; 100], already);
    assert_eq!(got, Ok(None));
    assert_eq!((r.pending_blocks(), r.assembly_bytes()), (0, 0));
    // Before the manifest names the file, a block may still be assembled.
    let not_yet = |_, _| Wanted::NotYet;
    let got = r.on_chunk(t(0), 0, &chunk(2, 0, 0, 1000), &[0; 100], not_yet);
    assert_eq!(got, Ok(None));
    assert_eq!(r.pending_blocks(), 1);
}

#[test]
fn assemblies_stop_at_their_byte_and_count_limits() {
    let t = Duration::from_millis;
    let mut r = DatagramReceiver::new(t(50), t(0));
    // 16 MiB blocks: three fit in 50 MiB.
    r.limit_assemblies(50 << 20, 1000);
    for i in 0..10 {
        let (_, peak) = peak_of(|| {
            r.on_chunk(t(0), 0, &chunk(1, i, 1000, 1 << 24), &[0; 100], yes)
                .unwrap()
        });
        assert!(peak <= (16 << 20) + 4096, "{peak}");
        assert!(r.assembly_bytes() <= 50 << 20);
    }
    assert_eq!(r.pending_blocks(), 3);
    assert_eq!(r.stats.refused, 7);
    // Blocks already being assembled go on; a completed one frees room.
    let done = r
        .on_chunk(t(0), 0, &chunk(1, 0, 0, 1 << 24), &[0; 1000], yes)
        .unwrap();
    assert!(done.is_none());
    let mut r = DatagramReceiver::new(t(50), t(0));
    r.limit_assemblies(1 << 30, 2);
    for i in 0..5 {
        r.on_chunk(t(0), 0, &chunk(1, i, 10, 20), &[0; 10], yes)
            .unwrap();
    }
    assert_eq!(r.pending_blocks(), 2);
    let done = r.on_chunk(t(0), 0, &chunk(1, 0, 0, 20), &[0; 10], yes);
    assert!(done.unwrap().is_some());
    r.on_chunk(t(0), 0, &chunk(1, 7, 10, 20), &[0; 10], yes)
        .unwrap();
    assert_eq!(r.pending_blocks(), 2);
}

#[test]
fn extreme_send_times_and_report_figures_do_not_overflow() {
    let t = Duration::from_millis;
    let mut r = DatagramReceiver::new(t(50), t(0));
    let mut h = chunk(1, 0, 0, 10);
    for sent_us in [u32::MAX, 1 << 31, 0] {
        h.sent_us = sent_us;
        r.on_chunk(t(0), 5, &h, &[0; 5], yes).unwrap();
    }
    let report = r.poll_reports(t(100)).remove(0);
    // The sender takes the same figures from a hostile receiver.
    let mut tx = session::datagram::DatagramSender::new(
        1472,
        t(50),
        Box::new(rate::Adaptive::new(1_000_000, None)),
    );
    for (owd, bytes) in [(i64::MIN, u64::MAX), (i64::MAX, u64::MAX), (0, 1)] {
        let hostile = wire::datagram::Report {
            interval_us: 60_000,
            packets: 10,
            min_owd_us: owd,
            bytes,
            ..report.clone()
        };
        tx.on_report(t(200), &hostile);
        tx.on_report(t(300), &hostile);
    }
}

#[test]
fn a_block_sent_one_byte_in_two_costs_a_logarithm_a_chunk() {
    // 100 000 one-byte chunks, every other byte, then the rest: each chunk
    // once sorted and rebuilt every range (quadratic: minutes); the ranges
    // also count against the assembly limit.
    let t = Duration::from_millis;
    let started = std::time::Instant::now();
    let mut r = DatagramReceiver::new(t(50), t(0));
    let n = 200_000u32;
    for off in (1..n).step_by(2) {
        let got = r.on_chunk(t(0), 0, &chunk(1, 0, off, n), &[1], yes);
        assert_eq!(got, Ok(None));
    }
    assert!(r.assembly_bytes() > 100_000 * 32, "{}", r.assembly_bytes());
    let mut done = None;
    for off in (0..n).step_by(2) {
        done = r
            .on_chunk(t(0), 0, &chunk(1, 0, off, n), &[1], yes)
            .unwrap();
    }
    assert_eq!(done.map(|c| c.data.len()), Some(n as usize));
    assert_eq!(r.assembly_bytes(), 0);
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// A pool of memory shared by sessions, as a daemon's `--memory` is.
struct Shared(std::sync::Mutex<u64>, u64);

impl session::Pool for Shared {
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

#[test]
fn sessions_sharing_a_pool_are_refused_as_busy_past_it_and_give_it_back() {
    use std::sync::Arc;
    let pool = Arc::new(Shared(std::sync::Mutex::new(0), 10 << 20));
    let bs = 64 << 10;
    let big = |id, name: &str| wire::Entry {
        id,
        path: name.as_bytes().to_vec(),
        kind: wire::EntryKind::File {
            size: 200_000 * bs as u64,
            mode: 0o644,
            mtime: 0,
            mtime_nsec: 0,
        },
        target: Vec::new(),
    };
    let mut first = session::ReceiverSession::new(bs);
    first.set_pool(pool.clone());
    let mut second = session::ReceiverSession::new(bs);
    second.set_pool(pool.clone());
    assert!(first.handle(wire::Msg::Entry(big(0, "a"))).is_ok());
    let taken = *pool.0.lock().unwrap();
    assert!(taken > 6 << 20, "{taken}");
    let e = second.handle(wire::Msg::Entry(big(0, "b"))).unwrap_err();
    assert_eq!(e.code(), wire::ErrorCode::Busy, "{e}");
    drop(first);
    assert_eq!(
        *pool.0.lock().unwrap(),
        0,
        "given back when the session ends"
    );
    assert!(second.handle(wire::Msg::Entry(big(1, "c"))).is_ok());
}
