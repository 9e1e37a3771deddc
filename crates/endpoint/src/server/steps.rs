//! The steps of a keyed session before its side runs, each with what it
//! holds until the session ends: the key admitted and counted
//! ([`Server::enter`]), the request read ([`Server::read_request`]) and
//! admitted, narrowed and given its buffers ([`Server::grant`]), and the
//! data path accepted and joined ([`Server::accept`]). `Server::run_session` calls them in turn; what
//! a refusal tells the client is its.

use std::sync::{mpsc, Arc};
use std::time::Instant;

use secure::PublicKey;
use store::Root;
use wire::{ErrorCode, Msg, Op, Request, TRANSPORT_UDP};

use connect::error::TransferError;
use connect::framed::{FrameReader, FrameWriter};
use connect::handshake;
use connect::join::{Accepted, DataPlan, Joined, Listed};
use connect::progress::Progress;
use secure::Protection;

use super::access::KeyOptions;
use super::greetings::Trusted;
use super::guards::SessionGuard;
use super::keyring::KeySession;
use super::memory::Reserved;
use super::{admission, gather, record, release_freed_memory, session_share, ClientKeys};
use super::{Server, SessionBudget};

/// What an admitted key holds while its session runs.
pub(super) struct Entered<'s> {
    /// Its address's data connections are this session's to bound.
    _trusted: Option<Trusted>,
    _session: SessionGuard<'s>,
    /// Counted against its key's share, and judged again on SIGHUP.
    pub key: KeySession<'s>,
    /// Its name in the authorized keys.
    pub comment: Option<String>,
}

/// A request as admitted, and what it holds while it runs.
pub(super) struct Granted<'s> {
    pub req: Request,
    /// The part of the served root this key sees.
    pub root: Root,
    pub protection: Protection,
    /// Pushes only add files (a write-only key's drop box).
    pub adding_only: bool,
    pub budget: SessionBudget,
    _reserved: Reserved<'s>,
    _tunnel: Option<SessionGuard<'s>>,
}

impl Server {
    /// The key admitted: its line of the authorized keys, a slot among
    /// the daemon's sessions and among its key's.
    pub(super) fn enter(
        &self,
        peer: &PublicKey,
        control: &std::net::TcpStream,
        progress: &Arc<Progress>,
        rec: &record::Record,
    ) -> Result<(KeyOptions, Entered<'_>), TransferError> {
        let (comment, access) = self.admit(peer)?;
        rec.key(peer.fingerprint(), comment.clone());
        let trusted = control
            .peer_addr()
            .ok()
            .map(|a| self.greetings.trust(a.ip()));
        let max = self.cfg.max_sessions;
        let session =
            SessionGuard::enter(&self.active, max, release_freed_memory).ok_or_else(|| {
                busy(format!(
                    "server busy: {max} sessions already running; try again later"
                ))
            })?;
        // Each key within its share of the sessions (issue 39).
        let quota = match &self.cfg.client_keys {
            ClientKeys::File(_) => access.quota(max),
            ClientKeys::Only(_) => max,
        };
        let key = self
            .keyring
            .enter(*peer, &access, quota, progress.clone())
            .ok_or_else(|| {
                busy(format!(
                    "server busy: your key already runs {quota} sessions, as many as it may at once (sessions= in its line of the authorized keys, or half of --max-sessions); try again when one ends"
                ))
            })?;
        let entered = Entered {
            comment,
            _trusted: trusted,
            _session: session,
            key,
        };
        Ok((access, entered))
    }

