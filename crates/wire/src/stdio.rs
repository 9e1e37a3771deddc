//! What travels over an ssh channel when the client starts the remote side
//! itself (`haul serve --stdio`, P-27, P-28): one greeting line each way,
//! then, only if the hosts cannot connect directly, relay frames that carry
//! the session's TCP connections through the ssh channel.

use crate::buf::{DecodeError, Reader, Writer};

/// First word of a greeting line.
pub const GREETING_MAGIC: &str = "haul-ssh";

/// Longest greeting line a reader accepts, newline included.
pub const MAX_GREETING_LEN: usize = 1024;

/// Largest payload of one relay frame.
pub const MAX_RELAY_PAYLOAD: usize = 256 << 10;

/// Encoded length of a relay frame's header.
pub const RELAY_HEADER_LEN: usize = 1 + 4 + 4;

/// Longest handshake message a greeting carries (`hs=`), in bytes.
pub const MAX_GREETING_HS: usize = 128;

/// One side's greeting (P-27): `haul-ssh PROTO VERSION key=HEX [port=N]
/// [addr=IP] [udp=N] [hs=HEX] [keyed]`. Both sides send one as soon as they start; unknown `k=v`
/// words are ignored so that later releases can add some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    /// The protocol version the sender speaks ([`crate::PROTOCOL_VERSION`]).
    pub protocol: u16,
    /// The sender's release, for messages ("0.1.0").
    pub release: String,
    /// The sender's one-time X25519 public key for this session.
    pub key: [u8; 32],
    /// Server only: the TCP port it listens on for this session.
    pub port: Option<u16>,
    /// Server only: the address the ssh connection reached it at, where
    /// the client should try to connect directly.
    pub addr: Option<String>,
    /// Server only: the UDP port it opened for the session's data channel.
    pub udp: Option<u16>,
    /// Server only: message one of the keyed start (P-27). Without it the
    /// session is keyed by a handshake on its control connection.
    pub hs: Option<Vec<u8>>,
    /// Client only: it answers a server's `hs` with an [`HsLine`] right
    /// after this greeting (P-27).
    pub keyed: bool,
}

fn word_ok(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_graphic())
}

impl Greeting {
    /// The line, newline included.
    pub fn encode(&self) -> String {
        let release = if word_ok(&self.release) {
            self.release.as_str()
        } else {
            "unknown"
        };
        let mut s = format!(
            "{GREETING_MAGIC} {} {release} key={}",
            self.protocol,
            crate::hex::encode(&self.key)
        );
        if let Some(p) = self.port {
            s.push_str(&format!(" port={p}"));
        }
        if let Some(a) = self.addr.as_deref().filter(|a| word_ok(a)) {
            s.push_str(&format!(" addr={a}"));
        }
        if let Some(p) = self.udp {
            s.push_str(&format!(" udp={p}"));
        }
        if let Some(h) = self.hs.as_deref().filter(|h| h.len() <= MAX_GREETING_HS) {
            s.push_str(&format!(" hs={}", crate::hex::encode(h)));
        }
        if self.keyed {
            s.push_str(" keyed");
        }
        s.push('\n');
        s
    }

    /// Whether `line` looks like a greeting at all (its first word), so a
    /// reader can skip what a remote login prints before it.
    pub fn is_greeting(line: &str) -> bool {
        line.split_ascii_whitespace().next() == Some(GREETING_MAGIC)
    }

    /// Parses one line (with or without its newline).
    pub fn decode(line: &str) -> Result<Greeting, DecodeError> {
        if line.len() > MAX_GREETING_LEN {
            return Err(DecodeError::TooLong {
                what: "greeting",
                len: line.len(),
                max: MAX_GREETING_LEN,
            });
        }
        let mut words = line.split_ascii_whitespace();
        if words.next() != Some(GREETING_MAGIC) {
            return Err(DecodeError::Invalid("not a haul-ssh greeting"));
        }
        let protocol = words
            .next()
            .and_then(|w| w.parse::<u16>().ok())
            .ok_or(DecodeError::Invalid("greeting has no protocol version"))?;
        let release = words
            .next()
            .filter(|w| word_ok(w))
            .ok_or(DecodeError::Invalid("greeting has no release"))?
            .to_string();
        let (mut key, mut port, mut addr, mut udp, mut hs) = (None, None, None, None, None);
        let mut keyed = false;
        let port_of = |v: &str, what: &'static str| {
            v.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or(DecodeError::Invalid(what))
        };
        for w in words {
            match w.split_once('=') {
                Some(("key", v)) => {
                    key = Some(
                        crate::hex::decode32(v)
                            .ok_or(DecodeError::Invalid("greeting key is not 64 hex digits"))?,
                    )
                }
                Some(("port", v)) => port = Some(port_of(v, "greeting port is not 1..65535")?),
                Some(("udp", v)) => udp = Some(port_of(v, "greeting udp port is not 1..65535")?),
                Some(("hs", v)) => {
                    hs = Some(crate::hex::decode(v, MAX_GREETING_HS).ok_or(
                        DecodeError::Invalid("greeting handshake is not hex of 128 bytes or fewer"),
                    )?)
                }
                Some(("addr", v)) if word_ok(v) => addr = Some(v.to_string()),
                None if w == "keyed" => keyed = true,
                _ => {}
            }
        }
        Ok(Greeting {
            protocol,
            release,
            key: key.ok_or(DecodeError::Invalid("greeting has no key"))?,
            port,
            addr,
            udp,
            hs,
            keyed,
        })
    }
}

