//! The cleartext greeting that opens every TCP connection (P-1, P-2), so a
//! peer of another version or another protocol is told apart before any
//! cryptography runs.

use crate::buf::{DecodeError, Reader, Writer};

/// First four bytes of every haul connection.
pub const MAGIC: [u8; 4] = *b"HAUL";

/// The protocol version this build speaks (P-2). Bumped on any incompatible
/// change; within a version, what the `Request` carries (op, streams, block
/// size, protection, rate, transport, options) is the only negotiation.
/// Version 2 added the UDP data channel (P-23); version 3 the request's
/// options byte (rsync's trailing-slash rule, `-p`, P-8) and the ssh start
/// (P-27, P-28); version 4 deduplication and sync (P-31, P-32); version 5
/// bundles of small files (P-33); version 6 packed control messages
/// (P-34); version 7 block-exact resume (P-35); version 8 the handshake's
/// wishes and answer, which offer the UDP port a round trip sooner (P-3,
/// P-23); version 9 the probe request (P-36); version 10 tunnels
/// (P-37); version 11 data connections that join before `Accept` (P-20);
/// version 13 the ssh start's handshake in the greetings and its keyed
/// control connection (P-27); version 14 a push that is one shard of a
/// transfer split across hosts (P-42); version 15 a UDP port named only in
/// `Accept`, opened once the client is authenticated (P-23, P-43);
/// version 16 filter rules, sizes and ages in the request, `--ignore-existing`
/// and the receiver's `Changes` (P-44); version 23 the pinned start,
/// Noise IK with the request in message one (P-48); version 24 the
/// warm-up before a pinned start's data preamble (P-49).
pub const PROTOCOL_VERSION: u16 = 24;

/// A warm-up's `session[0]` when it asks for warm-ups back (P-49).
pub const WARMUP_ASK: u8 = 1;

/// The most padding a connection's warm-ups carry in all (P-49,
/// "Security limits"): four times TCP's usual first window at MTU 9000.
pub const MAX_WARMUP: usize = 256 << 10;

/// Encoded length of [`Preamble`].
pub const PREAMBLE_LEN: usize = 4 + 2 + 1 + 16 + 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnKind {
    /// Handshake, then sealed control messages.
    Control,
    /// Sealed block frames of an established session.
    Data,
    /// The control connection of a session whose keys were agreed in the
    /// ssh greetings (P-27): a join frame on stream 0, then sealed control
    /// messages, with no handshake of its own.
    Keyed,
    /// A connection the client of a job relays to the job's other end
    /// (`--through-client`, P-45 J-11): `session` is the job's id; the
    /// daemon uses the connection as one to that end, whose key it
    /// checks. Nothing else follows from the client.
    Relay,
    /// A control connection to a server whose key the client has pinned
    /// (P-48): Noise IK instead of XX, with the request in message one.
    Pinned,
    /// Padding ahead of a data connection's own preamble (P-49): `stream`
    /// bytes of it follow, then another preamble. It grows the sender's
    /// congestion window while the session's keys are still on their way.
    Warmup,
}

/// Client → server, first bytes of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preamble {
    pub version: u16,
    pub kind: ConnKind,
    /// For data connections: the session they join (zero for control).
    pub session: [u8; 16],
    /// For data connections: the stream index, 1-based, unique per session;
    /// for a warm-up, the bytes of padding that follow it.
    pub stream: u16,
}

impl Preamble {
    /// A warm-up announcing `padding` bytes (P-49).
    pub fn warmup(padding: u16) -> Preamble {
        Preamble {
            version: PROTOCOL_VERSION,
            kind: ConnKind::Warmup,
            session: [0; 16],
            stream: padding,
        }
    }

    /// A client's warm-up that asks the server for warm-ups back (P-49):
    /// a pull's data flows from the server.
    pub fn warmup_asking() -> Preamble {
        let mut p = Preamble::warmup(0);
        p.session[0] = WARMUP_ASK;
        p
    }

    /// Whether a warm-up asks for warm-ups back; `None` if its `session`
    /// holds anything else than that one flag.
    pub fn warmup_asks(&self) -> Option<bool> {
        match self.session {
            [0, rest @ ..] if rest == [0; 15] => Some(false),
            [WARMUP_ASK, rest @ ..] if rest == [0; 15] => Some(true),
            _ => None,
        }
    }
}

