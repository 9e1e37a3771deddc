//! Tests of the control messages: every variant round-trips, any bytes
//! decode without a panic, options and limits are checked.

use super::*;
use proptest::prelude::*;

#[test]
fn request_options_byte() {
    let req = Request {
        op: Op::Push,
        paths: vec!["d/".into()],
        recursive: true,
        many_sources: false,
        streams: 4,
        block_size: 1 << 20,
        protection: PROTECT_AES256GCM,
        rate: 0,
        transport: TRANSPORT_TCP,
        contents: true,
        preserve: true,
        compress: COMPRESS_ZSTD,
        compress_level: 9,
        sync: SyncOptions::default(),
        basis: String::new(),
        shard: None,
        select: Selection::default(),
        itemize: false,
        share: crate::SHARE_FAIR,
    };
    let mut full = Msg::Request(req.clone()).encode();
    // The sync byte, an empty basis (a 4-byte length), no shard (one
    // byte) and a selection of nothing (no rules, two sizes and a time)
    // come last. Every sync bit is one this version knows.
    let sync_at = full.len() - 6 - 28;
    full[sync_at] = 255;
    assert!(
        matches!(
            Msg::decode(&full),
            Ok(Msg::Request(Request {
                sync: SyncOptions {
                    ignore_existing: true,
                    ..
                },
                ..
            }))
        ),
        "every sync bit"
    );
    full[sync_at] = 63;
    assert!(matches!(
        Msg::decode(&full),
        Ok(Msg::Request(Request {
            sync: SyncOptions {
                dedup: true,
                dry_run: true,
                ..
            },
            ..
        }))
    ));
    full[sync_at] = 0;
    let mut bytes = full[..sync_at].to_vec();
    let n = bytes.len();
    let tail = full[sync_at..].to_vec();
    let decode = |b: &[u8]| {
        let mut whole = b.to_vec();
        whole.extend_from_slice(&tail);
        Msg::decode(&whole)
    };
    assert_eq!(bytes[n - 3], 0b11);
    assert_eq!(decode(&bytes).unwrap(), Msg::Request(req));
    // The share policy (P-46): one bit each, never both.
    for (bits, share) in [(0b1011, SHARE_BACKGROUND), (0b10011, SHARE_OFF)] {
        bytes[n - 3] = bits;
        assert!(matches!(decode(&bytes), Ok(Msg::Request(Request { share: s, .. })) if s == share));
    }
    bytes[n - 3] = 0b11011;
    assert!(matches!(decode(&bytes), Err(DecodeError::Invalid(_))));
    // A bit this version does not know is refused, not ignored.
    bytes[n - 3] = 0b100011;
    assert!(decode(&bytes).is_err());
    bytes[n - 3] = 0b11;
    // So are an unknown compression and a level out of range.
    bytes[n - 2] = 4;
    assert!(decode(&bytes).is_err());
    bytes[n - 2] = COMPRESS_ZSTD;
    bytes[n - 1] = 20;
    assert!(decode(&bytes).is_err());
    bytes[n - 2] = COMPRESS_LZ4;
    bytes[n - 1] = 3;
    assert!(decode(&bytes).is_err());
}

fn arb_kind() -> impl Strategy<Value = EntryKind> {
    prop_oneof![
        (any::<u64>(), any::<u32>(), any::<i64>(), any::<u32>()).prop_map(
            |(size, mode, mtime, mtime_nsec)| EntryKind::File {
                size,
                mode,
                mtime,
                mtime_nsec
            }
        ),
        (any::<u32>(), any::<i64>(), any::<u32>()).prop_map(|(mode, mtime, mtime_nsec)| {
            EntryKind::Dir {
                mode,
                mtime,
                mtime_nsec,
            }
        }),
        Just(EntryKind::Symlink),
    ]
}