/// First word of the client's answer to a keyed start.
pub const HS_MAGIC: &str = "haul-ssh-hs";

/// The client's answer to the `hs` of a remote greeting (P-27): `haul-ssh-hs
/// HEX`, the line right after a greeting that said `keyed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HsLine(pub Vec<u8>);

impl HsLine {
    /// The line, newline included.
    pub fn encode(&self) -> String {
        format!("{HS_MAGIC} {}\n", crate::hex::encode(&self.0))
    }

    /// Parses one line (with or without its newline).
    pub fn decode(line: &str) -> Result<HsLine, DecodeError> {
        if line.len() > MAX_GREETING_LEN {
            return Err(DecodeError::TooLong {
                what: "handshake line",
                len: line.len(),
                max: MAX_GREETING_LEN,
            });
        }
        let mut words = line.split_ascii_whitespace();
        if words.next() != Some(HS_MAGIC) {
            return Err(DecodeError::Invalid("not a haul-ssh-hs line"));
        }
        let msg = words
            .next()
            .and_then(|w| crate::hex::decode(w, MAX_GREETING_HS))
            .ok_or(DecodeError::Invalid(
                "the handshake line is not hex of 128 bytes or fewer",
            ))?;
        if words.next().is_some() {
            return Err(DecodeError::Invalid("the handshake line has more words"));
        }
        Ok(HsLine(msg))
    }
}

/// What a relay frame does to its channel (P-28).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayKind {
    /// Client → server: a new TCP connection; the server connects to its
    /// own listener for it.
    Open = 1,
    /// Bytes of the channel's connection.
    Data = 2,
    /// The sending side's connection reached its end (or failed): the
    /// receiving side shuts down writing on its connection.
    Eof = 3,
    /// The receiving side wrote `len` more bytes of the channel into its
    /// connection: the sender may send that many more (flow control, so
    /// that one stalled connection never blocks the others).
    Credit = 4,
}

/// The header of one relay frame: `kind u8, channel u32, length u32`,
/// followed by `length` payload bytes (only `Data` has any; for `Credit`
/// the length is the number of bytes credited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayHeader {
    pub kind: RelayKind,
    pub channel: u32,
    pub len: u32,
}

impl RelayHeader {
    pub fn encode(&self) -> [u8; RELAY_HEADER_LEN] {
        let mut w = Writer::new();
        w.u8(self.kind as u8).u32(self.channel).u32(self.len);
        let mut out = [0u8; RELAY_HEADER_LEN];
        out.copy_from_slice(&w.buf);
        out
    }

