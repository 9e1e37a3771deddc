//! What a connected client asks for: push, pull, probe (P-36) and tunnel
//! (P-37), each from the request to the report.

use std::time::{Duration, Instant};

use session::{ReceiverSession, SenderSession};
use store::{BlockSink, BlockSource, Sink, Sources, Walked};
use wire::{ErrorCode, Op, Request};

use super::config::Transport;
use super::connected::{Connected, ZERO_WAIT_MAX, ZERO_WAIT_MIN};
use super::dial::auto_streams;
use super::report::{ProbeRun, Report};
use connect::error::TransferError;
use connect::join::DataPlan;
use connect::progress::Progress;
use connect::sizing::{SEND_WINDOW, UDP_SEND_WINDOW};
use transfer::{run_receiver, run_sender, RecvPath, SendPath, Sending};

/// A TCP connection's first window, bytes: Linux's ten segments (RFC
/// 6928) of an MTU-1500 path.
const FIRST_WINDOW: f64 = 10.0 * 1448.0;

impl Connected {
    /// Sends local sources to `dest` on the server. `contents`: a source
    /// named a directory's contents (`dir/`, P-8). `scan` has looked for
    /// zero blocks since before the connection was made.
    pub fn push(
        self,
        walked: Walked,
        mut scan: transfer::ZeroScan,
        dest: &str,
        recursive: bool,
        many_sources: bool,
        contents: bool,
    ) -> Result<Report, TransferError> {
        let (_, window) = self.streams();
        // Nothing to send but zeros, known already: the manifest and its
        // zero announcements ride right behind the request, and no data
        // connection is opened (P-29).
        let plain = self.cfg.sync
            == wire::SyncOptions {
                dedup: self.cfg.sync.dedup,
                ..Default::default()
            };
        if plain
            && self.cfg.basis.is_none()
            && self.cfg.transport != Transport::Udp
            && scan.only_zeros(
                &walked,
                self.cfg.block_size,
                self.rtt.clamp(ZERO_WAIT_MIN, ZERO_WAIT_MAX),
            )
        {
            return self.push_announced(
                walked,
                scan,
                dest,
                (recursive, many_sources, contents),
                window,
            );
        }
        let bytes = walked.file_bytes();
        let (paths, inodes) = (walked.paths, walked.inodes);
        let entries = walked.entries;
        let stamp = entries.clone();
        self.push_with(
            entries,
            bytes,
            move || {
                Box::new(
                    Sources::new(paths)
                        .stamped(&stamp, &inodes)
                        .with_zeros(scan.finish()),
                )
            },
            dest,
            (recursive, many_sources, contents),
        )
    }

    /// Sends the manifest `entries`, whose file bytes `source` reads (an
    /// object store's, say), to `dest` on the server; as [`Self::push`]
    /// otherwise.
    pub fn push_from(
        self,
        entries: Vec<wire::Entry>,
        source: Box<dyn BlockSource>,
        dest: &str,
        (recursive, many_sources, contents): (bool, bool, bool),
    ) -> Result<Report, TransferError> {
        let bytes = entries
            .iter()
            .map(|e| match e.kind {
                wire::EntryKind::File { size, .. } => size,
                _ => 0,
            })
            .sum();
        self.push_with(
            entries,
            bytes,
            move || source,
            dest,
            (recursive, many_sources, contents),
        )
    }

