//! The session a client started over ssh keyed in the greetings (P-27):
//! its keys wait here until its control connection joins with them, once,
//! in place of a handshake.

use std::net::TcpStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use secure::PublicKey;
use wire::ErrorCode;

use connect::error::TransferError;
use connect::handshake::{self, CONTROL_PROTECTION};
use connect::join::{self, DataConn};
use connect::progress::Progress;

/// A session whose keys the ssh greetings agreed (P-27): its control
/// connection joins with them instead of running a handshake.
pub struct Prekeyed {
    pub keys: secure::SessionKeys,
    /// The client's one-time key, from its greeting.
    pub peer: PublicKey,
    /// The UDP socket the server's greeting named, if one opened.
    pub udp: Option<udp::UdpChannel>,
}

/// What a keyed control connection that joined starts its session with:
/// the connection, the session as after a handshake (its round trip not
/// yet measured), its UDP socket and its counters.
pub(super) type Joined = (
    DataConn,
    handshake::Established,
    Option<udp::UdpChannel>,
    Arc<Progress>,
);

/// Where the keyed session waits for its control connection.
pub(super) struct PrekeyedSlot(Mutex<Option<Prekeyed>>);

impl PrekeyedSlot {
    pub(super) fn new(p: Option<Prekeyed>) -> PrekeyedSlot {
        PrekeyedSlot(Mutex::new(p))
    }

    fn lock(&self) -> MutexGuard<'_, Option<Prekeyed>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins a connection whose preamble named kind `Keyed` to the keyed
    /// session, once. The join is checked with a copy of the keys, so a
    /// connection that cannot join holds nothing while it tries.
    pub(super) fn join(
        &self,
        stream: TcpStream,
        pre: &wire::Preamble,
    ) -> Result<Joined, TransferError> {
        let session = pre.session;
        let none = || {
            TransferError::new(
                ErrorCode::Protocol,
                "a keyed control connection for no session started over ssh (or one already joined)",
            )
        };
        let keys = match self.lock().as_ref() {
            Some(p) if p.keys.session_id() == session && pre.stream == 0 => p.keys.clone(),
            _ => return Err(none()),
        };
        let progress = Arc::new(Progress::default());
        let control = join::server_join(stream, &keys, 0, CONTROL_PROTECTION, &progress)?;
        let p = {
            let mut slot = self.lock();
            match slot.take() {
                Some(p) if p.keys.session_id() == session => p,
                other => {
                    *slot = other;
                    return Err(none());
                }
            }
        };
        let udp_port = p
            .udp
            .as_ref()
            .and_then(|c| c.local_addr().ok())
            .map_or(0, |a| a.port());
        // No handshake measured the round trip: the session measures it
        // from its answer to the client's first reply on the data path.
        let est = handshake::Established {
            keys: p.keys,
            rtt: Duration::ZERO,
            peer: p.peer,
            udp_port,
        };
        Ok((control, est, p.udp, progress))
    }
}
