//! The side the server plays for an admitted request, prepared before it
//! accepts so that errors come first (P-21): a sender of files, objects or
//! generated data for a pull or probe, a receiver of a push into files
//! (or a shard's layer over them) or objects, or a tunnel to a target.

use secure::PublicKey;
use session::SenderSession;
use store::{Destination, Root, Sink, Sources};
use wire::{ErrorCode, Op, Request};

use connect::error::TransferError;

use super::{send_window, session_share};

/// What the server does for a request.
pub(super) enum Side {
    /// Sends: its session, the sources, and their bytes.
    Send(Box<SenderSession>, Box<dyn store::BlockSource>, u64),
    /// Receives into the sink, as the options say.
    Receive(Box<dyn store::BlockSink>, transfer::ReceiveOptions),
    /// Carries connections to the target.
    Tunnel(String),
}

impl super::Server {
    /// The side for `req`, admitted for `peer` with `root` as the part of
    /// the served files it sees.
    pub(super) fn build_side(
        &self,
        req: &Request,
        root: &Root,
        peer: &PublicKey,
        (adding_only, budget): (bool, Option<u64>),
    ) -> Result<Side, TransferError> {
        let side = self.side(req, root, peer, adding_only)?;
        // A push through a one-time grant, within its budget (P-45 G-4).
        Ok(match (side, budget) {
            (Side::Receive(sink, o), Some(b)) => {
                Side::Receive(Box::new(super::budget::Budgeted::new(sink, b)), o)
            }
            (side, _) => side,
        })
    }

    fn side(
        &self,
        req: &Request,
        root: &Root,
        peer: &PublicKey,
        adding_only: bool,
    ) -> Result<Side, TransferError> {
        let objects = |p: &String| self.cfg.buckets.as_ref().filter(|b| b.serves(p));
        match req.op {
            Op::Grant { .. } | Op::Job => Err(TransferError::new(
                ErrorCode::BadRequest,
                "grants and job calls move no files",
            )),
            Op::Tunnel => {
                self.cfg.tunnel_to.check(&req.paths[0])?;
                Ok(Side::Tunnel(req.paths[0].clone()))
            }
            Op::Pull if req.paths.iter().any(|p| objects(p).is_some()) => {
                let Some(b) = objects(&req.paths[0])
                    .filter(|_| req.paths.iter().all(|p| objects(p).is_some()))
                else {
                    return Err(TransferError::new(
                        ErrorCode::BadRequest,
                        "pull either object-store locations (s3://, gs://, az://) or files, not both at once",
                    ));
                };
                let select = transfer::selection(&req.select)?;
                let (entries, sources, bytes) = b.sources(&req.paths, req.recursive, &select)?;
                self.sending(req, entries, sources, bytes)
            }
            Op::Pull => {
                let (walked, sources) = self.walk_request(root, req)?;
                let bytes = walked.file_bytes();
                self.sending(req, walked.entries, Box::new(sources), bytes)
            }
            Op::Probe { bytes } => {
                // One file of generated data, verified and discarded by the
                // client: the network and both hosts' CPUs, no disks (P-36).
                let probe = wire::Entry {
                    id: 0,
                    path: b"probe".to_vec(),
                    kind: wire::EntryKind::File {
                        size: bytes,
                        mode: 0o600,
                        mtime: 0,
                        mtime_nsec: 0,
                    },
                    target: Vec::new(),
                };
                let session = SenderSession::new(vec![probe], req.block_size, send_window(req));
                Ok(Side::Send(
                    Box::new(session),
                    Box::new(Sources::generated()),
                    bytes,
                ))
            }
            Op::Push if objects(&req.paths[0]).is_some() => {
                let b = objects(&req.paths[0]).expect("checked");
                if !req.basis.is_empty() {
                    return Err(TransferError::new(
                        ErrorCode::BadRequest,
                        "--basis names a file, and this destination is an object store's",
                    ));
                }
                if req.shard.is_some() {
                    return Err(TransferError::new(ErrorCode::BadRequest, "a split transfer's shards fill files in a shared file system; into an object store, run it as one transfer"));
                }
                let sink = b.sink(&req.paths[0], req.many_sources, req.contents, adding_only)?;
                Ok(Side::Receive(sink, self.receiving(req, peer, None)?))
            }
            Op::Push => {
                let dest = &req.paths[0];
                let place = Destination::for_path(
                    &self.resolve(root, dest)?,
                    dest.ends_with('/'),
                    req.many_sources,
                    req.contents,
                    root.clone(),
                )?;
                let basis = self.open_basis(root, &req.basis)?;
                let mut files = Sink::new(place, req.preserve);
                if adding_only {
                    files = files.adding_only();
                }
                let sink = self.receiving_sink(files, req.shard.as_ref())?;
                Ok(Side::Receive(sink, self.receiving(req, peer, basis)?))
            }
        }
    }

    /// A sending side for `entries` read from `sources`: what the client
    /// may answer, and what the session may hold, the sources' own
    /// bookkeeping included (P-43 R-1 … R-5).
    fn sending(
        &self,
        req: &Request,
        entries: Vec<wire::Entry>,
        sources: Box<dyn store::BlockSource>,
        bytes: u64,
    ) -> Result<Side, TransferError> {
        let mut session = SenderSession::new(entries, req.block_size, send_window(req));
        session.expect(&req.sync);
        session.admit(session_share(self.cfg.memory), Some(self.reserved.clone()))?;
        if req.sync.gated {
            transfer::gate_sender(&mut session, &req.sync, &*sources, req.block_size)?;
        }
        Ok(Side::Send(Box::new(session), sources, bytes))
    }