    /// The request, then the data: `source` is made once the request is
    /// on its way (a zero scan runs meanwhile).
    fn push_with(
        mut self,
        entries: Vec<wire::Entry>,
        file_bytes: u64,
        source: impl FnOnce() -> Box<dyn BlockSource>,
        dest: &str,
        (recursive, many_sources, contents): (bool, bool, bool),
    ) -> Result<Report, TransferError> {
        let (streams, window) = self.push_streams();
        // No more streams than blocks: a small transfer needs few.
        let blocks: u64 = entries
            .iter()
            .map(|e| match e.kind {
                wire::EntryKind::File { size, .. } => {
                    session::block_count(size, self.cfg.block_size).max(1)
                }
                _ => 0,
            })
            .sum();
        let streams = streams.min(blocks.max(1).min(u16::MAX as u64) as u16);
        Progress::set(&self.progress.total_bytes, file_bytes);
        Progress::set(
            &self.progress.total_files,
            entries
                .iter()
                .filter(|e| matches!(e.kind, wire::EntryKind::File { .. }))
                .count() as u64,
        );
        let (plan, gated) = self.request(Request {
            recursive,
            many_sources,
            contents,
            ..self.build_request(Op::Push, vec![dest.to_string()], streams)
        })?;
        let sources = source();
        let sources: &dyn BlockSource = &*sources;
        let (path, streams, window_bytes) = match plan {
            DataPlan::Tcp(conns) => {
                let n = conns.len() as u16;
                let writers = conns.into_iter().map(|c| c.writer).collect();
                (SendPath::Tcp(writers), n, SEND_WINDOW)
            }
            DataPlan::Udp(link) => (SendPath::Udp(link), 0, UDP_SEND_WINDOW),
        };
        let mut session = SenderSession::new(entries, self.cfg.block_size, window_bytes);
        session.expect(&self.cfg.sync);
        session.itemize = self.cfg.itemize;
        if gated {
            transfer::gate_sender(&mut session, &self.cfg.sync, sources, self.cfg.block_size)?;
        }
        let how = Sending {
            rate: self.cfg.rate,
            compress: self.cfg.compress,
            start_rate: self.cfg.advice.map(|a| a.rate / 2),
            known_rate: self.known_rate(),
            path: self.known_link(),
            answer: None,
            share: self.cfg.share,
        };
        let (progress, tail) = (self.progress.clone(), self.tail());
        let ctrl = self.take_ctrl()?;
        let r = run_sender(ctrl.r, ctrl.w, path, session, sources, how, &progress)?;
        let sent = (r.retransmitted, r.endgame_copies);
        Ok(tail.report(r.summary, streams, sent, window))
    }

    /// Where the UDP channel's rate starts: what the last transfer to this
    /// host measured, when the round trip is about the same, and no
    /// `--rate` cap sits below it.
    fn known_rate(&self) -> Option<u64> {
        let k = self
            .cfg
            .known_path
            .filter(|k| k.rate > 0 && k.fits(self.rtt))?;
        Some(self.cfg.rate.map_or(k.rate, |c| c.min(k.rate)))
    }

    /// Streams for a push, and their window. On a known path whose ceiling
    /// holds them (P-46, `--fair on`), with no count given, enough that their first
    /// windows together are a 64th of the path's bandwidth-delay product
    /// (at most 16): each starts at ten segments and BBR's startup doubles
    /// it a round trip, so n streams reach the path log2(n) round trips
    /// sooner, and under the ceiling their startup cannot flood the queue.
    /// On the emulated 1 Gbit/s, 150 ms link, 16 streams moved 1 GiB at a
    /// median of 824 Mbit/s where 7 moved 810 (0.1% loss: 813 against 796)
    /// and the 4 sized from the window 803.
    fn push_streams(&self) -> (u16, u64) {
        let (n, window) = self.streams();
        let auto = self.cfg.streams.is_none() && self.cfg.advice.is_none();
        // Not under `--background`, which yields rather than races.
        let known = self
            .known_link()
            .filter(|_| self.cfg.share == rate::Share::Fair);
        let Some(k) = known.filter(|_| auto) else {
            return (n, window);
        };
        let bdp = k.most as f64 * k.rtt.max(self.rtt).as_secs_f64();
        let ramp = (bdp / (64.0 * FIRST_WINDOW)).ceil().min(16.0) as u16;
        (n.max(ramp), window)
    }

    /// Streams for a pull, and their window: sized as for a first
    /// transfer (the `--rate` cap, else 10 Gbit/s), whatever a known path
    /// measured. The server sends, with no ceiling to hold the extra
    /// streams a known push opens (P-46), and sized for the known rate
    /// a 1 Gbit/s, 150 ms path got 2 streams, whose first windows took so
    /// long to grow that a pull after a push moved 1 GiB at 761 Mbit/s
    /// where a first pull's 6 streams moved 791.
    fn pull_streams(&self) -> (u16, u64) {
        let (n, window) = self.streams();
        let auto = self.cfg.streams.is_none() && self.cfg.advice.is_none();
        match auto {
            true => (auto_streams(self.rtt, self.cfg.rate, window), window),
            false => (n, window),
        }
    }

