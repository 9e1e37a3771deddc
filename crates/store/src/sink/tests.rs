//! The sink's tests: placement, resume, descriptors and links.
use super::*;
use crate::storage::{BlockSink, DirTimes, Stamp, Verified};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::sync::atomic::Ordering;

fn verified(id: u32, mode: u32, mtime: i64, mtime_nsec: u32) -> Verified {
    Verified {
        id,
        mode,
        mtime,
        mtime_nsec,
    }
}
use std::fs::OpenOptions;

fn stamp(size: u64) -> Stamp {
    Stamp {
        block_size: 1 << 20,
        size,
        mtime: 1_700_000_000,
        mtime_nsec: 0,
    }
}

fn sink_at(dir: &Path, base: &str, many: bool) -> Sink {
    let root = Root::new(dir).unwrap();
    Sink::new(
        Destination::for_path(&dir.join(base), false, many, false, root).unwrap(),
        true,
    )
}

#[test]
fn any_number_of_files_within_the_descriptor_limit() {
    let open_fds = || fs::read_dir("/proc/self/fd").unwrap().count();
    let d = tempfile::tempdir().unwrap();
    fs::create_dir(d.path().join("many")).unwrap();
    let s = sink_at(d.path(), "many", true);
    let before = open_fds();
    let n = 3 * MAX_OPEN as u32;
    for id in 0..n {
        s.open_file(id, format!("f{id}").as_bytes(), &stamp(8))
            .unwrap();
    }
    for id in 0..n {
        s.write_block(id, 0, &id.to_le_bytes()).unwrap();
        s.write_zero(id, 4, 4).unwrap();
    }
    // Other tests' descriptors come and go meanwhile: allow for them.
    assert!(open_fds() < before + MAX_OPEN + 64, "{} open", open_fds());
    let batch: Vec<_> = (0..n).map(|id| verified(id, 0o644, 0, 0)).collect();
    s.finalize(&batch).unwrap();
    for id in 0..n {
        let got = fs::read(d.path().join(format!("many/f{id}"))).unwrap();
        assert_eq!(got[..4], id.to_le_bytes());
        assert_eq!(got[4..], [0; 4]);
    }
    assert_eq!(s.open.load(Ordering::SeqCst), 0);
    // Empty files too, announced beyond the descriptors kept.
    let s = sink_at(d.path(), "many", true);
    for id in 0..n {
        s.open_file(id, format!("e{id}").as_bytes(), &stamp(0))
            .unwrap();
    }
    s.finalize(&batch).unwrap();
    assert!(
        (0..n).all(|id| fs::metadata(d.path().join(format!("many/e{id}")))
            .unwrap()
            .len()
            == 0)
    );
}

#[test]
fn a_drop_box_never_places_a_file_over_one_that_is_there() {
    let d = tempfile::tempdir().unwrap();
    fs::write(d.path().join("out.bin"), b"earlier").unwrap();
    let s = sink_at(d.path(), "out.bin", false).adding_only();
    let e = s.open_file(1, b"src.bin", &stamp(3)).unwrap_err();
    assert_eq!(e.kind, crate::StoreErrorKind::Permission, "{e}");
    // A file that appears after the name was found free is not replaced
    // either: the rename does not overwrite.
    let s = sink_at(d.path(), "new.bin", false).adding_only();
    s.open_file(1, b"src.bin", &stamp(3)).unwrap();
    s.write_block(1, 0, b"abc").unwrap();
    fs::write(d.path().join("new.bin"), b"raced").unwrap();
    let e = s.finalize(&[verified(1, 0o640, 1_000_000, 0)]).unwrap_err();
    assert_eq!(e.kind, crate::StoreErrorKind::Permission, "{e}");
    assert_eq!(fs::read(d.path().join("new.bin")).unwrap(), b"raced");
    assert_eq!(fs::read(d.path().join("out.bin")).unwrap(), b"earlier");
}

#[test]
fn file_appears_only_after_finalize() {
    let d = tempfile::tempdir().unwrap();
    let s = sink_at(d.path(), "out.bin", false);
    s.open_file(1, b"src.bin", &stamp(6)).unwrap();
    s.write_block(1, 3, b"def").unwrap();
    s.write_block(1, 0, b"abc").unwrap();
    assert!(!d.path().join("out.bin").exists());
    s.finalize(&[verified(1, 0o640, 1_000_000, 5)]).unwrap();
    let p = d.path().join("out.bin");
    assert_eq!(fs::read(&p).unwrap(), b"abcdef");
    assert_eq!(
        fs::metadata(&p).unwrap().permissions().mode() & 0o777,
        0o640
    );
    assert_eq!(
        fs::metadata(&p).unwrap().modified().unwrap(),
        to_time(1_000_000, 5)
    );
    assert_eq!(
        fs::read_dir(d.path()).unwrap().count(),
        1,
        "no temporary file left"
    );
}

