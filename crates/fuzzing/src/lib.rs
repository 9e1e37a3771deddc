//! The body of every fuzz target: one function per decoder that reads
//! what a peer or a disk hands haul, and two that play hostile peers
//! against the receiving state machines (`sessions.rs`). `fuzz/fuzz_targets/NAME.rs` calls
//! `fuzzing::NAME` under cargo-fuzz (`scripts/fuzz.sh`); the stable test
//! `tests/regressions.rs` replays every input kept in
//! `fuzz/regressions/NAME/` through the same function, so a crash once
//! found stays fixed without a nightly toolchain.
//!
//! Each function must return normally for any input: a decoder refuses
//! bad bytes with an error, never a panic, an overflow or a huge
//! allocation. Where a decoder accepts its input, the function also
//! checks what it can of the result (a message re-encodes to the same
//! message).

use std::sync::OnceLock;

mod sessions;
pub use sessions::{datagram_receiver, receiver};

/// A target's body: any bytes in, a normal return out.
pub type Target = fn(&[u8]);

/// Every target, by the name its fuzz target and regression folder use.
pub const TARGETS: &[(&str, Target)] = &[
    ("msg", msg),
    ("packed", packed),
    ("preamble", preamble),
    ("block_header", block_header),
    ("datagram", datagram),
    ("stdio", stdio),
    ("bundle", bundle),
    ("program", program),
    ("compressed", compressed),
    ("handshake", handshake),
    ("keys", keys),
    ("journal", journal),
    ("cache_index", cache_index),
    ("tunnel", tunnel),
    ("receiver", receiver),
    ("datagram_receiver", datagram_receiver),
];

/// A control message (P-6): decoding, and for what decodes, encoding it
/// again gives the same message.
pub fn msg(d: &[u8]) {
    if let Ok(m) = wire::Msg::decode(d) {
        let again = wire::Msg::decode(&m.encode()).expect("a decoded message re-encodes");
        assert_eq!(again, m);
    }
}

/// Several control messages packed into one frame (P-34).
pub fn packed(d: &[u8]) {
    let _ = wire::packed::split(d);
}

/// The cleartext preamble and its reply (P-1, P-2), the handshake's
/// wishes and answer (P-3), and a pinned start's opening (P-48).
pub fn preamble(d: &[u8]) {
    if let Ok(p) = wire::Preamble::decode(d) {
        assert_eq!(wire::Preamble::decode(&p.encode()), Ok(p));
    }
    let _ = wire::PreambleReply::decode(d);
    if let Ok(w) = wire::HandshakeWishes::decode(d) {
        assert_eq!(&w.encode()[..], d);
    }
    if let Ok(a) = wire::HandshakeAnswer::decode(d) {
        assert_eq!(&a.encode()[..], d);
    }
    if let Ok(o) = wire::PinnedOpening::decode(d) {
        assert_eq!(o.encode(), d);
    }
}

/// A data frame's block header (P-10).
pub fn block_header(d: &[u8]) {
    if let Ok(h) = wire::BlockHeader::decode(d) {
        let _ = wire::check_coding(h.codec, h.len, h.wire_len);
    }
}

/// A UDP datagram (P-24): its prefix, chunk header and signals, and the
/// whole open path under both protections with a fixed key.
pub fn datagram(d: &[u8]) {
    use wire::datagram::{decode_prefix, ChunkHeader, Signal};
    let _ = decode_prefix(d);
    let _ = ChunkHeader::decode(d);
    if let Some((&kind, rest)) = d.split_first() {
        let _ = Signal::decode(kind, rest);
    }
    for protection in [
        secure::Protection::IntegrityOnly,
        secure::Protection::best_encrypting(),
    ] {
        let key = secure::DatagramKey::new(protection, &[7; 32]);
        let mut buf = d.to_vec();
        let _ = connect::datagram::open(&key, &mut buf);
    }
}

/// The ssh channel's greeting line and relay frame headers (P-27, P-28).
pub fn stdio(d: &[u8]) {
    let _ = wire::stdio::Greeting::decode(&String::from_utf8_lossy(d));
    let _ = wire::stdio::RelayHeader::decode(d);
}

/// A bundle of small files (P-33).
pub fn bundle(d: &[u8]) {
    let _ = wire::bundle::decode(d);
}

/// A delta program (P-31): the first 4 bytes give the block's length.
pub fn program(d: &[u8]) {
    let Some((len, prog)) = d.split_at_checked(4) else {
        return;
    };
    let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) % (wire::MAX_BLOCK_SIZE + 1);
    if let Ok(pieces) = wire::program::decode(prog, len) {
        let total: u64 = pieces.iter().map(|p| p.len() as u64).sum();
        assert_eq!(total, len as u64, "pieces add up to the block");
    }
}