    /// What the last transfer to this host measured, over either transport,
    /// at a round trip this one's could be with a queue standing, and that
    /// round trip (P-46: what the TCP streams' sharing takes for the path).
    /// What earlier streams delivered at their most, where they measured
    /// it, is the path for them: the UDP sender's estimate reads over
    /// what TCP carries (1,013 Mbit/s on the emulated 1 Gbit/s link,
    /// where sixteen streams delivered 965).
    fn known_link(&self) -> Option<transfer::KnownLink> {
        let k = self.cfg.known_path.filter(|k| k.fits_queued(self.rtt))?;
        if k.tcp_peak > 0 {
            let (rate, most, rtt) = (k.tcp_peak, k.tcp_peak, k.rtt);
            return Some(transfer::KnownLink { rate, most, rtt });
        }
        let rate = k.rate.max(k.tcp_rate);
        (rate > 0).then_some(transfer::KnownLink {
            rate,
            // A TCP push's figure averages over BBR's startup: a quarter
            // more, as the streams are sized (`target_rate`). (A guess: a
            // ceiling over the path comes down once the streams show it,
            // P-46 step 5.)
            most: k.rate.max(k.tcp_rate.saturating_mul(5) / 4),
            rtt: k.rtt,
        })
    }

    /// A push whose every block is known to be zeros (or whose files are
    /// empty): a request for no data connections, with the whole manifest
    /// and its zero announcements right behind it, before the server's
    /// answer. The engine reads the welcome and `Accept` first (P-29).
    fn push_announced(
        mut self,
        walked: Walked,
        scan: transfer::ZeroScan,
        dest: &str,
        (recursive, many_sources, contents): (bool, bool, bool),
        window: u64,
    ) -> Result<Report, TransferError> {
        Progress::set(&self.progress.total_bytes, walked.file_bytes());
        let files = walked
            .entries
            .iter()
            .filter(|e| matches!(e.kind, wire::EntryKind::File { .. }))
            .count();
        Progress::set(&self.progress.total_files, files as u64);
        let mut req = Request {
            recursive,
            many_sources,
            contents,
            transport: wire::TRANSPORT_TCP,
            ..self.build_request(Op::Push, vec![dest.to_string()], 0)
        };
        // Zero blocks match nothing the receiver holds: nothing to gate.
        req.sync.dedup = false;
        self.send_request(&req)?
            .map_err(|e| TransferError::lost("sending the request", &e))?;
        let sources = Sources::new(walked.paths)
            .stamped(&walked.entries, &walked.inodes)
            .with_zeros(scan.finish());
        let mut session = SenderSession::new(walked.entries, self.cfg.block_size, SEND_WINDOW);
        session.expect(&self.cfg.sync);
        session.itemize = self.cfg.itemize;
        let how = Sending {
            rate: self.cfg.rate,
            compress: self.cfg.compress,
            start_rate: None,
            known_rate: None,
            path: None,
            answer: Some(self.ctrl()?.keys.session_id()),
            share: self.cfg.share,
        };
        let (progress, tail) = (self.progress.clone(), self.tail());
        let ctrl = self.take_ctrl()?;
        let r = run_sender(
            ctrl.r,
            ctrl.w,
            SendPath::Tcp(Vec::new()),
            session,
            &sources,
            how,
            &progress,
        )?;
        let sent = (r.retransmitted, r.endgame_copies);
        Ok(tail.report(r.summary, 0, sent, window))
    }

    /// Fetches `sources` from the server into `sink`.
    pub fn pull(
        mut self,
        sources: Vec<String>,
        recursive: bool,
        sink: &dyn BlockSink,
    ) -> Result<Report, TransferError> {
        let (streams, window) = self.pull_streams();
        let contents = sources.iter().any(|s| store::names_contents(s.as_bytes()));
        let basis = match &self.cfg.basis {
            Some(b) => {
                let p = std::path::PathBuf::from(b);
                let f = std::fs::File::open(&p).map_err(|e| {
                    TransferError::from(store::StoreError::io("open the basis", &p, &e))
                })?;
                Some((p, std::sync::Arc::new(f) as std::sync::Arc<dyn store::Held>))
            }
            None => None,
        };
        let opts = transfer::ReceiveOptions {
            sync: self.cfg.sync,
            basis,
            cache: self.cfg.cache.clone(),
            contents,
            select: transfer::selection(&self.cfg.select)?,
            itemize: match self.cfg.itemize {
                true => transfer::Itemize::Keep,
                false => transfer::Itemize::Off,
            },
        };
        let gated = opts.gated(sink.destination_exists());
        // Only what was asked for may arrive (S-5).
        let asked = session::Asked::new(&sources, recursive);
        let mut req = Request {
            recursive,
            contents,
            ..self.build_request(Op::Pull, sources, streams)
        };
        req.sync.gated = gated;
        let (plan, _) = self.request(req)?;
        self.receive(plan, sink, &opts, gated, window, Some(asked))
    }

