//! The Noise XX handshake (P-3) as a sans-IO state machine: bytes in, bytes
//! out, no sockets. Noise gives mutual authentication by static keys and
//! forward secrecy by ephemeral ones; `snow` is the vetted implementation.
//!
//! ```text
//! client                                   server
//!   msg1: -> e  [client's wishes]   ────────▶
//!                                   ◀──────── msg2: <- e, ee, s, es  [server random, answer]
//!   (client checks the server key against its pins)
//!   msg3: -> s, se  [client random] ────────▶
//!                                             (server checks authorized keys)
//! ```
//!
//! Both sides then hold [`SessionKeys`]: a secret mixed from both randoms
//! (each sent encrypted under the ephemeral keys) and the handshake hash.
//! Every connection of the session derives its own per-direction keys from
//! it, so data connections need no handshake of their own.
//!
//! Message one's payload (cleartext, but bound into the transcript) and
//! the part of message two's after the server random (encrypted) are the
//! caller's: haul asks for and offers a UDP port there (P-3, P-23).

use thiserror::Error;
use zeroize::{Zeroize, Zeroizing};

use crate::keys::{Keypair, PublicKey};
pub use crate::noise_pattern::NOISE_PATTERN;

const PROLOGUE: &[u8] = b"haul handshake v1";
const MAX_MSG: usize = 1024;
/// Longest caller payload in message one, or after the random in message two.
pub const MAX_EXTRA: usize = 64;

#[derive(Debug, Error)]
pub enum HandshakeError {
    #[error("handshake failed: {0} (the peer may hold another key or not speak haul)")]
    Noise(#[from] snow::Error),
    #[error("handshake message malformed: {0}")]
    Malformed(&'static str),
}

/// Which way a frame travels; each direction of each stream has its own key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ClientToServer,
    ServerToClient,
}

/// The result of a handshake: material every stream key derives from.
/// Wiped when dropped, as is every key derived from it (P-39).
#[derive(Clone)]
pub struct SessionKeys {
    secret: [u8; 32],
}

impl Drop for SessionKeys {
    fn drop(&mut self) {
        self.secret.zeroize();
    }
}

impl SessionKeys {
    pub(crate) fn new(
        client_random: &[u8; 32],
        server_random: &[u8; 32],
        handshake_hash: &[u8],
    ) -> SessionKeys {
        let mut h = blake3::Hasher::new_derive_key("haul 2026-11 session secret v1");
        h.update(client_random)
            .update(server_random)
            .update(handshake_hash);
        SessionKeys {
            secret: *h.finalize().as_bytes(),
        }
    }

    /// The 32-byte key of one direction of one stream (stream 0 is control),
    /// wiped when dropped.
    pub fn stream_key(&self, stream: u16, dir: Direction) -> Zeroizing<[u8; 32]> {
        let mut h = blake3::Hasher::new_derive_key("haul 2026-11 stream key v1");
        h.update(&self.secret)
            .update(&stream.to_le_bytes())
            .update(&[dir as u8]);
        Zeroizing::new(*h.finalize().as_bytes())
    }

    /// Key for the datagrams one side sends on the UDP data channel (P-3, P-24),
    /// distinct from every TCP stream's key; wiped when dropped.
    pub fn datagram_key(&self, dir: Direction) -> Zeroizing<[u8; 32]> {
        let mut h = blake3::Hasher::new_derive_key("haul 2026-11 datagram key v1");
        h.update(&self.secret).update(&[dir as u8]);
        Zeroizing::new(*h.finalize().as_bytes())
    }

    /// A value both peers share and nobody else knows, used as the session id
    /// that data connections present.
    pub fn session_id(&self) -> [u8; 16] {
        let mut h = blake3::Hasher::new_derive_key("haul 2026-11 session id v1");
        h.update(&self.secret);
        let mut out = [0u8; 16];
        out.copy_from_slice(&h.finalize().as_bytes()[..16]);
        out
    }
}

/// The prologue binds the cleartext greeting (preamble and reply) into the
/// handshake transcript, so tampering with it fails the handshake (P-3).
fn builder<'a>(
    local: &'a Keypair,
    prologue: &'a [u8],
) -> Result<snow::Builder<'a>, HandshakeError> {
    let params = NOISE_PATTERN
        .parse()
        .map_err(|_| HandshakeError::Malformed("pattern"))?;
    Ok(snow::Builder::new(params)
        .local_private_key(local.secret())?
        .prologue(prologue)?)
}

/// `PROLOGUE || greeting`: what both sides feed Noise as its prologue.
pub fn prologue(greeting: &[u8]) -> Vec<u8> {
    [PROLOGUE, greeting].concat()
}

fn random32() -> [u8; 32] {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the OS random source is available");
    b
}

fn remote_static(hs: &snow::HandshakeState) -> Result<PublicKey, HandshakeError> {
    let k = hs
        .get_remote_static()
        .ok_or(HandshakeError::Malformed("no static key"))?;
    let mut out = [0u8; 32];
    out.copy_from_slice(k);
    Ok(PublicKey(out))
}

