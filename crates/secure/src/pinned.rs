//! The pinned start (P-48): Noise IK, for a client that has pinned the
//! server's key. Its first message is encrypted to that key and proves the
//! client's own, so it may carry the request; the server's one answer
//! completes the handshake. One round trip where XX and its request take
//! two.
//!
//! ```text
//! client                                          server
//!   msg1: -> e, es, s, ss  [client random, opening] ──▶
//!                                                     (server checks authorized keys)
//!                          ◀── msg2: <- e, ee, se  [server random, answer]
//! ```
//!
//! Message one has no forward secrecy of its own and can be replayed by
//! whoever recorded it: the session keys mix in the server's ephemeral key
//! and random, so a replayer can never read or send anything of the
//! session, but the server must still not act twice on the request it
//! carries (P-48's replay rules live with the server). A server whose key
//! changed cannot read message one; the client then starts over with XX,
//! which names the change.

use zeroize::Zeroizing;

use crate::handshake::{prologue, HandshakeError, SessionKeys};
use crate::keys::{Keypair, PublicKey};

/// The Noise protocol name of the pinned start.
pub const PINNED_PATTERN: &str = "Noise_IK_25519_ChaChaPoly_BLAKE2s";
/// The longest handshake message either side writes or reads: Noise's own
/// bound.
const MAX_MSG: usize = 65535;
/// Message one's fixed part: the ephemeral key, the sealed static key,
/// and the payload's tag.
const MSG1_OVERHEAD: usize = 32 + 48 + 16;
/// The longest caller payload in message one.
pub const MAX_OPENING: usize = MAX_MSG - MSG1_OVERHEAD - 32;
/// The longest caller payload in message two.
pub const MAX_ANSWER: usize = 64;

fn builder<'a>(
    local: &'a Keypair,
    prologue: &'a [u8],
) -> Result<snow::Builder<'a>, HandshakeError> {
    let params = PINNED_PATTERN
        .parse()
        .map_err(|_| HandshakeError::Malformed("pattern"))?;
    Ok(snow::Builder::new(params)
        .local_private_key(local.secret())?
        .prologue(prologue)?)
}

fn random32() -> Zeroizing<[u8; 32]> {
    let mut b = Zeroizing::new([0u8; 32]);
    getrandom::fill(&mut *b).expect("the OS random source is available");
    b
}

fn take_random(payload: &[u8]) -> Result<Zeroizing<[u8; 32]>, HandshakeError> {
    let r: [u8; 32] = payload
        .get(..32)
        .and_then(|b| b.try_into().ok())
        .ok_or(HandshakeError::Malformed("payload length"))?;
    Ok(Zeroizing::new(r))
}

/// The client's side, between its message one and the server's answer.
pub struct PinnedClient {
    hs: snow::HandshakeState,
    client_random: Zeroizing<[u8; 32]>,
}

impl PinnedClient {
    /// Message one to `server`, carrying `opening` (at most
    /// [`MAX_OPENING`] bytes); `greeting` is the cleartext before it.
    pub fn start(
        local: &Keypair,
        server: &PublicKey,
        greeting: &[u8],
        opening: &[u8],
    ) -> Result<(PinnedClient, Vec<u8>), HandshakeError> {
        if opening.len() > MAX_OPENING {
            return Err(HandshakeError::Malformed("message one's payload too long"));
        }
        let p = prologue(greeting);
        let mut hs = builder(local, &p)?
            .remote_public_key(&server.0)?
            .build_initiator()?;
        let client_random = random32();
        let payload = Zeroizing::new([&client_random[..], opening].concat());
        let mut out = vec![0u8; MAX_MSG];
        let n = hs.write_message(&payload, &mut out)?;
        out.truncate(n);
        Ok((PinnedClient { hs, client_random }, out))
    }

    /// Reads message two: the server's answer and the session's keys.
    pub fn finish(mut self, msg2: &[u8]) -> Result<(Vec<u8>, SessionKeys), HandshakeError> {
        let mut payload = Zeroizing::new(vec![0u8; MAX_MSG]);
        let n = self.hs.read_message(msg2, &mut payload)?;
        if !(32..=32 + MAX_ANSWER).contains(&n) || !self.hs.is_handshake_finished() {
            return Err(HandshakeError::Malformed("message two"));
        }
        let server_random = take_random(&payload[..n])?;
        let keys = SessionKeys::new(
            &self.client_random,
            &server_random,
            self.hs.get_handshake_hash(),
        );
        Ok((payload[32..n].to_vec(), keys))
    }
}

/// What the server read in message one.
pub struct PinnedOpened {
    /// The client's static key, proven by message one.
    pub client: PublicKey,
    /// The client's ephemeral key: message one's first 32 bytes, which
    /// name it for the replay check.
    pub ephemeral: [u8; 32],
    /// The caller's payload.
    pub opening: Vec<u8>,
}

/// The server's side, between message one and its answer.
pub struct PinnedServer {
    hs: snow::HandshakeState,
    client_random: Zeroizing<[u8; 32]>,
}