    /// What this key may do with `req` (issue 29, P-43): refused or
    /// narrowed, the part of the root it sees, its protection; what the
    /// client reads named below that root; the session's buffers, fewer
    /// streams than asked where that many would not fit (P-39); a tunnel's
    /// slot.
    pub(super) fn grant(
        &self,
        access: &KeyOptions,
        req: Request,
        key: &KeySession<'_>,
        progress: &Progress,
    ) -> Result<Granted<'_>, TransferError> {
        let asked = req.clone();
        let policy = admission::Policy {
            served: &self.cfg.root,
            bucket: self.cfg.buckets.is_some(),
            require_encryption: self.cfg.require_encryption,
        };
        let admission::Admitted {
            req,
            root,
            protection,
            adding_only,
        } = admission::admit_request(access, &policy, req)?;
        key.asked(asked, req.clone());
        // What the client reads names paths below the root it sees, never
        // the server's own (issue 39).
        let (shown_root, served) = (root.clone(), self.cfg.root.clone());
        progress
            .control
            .set_hide(Arc::new(move |m| served.hide(&shown_root.hide(m))));
        let (budget, reserved) = self.reserve(SessionBudget::of(&req)).ok_or_else(|| {
            busy(format!(
                "server busy: the running sessions hold the {} MiB of buffers it gives them (--memory); try again later",
                self.cfg.memory >> 20
            ))
        })?;
        if budget.streams < req.streams {
            tracing::info!(
                "the client asked for {} streams; {} fit ({} MiB per session, {} MiB for all, frames of {} bytes)",
                req.streams,
                budget.streams,
                session_share(self.cfg.memory) >> 20,
                self.cfg.memory >> 20,
                budget.frame_max
            );
        }
        let tunnel = match req.op {
            Op::Tunnel => Some(self.tunnel_slot()?),
            _ => None,
        };
        Ok(Granted {
            req,
            root,
            protection,
            adding_only,
            budget,
            _reserved: reserved,
            _tunnel: tunnel,
        })
    }

    /// The client's request, within the handshake's time, or the one a
    /// pinned start took from message one (P-48). The error says whether
    /// it is ours to tell the client (a bad frame) or not (the connection
    /// broke).
    pub(super) fn read_request(
        &self,
        ctrl_r: &mut FrameReader,
        early: Option<Request>,
    ) -> Result<Request, (TransferError, bool)> {
        if let Some(r) = early {
            return Ok(r);
        }
        ctrl_r
            .get_ref()
            .set_read_timeout(Some(handshake::HANDSHAKE_TIMEOUT))
            .ok();
        let req = match ctrl_r.read_msg() {
            Ok(Some(Msg::Request(r))) => r,
            Ok(_) => {
                let e = TransferError::new(ErrorCode::Protocol, "client sent no request");
                return Err((e, false));
            }
            Err(e) => {
                let ours = !matches!(e, connect::framed::FrameError::Io(_));
                return Err((e.into_transfer("reading the request"), ours));
            }
        };
        ctrl_r.get_ref().set_read_timeout(None).ok();
        Ok(req)
    }

    fn tunnel_slot(&self) -> Result<SessionGuard<'_>, TransferError> {
        let max = self.cfg.max_tunnels;
        SessionGuard::enter(&self.tunnels, max, release_freed_memory).ok_or_else(|| {
            busy(format!(
                "server busy: {max} tunnel sessions already running (--max-tunnels), each of which may hold {} MiB; try again later",
                tunnel_driver::SESSION_HELD >> 20
            ))
        })
    }

    /// The request accepted and its data path joined: the UDP socket
    /// opened in the handshake serves a UDP request only, one not opened
    /// then is opened now that the client is known and named in
    /// `Accept` (P-23, issue 39); then the client's data connections, or
    /// its UDP hello and probes.
    #[allow(clippy::type_complexity)]
    pub(super) fn accept(
        &self,
        (est, udp, listed, joined): (
            &mut handshake::Established,
            Option<udp::UdpChannel>,
            &Listed<'_>,
            &mpsc::Receiver<Joined>,
        ),
        (ctrl_r, ctrl_w): (&mut FrameReader, &mut FrameWriter),
        granted: &Granted<'_>,
        gated: bool,
        progress: &Arc<Progress>,
    ) -> Result<DataPlan, TransferError> {
        let req = &granted.req;
        let udp = match udp {
            None if req.transport == TRANSPORT_UDP && est.udp_port == 0 => {
                self.open_udp(ctrl_r.get_ref().local_addr())
            }
            u => u.filter(|_| req.transport == TRANSPORT_UDP),
        };
        let udp_port = udp
            .as_ref()
            .and_then(|c| c.local_addr().ok())
            .map_or(0, |a| a.port());
        let streams = granted.budget.streams;
        listed.open(Accepted {
            protection: granted.protection,
            streams,
            frame_max: granted.budget.frame_max,
        });
        let accepted_at = Instant::now();
        ctrl_w
            .send_msg(&Msg::Accept {
                session: est.keys.session_id(),
                streams,
                udp_port,
                gated,
            })
            .map_err(|e| TransferError::lost("accepting the request", &e))?;
        match req.transport {
            TRANSPORT_UDP => self.udp_or_streams(
                udp,
                est,
                accepted_at,
                granted.protection,
                ctrl_r,
                joined,
                streams,
                req,
                progress,
            ),
            _ => gather(joined, streams).map(DataPlan::Tcp),
        }
    }
}

fn busy(msg: String) -> TransferError {
    TransferError::new(ErrorCode::Busy, msg)
}