fn take32(payload: &[u8]) -> Result<[u8; 32], HandshakeError> {
    payload
        .try_into()
        .map_err(|_| HandshakeError::Malformed("payload length"))
}

/// The initiator's side.
pub struct ClientHandshake {
    hs: snow::HandshakeState,
    server_random: Option<[u8; 32]>,
}

/// The randoms make the session secret: wiped with the handshake.
impl Drop for ClientHandshake {
    fn drop(&mut self) {
        if let Some(r) = &mut self.server_random {
            r.zeroize();
        }
    }
}

impl ClientHandshake {
    /// Starts a handshake; returns the state and message one to send.
    /// `greeting` is the cleartext exchanged before it (preamble, reply);
    /// `wishes` is message one's payload (at most [`MAX_EXTRA`] bytes), in
    /// clear but bound into the transcript.
    pub fn start(
        local: &Keypair,
        greeting: &[u8],
        wishes: &[u8],
    ) -> Result<(ClientHandshake, Vec<u8>), HandshakeError> {
        if wishes.len() > MAX_EXTRA {
            return Err(HandshakeError::Malformed("message one's payload too long"));
        }
        let p = prologue(greeting);
        let mut hs = builder(local, &p)?.build_initiator()?;
        let mut out = vec![0u8; MAX_MSG];
        let n = hs.write_message(wishes, &mut out)?;
        out.truncate(n);
        Ok((
            ClientHandshake {
                hs,
                server_random: None,
            },
            out,
        ))
    }

    /// Reads message two; returns the server's static key, which the caller
    /// must check against its pins before calling [`Self::finish`], and the
    /// server's answer (what followed its random; trust it only once the
    /// key is).
    pub fn read_reply(&mut self, msg2: &[u8]) -> Result<(PublicKey, Vec<u8>), HandshakeError> {
        let mut payload = Zeroizing::new(vec![0u8; MAX_MSG]);
        let n = self.hs.read_message(msg2, &mut payload)?;
        if !(32..=32 + MAX_EXTRA).contains(&n) {
            return Err(HandshakeError::Malformed("payload length"));
        }
        self.server_random = Some(take32(&payload[..32])?);
        Ok((remote_static(&self.hs)?, payload[32..n].to_vec()))
    }

    /// Writes message three, which proves the client's identity.
    pub fn finish(mut self) -> Result<(Vec<u8>, SessionKeys), HandshakeError> {
        let server_random = Zeroizing::new(
            self.server_random
                .ok_or(HandshakeError::Malformed("message two not read"))?,
        );
        let client_random = Zeroizing::new(random32());
        let mut out = vec![0u8; MAX_MSG];
        let n = self.hs.write_message(&*client_random, &mut out)?;
        out.truncate(n);
        if !self.hs.is_handshake_finished() {
            return Err(HandshakeError::Malformed("handshake did not finish"));
        }
        let keys = SessionKeys::new(&client_random, &server_random, self.hs.get_handshake_hash());
        Ok((out, keys))
    }
}

/// The responder's side.
pub struct ServerHandshake {
    hs: snow::HandshakeState,
    server_random: [u8; 32],
}

impl Drop for ServerHandshake {
    fn drop(&mut self) {
        self.server_random.zeroize();
    }
}

impl ServerHandshake {
    /// Reads message one; returns the state and the client's wishes (its
    /// payload), to be answered with [`Self::reply`]. `greeting` is the
    /// cleartext exchanged before it (preamble, reply).
    pub fn respond(
        local: &Keypair,
        greeting: &[u8],
        msg1: &[u8],
    ) -> Result<(ServerHandshake, Vec<u8>), HandshakeError> {
        let p = prologue(greeting);
        let mut hs = builder(local, &p)?.build_responder()?;
        let mut wishes = vec![0u8; MAX_MSG];
        let n = hs.read_message(msg1, &mut wishes)?;
        if n > MAX_EXTRA {
            return Err(HandshakeError::Malformed("message one's payload too long"));
        }
        wishes.truncate(n);
        let server_random = random32();
        Ok((ServerHandshake { hs, server_random }, wishes))
    }