#[test]
fn a_file_of_one_block_keeps_no_journal() {
    let d = tempfile::tempdir().unwrap();
    let bs = 64 << 10;
    let st = Stamp {
        block_size: bs,
        ..stamp(1000)
    };
    let s = sink_at(d.path(), "small", false);
    s.open_file(1, b"small", &st).unwrap();
    s.write_block(1, 0, &[7; 1000]).unwrap();
    s.record(1, 0, &session::block_hash(&[7; 1000]));
    let journal = d.path().join(".small.haul.journal");
    assert!(!journal.exists());
    // Stopped here, its partial stays and resumes by content (P-35).
    s.abort();
    assert!(d.path().join(".small.haul.part").exists());
    let s = sink_at(d.path(), "small", false);
    s.open_file(1, b"small", &st).unwrap();
    assert_eq!(s.held_blocks(1).unwrap(), vec![]);
    s.write_block(1, 0, &[7; 1000]).unwrap();
    s.finalize(&[verified(1, 0o644, 0, 0)]).unwrap();
    assert_eq!(fs::read(d.path().join("small")).unwrap(), vec![7; 1000]);
    assert!(!journal.exists());
    assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
}

#[test]
fn a_partial_resumes_the_blocks_its_journal_lists_and_still_holds() {
    let d = tempfile::tempdir().unwrap();
    let bs = 64 << 10;
    let st = Stamp {
        block_size: bs,
        ..stamp(3 * bs as u64)
    };
    let block = |i: u8| vec![i + 1; bs as usize];
    let s = sink_at(d.path(), "x", false);
    s.open_file(1, b"x", &st).unwrap();
    for i in 0..2u8 {
        s.write_block(1, i as u64 * bs as u64, &block(i)).unwrap();
        s.record(1, i as u32, &session::block_hash(&block(i)));
    }
    s.abort();
    let journal = d.path().join(".x.haul.journal");
    assert!(journal.exists(), "kept beside the partial");
    // Block 1 is damaged after the fact: the journal is not believed.
    let part = d.path().join(".x.haul.part");
    let f = OpenOptions::new().write(true).open(&part).unwrap();
    f.write_all_at(b"torn", bs as u64 + 10).unwrap();

    let s = sink_at(d.path(), "x", false);
    s.open_file(1, b"x", &st).unwrap();
    let held = s.held_blocks(1).unwrap();
    assert_eq!(held, vec![(0, session::block_hash(&block(0)))]);
    s.finalize(&[verified(1, 0o644, 0, 0)]).unwrap();
    assert!(!journal.exists(), "gone once the file is placed");

    // Another version of the source: its journal starts afresh.
    let s = sink_at(d.path(), "y", false);
    s.open_file(2, b"y", &st).unwrap();
    s.write_block(2, 0, &block(0)).unwrap();
    s.record(2, 0, &session::block_hash(&block(0)));
    s.abort();
    let s = sink_at(d.path(), "y", false);
    let newer = Stamp { mtime: 5, ..st };
    s.open_file(2, b"y", &newer).unwrap();
    assert!(s.held_blocks(2).unwrap().is_empty());
}

#[test]
fn abort_keeps_only_partials_that_hold_data() {
    let d = tempfile::tempdir().unwrap();
    let s = sink_at(d.path(), "x", false);
    s.open_file(1, b"x", &stamp(10)).unwrap();
    s.abort();
    assert_eq!(
        fs::read_dir(d.path()).unwrap().count(),
        0,
        "nothing written"
    );

    let s = sink_at(d.path(), "x", false);
    s.open_file(1, b"x", &stamp(10)).unwrap();
    s.write_block(1, 0, b"hello").unwrap();
    s.abort();
    let kept = d.path().join(".x.haul.part");
    assert_eq!(fs::read(&kept).unwrap(), b"hello\0\0\0\0\0");
    assert!(!d.path().join("x").exists());

    // The next transfer finds it, writes on in place, and places it.
    let s = sink_at(d.path(), "x", false);
    assert!(s.destination_exists(), "a partial is something to resume");
    assert!(s.partial_of(b"x").unwrap().is_some());
    s.open_file(1, b"x", &stamp(12)).unwrap();
    assert!(
        s.partial_of(b"x").unwrap().is_none(),
        "held by this transfer"
    );
    s.write_block(1, 5, b" world!").unwrap();
    s.finalize(&[verified(1, 0o644, 0, 0)]).unwrap();
    assert_eq!(fs::read(d.path().join("x")).unwrap(), b"hello world!");
    assert!(!kept.exists());

    // A resumed partial that this transfer wrote nothing into is kept.
    fs::write(&kept, b"old").unwrap();
    let s = sink_at(d.path(), "x", false);
    s.open_file(1, b"x", &stamp(3)).unwrap();
    s.abort();
    assert_eq!(fs::read(&kept).unwrap(), b"old");
}