impl Preamble {
    pub fn encode(&self) -> [u8; PREAMBLE_LEN] {
        let mut w = Writer::new();
        w.bytes(&MAGIC).u16(self.version);
        w.u8(match self.kind {
            ConnKind::Control => 0,
            ConnKind::Data => 1,
            ConnKind::Keyed => 2,
            ConnKind::Relay => 3,
            ConnKind::Pinned => 4,
            ConnKind::Warmup => 5,
        });
        w.bytes(&self.session).u16(self.stream);
        let mut out = [0u8; PREAMBLE_LEN];
        out.copy_from_slice(&w.buf);
        out
    }

    /// Decodes a preamble. A wrong magic means the peer does not speak haul at
    /// all; the version is returned even when it differs from ours so that
    /// the caller can name both in its refusal.
    pub fn decode(b: &[u8]) -> Result<Preamble, DecodeError> {
        let mut r = Reader::new(b);
        if r.array::<4>()? != MAGIC {
            return Err(DecodeError::Invalid("magic (not a haul peer)"));
        }
        let version = r.u16()?;
        let kind = match r.u8()? {
            0 => ConnKind::Control,
            1 => ConnKind::Data,
            2 => ConnKind::Keyed,
            3 => ConnKind::Relay,
            4 => ConnKind::Pinned,
            5 => ConnKind::Warmup,
            tag => {
                return Err(DecodeError::UnknownTag {
                    what: "connection kind",
                    tag,
                })
            }
        };
        let session = r.array()?;
        let stream = r.u16()?;
        r.finish()?;
        Ok(Preamble {
            version,
            kind,
            session,
            stream,
        })
    }
}

/// Server → client answer to a control preamble: the server's version and
/// whether it accepts ours (P-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreambleReply {
    pub version: u16,
    pub accepted: bool,
}

impl PreambleReply {
    pub const LEN: usize = 7;

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&self.version.to_le_bytes());
        out[6] = self.accepted as u8;
        out
    }

    pub fn decode(b: &[u8]) -> Result<PreambleReply, DecodeError> {
        let mut r = Reader::new(b);
        if r.array::<4>()? != MAGIC {
            return Err(DecodeError::Invalid("magic (not a haul server)"));
        }
        let version = r.u16()?;
        let accepted = match r.u8()? {
            0 => false,
            1 => true,
            tag => {
                return Err(DecodeError::UnknownTag {
                    what: "preamble status",
                    tag,
                })
            }
        };
        r.finish()?;
        Ok(PreambleReply { version, accepted })
    }
}

/// Message one's payload (P-3): what the client asks of the server before
/// the session exists. Cleartext, but bound into the handshake transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HandshakeWishes {
    /// Open a UDP socket for this session now, and name its port in
    /// message two, so the client's hello can ride behind message three
    /// (P-23).
    pub udp_port: bool,
}

impl HandshakeWishes {
    pub const LEN: usize = 1;

    pub fn encode(&self) -> [u8; Self::LEN] {
        [self.udp_port as u8]
    }

    /// Exactly one byte; a bit other than bit 0 is refused.
    pub fn decode(b: &[u8]) -> Result<HandshakeWishes, DecodeError> {
        let mut r = Reader::new(b);
        let udp_port = match r.u8()? {
            0 => false,
            1 => true,
            tag => {
                return Err(DecodeError::UnknownTag {
                    what: "handshake wish",
                    tag,
                })
            }
        };
        r.finish()?;
        Ok(HandshakeWishes { udp_port })
    }
}

/// What follows the server's random in message two (P-3): its answer to
/// the client's wishes. Encrypted, and trusted once the server's key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HandshakeAnswer {
    /// The UDP port opened for this session, or 0: none asked for, or
    /// none could be opened (P-23).
    pub udp_port: u16,
    /// A pinned start only (P-48): the server took the request that rode
    /// in message one, and answers it behind message two. Otherwise the
    /// client sends it again as its first control message.
    pub early: bool,
}

impl HandshakeAnswer {
    pub const LEN: usize = 3;

    pub fn encode(&self) -> [u8; Self::LEN] {
        let p = self.udp_port.to_le_bytes();
        [p[0], p[1], self.early as u8]
    }

    /// Exactly three bytes; the flag is 0 or 1.
    pub fn decode(b: &[u8]) -> Result<HandshakeAnswer, DecodeError> {
        let mut r = Reader::new(b);
        let udp_port = r.u16()?;
        let early = match r.u8()? {
            0 => false,
            1 => true,
            tag => {
                return Err(DecodeError::UnknownTag {
                    what: "early request flag",
                    tag,
                })
            }
        };
        r.finish()?;
        Ok(HandshakeAnswer { udp_port, early })
    }
}

/// Longest request that rides in a pinned start's message one (P-48,
/// S-9): a larger one (many sources, long filter rules) is sent as the
/// first control message instead.
pub const MAX_EARLY_REQUEST: usize = 16 << 10;