/// A tunnel lane's frame body (P-37): what decodes re-encodes to the same
/// bytes, and a server's mux takes any decoded frames in any order with an
/// error or not, never a panic.
pub fn tunnel(d: &[u8]) {
    let Ok(frames) = wire::tunnel::TunnelFrame::decode_all(d) else {
        return;
    };
    let mut again = Vec::new();
    for f in &frames {
        f.encode_into(&mut again);
    }
    assert_eq!(again, d, "a decoded tunnel frame re-encodes");
    let mut mux = tunnel::Mux::new(tunnel::Role::Server, tunnel::MuxConfig::default());
    for f in frames {
        let plain = matches!(f, wire::tunnel::TunnelFrame::Data { codec: 0, .. });
        if plain || !matches!(f, wire::tunnel::TunnelFrame::Data { .. }) {
            let _ = mux.handle(f);
        }
        while mux.poll_frame().is_some() {}
    }
}

/// A compressed block (P-30): the first byte picks lz4 or zstd, the next
/// 4 the length it claims (at most 1 MiB here); what does not decode to
/// exactly that length comes back as zeros of it.
pub fn compressed(d: &[u8]) {
    let Some((head, data)) = d.split_at_checked(5) else {
        return;
    };
    let codec = [wire::CODEC_LZ4, wire::CODEC_ZSTD][head[0] as usize % 2];
    let len = u32::from_le_bytes(head[1..5].try_into().expect("4 bytes")) % (1 << 20);
    let progress = connect::Progress::default();
    let out = transfer::compress::decode(codec, data, len, &progress);
    assert_eq!(out.len(), len as usize);
}

fn keypair() -> &'static secure::Keypair {
    static K: OnceLock<secure::Keypair> = OnceLock::new();
    K.get_or_init(secure::Keypair::generate)
}

/// The Noise handshakes (P-3, P-48): the first byte picks a server reading
/// message one, a client reading message two, or a server reading message
/// three after a real message one, of XX; or a server reading message one
/// or a client reading message two of the pinned start (IK); the rest is
/// that message. One of the five a run: each costs several X25519
/// operations, which set the pace.
pub fn handshake(d: &[u8]) {
    let Some((&pick, d)) = d.split_first() else {
        return;
    };
    let k = keypair();
    match pick % 5 {
        3 => {
            if let Ok((_, opened)) = secure::PinnedServer::respond(k, b"greeting", d) {
                let _ = wire::PinnedOpening::decode(&opened.opening);
            }
        }
        4 => {
            if let Ok((client, _)) = secure::PinnedClient::start(k, &k.public, b"greeting", &[]) {
                if let Ok((answer, _)) = client.finish(d) {
                    let _ = wire::HandshakeAnswer::decode(&answer);
                }
            }
        }
        0 => {
            if let Ok((_, wishes)) = secure::ServerHandshake::respond(k, b"greeting", d) {
                let _ = wire::HandshakeWishes::decode(&wishes);
            }
        }
        1 => {
            let wishes = wire::HandshakeWishes { udp_port: true }.encode();
            if let Ok((mut client, _)) = secure::ClientHandshake::start(k, b"greeting", &wishes) {
                if let Ok((_, answer)) = client.read_reply(d) {
                    let _ = wire::HandshakeAnswer::decode(&answer);
                }
            }
        }
        _ => {
            let wishes = wire::HandshakeWishes { udp_port: true }.encode();
            if let Ok((_, msg1)) = secure::ClientHandshake::start(k, b"greeting", &wishes) {
                if let Ok((server, _)) = secure::ServerHandshake::respond(k, b"greeting", &msg1) {
                    let _ = server.finish(d);
                }
            }
        }
    }
}

/// Public keys and authorized_keys / known_hosts text.
pub fn keys(d: &[u8]) {
    let text = String::from_utf8_lossy(d);
    let _ = secure::PublicKey::parse(&text);
    let _ = secure::AuthorizedKeys::parse(&text);
}

/// A resume journal (P-35), as left on disk beside a partial.
pub fn journal(d: &[u8]) {
    if let Ok((stamp, listed)) = store::journal::decode(d) {
        let blocks = stamp.size.div_ceil(stamp.block_size as u64);
        assert!(listed.iter().all(|(i, _)| (*i as u64) < blocks));
        assert!(listed.windows(2).all(|w| w[0].0 < w[1].0));
    }
}

/// The chunk cache's index (P-31). Its checksum is appended here, so the
/// fuzzer reaches the fields behind it.
pub fn cache_index(d: &[u8]) {
    let mut b = d.to_vec();
    b.extend_from_slice(blake3::hash(d).as_bytes());
    let _ = store::cache::index_is_valid(&b);
    let _ = store::cache::index_is_valid(d);
}