#[test]
fn a_partial_held_by_a_live_transfer_is_left_alone() {
    let d = tempfile::tempdir().unwrap();
    let first = sink_at(d.path(), "x", false);
    first.open_file(1, b"x", &stamp(4)).unwrap();
    first.write_block(1, 0, b"aaaa").unwrap();
    let second = sink_at(d.path(), "x", false);
    assert!(second.partial_of(b"x").unwrap().is_none());
    second.open_file(1, b"x", &stamp(4)).unwrap();
    second.write_block(1, 0, b"bbbb").unwrap();
    second.finalize(&[verified(1, 0o644, 0, 0)]).unwrap();
    assert_eq!(fs::read(d.path().join("x")).unwrap(), b"bbbb");
    first.abort();
    assert_eq!(fs::read(d.path().join(".x.haul.part")).unwrap(), b"aaaa");
}

#[test]
fn refuses_writing_through_a_symlink_out_of_the_root() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    fs::create_dir(&root).unwrap();
    std::os::unix::fs::symlink(outer.path(), root.join("escape")).unwrap();
    let s = sink_at(&root, "", true);
    let e = s.open_file(1, b"escape/owned", &stamp(1)).unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::OutsideRoot);
}

/// A directory outside the destination with a file in it, and their
/// modes, contents and times, to check nothing there changed (P-38).
struct Victim {
    dir: PathBuf,
    before: Vec<(PathBuf, u32, i64, Vec<u8>)>,
}

impl Victim {
    fn plant(outer: &Path) -> Victim {
        let dir = outer.join("outside");
        fs::create_dir_all(dir.join("sub")).unwrap();
        fs::write(dir.join("secret"), b"do not touch").unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        let mut v = Victim {
            dir,
            before: Vec::new(),
        };
        v.before = v.state();
        v
    }

    fn state(&self) -> Vec<(PathBuf, u32, i64, Vec<u8>)> {
        use std::os::unix::fs::MetadataExt;
        let mut out = Vec::new();
        for p in [
            self.dir.clone(),
            self.dir.join("secret"),
            self.dir.join("sub"),
        ] {
            let m = fs::symlink_metadata(&p).unwrap();
            let data = if m.is_file() {
                fs::read(&p).unwrap()
            } else {
                Vec::new()
            };
            out.push((p, m.mode(), m.mtime(), data));
        }
        out
    }

    fn untouched(&self) {
        assert_eq!(self.state(), self.before, "something outside changed");
    }
}

fn root_with_victim() -> (tempfile::TempDir, PathBuf, Victim) {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    fs::create_dir(&root).unwrap();
    let v = Victim::plant(outer.path());
    (outer, root, v)
}

#[test]
fn a_link_named_like_a_temporary_is_never_written_through() {
    let (_o, root, v) = root_with_victim();
    let s = sink_at(&root, "", true);
    let bs = 64 << 10;
    let st = Stamp {
        block_size: bs,
        ..stamp(2 * bs as u64)
    };
    s.make_symlink(b".x.haul.part", v.dir.join("secret").as_os_str().as_bytes())
        .unwrap();
    s.make_symlink(
        b".x.haul.journal",
        v.dir.join("secret").as_os_str().as_bytes(),
    )
    .unwrap();
    s.open_file(1, b"x", &st).unwrap();
    s.write_block(1, 0, &vec![1; bs as usize]).unwrap();
    s.record(1, 0, &session::block_hash(&vec![1; bs as usize]));
    s.write_block(1, bs as u64, &vec![2; bs as usize]).unwrap();
    s.finalize(&[verified(1, 0o777, 0, 0)]).unwrap();
    v.untouched();
    let placed = fs::symlink_metadata(root.join("x")).unwrap();
    assert!(placed.is_file(), "x is the file sent, not a link");
    assert_eq!(fs::read(root.join("x")).unwrap().len(), 2 * bs as usize);
    // The sender's links are left as they were sent.
    assert!(fs::symlink_metadata(root.join(".x.haul.part"))
        .unwrap()
        .is_symlink());
}

