//! The server's side of a pinned start (P-48): Noise IK, whose message
//! one may carry the request. That message can be replayed by whoever
//! recorded it, so one is answered only once and only while recent
//! (`replays`: a replay is closed, and holds no session slot), and the
//! request it carries is taken only if it is a push or a pull, whose
//! effects wait for data only the true client can seal; otherwise the
//! client is told to send it again.

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use secure::PublicKey;
use wire::{Msg, Op, Preamble, Request};

use connect::error::TransferError;
use connect::handshake::{self, PinnedPolicy, CONTROL_PROTECTION};
use connect::join::keyed;
use connect::progress::Progress;

use super::greetings::Greeting;
use super::record::Record;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The request message one carried, if it may be acted on before the
/// client's next flight: a push or a pull of files, nothing that acts by
/// itself.
fn early_request(request: &[u8]) -> Option<Request> {
    match Msg::decode(request) {
        Ok(Msg::Request(r)) => match r.op {
            Op::Push if r.shard.is_none() => Some(r),
            Op::Pull => Some(r),
            _ => None,
        },
        _ => None,
    }
}

/// What the handshake asks of the server.
struct Policy<'a> {
    server: &'a super::Server,
    local: Option<SocketAddr>,
    udp: Option<udp::UdpChannel>,
    /// The request taken from message one, decoded once.
    early: Option<Request>,
}

impl PinnedPolicy for Policy<'_> {
    fn fresh(&mut self, ephemeral: &[u8; 32], time: u64) -> bool {
        self.server.replays.first(ephemeral, time, unix_now())
    }

    fn admits(&mut self, client: &PublicKey) -> bool {
        self.server.admit(client).is_ok()
    }

    fn takes_early(&mut self, request: &[u8]) -> bool {
        self.early = early_request(request);
        self.early.is_some()
    }

    fn open_udp(&mut self) -> u16 {
        let local = self
            .local
            .ok_or_else(|| std::io::Error::other("no local address"));
        self.udp = self.server.open_udp(local);
        self.udp
            .as_ref()
            .and_then(|c| c.local_addr().ok())
            .map_or(0, |a| a.port())
    }
}

impl super::Server {
    /// A control connection opened with a pinned start: the client was
    /// proven by message one, so its UDP socket is opened then, and the
    /// request it carried (if taken) is answered behind message two.
    pub(super) fn pinned_session(
        &self,
        mut stream: TcpStream,
        pre: &Preamble,
        greeting: Greeting,
        rec: &Record,
    ) -> Result<String, TransferError> {
        let mut policy = Policy {
            server: self,
            local: stream.local_addr().ok(),
            udp: None,
            early: None,
        };
        let est = handshake::server_pinned(&mut stream, pre, &self.cfg.key, &mut policy);
        drop(greeting);
        let (est, taken) = est?;
        let early = policy.early.filter(|_| taken.is_some());
        let progress = Arc::new(Progress::default());
        let control = keyed(stream, &est.keys, 0, CONTROL_PROTECTION, false, &progress)?;
        self.run_session(control, est, policy.udp, progress, rec, early)
    }
}