    /// Writes message two: the server's keys, its random and `answer`
    /// (at most [`MAX_EXTRA`] bytes, encrypted).
    pub fn reply(&mut self, answer: &[u8]) -> Result<Vec<u8>, HandshakeError> {
        if answer.len() > MAX_EXTRA {
            return Err(HandshakeError::Malformed("message two's answer too long"));
        }
        let payload = Zeroizing::new([&self.server_random[..], answer].concat());
        let mut out = vec![0u8; MAX_MSG];
        let n = self.hs.write_message(&payload, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// Reads message three; returns the client's static key (the caller
    /// checks it against the authorized keys) and the session keys.
    pub fn finish(mut self, msg3: &[u8]) -> Result<(PublicKey, SessionKeys), HandshakeError> {
        let mut payload = Zeroizing::new(vec![0u8; MAX_MSG]);
        let n = self.hs.read_message(msg3, &mut payload)?;
        let client_random = Zeroizing::new(take32(&payload[..n])?);
        if !self.hs.is_handshake_finished() {
            return Err(HandshakeError::Malformed("handshake did not finish"));
        }
        let keys = SessionKeys::new(
            &client_random,
            &self.server_random,
            self.hs.get_handshake_hash(),
        );
        Ok((remote_static(&self.hs)?, keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(
        client: &Keypair,
        server: &Keypair,
    ) -> Result<(PublicKey, PublicKey, SessionKeys, SessionKeys), HandshakeError> {
        let (mut c, m1) = ClientHandshake::start(client, b"greeting", &[1])?;
        let (mut s, wishes) = ServerHandshake::respond(server, b"greeting", &m1)?;
        assert_eq!(wishes, [1]);
        let m2 = s.reply(&[7, 0])?;
        let (server_seen, answer) = c.read_reply(&m2)?;
        assert_eq!(answer, [7, 0]);
        let (m3, ck) = c.finish()?;
        let (client_seen, sk) = s.finish(&m3)?;
        Ok((server_seen, client_seen, ck, sk))
    }

    #[test]
    fn both_sides_agree_and_learn_each_other() {
        let (c, s) = (Keypair::generate(), Keypair::generate());
        let (server_seen, client_seen, ck, sk) = run(&c, &s).unwrap();
        assert_eq!(server_seen, s.public);
        assert_eq!(client_seen, c.public);
        assert_eq!(ck.session_id(), sk.session_id());
        assert_eq!(
            ck.stream_key(3, Direction::ClientToServer),
            sk.stream_key(3, Direction::ClientToServer)
        );
        assert_ne!(
            ck.stream_key(3, Direction::ClientToServer),
            ck.stream_key(3, Direction::ServerToClient)
        );
        assert_ne!(
            ck.stream_key(3, Direction::ClientToServer),
            ck.stream_key(4, Direction::ClientToServer)
        );
    }

    #[test]
    fn session_secrets_are_wiped_when_dropped() {
        let (c, s) = (Keypair::generate(), Keypair::generate());
        let keys = run(&c, &s).unwrap().2;
        let mut keys = std::mem::ManuallyDrop::new(keys);
        assert_ne!(keys.secret, [0; 32]);
        // SAFETY: dropped once and never again; the destructor leaves a
        // valid `[u8; 32]` behind, which is all that is read after.
        unsafe { std::mem::ManuallyDrop::drop(&mut keys) };
        assert_eq!(keys.secret, [0; 32]);
    }

    #[test]
    fn sessions_never_share_keys() {
        let (c, s) = (Keypair::generate(), Keypair::generate());
        let a = run(&c, &s).unwrap().2;
        let b = run(&c, &s).unwrap().2;
        assert_ne!(a.session_id(), b.session_id());
    }

    #[test]
    fn different_greetings_fail_the_handshake() {
        let (c, s) = (Keypair::generate(), Keypair::generate());
        let (mut ch, m1) = ClientHandshake::start(&c, b"HAUL v1", &[]).unwrap();
        let (mut sh, _) = ServerHandshake::respond(&s, b"HAUL v2", &m1).unwrap();
        let m2 = sh.reply(&[]).unwrap();
        assert!(ch.read_reply(&m2).is_err());
    }

    #[test]
    fn tampered_message_two_fails() {
        let (c, s) = (Keypair::generate(), Keypair::generate());
        let (mut ch, m1) = ClientHandshake::start(&c, b"g", &[]).unwrap();
        let (mut sh, _) = ServerHandshake::respond(&s, b"g", &m1).unwrap();
        let mut m2 = sh.reply(&[]).unwrap();
        let last = m2.len() - 1;
        m2[last] ^= 1;
        assert!(ch.read_reply(&m2).is_err());
    }

    proptest! {
        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let s = Keypair::generate();
            let _ = ServerHandshake::respond(&s, b"g", &b);
            let (mut ch, _) = ClientHandshake::start(&s, b"g", &[]).unwrap();
            let _ = ch.read_reply(&b);
        }
    }

    #[test]
    fn payloads_past_their_bound_are_refused_both_ways() {
        let (c, s) = (Keypair::generate(), Keypair::generate());
        let long = [0u8; MAX_EXTRA + 1];
        assert!(ClientHandshake::start(&c, b"g", &long).is_err());
        let (_, m1) = ClientHandshake::start(&c, b"g", &long[..MAX_EXTRA]).unwrap();
        let (mut sh, wishes) = ServerHandshake::respond(&s, b"g", &m1).unwrap();
        assert_eq!(wishes.len(), MAX_EXTRA);
        assert!(sh.reply(&long).is_err());
    }
}
