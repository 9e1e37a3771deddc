//! The UDP data channel below the transfer (P-23 to P-26): its set-up
//! (hello and path-MTU probes), the echo that measures the path, and the
//! sealing and opening of datagrams. The paced sender and the receiver
//! that feed `session::datagram` are the engine's (`transfer::sender::udp`,
//! `transfer::receiver::udp`).

pub mod echo;
pub mod setup;
pub mod train;

use std::time::Duration;

use secure::{DatagramKey, Direction, Protection, SessionKeys};
use udp::UdpChannel;
use wire::datagram::{
    decode_prefix, encode_prefix, ChunkHeader, ParityHeader, Signal, DATAGRAM_PREFIX,
    FIRST_CHUNK_HEADER_LEN, KIND_DATA, KIND_DATA_FEC, KIND_PARITY, PARITY_HEADER_LEN,
};
use wire::TAG_LEN;

/// A ready UDP channel, its keys and what set-up learned.
pub struct UdpLink {
    pub channel: UdpChannel,
    pub send_key: DatagramKey,
    pub recv_key: DatagramKey,
    /// UDP payload bytes per datagram, probed for the path.
    pub payload: usize,
    pub rtt: Duration,
    /// The rate, in datagram bytes per second, at which set-up's packet
    /// train crossed the path in this side's sending direction (P-23):
    /// where a first transfer to a host starts. `None`: not measured.
    pub path_rate: Option<u64>,
    /// Threads that read and hash (sender) or verify and write (receiver).
    pub workers: usize,
    /// Sealed datagrams that arrived during set-up, to be handled first.
    pub backlog: Vec<Vec<u8>>,
    /// How long the channel may stay silent (`--timeout`) before the
    /// transfer is given up. Both ends send at least every quarter
    /// second while it runs.
    pub silence: Duration,
}

/// The keys one side uses: it seals with its own direction's key and opens
/// with the other's.
pub fn keys(
    keys: &SessionKeys,
    protection: Protection,
    client: bool,
) -> (DatagramKey, DatagramKey) {
    let (send, recv) = if client {
        (Direction::ClientToServer, Direction::ServerToClient)
    } else {
        (Direction::ServerToClient, Direction::ClientToServer)
    };
    (
        DatagramKey::new(protection, &keys.datagram_key(send)),
        DatagramKey::new(protection, &keys.datagram_key(recv)),
    )
}

/// Worker threads per side: the host's share of cores for a transfer
/// (`sizing::core_share`), 2 to [`MAX_WORKERS`].
pub fn workers() -> usize {
    crate::sizing::host_core_share().clamp(2, MAX_WORKERS)
}

/// The most workers a side runs for the UDP channel: past the channel's
/// one pump and one receive thread, more only wait.
pub const MAX_WORKERS: usize = 8;

/// A sealed signal datagram.
pub fn seal_signal(key: &DatagramKey, seq: u64, sig: &Signal) -> Vec<u8> {
    let mut b = vec![0u8; DATAGRAM_PREFIX];
    encode_prefix(&mut b, sig.kind(), seq);
    b.extend_from_slice(&sig.encode());
    let n = b.len();
    let tag = key.seal(seq, &mut b, DATAGRAM_PREFIX, n);
    b.extend_from_slice(&tag);
    b
}

/// A sealed parity datagram (P-47): its header, then one recovery shard.
pub fn seal_parity(key: &DatagramKey, seq: u64, header: &ParityHeader, shard: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(DATAGRAM_PREFIX + PARITY_HEADER_LEN + shard.len() + TAG_LEN);
    b.resize(DATAGRAM_PREFIX, 0);
    encode_prefix(&mut b, KIND_PARITY, seq);
    b.extend_from_slice(&header.encode());
    b.extend_from_slice(shard);
    let n = b.len();
    let tag = key.seal(seq, &mut b, DATAGRAM_PREFIX, n);
    b.extend_from_slice(&tag);
    b
}

/// Writes a sealed data datagram for `header` and `data` at the end of
/// `out`; returns its length. `covered`: the kind erasure coding covers
/// (P-47), which the receiver keeps until its group is settled.
pub fn seal_chunk(
    key: &DatagramKey,
    seq: u64,
    header: &ChunkHeader,
    data: &[u8],
    covered: bool,
    out: &mut Vec<u8>,
) -> usize {
    let start = out.len();
    out.resize(start + DATAGRAM_PREFIX + FIRST_CHUNK_HEADER_LEN, 0);
    let kind = if covered { KIND_DATA_FEC } else { KIND_DATA };
    encode_prefix(&mut out[start..], kind, seq);
    let n = header.encode_into(&mut out[start + DATAGRAM_PREFIX..]);
    out.truncate(start + DATAGRAM_PREFIX + n);
    out.extend_from_slice(data);
    let covered = DATAGRAM_PREFIX + n;
    let tag = key.seal(seq, &mut out[start..], DATAGRAM_PREFIX, covered);
    out.extend_from_slice(&tag);
    out.len() - start
}

