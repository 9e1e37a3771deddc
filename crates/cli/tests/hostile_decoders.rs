//! Received block data decoded within bounds (issue 23, items 11 and 12's
//! decoders): a hostile client with an authorized key pushes crafted
//! blocks to a daemon, under full encryption and under `--no-encrypt`.
//!
//! - What the authenticated header claims past the session's bounds (a
//!   block longer than the session's blocks) ends the session with
//!   `Protocol`, before anything is decoded.
//! - Bytes that cannot decode within their bound (a bundle past 4 MiB, a
//!   zstd frame declaring more than its block, a delta program longer
//!   than its block) are refused before anything is allocated, and the
//!   block is asked for again (`Nack`): under `--no-encrypt` they are not
//!   authenticated, and may have been altered on the path.
//! - A bundle that passes its hash but whose table is bad is the sender's
//!   doing: `Protocol`.
//!
//! Loopback only; every wait is bounded.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::Env;
use hostile::{block, end, file, push, Client, BLOCK};
use secure::Keypair;
use wire::{
    BlockHeader, ErrorCode, Msg, Request, CODEC_BUNDLE, CODEC_DELTA, CODEC_NONE, CODEC_ZSTD,
    PROTECT_INTEGRITY_ONLY,
};

const VERDICT: Duration = Duration::from_secs(20);

