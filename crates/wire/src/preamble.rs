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
/// bundles of small files (P-33).
pub const PROTOCOL_VERSION: u16 = 7;

/// Encoded length of [`Preamble`].
pub const PREAMBLE_LEN: usize = 4 + 2 + 1 + 16 + 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnKind {
    /// Handshake, then sealed control messages.
    Control,
    /// Sealed block frames of an established session.
    Data,
}

/// Client → server, first bytes of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preamble {
    pub version: u16,
    pub kind: ConnKind,
    /// For data connections: the session they join (zero for control).
    pub session: [u8; 16],
    /// For data connections: the stream index, 1-based, unique per session.
    pub stream: u16,
}

impl Preamble {
    pub fn encode(&self) -> [u8; PREAMBLE_LEN] {
        let mut w = Writer::new();
        w.bytes(&MAGIC).u16(self.version);
        w.u8(match self.kind {
            ConnKind::Control => 0,
            ConnKind::Data => 1,
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
        let r = PreambleReply {
            version: 9,
            accepted: false,
        };
        assert_eq!(PreambleReply::decode(&r.encode()).unwrap(), r);
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
    }
}
