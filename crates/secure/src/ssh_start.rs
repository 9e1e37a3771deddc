//! The handshake of a session started over ssh (P-27, since version 13):
//! Noise NN whose first message rides in the remote side's greeting and
//! whose second goes back on the line after the client's, so the client
//! holds the session keys the moment the remote greeting arrives, before
//! any TCP connection exists, and the remote side writes its greeting
//! without waiting for anything.
//!
//! ```text
//! client                                     remote (haul serve --stdio)
//!                                 ◀──────── greeting: msg1 -> e  [server random]
//!   msg2: <- e, ee [client random] ────────▶ (the line after the client's greeting)
//! ```
//!
//! NN authenticates neither side by itself: ssh does. Both messages travel
//! inside the ssh channel, which the client authenticated by the host's ssh
//! key and the server by the user's login, and which carries them sealed
//! end to end; the Noise exchange adds forward secrecy of its own, and keys
//! that no party outside the two processes ever held. The prologue binds
//! the protocol version and the server's one-time key from its greeting.

use zeroize::Zeroizing;

use crate::handshake::{HandshakeError, SessionKeys};

/// The Noise protocol name of the ssh start.
pub const SSH_START_PATTERN: &str = "Noise_NN_25519_ChaChaPoly_BLAKE2s";
const PROLOGUE: &[u8] = b"haul ssh start v1";
/// Longest message either side accepts: an ephemeral key, a random and
/// a tag.
pub const MAX_SSH_START_MSG: usize = 32 + 32 + 16;

fn state(
    protocol: u16,
    server_key: &[u8; 32],
    initiator: bool,
) -> Result<snow::HandshakeState, HandshakeError> {
    let params = SSH_START_PATTERN
        .parse()
        .map_err(|_| HandshakeError::Malformed("pattern"))?;
    let prologue = [PROLOGUE, &protocol.to_le_bytes(), server_key].concat();
    let b = snow::Builder::new(params).prologue(&prologue)?;
    Ok(if initiator {
        b.build_initiator()?
    } else {
        b.build_responder()?
    })
}

fn random32() -> Zeroizing<[u8; 32]> {
    let mut b = Zeroizing::new([0u8; 32]);
    getrandom::fill(&mut b[..]).expect("the OS random source is available");
    b
}

fn random_of(payload: &[u8]) -> Result<Zeroizing<[u8; 32]>, HandshakeError> {
    let r: [u8; 32] = payload
        .try_into()
        .map_err(|_| HandshakeError::Malformed("payload length"))?;
    Ok(Zeroizing::new(r))
}

/// The remote side's half: message one for its greeting, then the
/// client's answer.
pub struct SshStartServer {
    hs: snow::HandshakeState,
    server_random: Zeroizing<[u8; 32]>,
}

impl SshStartServer {
    /// Message one, for the remote greeting; `server_key` is the one-time
    /// key that greeting names.
    pub fn start(
        protocol: u16,
        server_key: &[u8; 32],
    ) -> Result<(SshStartServer, Vec<u8>), HandshakeError> {
        let mut hs = state(protocol, server_key, true)?;
        let server_random = random32();
        let mut out = vec![0u8; MAX_SSH_START_MSG];
        let n = hs.write_message(&server_random[..], &mut out)?;
        out.truncate(n);
        Ok((SshStartServer { hs, server_random }, out))
    }

    /// Reads message two, the client's answer: the session's keys.
    pub fn finish(mut self, msg2: &[u8]) -> Result<SessionKeys, HandshakeError> {
        if msg2.len() > MAX_SSH_START_MSG {
            return Err(HandshakeError::Malformed("message two too long"));
        }
        let mut payload = Zeroizing::new(vec![0u8; MAX_SSH_START_MSG]);
        let n = self.hs.read_message(msg2, &mut payload)?;
        let client_random = random_of(&payload[..n])?;
        if !self.hs.is_handshake_finished() {
            return Err(HandshakeError::Malformed("handshake did not finish"));
        }
        Ok(SessionKeys::new(
            &client_random,
            &self.server_random,
            self.hs.get_handshake_hash(),
        ))
    }
}

/// The client's half: reads message one from the remote greeting and
/// returns message two, to send back, and the session's keys.
pub fn ssh_start_answer(
    protocol: u16,
    server_key: &[u8; 32],
    msg1: &[u8],
) -> Result<(Vec<u8>, SessionKeys), HandshakeError> {
    if msg1.len() > MAX_SSH_START_MSG {
        return Err(HandshakeError::Malformed("message one too long"));
    }
    let mut hs = state(protocol, server_key, false)?;
    let mut payload = Zeroizing::new(vec![0u8; MAX_SSH_START_MSG]);
    let n = hs.read_message(msg1, &mut payload)?;
    let server_random = random_of(&payload[..n])?;
    let client_random = random32();
    let mut out = vec![0u8; MAX_SSH_START_MSG];
    let m = hs.write_message(&client_random[..], &mut out)?;
    out.truncate(m);
    if !hs.is_handshake_finished() {
        return Err(HandshakeError::Malformed("handshake did not finish"));
    }
    let keys = SessionKeys::new(&client_random, &server_random, hs.get_handshake_hash());
    Ok((out, keys))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::Direction;
    use proptest::prelude::*;

    #[test]
    fn both_sides_hold_the_same_keys_after_two_greetings() {
        let key = [9u8; 32];
        let (s, m1) = SshStartServer::start(13, &key).unwrap();
        let (m2, ck) = ssh_start_answer(13, &key, &m1).unwrap();
        assert!(m1.len() <= MAX_SSH_START_MSG && m2.len() <= MAX_SSH_START_MSG);
        let sk = s.finish(&m2).unwrap();
        assert_eq!(ck.session_id(), sk.session_id());
        assert_eq!(
            ck.stream_key(0, Direction::ClientToServer),
            sk.stream_key(0, Direction::ClientToServer)
        );
        // A second start never shares keys with the first.
        let (s2, m1) = SshStartServer::start(13, &key).unwrap();
        let (m2, _) = ssh_start_answer(13, &key, &m1).unwrap();
        assert_ne!(s2.finish(&m2).unwrap().session_id(), ck.session_id());
    }

    #[test]
    fn another_key_version_or_tampered_reply_fails() {
        let key = [9u8; 32];
        let (s, m1) = SshStartServer::start(13, &key).unwrap();
        let (m2, _) = ssh_start_answer(13, &[8u8; 32], &m1).unwrap();
        assert!(s.finish(&m2).is_err(), "the server's key is bound");
        let (s, m1) = SshStartServer::start(13, &key).unwrap();
        let (m2, _) = ssh_start_answer(12, &key, &m1).unwrap();
        assert!(s.finish(&m2).is_err(), "the version is bound");
        let (s, m1) = SshStartServer::start(13, &key).unwrap();
        let (mut m2, _) = ssh_start_answer(13, &key, &m1).unwrap();
        let last = m2.len() - 1;
        m2[last] ^= 1;
        assert!(s.finish(&m2).is_err());
    }

    proptest! {
        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let key = [1u8; 32];
            let _ = ssh_start_answer(13, &key, &b);
            let (s, _) = SshStartServer::start(13, &key).unwrap();
            let _ = s.finish(&b);
        }
    }
}