/// What an authenticated datagram holds.
pub enum Opened<'a> {
    Chunk {
        seq: u64,
        header: ChunkHeader,
        data: &'a [u8],
        /// For a datagram erasure coding covers (P-47): its body less
        /// `sent_us`, what its group's shards were made of.
        covered: Option<&'a [u8]>,
    },
    /// A parity datagram of erasure coding (P-47).
    Parity {
        seq: u64,
        header: ParityHeader,
        shard: &'a [u8],
    },
    Signal {
        seq: u64,
        signal: Signal,
    },
}

/// Opens a datagram in place. `None` for anything that fails: a forged,
/// corrupted or foreign datagram is dropped like a lost one (P-24).
pub fn open<'a>(key: &DatagramKey, d: &'a mut [u8]) -> Option<Opened<'a>> {
    let (kind, seq) = decode_prefix(d).ok()?;
    let body_end = d.len().checked_sub(TAG_LEN)?;
    if body_end < DATAGRAM_PREFIX {
        return None;
    }
    let tag: [u8; TAG_LEN] = d[body_end..].try_into().ok()?;
    let chunk = kind == KIND_DATA || kind == KIND_DATA_FEC;
    let covered = if chunk && !key.protection().encrypts() {
        // In integrity-only mode the header is in clear and covered; its
        // length depends on the offset, which the tag then vouches for.
        DATAGRAM_PREFIX + wire::datagram::chunk_header_len(&d[DATAGRAM_PREFIX..body_end])?
    } else {
        body_end
    };
    let (body, _) = d.split_at_mut(body_end);
    key.open(seq, body, DATAGRAM_PREFIX, covered, &tag).ok()?;
    let body: &'a [u8] = &d[DATAGRAM_PREFIX..body_end];
    if chunk {
        let (header, n) = ChunkHeader::decode(body).ok()?;
        return Some(Opened::Chunk {
            seq,
            header,
            data: &body[n..],
            covered: (kind == KIND_DATA_FEC).then(|| &body[4..]),
        });
    }
    if kind == KIND_PARITY {
        return Some(Opened::Parity {
            seq,
            header: ParityHeader::decode(body).ok()?,
            shard: &body[PARITY_HEADER_LEN..],
        });
    }
    Some(Opened::Signal {
        seq,
        signal: Signal::decode(kind, body).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever arrives on the socket, opening never panics and never
        /// accepts what the key did not seal.
        #[test]
        fn open_refuses_arbitrary_bytes(mut d in proptest::collection::vec(any::<u8>(), 0..2000), p in 0usize..3) {
            let p = [Protection::Aes256Gcm, Protection::ChaCha20Poly1305, Protection::IntegrityOnly][p];
            let k = DatagramKey::new(p, &[5; 32]);
            prop_assert!(open(&k, &mut d).is_none());
        }
    }

    #[test]
    fn chunks_and_signals_open_under_every_protection() {
        for p in [
            Protection::Aes256Gcm,
            Protection::ChaCha20Poly1305,
            Protection::IntegrityOnly,
        ] {
            let k = DatagramKey::new(p, &[5; 32]);
            for offset in [0u32, 100] {
                let h = ChunkHeader {
                    sent_us: 1,
                    file: 2,
                    index: 3,
                    offset,
                    block_len: 1000,
                    first: (offset == 0).then_some(wire::datagram::FirstChunk {
                        hash: [8; 32],
                        codec: wire::CODEC_NONE,
                        len: 1000,
                    }),
                };
                let mut out = Vec::new();
                seal_chunk(&k, 77, &h, &[4; 50], offset > 0, &mut out);
                let mut bad = out.clone();
                let i = bad.len() - TAG_LEN - 1;
                bad[i] ^= 1;
                match open(&k, &mut out) {
                    Some(Opened::Chunk {
                        seq,
                        header,
                        data,
                        covered,
                    }) => {
                        assert_eq!((seq, header, data), (77, h, &[4u8; 50][..]));
                        // A covered chunk gives its body less `sent_us`.
                        let n = h.encoded_len() - 4 + 50;
                        assert_eq!(covered.map(|c| c.len()), (offset > 0).then_some(n));
                    }
                    _ => panic!("{p:?} chunk did not open"),
                }
                // Flipped data: refused when encrypted; under integrity-only
                // it opens and the block hash catches it later.
                assert_eq!(open(&k, &mut bad).is_some(), !p.encrypts());
            }
            let mut s = seal_signal(&k, 9, &Signal::Probe(1400));
            assert_eq!(s.len(), 1400);
            assert!(matches!(
                open(&k, &mut s),
                Some(Opened::Signal {
                    seq: 9,
                    signal: Signal::Probe(1400)
                })
            ));
            let ph = ParityHeader {
                group: 100,
                parity: 3,
                index: 2,
            };
            let mut par = seal_parity(&k, 10, &ph, &[6; 40]);
            assert!(matches!(
                open(&k, &mut par),
                Some(Opened::Parity { seq: 10, header, shard }) if header == ph && shard == [6; 40]
            ));
            let mut s = seal_signal(&k, 9, &Signal::Ping);
            s[0] = wire::datagram::KIND_STATS;
            assert!(open(&k, &mut s).is_none());
        }
    }
}