impl PinnedServer {
    /// Reads message one. Fails if it was not encrypted to `local`'s key.
    pub fn respond(
        local: &Keypair,
        greeting: &[u8],
        msg1: &[u8],
    ) -> Result<(PinnedServer, PinnedOpened), HandshakeError> {
        let p = prologue(greeting);
        let mut hs = builder(local, &p)?.build_responder()?;
        let mut payload = Zeroizing::new(vec![0u8; MAX_MSG]);
        let n = hs.read_message(msg1, &mut payload)?;
        let client_random = take_random(&payload[..n])?;
        let mut client = [0u8; 32];
        client.copy_from_slice(
            hs.get_remote_static()
                .ok_or(HandshakeError::Malformed("no static key"))?,
        );
        let ephemeral = msg1
            .get(..32)
            .and_then(|b| b.try_into().ok())
            .ok_or(HandshakeError::Malformed("message one"))?;
        let opened = PinnedOpened {
            client: PublicKey(client),
            ephemeral,
            opening: payload[32..n].to_vec(),
        };
        Ok((PinnedServer { hs, client_random }, opened))
    }

    /// Writes message two with `answer` (at most [`MAX_ANSWER`] bytes);
    /// the handshake is complete.
    pub fn finish(mut self, answer: &[u8]) -> Result<(Vec<u8>, SessionKeys), HandshakeError> {
        if answer.len() > MAX_ANSWER {
            return Err(HandshakeError::Malformed("message two's answer too long"));
        }
        let server_random = random32();
        let payload = Zeroizing::new([&server_random[..], answer].concat());
        let mut out = vec![0u8; MAX_MSG];
        let n = self.hs.write_message(&payload, &mut out)?;
        out.truncate(n);
        if !self.hs.is_handshake_finished() {
            return Err(HandshakeError::Malformed("handshake did not finish"));
        }
        let keys = SessionKeys::new(
            &self.client_random,
            &server_random,
            self.hs.get_handshake_hash(),
        );
        Ok((out, keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::Direction;
    use proptest::prelude::*;

    #[test]
    fn one_round_trip_keys_both_sides_and_names_the_client() {
        let (c, s) = (Keypair::generate(), Keypair::generate());
        let (pc, m1) = PinnedClient::start(&c, &s.public, b"g", b"request").unwrap();
        let (ps, opened) = PinnedServer::respond(&s, b"g", &m1).unwrap();
        assert_eq!(opened.client, c.public);
        assert_eq!(opened.opening, b"request");
        assert_eq!(&opened.ephemeral[..], &m1[..32]);
        let (m2, sk) = ps.finish(&[7]).unwrap();
        let (answer, ck) = pc.finish(&m2).unwrap();
        assert_eq!(answer, [7]);
        assert_eq!(ck.session_id(), sk.session_id());
        assert_eq!(
            ck.stream_key(0, Direction::ClientToServer),
            sk.stream_key(0, Direction::ClientToServer)
        );
    }

    #[test]
    fn a_server_with_another_key_cannot_read_message_one() {
        let (c, s, other) = (
            Keypair::generate(),
            Keypair::generate(),
            Keypair::generate(),
        );
        let (_, m1) = PinnedClient::start(&c, &s.public, b"g", b"r").unwrap();
        assert!(PinnedServer::respond(&other, b"g", &m1).is_err());
        assert!(PinnedServer::respond(&s, b"other greeting", &m1).is_err());
    }

    #[test]
    fn a_replayed_message_one_gives_the_replayer_no_keys_of_the_session() {
        let (c, s) = (Keypair::generate(), Keypair::generate());
        let (pc, m1) = PinnedClient::start(&c, &s.public, b"g", b"r").unwrap();
        let (first, _) = PinnedServer::respond(&s, b"g", &m1).unwrap();
        let (again, _) = PinnedServer::respond(&s, b"g", &m1).unwrap();
        let (m2, k1) = first.finish(&[]).unwrap();
        let (_, k2) = again.finish(&[]).unwrap();
        assert_ne!(k1.session_id(), k2.session_id());
        assert_eq!(pc.finish(&m2).unwrap().1.session_id(), k1.session_id());
    }

    #[test]
    fn payloads_past_their_bound_are_refused() {
        let (c, s) = (Keypair::generate(), Keypair::generate());
        assert!(PinnedClient::start(&c, &s.public, b"g", &vec![0; MAX_OPENING + 1]).is_err());
        let (_, m1) = PinnedClient::start(&c, &s.public, b"g", &vec![0; MAX_OPENING]).unwrap();
        let (ps, _) = PinnedServer::respond(&s, b"g", &m1).unwrap();
        assert!(ps.finish(&[0; MAX_ANSWER + 1]).is_err());
    }

    proptest! {
        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let (c, s) = (Keypair::generate(), Keypair::generate());
            let _ = PinnedServer::respond(&s, b"g", &b);
            let (pc, _) = PinnedClient::start(&c, &s.public, b"g", &[]).unwrap();
            let _ = pc.finish(&b);
        }
    }
}