pub(crate) fn arb_msg() -> impl Strategy<Value = Msg> {
    let bytes = || proptest::collection::vec(any::<u8>(), 0..64);
    prop_oneof![
        (
            0u32..50,
            proptest::collection::vec(".{0,20}", 0..4),
            any::<bool>(),
            any::<bool>(),
            any::<u16>(),
            any::<u32>(),
            0u8..=2,
            (
                any::<u64>(),
                0u8..=1,
                any::<bool>(),
                any::<bool>(),
                (0u8..=3, 1u8..=19),
                (any::<u8>(), ".{0,20}")
            ),
            proptest::option::of((
                any::<[u8; 16]>(),
                any::<[u8; 32]>(),
                (1u32..=MAX_SHARDS),
                any::<u32>(),
                proptest::collection::vec(
                    (
                        proptest::collection::vec(any::<u8>(), 0..40),
                        0u64..1 << 40,
                        1u64..1 << 40
                    ),
                    0..=MAX_PIECES
                ),
                any::<bool>()
            ))
        )
            .prop_map(
                |(
                    push,
                    paths,
                    recursive,
                    many_sources,
                    streams,
                    block_size,
                    protection,
                    (rate, transport, contents, preserve, (compress, level), (sync, basis)),
                    shard,
                )| {
                    let shard =
                        shard.map(|(transfer, plan, count, index, pieces, status)| ShardSpec {
                            status,
                            transfer,
                            plan,
                            index: index % count,
                            count,
                            pieces: pieces
                                .into_iter()
                                .map(|(path, offset, more)| Piece {
                                    path,
                                    offset,
                                    whole: offset + more,
                                })
                                .collect(),
                        });
                    Msg::Request(Request {
                        shard,
                        select: Selection {
                            rules: basis.split(' ').map(|w| format!("- {w}")).collect(),
                            min_size: rate / 3,
                            max_size: rate,
                            not_before: block_size as i64 - (1 << 31),
                        },
                        itemize: preserve && !contents,
                        share: (rate % 3) as u8,
                        sync: SyncOptions::from_bits(sync).unwrap(),
                        basis,
                        contents,
                        preserve,
                        compress,
                        compress_level: if compress == COMPRESS_ZSTD { level } else { 0 },
                        op: match push {
                            0 => Op::Push,
                            1 => Op::Pull,
                            40..=49 => Op::Tunnel,
                            50..=59 => Op::Job,
                            n @ 60..=69 => Op::Grant {
                                key: [n as u8; 32],
                                budget: rate,
                                lifetime: 1 + block_size % crate::MAX_GRANT_LIFETIME,
                                repeat: n % 2 == 0,
                            },
                            n => Op::Probe {
                                bytes: n as u64 * 7919,
                            },
                        },
                        paths,
                        recursive,
                        many_sources,
                        streams,
                        block_size,
                        protection,
                        rate,
                        transport,
                    })
                }
            ),
        (any::<[u8; 16]>(), any::<u16>(), any::<u16>(), any::<bool>()).prop_map(
            |(session, streams, udp_port, gated)| Msg::Accept {
                session,
                streams,
                udp_port,
                gated,
            }
        ),
        (
            any::<u32>(),
            proptest::collection::vec((any::<[u8; 16]>(), any::<u32>()), 0..10)
        )
            .prop_map(|(file, chunks)| Msg::Chunks { file, chunks }),
        proptest::collection::vec(any::<u32>(), 0..20).prop_map(Msg::Ready),
        proptest::collection::vec((any::<u32>(), 0u8..16), 0..20).prop_map(Msg::Changes),
        (
            any::<u32>(),
            proptest::collection::vec((any::<u32>(), any::<[u8; 32]>()), 0..10)
        )
            .prop_map(|(file, blocks)| Msg::Have { file, blocks }),
        proptest::collection::vec((any::<u32>(), any::<u32>()), 0..20).prop_map(Msg::Kept),
        proptest::collection::vec(any::<u32>(), 0..20).prop_map(Msg::Skip),
        (any::<u32>(), any::<[u8; 32]>()).prop_map(|(file, digest)| Msg::Digest { file, digest }),
        proptest::collection::vec(bytes(), 0..5).prop_map(Msg::Deleted),
        (0u8..6, ".{0,40}").prop_map(|(k, text)| Msg::Note {
            kind: NoteKind::from_u8(k),
            text
        }),
        (any::<u16>(), any::<[u64; 4]>()).prop_map(|(cores, v)| Msg::DecodeSpeed {
            cores,
            lz4_bytes: v[0],
            lz4_micros: v[1],
            zstd_bytes: v[2],
            zstd_micros: v[3],
        }),
        (any::<u32>(), bytes(), arb_kind(), bytes()).prop_map(|(id, path, kind, target)| {
            Msg::Entry(Entry {
                id,
                path,
                kind,
                target,
            })
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(files, bytes)| Msg::ManifestEnd { files, bytes }),
        (any::<u32>(), any::<[u8; 32]>()).prop_map(|(file, digest)| Msg::FileEnd { file, digest }),
        proptest::collection::vec((any::<u32>(), any::<u32>()), 0..20).prop_map(Msg::Acks),
        proptest::collection::vec((any::<u32>(), any::<u32>()), 0..20).prop_map(Msg::Zeros),
        (any::<u32>(), any::<u32>()).prop_map(|(file, index)| Msg::Nack { file, index }),
        any::<u32>().prop_map(|file| Msg::FileDone { file }),
        (0u8..13, ".{0,40}").prop_map(|(c, message)| Msg::Error {
            code: ErrorCode::from_u8(c),
            message
        }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(files, file_bytes, bad_blocks)| {
            Msg::Done(Summary {
                files,
                file_bytes,
                bad_blocks,
            })
        }),
        Just(Msg::Welcome),
        any::<u64>().prop_map(|expires| Msg::Granted { expires }),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Msg::JobCall),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Msg::JobAnswer),
        any::<(u16, u64)>().prop_map(|(udp_payload, path_rate)| Msg::UseTransport {
            udp_payload,
            path_rate
        }),
        (
            1u32..=crate::packed::MAX_PACKED as u32,
            proptest::collection::vec(any::<u8>(), 1..40)
        )
            .prop_map(|(raw_len, data)| Msg::Packed { raw_len, data }),
    ]
}