#[test]
fn a_link_is_never_a_directory_to_fill_change_or_clean() {
    let (_o, root, v) = root_with_victim();
    let target = v.dir.as_os_str().as_bytes().to_vec();
    let s = sink_at(&root, "", true);
    s.make_symlink(b"d", &target).unwrap();
    // A directory of the same name: refused, not taken for the link's target.
    let e = s.make_dir(b"d", 0o1777).unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::OutsideRoot, "{e}");
    // Nor a parent of a file, a link or a directory.
    let e = s.open_file(2, b"d/f", &stamp(1)).unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::OutsideRoot, "{e}");
    assert!(s.make_symlink(b"d/l", b"x").is_err());
    assert!(s.make_dir(b"d/sub2", 0o755).is_err());
    // `-p` on it: refused, the target's mode and times untouched.
    assert!(s
        .finish(&[DirTimes {
            rel: b"d".to_vec(),
            mtime: 915_000_000,
            mtime_nsec: 0
        }])
        .is_err());
    // `--delete` in it: refused, nothing listed or removed there.
    let e = s
        .extraneous(&[b"d".to_vec()], &[], false, false)
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::OutsideRoot, "{e}");
    // Nothing is read through it either.
    assert!(s.open_placed(b"d/secret").is_err());
    v.untouched();
    // The link itself is extraneous to a tree without it, and removing it
    // removes the link only.
    let found = s.extraneous(&[], &[], true, false).unwrap();
    assert_eq!(
        found,
        vec![Extraneous {
            place: b"d".to_vec(),
            shown: b"d".to_vec(),
            // A link: neither a directory nor a file, and not followed.
            dir: false,
            file: None,
        }]
    );
    s.remove(&[b"d".to_vec()], false).unwrap();
    assert!(!root.join("d").exists());
    v.untouched();
}

#[test]
fn a_link_in_place_of_a_file_is_replaced_never_read() {
    let (_o, root, v) = root_with_victim();
    std::os::unix::fs::symlink(v.dir.join("secret"), root.join("s")).unwrap();
    let s = sink_at(&root, "", true);
    assert!(s.open_placed(b"s").unwrap().is_none(), "not a basis");
    assert!(s.partial_of(b"s").unwrap().is_none());
    s.open_file(1, b"s", &stamp(3)).unwrap();
    s.write_block(1, 0, b"new").unwrap();
    s.finalize(&[verified(1, 0o644, 0, 0)]).unwrap();
    assert_eq!(fs::read(root.join("s")).unwrap(), b"new");
    assert!(!fs::symlink_metadata(root.join("s")).unwrap().is_symlink());
    v.untouched();
}

#[test]
fn a_dir_contents_destination_is_made_only_when_something_arrives() {
    let d = tempfile::tempdir().unwrap();
    let root = Root::new(d.path()).unwrap();
    let dest = d.path().join("new");
    let s = Sink::new(
        Destination::for_path(&dest, true, false, true, root.clone()).unwrap(),
        false,
    );
    assert!(!dest.exists(), "a dry run changes nothing");
    assert!(s.open_placed(b"x").unwrap().is_none());
    assert!(s.extraneous(&[], &[], true, false).unwrap().is_empty());
    assert!(!dest.exists());
    s.finish(&[]).unwrap();
    assert!(dest.is_dir(), "an empty `dir/` still makes its directory");
}

#[test]
fn partials_another_live_transfer_holds_cost_one_grace_in_all() {
    let d = tempfile::tempdir().unwrap();
    fs::create_dir(d.path().join("t")).unwrap();
    let dir = beneath::open_dir(&d.path().join("t")).unwrap();
    // Another transfer, live, holds the partials of both files.
    let held: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| partial::open_locked(&dir, &partial::resumable_name(OsStr::new(n))).unwrap())
        .collect();
    let s = sink_at(d.path(), "t", true);
    let t0 = std::time::Instant::now();
    s.open_file(1, b"a", &stamp(8)).unwrap();
    s.open_file(2, b"b", &stamp(8)).unwrap();
    let took = t0.elapsed();
    assert!(
        took >= partial::LIVE_GRACE,
        "waited for the holder: {took:?}"
    );
    assert!(
        took < partial::LIVE_GRACE + Duration::from_secs(2),
        "waited once, not per file: {took:?}"
    );
    let notes = s.take_notes();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes
        .iter()
        .all(|(k, t)| *k == NoteKind::PartialHeld && t.contains("still running")));
    // Both went to names of their own, and the held partials are untouched.
    s.write_block(1, 0, b"12345678").unwrap();
    s.write_block(2, 0, b"abcdefgh").unwrap();
    s.finalize(&[verified(1, 0o644, 0, 0), verified(2, 0o644, 0, 0)])
        .unwrap();
    assert_eq!(fs::read(d.path().join("t/a")).unwrap(), b"12345678");
    assert!(d.path().join("t/.a.haul.part").exists(), "still held");
    drop(held);
}