/// Both protections a client may ask for.
fn requests() -> [(&'static str, Request); 2] {
    [
        ("encrypted", push("dst")),
        (
            "--no-encrypt",
            Request {
                protection: PROTECT_INTEGRITY_ONLY,
                ..push("dst")
            },
        ),
    ]
}

struct Daemon {
    env: Env,
    server: common::Server,
}

impl Daemon {
    fn start() -> Daemon {
        let env = Env::new();
        std::fs::create_dir_all(env.root.join("dst")).unwrap();
        let server = env.serve();
        Daemon { env, server }
    }

    /// A hostile client, its request accepted, its manifest of `files`
    /// (id, name, size) sent.
    fn session(&self, req: Request, files: &[(u32, &str, u64)]) -> Client {
        let key = Keypair::load(&self.env.home.join("id_x25519")).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", self.server.port).parse().unwrap();
        let mut c = Client::connect(addr, &key, false).expect("hostile handshake");
        c.request(req).expect("request accepted");
        let mut msgs: Vec<Msg> = files.iter().map(|&(id, n, s)| file(id, n, s)).collect();
        let bytes = files.iter().map(|f| f.2).sum();
        msgs.push(end(files.len() as u64, bytes));
        c.send(&msgs).unwrap();
        c
    }
}

fn zstd(data: &[u8]) -> Vec<u8> {
    let mut z = Vec::new();
    codec::Coder::new().compress(codec::Codec::Zstd(3), data, &mut z);
    z
}

/// Sends one block and reads until the daemon nacks it or ends the
/// session: the messages it sent.
fn verdict(c: &mut Client, h: &BlockHeader, data: &[u8]) -> Vec<Msg> {
    c.send_block(0, h, data).unwrap();
    c.read_for(VERDICT, |m| matches!(m, Msg::Nack { .. })).0
}

fn nacked(msgs: &[Msg], what: &str) {
    assert!(
        msgs.iter()
            .any(|m| matches!(m, Msg::Nack { file: 0, index: 0 })),
        "{what}: not asked for again: {msgs:?}"
    );
    assert!(
        !msgs.iter().any(|m| matches!(m, Msg::Error { .. })),
        "{what}: {msgs:?}"
    );
}

fn ended(msgs: &[Msg], words: &str, what: &str) {
    let e = msgs.iter().find_map(|m| match m {
        Msg::Error { code, message } => Some((*code, message.clone())),
        _ => None,
    });
    assert!(
        matches!(&e, Some((ErrorCode::Protocol, m)) if m.contains(words)),
        "{what}: expected a Protocol error naming {words:?}: {msgs:?}"
    );
}

#[test]
fn a_block_longer_than_the_sessions_blocks_ends_the_session() {
    let d = Daemon::start();
    for (what, req) in requests() {
        let data = common::random_bytes(2 * BLOCK as usize, 1);
        let mut c = d.session(req, &[(0, "long", data.len() as u64)]);
        let msgs = verdict(&mut c, &block(0, 0, BLOCK, &data), &data);
        ended(&msgs, "longer than the session's", what);
    }
}

#[test]
fn bundles_past_their_bound_or_with_bombs_are_asked_for_again() {
    let d = Daemon::start();
    let leader = common::random_bytes(300, 2);
    for (what, req) in requests() {
        let mut c = d.session(req, &[(0, "a", 300), (1, "b", 200)]);
        // A bundle stated at 8 MiB (a sender fills at most 4 MiB).
        let bomb = zstd(&vec![0u8; 8 << 20]);
        let payload = [&(8u32 << 20).to_le_bytes()[..], &bomb].concat();
        let h = BlockHeader {
            codec: CODEC_BUNDLE | CODEC_ZSTD,
            wire_len: payload.len() as u32,
            ..block(0, 0, BLOCK, &leader)
        };
        nacked(
            &verdict(&mut c, &h, &payload),
            &format!("{what}: 8 MiB bundle"),
        );
        // A bundle stated at 1 MiB whose frame holds 64 MiB.
        let bomb = zstd(&vec![0u8; 64 << 20]);
        let payload = [&(1u32 << 20).to_le_bytes()[..], &bomb].concat();
        let h = BlockHeader {
            wire_len: payload.len() as u32,
            ..h
        };
        nacked(
            &verdict(&mut c, &h, &payload),
            &format!("{what}: bundle bomb"),
        );
    }
}

#[test]
fn a_bundle_whose_table_is_bad_after_its_hash_ends_the_session() {
    let d = Daemon::start();
    for (what, req) in requests() {
        let mut c = d.session(req, &[(0, "a", 3), (1, "b", 2)]);
        // The table names file 1 first: not the leader the header names.
        let mut bundle = 2u16.to_le_bytes().to_vec();
        for (f, len) in [(1u32, 2u32), (0, 3)] {
            bundle.extend_from_slice(&f.to_le_bytes());
            bundle.extend_from_slice(&len.to_le_bytes());
        }
        bundle.extend_from_slice(b"deabc");
        let payload = [&(bundle.len() as u32).to_le_bytes()[..], &bundle].concat();
        let h = BlockHeader {
            file: 0,
            index: 0,
            offset: 0,
            len: 3,
            hash: session::block_hash(&bundle),
            codec: CODEC_BUNDLE | CODEC_NONE,
            wire_len: payload.len() as u32,
        };
        ended(&verdict(&mut c, &h, &payload), "bundle", what);
    }
}

#[test]
fn delta_programs_longer_than_their_block_are_asked_for_again() {
    let d = Daemon::start();
    let real = common::random_bytes(BLOCK as usize, 3);
    for (what, req) in requests() {
        let mut c = d.session(req, &[(0, "delta", BLOCK as u64)]);
        // A program stated at 16 MiB for a 64 KiB block, in a few KiB.
        let bomb = zstd(&vec![0u8; 16 << 20]);
        let payload = [&(16u32 << 20).to_le_bytes()[..], &bomb].concat();
        let h = BlockHeader {
            codec: CODEC_DELTA | CODEC_ZSTD,
            wire_len: payload.len() as u32,
            ..block(0, 0, BLOCK, &real)
        };
        nacked(&verdict(&mut c, &h, &payload), &format!("{what}: program"));
        // A plain block whose zstd frame declares more than its block.
        let h = BlockHeader {
            codec: CODEC_ZSTD,
            wire_len: bomb.len() as u32,
            ..block(0, 0, BLOCK, &real)
        };
        nacked(&verdict(&mut c, &h, &bomb), &format!("{what}: zstd bomb"));
        // The block itself, sent as it is, still lands.
        c.send_block(0, &block(0, 0, BLOCK, &real), &real).unwrap();
        let (msgs, how) = c.read_for(VERDICT, |m| matches!(m, Msg::Acks(_)));
        assert!(
            msgs.iter().any(|m| matches!(m, Msg::Acks(_))),
            "{what}: the real block was not acknowledged: {msgs:?} ({how})"
        );
    }
}