    pub fn decode(b: &[u8]) -> Result<RelayHeader, DecodeError> {
        let mut r = Reader::new(b);
        let kind = match r.u8()? {
            1 => RelayKind::Open,
            2 => RelayKind::Data,
            3 => RelayKind::Eof,
            4 => RelayKind::Credit,
            _ => return Err(DecodeError::Invalid("unknown relay frame kind")),
        };
        let channel = r.u32()?;
        let len = r.u32()?;
        r.finish()?;
        if matches!(kind, RelayKind::Open | RelayKind::Eof) && len != 0 {
            return Err(DecodeError::Invalid(
                "open and eof relay frames have no length",
            ));
        }
        if kind == RelayKind::Data && len as usize > MAX_RELAY_PAYLOAD {
            return Err(DecodeError::TooLong {
                what: "relay frame",
                len: len as usize,
                max: MAX_RELAY_PAYLOAD,
            });
        }
        Ok(RelayHeader { kind, channel, len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn greeting() -> Greeting {
        Greeting {
            protocol: 3,
            release: "0.1.0".into(),
            key: [7; 32],
            port: Some(40123),
            addr: Some("192.0.2.7".into()),
            udp: Some(40124),
            hs: Some(vec![1, 2, 3]),
            keyed: false,
        }
    }

    #[test]
    fn greeting_round_trip_and_forward_compatibility() {
        let g = greeting();
        assert_eq!(Greeting::decode(&g.encode()).unwrap(), g);
        let client = Greeting {
            port: None,
            addr: None,
            udp: None,
            hs: None,
            keyed: true,
            ..g.clone()
        };
        assert_eq!(Greeting::decode(&client.encode()).unwrap(), client);
        // Words a later release may add are ignored.
        let later = g.encode().trim_end().to_string() + " mtu=9000 x\n";
        assert_eq!(Greeting::decode(&later).unwrap(), g);
        assert!(Greeting::is_greeting(&g.encode()));
        assert!(!Greeting::is_greeting("Welcome to Ubuntu"));
        assert!(Greeting::decode("haul-ssh 3 0.1.0 port=1").is_err());
        assert!(Greeting::decode("haul-ssh x 0.1.0").is_err());
        assert!(Greeting::decode(&format!("haul-ssh 3 0.1 key={}", "0".repeat(64))).is_ok());
        assert!(
            Greeting::decode(&format!("haul-ssh 3 0.1 key={} port=0", "0".repeat(64))).is_err()
        );
        let k = "0".repeat(64);
        assert!(Greeting::decode(&format!("haul-ssh 3 0.1 key={k} udp=0")).is_err());
        assert!(Greeting::decode(&format!("haul-ssh 3 0.1 key={k} hs=0")).is_err());
        let long = "00".repeat(MAX_GREETING_HS + 1);
        assert!(Greeting::decode(&format!("haul-ssh 3 0.1 key={k} hs={long}")).is_err());
        // The answer line.
        let hs = HsLine(vec![7; 48]);
        assert_eq!(HsLine::decode(&hs.encode()).unwrap(), hs);
        assert!(HsLine::decode("haul-ssh-hs").is_err());
        assert!(HsLine::decode("haul-ssh-hs 0").is_err());
        assert!(HsLine::decode("haul-ssh-hs 00 11").is_err());
        assert!(HsLine::decode(&format!("haul-ssh-hs {long}")).is_err());
        assert!(HsLine::decode("haul-ssh 13 x").is_err());
    }

    #[test]
    fn relay_headers() {
        let h = RelayHeader {
            kind: RelayKind::Data,
            channel: 9,
            len: 1000,
        };
        assert_eq!(RelayHeader::decode(&h.encode()).unwrap(), h);
        let eof = RelayHeader {
            kind: RelayKind::Eof,
            channel: 9,
            len: 1,
        };
        assert!(RelayHeader::decode(&eof.encode()).is_err());
        let big = RelayHeader {
            len: MAX_RELAY_PAYLOAD as u32 + 1,
            ..h
        };
        assert!(RelayHeader::decode(&big.encode()).is_err());
        let credit = RelayHeader {
            kind: RelayKind::Credit,
            channel: 9,
            len: 8 << 20,
        };
        assert_eq!(RelayHeader::decode(&credit.encode()).unwrap(), credit);
    }

    proptest! {
        #[test]
        fn greeting_decoder_never_panics(s in "\\PC{0,300}") {
            let _ = Greeting::decode(&s);
            let _ = HsLine::decode(&s);
        }

        #[test]
        fn hs_lines_round_trip(msg in proptest::collection::vec(any::<u8>(), 1..=MAX_GREETING_HS)) {
            let l = HsLine(msg);
            prop_assert_eq!(HsLine::decode(&l.encode()).unwrap(), l);
        }

        #[test]
        fn greeting_lines_round_trip(
            protocol: u16,
            release in "[0-9a-z.+-]{1,20}",
            key: [u8; 32],
            port in proptest::option::of(1u16..),
            addr in proptest::option::of("[0-9a-f:.]{1,40}"),
            udp in proptest::option::of(1u16..),
            hs in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..=MAX_GREETING_HS)),
            keyed: bool,
        ) {
            let g = Greeting { protocol, release, key, port, addr, udp, hs, keyed };
            prop_assert_eq!(Greeting::decode(&g.encode()).unwrap(), g);
        }

        #[test]
        fn relay_decoder_never_panics(b in proptest::collection::vec(any::<u8>(), 0..16)) {
            if let Ok(h) = RelayHeader::decode(&b) {
                prop_assert_eq!(&h.encode()[..], &b[..]);
            }
        }
    }
}