proptest! {
    #[test]
    fn roundtrip(m in arb_msg()) {
        prop_assert_eq!(Msg::decode(&m.encode()).unwrap(), m);
    }

    #[test]
    fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Msg::decode(&b);
    }

    #[test]
    fn mutated_messages_never_panic(m in arb_msg(), at: usize, byte: u8) {
        let mut b = m.encode();
        let i = at % b.len();
        b[i] = byte;
        let _ = Msg::decode(&b);
    }
}

#[test]
fn job_messages_and_grants_are_bounded() {
    let mut b = vec![26u8];
    b.extend_from_slice(&((crate::MAX_JOB_CALL + 1) as u32).to_le_bytes());
    assert!(Msg::decode(&b).is_err(), "a job call past its bound");
    let mut b = vec![27u8];
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(Msg::decode(&b).is_err(), "a job answer past its bound");
    // A grant's lifetime: 1 second to a year.
    let grant = |lifetime| {
        Msg::Request(Request {
            op: Op::Grant {
                key: [1; 32],
                budget: 1,
                lifetime,
                repeat: false,
            },
            paths: vec!["in/".into()],
            recursive: true,
            many_sources: false,
            streams: 1,
            block_size: 1 << 20,
            protection: 0,
            rate: 0,
            transport: 0,
            contents: false,
            preserve: false,
            compress: 0,
            compress_level: 0,
            sync: SyncOptions::default(),
            basis: String::new(),
            shard: None,
            select: Selection::default(),
            itemize: false,
            share: crate::SHARE_FAIR,
        })
    };
    assert!(Msg::decode(&grant(60).encode()).is_ok());
    for lifetime in [0, crate::MAX_GRANT_LIFETIME + 1] {
        assert!(
            Msg::decode(&grant(lifetime).encode()).is_err(),
            "lifetime {lifetime}"
        );
    }
}