    /// Runs the receiving side of an accepted request.
    fn receive(
        mut self,
        plan: DataPlan,
        sink: &dyn BlockSink,
        opts: &transfer::ReceiveOptions,
        gated: bool,
        window: u64,
        asked: Option<session::Asked>,
    ) -> Result<Report, TransferError> {
        let (path, streams) = match plan {
            DataPlan::Tcp(conns) => {
                let n = conns.len() as u16;
                (
                    RecvPath::Tcp(conns.into_iter().map(|c| c.reader).collect()),
                    n,
                )
            }
            DataPlan::Udp(link) => (RecvPath::Udp(link), 0),
        };
        let (block_size, progress, tail) =
            (self.cfg.block_size, self.progress.clone(), self.tail());
        let mut session = ReceiverSession::new(block_size);
        if let Some(asked) = asked {
            session.expect(asked);
        }
        if gated {
            transfer::gate_receiver(&mut session, opts);
        }
        let ctrl = self.take_ctrl()?;
        let summary = run_receiver(ctrl.r, ctrl.w, path, session, sink, opts, &progress)?;
        Ok(tail.report(summary, streams, (0, 0), window))
    }

    /// A memory-to-memory goodput test (`haul probe`, P-36): the server
    /// sends `bytes` of generated data, verified here and discarded. With
    /// `echo`, the UDP channel's set-up is followed by echo measurements
    /// over that span (the transport must then be UDP).
    pub fn probe(mut self, bytes: u64, echo: Option<Duration>) -> Result<ProbeRun, TransferError> {
        let (streams, window) = self.streams();
        self.echo_span = echo;
        let (plan, _) =
            self.request(self.build_request(Op::Probe { bytes }, Vec::new(), streams))?;
        let echo = self.echo.take();
        let begun = Instant::now();
        let sink = Sink::new(store::Destination::Null, false);
        let opts = transfer::ReceiveOptions {
            sync: wire::SyncOptions::default(),
            basis: None,
            cache: None,
            contents: false,
            ..Default::default()
        };
        // Verified bytes over time, to tell the steady rate from the start.
        let progress = self.progress.clone();
        let done = std::sync::atomic::AtomicBool::new(false);
        // Bytes read off the wire too: verifying may lag the link for a
        // moment on a busy host, reading the sockets much less.
        let wire = |p: &Progress| Progress::get(&p.wire_rx) + Progress::get(&p.udp_bytes);
        let (report, (mut samples, mut wire_samples)) = std::thread::scope(|scope| {
            let sampler = scope.spawn(|| {
                let (mut verified, mut read) = (Vec::new(), Vec::new());
                while !done.load(std::sync::atomic::Ordering::Acquire) {
                    let t = begun.elapsed();
                    verified.push((t, Progress::get(&progress.done_bytes)));
                    read.push((t, wire(&progress)));
                    std::thread::sleep(Duration::from_millis(10));
                }
                (verified, read)
            });
            let report = self.receive(plan, &sink, &opts, false, window, None);
            done.store(true, std::sync::atomic::Ordering::Release);
            (report, sampler.join().unwrap_or_default())
        });
        let data_time = begun.elapsed();
        samples.push((data_time, bytes));
        wire_samples.push((data_time, wire(&progress)));
        Ok(ProbeRun {
            report: report?,
            data_time,
            echo,
            samples,
            wire_samples,
        })
    }
    /// Opens a tunnel session to `target` (`HOST:PORT` as the server
    /// resolves it, P-37): the data connections become its lanes, and the
    /// returned session carries the local connections given to it.
    /// `cache`: send content seen before as copies; compression follows
    /// the configuration's `compress`.
    pub fn tunnel(
        mut self,
        target: &str,
        cache: bool,
    ) -> Result<tunnel_driver::Session, TransferError> {
        self.cfg.transport = Transport::Tcp;
        self.cfg.sync.dedup = cache;
        let (streams, _) = self.streams();
        let (plan, _) =
            self.request(self.build_request(Op::Tunnel, vec![target.to_string()], streams))?;
        let DataPlan::Tcp(conns) = plan else {
            return Err(TransferError::new(
                ErrorCode::Protocol,
                "a tunnel travels on TCP streams",
            ));
        };
        let opts = tunnel_driver::Options {
            mux: tunnel::MuxConfig {
                window: tunnel_driver::window_for(self.rtt),
                ..tunnel::MuxConfig::default()
            },
            cache,
            compress: self.cfg.compress,
        };
        let session =
            tunnel_driver::Session::start(tunnel::Role::Client, opts, conns, self.progress.clone());
        let ctrl = self.take_ctrl()?;
        session.watch(ctrl.r, ctrl.w);
        Ok(session)
    }
}