    /// What a receiving side does beyond storing: the request's sync
    /// options, a basis, and the client key's own chunk cache.
    fn receiving(
        &self,
        req: &Request,
        peer: &PublicKey,
        basis: Option<(std::path::PathBuf, std::sync::Arc<dyn store::Held>)>,
    ) -> Result<transfer::ReceiveOptions, TransferError> {
        Ok(transfer::ReceiveOptions {
            select: transfer::selection(&req.select)?,
            itemize: match req.itemize {
                true => transfer::Itemize::Send,
                false => transfer::Itemize::Off,
            },
            sync: req.sync,
            basis,
            cache: self
                .cfg
                .cache
                .as_ref()
                .and_then(|c| c.for_peer(&peer.fingerprint())),
            contents: req.contents,
        })
    }
}

impl Side {
    /// Whether the receiver answers each file before its blocks come
    /// (P-31): only a receiving side, and not for a push of nothing but
    /// zeros (its manifest and announcements are on their way already,
    /// P-29).
    pub(super) fn gated(&self, streams: u16) -> bool {
        match self {
            Side::Receive(..) if streams == 0 => false,
            Side::Receive(sink, opts) => opts.gated(sink.destination_exists()),
            Side::Send(..) | Side::Tunnel(_) => false,
        }
    }
}

/// The control connection, as its reader and writer.
type Control = (connect::framed::FrameReader, connect::framed::FrameWriter);

impl super::Server {
    /// Runs `side` over `plan` to its end, with the control connection,
    /// the request, and how the session was set up (its round trip,
    /// whether the receiver answers each file, its protection); the log
    /// line says what moved.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_side(
        &self,
        side: Side,
        plan: connect::join::DataPlan,
        (ctrl_r, ctrl_w): Control,
        req: &Request,
        (rtt, gated, protection): (std::time::Duration, bool, secure::Protection),
        progress: std::sync::Arc<connect::progress::Progress>,
        rec: &super::record::Record,
    ) -> Result<String, TransferError> {
        use connect::join::DataPlan;
        use connect::progress::Progress;
        use transfer::{run_receiver, run_sender, RecvPath, SendPath, Sending};
        if let Side::Tunnel(target) = &side {
            let DataPlan::Tcp(conns) = plan else {
                return Err(TransferError::new(
                    ErrorCode::Protocol,
                    "a tunnel travels on TCP streams",
                ));
            };
            let ctrl = (ctrl_r, ctrl_w);
            return tunnel_driver::serve(target, req, conns, ctrl, rtt, progress);
        }
        let (send_path, recv_path, how) = match plan {
            DataPlan::Tcp(conns) => {
                Progress::set(&progress.streams, conns.len() as u64);
                let how = format!("{} streams", conns.len());
                let (readers, writers): (Vec<_>, Vec<_>) =
                    conns.into_iter().map(|c| (c.reader, c.writer)).unzip();
                (SendPath::Tcp(writers), RecvPath::Tcp(readers), how)
            }
            DataPlan::Udp(link) => {
                let how = format!("UDP, {}-byte datagrams", link.payload);
                // Only one of the two is used; the link moves into it.
                match side {
                    Side::Send(..) | Side::Tunnel(_) => {
                        (SendPath::Udp(link), RecvPath::Tcp(vec![]), how)
                    }
                    Side::Receive(..) => (SendPath::Tcp(vec![]), RecvPath::Udp(link), how),
                }
            }
        };
        match side {
            Side::Send(session, sources, bytes) => {
                let how_sent = Sending {
                    rate: super::rate_of(req),
                    compress: codec::Mode::from_wire(req.compress, req.compress_level),
                    start_rate: None,
                    known_rate: None,
                    path: None,
                    answer: None,
                    share: Sending::share_of(req.share),
                };
                // The manifest's bytes: a pull's total on the status page.
                Progress::set(&progress.total_bytes, bytes);
                let s = run_sender(
                    ctrl_r, ctrl_w, send_path, *session, &*sources, how_sent, &progress,
                )?;
                rec.moved(s.summary.files, bytes);
                Ok(format!(
                    "sent {} files, {bytes} bytes, over {how} ({}){}",
                    s.summary.files,
                    protection.name(),
                    coded(
                        Progress::get(&progress.dgrams_parity),
                        "parity datagrams sent"
                    )
                ))
            }
            Side::Tunnel(_) => Err(TransferError::new(ErrorCode::Other, "tunnel served twice")),
            Side::Receive(sink, opts) => {
                let mut session = session::ReceiverSession::new(req.block_size);
                // A manifest's bookkeeping comes out of the daemon's memory
                // too, a session's share at most (P-40 S-1).
                session.set_budget(session_share(self.cfg.memory));
                session.set_pool(self.reserved.clone());
                if gated {
                    transfer::gate_receiver(&mut session, &opts);
                }
                let s = run_receiver(ctrl_r, ctrl_w, recv_path, session, &*sink, &opts, &progress)?;
                rec.moved(s.files, s.file_bytes);
                Ok(format!(
                    "received {} files, {} bytes, over {how} ({}){}",
                    s.files,
                    s.file_bytes,
                    protection.name(),
                    coded(
                        Progress::get(&progress.dgrams_rebuilt),
                        "datagrams rebuilt from parity"
                    )
                ))
            }
        }
    }
}

/// What erasure coding over the tail did (P-47), for the log line; empty
/// when nothing.
fn coded(count: u64, what: &str) -> String {
    match count {
        0 => String::new(),
        n => format!(", {n} {what}"),
    }
}