/// Message one's payload in a pinned start (P-48): encrypted to the
/// server's static key and authenticated by the client's, but replayable
/// by whoever recorded it, so the server takes the request only once and
/// only while `time` is recent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedOpening {
    pub wishes: HandshakeWishes,
    /// The client's clock, seconds since the Unix epoch.
    pub time: u64,
    /// An encoded `Msg::Request`, at most [`MAX_EARLY_REQUEST`] bytes;
    /// empty for none.
    pub request: Vec<u8>,
}

impl PinnedOpening {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.bytes(&self.wishes.encode())
            .u64(self.time)
            .bytes(&self.request);
        w.buf
    }

    /// Everything after the time is the request; a longer one than
    /// [`MAX_EARLY_REQUEST`] is refused.
    pub fn decode(b: &[u8]) -> Result<PinnedOpening, DecodeError> {
        let mut r = Reader::new(b);
        let wishes = HandshakeWishes::decode(r.bytes(HandshakeWishes::LEN)?)?;
        let time = r.u64()?;
        let len = r.remaining();
        if len > MAX_EARLY_REQUEST {
            return Err(DecodeError::TooLong {
                what: "early request",
                len,
                max: MAX_EARLY_REQUEST,
            });
        }
        let request = r.bytes(len)?.to_vec();
        r.finish()?;
        Ok(PinnedOpening {
            wishes,
            time,
            request,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn roundtrip() {
        let p = Preamble {
            version: 1,
            kind: ConnKind::Data,
            session: [7; 16],
            stream: 3,
        };
        assert_eq!(Preamble::decode(&p.encode()).unwrap(), p);
        let w = Preamble::warmup(65_535);
        assert_eq!(w.encode()[6], 5);
        assert_eq!(Preamble::decode(&w.encode()).unwrap(), w);
        assert_eq!(w.warmup_asks(), Some(false));
        let ask = Preamble::warmup_asking();
        assert_eq!(
            Preamble::decode(&ask.encode()).unwrap().warmup_asks(),
            Some(true)
        );
        let mut odd = ask;
        odd.session[15] = 1;
        assert_eq!(odd.warmup_asks(), None);
        let r = PreambleReply {
            version: 9,
            accepted: false,
        };
        assert_eq!(PreambleReply::decode(&r.encode()).unwrap(), r);
        for udp_port in [false, true] {
            let w = HandshakeWishes { udp_port };
            assert_eq!(HandshakeWishes::decode(&w.encode()).unwrap(), w);
        }
        for early in [false, true] {
            let a = HandshakeAnswer {
                udp_port: 40123,
                early,
            };
            assert_eq!(HandshakeAnswer::decode(&a.encode()).unwrap(), a);
        }
        let o = PinnedOpening {
            wishes: HandshakeWishes { udp_port: true },
            time: 1_800_000_000,
            request: vec![1, 2, 3],
        };
        assert_eq!(PinnedOpening::decode(&o.encode()).unwrap(), o);
        let long = PinnedOpening {
            request: vec![0; MAX_EARLY_REQUEST + 1],
            ..o
        };
        assert!(PinnedOpening::decode(&long.encode()).is_err());
    }

    #[test]
    fn handshake_payloads_have_one_encoding() {
        assert!(HandshakeWishes::decode(&[]).is_err());
        assert!(HandshakeWishes::decode(&[2]).is_err());
        assert!(HandshakeWishes::decode(&[1, 0]).is_err());
        assert!(HandshakeAnswer::decode(&[1, 2]).is_err());
        assert!(HandshakeAnswer::decode(&[1, 2, 2]).is_err());
        assert!(HandshakeAnswer::decode(&[1, 2, 0, 0]).is_err());
    }

    #[test]
    fn ssh_banner_is_not_haul() {
        assert!(Preamble::decode(b"SSH-2.0-OpenSSH_9.2p1 Debian\r\n").is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Preamble::decode(&b);
            let _ = PreambleReply::decode(&b);
        }

        #[test]
        fn handshake_payloads_decode_to_what_they_encode(b in proptest::collection::vec(any::<u8>(), 0..8)) {
            if let Ok(w) = HandshakeWishes::decode(&b) {
                prop_assert_eq!(&w.encode()[..], &b[..]);
            }
            if let Ok(a) = HandshakeAnswer::decode(&b) {
                prop_assert_eq!(&a.encode()[..], &b[..]);
            }
        }

        #[test]
        fn pinned_openings_decode_to_what_they_encode(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(o) = PinnedOpening::decode(&b) {
                prop_assert_eq!(o.encode(), b);
            }
        }
    }
}