#[test]
fn huge_ack_count_is_refused_without_allocating() {
    let mut b = vec![6u8];
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(Msg::decode(&b).is_err());
}

#[test]
fn a_shard_request_is_bounded() {
    let piece = |offset, whole| Piece {
        path: b"big".to_vec(),
        offset,
        whole,
    };
    let req = |index, count, pieces: Vec<Piece>| {
        Msg::Request(Request {
            op: Op::Push,
            paths: vec!["dst/".into()],
            recursive: true,
            many_sources: false,
            streams: 4,
            block_size: 1 << 20,
            protection: PROTECT_AES256GCM,
            rate: 0,
            transport: TRANSPORT_TCP,
            contents: true,
            preserve: true,
            compress: COMPRESS_AUTO,
            compress_level: 0,
            sync: SyncOptions::default(),
            basis: String::new(),
            shard: Some(ShardSpec {
                transfer: [1; 16],
                plan: [2; 32],
                index,
                count,
                pieces,
                status: false,
            }),
            select: Selection::default(),
            itemize: false,
            share: crate::SHARE_FAIR,
        })
    };
    let good = req(3, 4, vec![piece(0, 10), piece(5, 6)]);
    assert_eq!(Msg::decode(&good.encode()).unwrap(), good);
    for bad in [
        req(4, 4, vec![]),
        req(0, 0, vec![]),
        req(0, MAX_SHARDS + 1, vec![]),
        req(0, 4, vec![piece(0, 10); MAX_PIECES + 1]),
        req(0, 4, vec![piece(10, 10)]),
        req(0, 4, vec![piece(0, u64::MAX)]),
    ] {
        assert!(Msg::decode(&bad.encode()).is_err(), "{bad:?}");
    }
}

#[test]
fn a_selection_and_changes_are_bounded() {
    let with = |rules: Vec<String>| {
        Msg::Request(Request {
            op: Op::Pull,
            paths: vec!["d/".into()],
            recursive: true,
            many_sources: false,
            streams: 4,
            block_size: 1 << 20,
            protection: PROTECT_AES256GCM,
            rate: 0,
            transport: TRANSPORT_TCP,
            contents: true,
            preserve: true,
            compress: COMPRESS_AUTO,
            compress_level: 0,
            sync: SyncOptions::default(),
            basis: String::new(),
            shard: None,
            select: Selection {
                rules,
                ..Selection::default()
            },
            itemize: true,
            share: crate::SHARE_FAIR,
        })
    };
    let most = with(vec!["- *.o".to_string(); MAX_FILTER_RULES]);
    assert_eq!(Msg::decode(&most.encode()).unwrap(), most);
    // Long rules: within each one's bound, but not all together.
    let long = |n| with(vec![format!("- {}", "x".repeat(1022)); n]);
    assert!(Msg::decode(&long(MAX_FILTER_BYTES / 1024).encode()).is_ok());
    assert!(Msg::decode(&long(MAX_FILTER_BYTES / 1024 + 1).encode()).is_err());
    assert!(Msg::decode(&with(vec!["- a".to_string(); MAX_FILTER_RULES + 1]).encode()).is_err());
    let long = format!("- {}", "a".repeat(MAX_FILTER_RULE_LEN));
    assert!(Msg::decode(&with(vec![long]).encode()).is_err());
    // A change bit this version does not know is refused.
    let mut bad = Msg::Changes(vec![(1, CHANGE_NEW)]).encode();
    *bad.last_mut().unwrap() = 16;
    assert!(Msg::decode(&bad).is_err());
}
