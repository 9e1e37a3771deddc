//! The transfer loops (P-19), the same whichever side is client or server.
//!
//! Sending side: one thread per data stream pulls the next block from the
//! session (work stealing), reads it at its offset, hashes it, seals it and
//! writes it; the control reader feeds acks and nacks back; the calling
//! thread writes control messages. Receiving side: one thread per data
//! stream opens, checks and writes blocks in place; the control reader
//! carries out manifest actions; a finalizer syncs and renames verified
//! files in batches; the calling thread writes acks and the final `Done`.
//!
//! Reads from disk, network transfer and writes to disk overlap because each
//! stream's thread does its own, and the finalizer works beside them.
//! The first error stops every thread, is sent to the peer when it is ours,
//! and leaves no temporary file behind.

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rate::TokenBucket;
use session::{block_hash, Action, BlockVerdict, ReceiverSession, SenderSession};
use store::{Sink, Sources};
use wire::{BlockHeader, ErrorCode, Msg, Summary, BLOCK_HEADER_LEN};

use crate::compress::Compression;
use crate::dedup::{Bases, Question, ReceiveOptions};
use crate::send_blocks::{prepare_blocks, send_blocks, Prepared};
use connect::control_gap::ControlGap;
use connect::datagram::UdpLink;
use connect::error::TransferError;
use connect::framed::{FrameError, FrameReader, FrameWriter};
use connect::progress::Progress;

pub(crate) const POLL: Duration = Duration::from_millis(50);
/// How long a block may wait for its file's manifest entry.
const ENTRY_WAIT: Duration = Duration::from_secs(60);
/// How long a broken data stream waits for the peer's stated reason.
const REASON_WAIT: Duration = Duration::from_secs(2);
/// How long to wait for the peer to close after the transfer is complete.
const LINGER: Duration = Duration::from_secs(30);

pub(crate) struct Shared<'a, S> {
    pub(crate) state: Mutex<S>,
    pub(crate) cv: Condvar,
    error: Mutex<Option<TransferError>>,
    stop: AtomicBool,
    done: AtomicBool,
    sockets: Vec<TcpStream>,
    ctrl: Mutex<FrameWriter>,
    pub(crate) progress: &'a Progress,
    /// How a sending side compresses blocks (off on a receiver).
    pub(crate) compression: Compression,
}

impl<'a, S> Shared<'a, S> {
    fn new(state: S, ctrl: FrameWriter, sockets: Vec<TcpStream>, progress: &'a Progress) -> Self {
        Shared {
            compression: Compression::off(),
            state: Mutex::new(state),
            cv: Condvar::new(),
            error: Mutex::new(None),
            stop: AtomicBool::new(false),
            done: AtomicBool::new(false),
            sockets,
            ctrl: Mutex::new(ctrl),
            progress,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, S> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the TCP data connections (not the control one) carry now,
    /// in bytes per second (`net::tcp_path_rate`).
    pub(crate) fn data_rate(&self) -> Option<f64> {
        connect::net::tcp_path_rate(self.sockets.get(1..).unwrap_or(&[]))
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Records the first error, tells the peer if `ours`, and unblocks
    /// every thread. Errors after a completed transfer are ignored.
    pub(crate) fn fail(&self, e: TransferError, ours: bool) {
        if self.is_done() {
            return;
        }
        {
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_some() {
                return;
            }
            tracing::debug!("transfer failed: {}", e.message);
            *slot = Some(e.clone());
        }
        self.stop.store(true, Ordering::Release);
        if ours {
            // A control write in progress finishes first (bounded by the
            // TCP user timeout), then the reason goes out.
            let mut c = self.ctrl.lock().unwrap_or_else(|p| p.into_inner());
            let _ = c.send_msg(&Msg::Error {
                code: e.code,
                message: e.message,
            });
        }
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.cv.notify_all();
    }

    /// For a broken data connection: the peer usually said why on the
    /// control connection just before closing, so give the control reader
    /// a moment to deliver that reason before settling for "connection lost".
    pub(crate) fn fail_transport(&self, e: TransferError) {
        let deadline = Instant::now() + REASON_WAIT;
        while Instant::now() < deadline && !self.stopped() && !self.is_done() {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.fail(e, false);
    }

    /// The control connection ended, cleanly (`None`) or not, before the
    /// transfer completed. A frame that fails to open or decode is ours to
    /// report; a broken connection is not.
    fn control_ended(&self, err: Option<FrameError>) {
        if self.is_done() {
            return;
        }
        match err {
            None => self.fail(
                TransferError::new(
                    ErrorCode::ConnectionLost,
                    "the peer closed the connection before the transfer finished",
                ),
                false,
            ),
            Some(e) => {
                let ours = !matches!(e, FrameError::Io(_));
                self.fail(e.into_transfer("reading control messages"), ours);
            }
        }
    }

    fn finish(&self) {
        self.done.store(true, Ordering::Release);
        self.cv.notify_all();
    }

    fn take_error(&self) -> Option<TransferError> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    pub(crate) fn send_all(&self, msgs: &[Msg]) -> bool {
        let mut c = self.ctrl.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = c.send_msgs(msgs) {
            drop(c);
            self.fail(TransferError::lost("sending control messages", &e), false);
            return false;
        }
        true
    }

    fn linger(&self) {
        for s in &self.sockets {
            let _ = s.set_read_timeout(Some(LINGER));
        }
    }
}

fn clones(
    ctrl: &TcpStream,
    data: impl Iterator<Item = std::io::Result<TcpStream>>,
) -> Result<Vec<TcpStream>, TransferError> {
    let mut v = vec![ctrl
        .try_clone()
        .map_err(|e| TransferError::lost("setting up", &e))?];
    for d in data {
        v.push(d.map_err(|e| TransferError::lost("setting up", &e))?);
    }
    Ok(v)
}

/// How blocks travel: the TCP data connections, or the UDP channel.
pub enum SendPath {
    Tcp(Vec<FrameWriter>),
    Udp(Box<UdpLink>),
}

pub enum RecvPath {
    Tcp(Vec<FrameReader>),
    Udp(Box<UdpLink>),
}

/// What the sending side learns.
#[derive(Debug, Clone, Copy)]
pub struct SenderReport {
    pub summary: Summary,
    pub retransmitted: u64,
    pub endgame_copies: u64,
}

/// Runs the sending side until the receiver confirms every file.
/// How the sender paces and encodes: the `--rate` cap, and `--compress`.
#[derive(Debug, Clone, Copy)]
pub struct Sending {
    pub rate: Option<u64>,
    pub compress: codec::Mode,
    /// Where the UDP channel's rate starts, if not at its usual 100 Mbit/s
    /// (half the rate `haul probe` measured, P-36).
    pub start_rate: Option<u64>,
    /// A push with nothing to send but zeros, its manifest sent right
    /// behind the request (P-29): the server's welcome and its `Accept` of
    /// this session id, with no data connections, come first on control;
    /// a block that turns out not to be zeros fails the transfer.
    pub answer: Option<[u8; 16]>,
}

pub fn run_sender(
    ctrl_r: FrameReader,
    ctrl_w: FrameWriter,
    path: SendPath,
    session: SenderSession,
    sources: &Sources,
    how: Sending,
    progress: &Progress,
) -> Result<SenderReport, TransferError> {
    match path {
        SendPath::Tcp(data) => {
            run_sender_with(ctrl_r, ctrl_w, data, None, session, sources, how, progress)
        }
        SendPath::Udp(link) => {
            let mut session = session;
            session.set_window(connect::sizing::udp_send_window(link.rtt));
            run_sender_with(
                ctrl_r,
                ctrl_w,
                vec![],
                Some(*link),
                session,
                sources,
                how,
                progress,
            )
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run_sender_with(
    mut ctrl_r: FrameReader,
    ctrl_w: FrameWriter,
    data: Vec<FrameWriter>,
    udp: Option<UdpLink>,
    session: SenderSession,
    sources: &Sources,
    how: Sending,
    progress: &Progress,
) -> Result<SenderReport, TransferError> {
    let sockets = clones(
        ctrl_r.get_ref(),
        data.iter().map(|w| w.get_ref().try_clone()),
    )?;
    let (rate, start_rate) = (how.rate, how.start_rate);
    let mut sh = Shared::new(session, ctrl_w, sockets, progress);
    sh.compression = Compression::new(how.compress).capped(how.rate);
    let bucket = rate.map(|r| Mutex::new(TokenBucket::new(r, (r / 50).max(256 << 10))));
    let (acks_tx, acks_rx) = mpsc::channel();
    let acks_tx = udp.is_some().then_some(acks_tx);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Prepared>(2 * workers);
    let (mut ready_tx, ready_rx) = (Some(ready_tx), Mutex::new(ready_rx));
    let answer = how.answer;
    std::thread::scope(|scope| {
        // Blocks are read, hashed, matched and compressed by a pool of
        // workers, one per core, off the stream threads, which only seal
        // and write (P-19, P-30).
        if let Some(tx) = ready_tx
            .take()
            .filter(|_| !data.is_empty() || answer.is_some())
        {
            for _ in 0..workers {
                let (sh, tx) = (&sh, tx.clone());
                scope.spawn(move || prepare_blocks(sh, sources, tx));
            }
            drop(tx);
            let ready = &ready_rx;
            if answer.is_some() {
                let sh = &sh;
                scope.spawn(move || refuse_data(sh, sources, ready));
            }
            for w in data {
                let (sh, bucket) = (&sh, bucket.as_ref());
                scope.spawn(move || send_blocks(sh, w, ready, bucket));
            }
        }
        if let Some(link) = udp {
            let sh = &sh;
            scope.spawn(move || {
                crate::datagram::send::run(sh, link, sources, (rate, start_rate), acks_rx)
            });
        }
        scope.spawn(|| sender_control_reader(&sh, &mut ctrl_r, acks_tx, answer));
        // Only a receiver that answers each file can ask for chunks.
        if sh.lock().is_gated() {
            scope.spawn(|| crate::dedup::planner(&sh, sources));
        }
        // This thread writes control messages, a gap apart (P-34).
        let mut gap = ControlGap::new();
        loop {
            let msgs: Vec<Msg> = {
                let mut st = sh.lock();
                if !st.has_control() {
                    if sh.is_done() || sh.stopped() {
                        break;
                    }
                    let _ = sh.cv.wait_timeout(st, POLL);
                    continue;
                }
                if let Some(left) = gap.hold(Instant::now()) {
                    let _ = sh.cv.wait_timeout(st, left);
                    continue;
                }
                std::iter::from_fn(|| st.poll_control()).collect()
            };
            if !sh.send_all(&msgs) {
                break;
            }
            gap.wrote(Instant::now(), sh.sockets.first());
        }
        if sh.is_done() {
            for s in &sh.sockets {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    });
    if let Some(e) = sh.take_error() {
        return Err(e);
    }
    let mut st = sh.lock();
    *progress.listed.lock().unwrap_or_else(|p| p.into_inner()) = std::mem::take(&mut st.listed);
    *progress.deleted.lock().unwrap_or_else(|p| p.into_inner()) = std::mem::take(&mut st.deleted);
    *progress.notes.lock().unwrap_or_else(|p| p.into_inner()) = std::mem::take(&mut st.notes);
    Progress::set(&progress.listed_bytes, st.listed_bytes);
    let summary = st.finished().ok_or_else(|| {
        TransferError::new(
            ErrorCode::Other,
            "transfer ended without the receiver's confirmation",
        )
    })?;
    Ok(SenderReport {
        summary,
        retransmitted: st.retransmitted,
        endgame_copies: st.endgame_copies(),
    })
}

/// A push sent without data connections found a block that is not zeros
/// (its file changed since the scan): nothing can carry it.
fn refuse_data(
    sh: &Shared<SenderSession>,
    sources: &Sources,
    ready: &Mutex<mpsc::Receiver<Prepared>>,
) {
    let got = ready.lock().unwrap_or_else(|p| p.into_inner()).recv();
    if let Ok((block, ..)) = got {
        let name = sources.path(block.file).map_or_else(
            || format!("file {}", block.file),
            |p| p.display().to_string(),
        );
        sh.fail(
            TransferError::new(
                ErrorCode::Other,
                format!("{name} changed while it was being sent (it was all zeros when read first); run the command again"),
            ),
            true,
        );
    }
}

/// Checks what the server answered to a push sent with its manifest
/// behind the request: its welcome, then `Accept` of this session with no
/// data connections (P-29). `None` while the answer is still to come.
fn check_answer(msg: &Msg, session: &[u8; 16]) -> Result<bool, TransferError> {
    match msg {
        Msg::Welcome => Ok(false),
        Msg::Accept {
            session: s,
            streams: 0,
            gated: false,
            ..
        } if s == session => Ok(true),
        Msg::Accept { .. } => Err(TransferError::new(
            ErrorCode::Protocol,
            "server answered a push of zeros with another session, data streams or gating",
        )),
        _ => Err(TransferError::new(
            ErrorCode::Protocol,
            "server sent no welcome",
        )),
    }
}

fn sender_control_reader(
    sh: &Shared<SenderSession>,
    r: &mut FrameReader,
    acks: Option<mpsc::Sender<Vec<(u32, u32)>>>,
    mut answer: Option<[u8; 16]>,
) {
    loop {
        match r.read_msg() {
            Ok(Some(msg)) => {
                if let Some(session) = answer.filter(|_| !matches!(msg, Msg::Error { .. })) {
                    match check_answer(&msg, &session) {
                        Ok(accepted) => {
                            if accepted {
                                answer = None;
                            }
                            continue;
                        }
                        Err(e) => return sh.fail(e, true),
                    }
                }
                if let (Some(tx), Msg::Acks(list)) = (&acks, &msg) {
                    let _ = tx.send(list.clone());
                }
                if matches!(msg, Msg::DecodeSpeed { .. }) {
                    sh.compression.record_decode(&msg);
                    continue;
                }
                let mut st = sh.lock();
                let remote = matches!(msg, Msg::Error { .. });
                if let Err(e) = st.handle(msg, Instant::now()) {
                    drop(st);
                    sh.fail(e.into(), !remote);
                    return;
                }
                Progress::set(&sh.progress.done_bytes, st.acked_bytes);
                Progress::set(&sh.progress.done_files, st.files_done);
                Progress::set(&sh.progress.retransmitted, st.retransmitted);
                Progress::set(&sh.progress.skipped_files, st.skipped_files);
                Progress::set(&sh.progress.skipped_bytes, st.skipped_bytes);
                let finished = st.finished().is_some();
                drop(st);
                if finished {
                    sh.finish();
                    return;
                }
                sh.cv.notify_all();
            }
            Ok(None) => return sh.control_ended(None),
            Err(e) => return sh.control_ended(Some(e)),
        }
    }
}

/// Runs the receiving side until every file is placed and the sender is told.
pub fn run_receiver(
    mut ctrl_r: FrameReader,
    ctrl_w: FrameWriter,
    path: RecvPath,
    session: ReceiverSession,
    sink: &Sink,
    opts: &ReceiveOptions,
    progress: &Progress,
) -> Result<Summary, TransferError> {
    let (data, udp) = match path {
        RecvPath::Tcp(d) => (d, None),
        RecvPath::Udp(link) => (vec![], Some(link)),
    };
    let sockets = clones(
        ctrl_r.get_ref(),
        data.iter().map(|r| r.get_ref().try_clone()),
    )?;
    let sh = Shared::new(session, ctrl_w, sockets, progress);
    let (fin_tx, fin_rx) = mpsc::channel::<(u32, u32, i64, u32)>();
    let (block_size, gated) = {
        let st = sh.lock();
        (st.block_size(), st.is_gated())
    };
    let (q_tx, q_rx) = mpsc::channel();
    let (cache_tx, cache_rx) = mpsc::channel();
    // Another session wants a partial this one holds: a word to the peer
    // at once shows whether it is still there (P-41).
    let poked = std::sync::Arc::new(AtomicBool::new(false));
    let flag = poked.clone();
    sink.on_contention(std::sync::Arc::new(move || {
        flag.store(true, Ordering::Release)
    }));
    let rx = Receiving {
        block_size,
        sh: &sh,
        sink,
        fin_tx,
        opts,
        bases: Bases::default(),
        questions: gated.then_some(q_tx),
        placed: opts.cache.is_some().then_some(cache_tx),
        caching: std::sync::atomic::AtomicU64::new(0),
    };
    std::thread::scope(|scope| {
        let rx = &rx;
        if gated {
            scope.spawn(move || rx.answerer(q_rx));
        }
        if let Some(cache) = &opts.cache {
            scope.spawn(move || rx.cacher(cache, cache_rx));
        }
        for r in data {
            scope.spawn(move || rx.receive_blocks(r));
        }
        if let Some(link) = udp {
            scope.spawn(move || crate::datagram::receive::run(rx, *link));
        }
        scope.spawn(move || rx.control_reader(&mut ctrl_r));
        scope.spawn(move || rx.finalizer(fin_rx));
        // This thread writes acks, nacks, file confirmations and `Done`,
        // and tells the sender how fast this side decompresses.
        // Writes are a gap apart (P-34), except the last.
        let mut meter = crate::compress::DecodeMeter::default();
        let mut gap = ControlGap::new();
        loop {
            // Notes made on the blocks' threads go out before `Done`.
            rx.forward_notes();
            let (msgs, finished) = {
                let mut st = sh.lock();
                let finished = st.is_finished();
                if !finished && st.has_control() {
                    if let Some(left) = gap.hold(Instant::now()) {
                        let _ = sh.cv.wait_timeout(st, left);
                        continue;
                    }
                }
                let mut msgs: Vec<Msg> = std::iter::from_fn(|| st.poll_control()).collect();
                if !finished {
                    msgs.extend(meter.report(sh.progress));
                }
                if poked.swap(false, Ordering::AcqRel) {
                    // Acknowledges nothing: only provokes a reset from a
                    // peer's host whose process is gone.
                    msgs.push(Msg::Acks(Vec::new()));
                }
                if msgs.is_empty() && !finished {
                    if sh.stopped() {
                        break;
                    }
                    let _ = sh.cv.wait_timeout(st, POLL);
                    continue;
                }
                (msgs, finished)
            };
            // Everything is in place before `Done` goes out, so whatever the
            // peer does after reading it cannot fail this side.
            if finished {
                sh.finish();
            }
            if !sh.send_all(&msgs) {
                break;
            }
            gap.wrote(Instant::now(), sh.sockets.first());
            if finished {
                sh.linger();
                sh.ctrl
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .shutdown_write();
                break;
            }
        }
        if sh.stopped() {
            // Ending: a new transfer of these files may take the
            // partials over as soon as the threads let go (P-41).
            sink.let_go();
        }
    });
    if let Some(e) = sh.take_error() {
        sink.abort();
        return Err(e);
    }
    let summary = sh.lock().summary();
    Ok(summary)
}

pub(crate) struct Receiving<'a, 'p> {
    pub(crate) block_size: u32,
    pub(crate) sh: &'a Shared<'p, ReceiverSession>,
    pub(crate) sink: &'a Sink,
    fin_tx: mpsc::Sender<(u32, u32, i64, u32)>,
    pub(crate) opts: &'a ReceiveOptions,
    pub(crate) bases: Bases,
    /// Files for the answerer, in a gated session (P-31).
    questions: Option<mpsc::Sender<Question>>,
    /// Files placed, for the chunk cache, and how many it has yet to take.
    placed: Option<mpsc::Sender<Vec<u8>>>,
    pub(crate) caching: std::sync::atomic::AtomicU64,
}

impl Receiving<'_, '_> {
    pub(crate) fn drain(st: &mut ReceiverSession) -> Vec<Action> {
        std::iter::from_fn(|| st.poll_action()).collect()
    }

    /// Hands what the sink noted about files (P-41) to the session, which
    /// tells the sender, and to this side's progress, for a client that
    /// receives.
    pub(crate) fn forward_notes(&self) {
        let notes = self.sink.take_notes();
        if notes.is_empty() {
            return;
        }
        let mut st = self.sh.lock();
        for (kind, text) in notes {
            st.note(kind, text);
        }
        *self
            .sh
            .progress
            .notes
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = st.notes.clone();
        drop(st);
        self.sh.cv.notify_all();
    }

    fn report(&self, st: &ReceiverSession) {
        let p = self.sh.progress;
        Progress::set(&p.done_bytes, st.bytes_stored);
        if let Some(total) = st.bytes_expected {
            Progress::set(&p.total_bytes, total);
        }
        Progress::set(&p.total_files, st.files_expected());
        Progress::set(&p.done_files, st.summary().files);
    }

    /// Carries out the session's actions; some produce further actions.
    pub(crate) fn execute(&self, mut actions: Vec<Action>) -> Result<(), TransferError> {
        while !actions.is_empty() {
            let mut more = Vec::new();
            for a in actions {
                match a {
                    Action::MakeDir { .. } | Action::MakeSymlink { .. }
                        if self.opts.sync.dry_run => {}
                    Action::MakeDir { path, mode, .. } => self.sink.make_dir(&path, mode)?,
                    Action::MakeSymlink { path, target, .. } => {
                        self.sink.make_symlink(&path, &target)?
                    }
                    Action::OpenFile {
                        id,
                        path,
                        size,
                        mtime,
                        mtime_nsec,
                    } => {
                        if let (Some(q), true) =
                            (&self.questions, size > 0 || self.opts.sync.dry_run)
                        {
                            let _ = q.send(Question {
                                id,
                                path,
                                size,
                                mtime: (mtime, mtime_nsec),
                            });
                            continue;
                        }
                        let stamp = store::Stamp {
                            block_size: self.block_size,
                            size,
                            mtime,
                            mtime_nsec,
                        };
                        self.sink.open_file(id, &path, &stamp)?;
                        self.forward_notes();
                        let mut st = self.sh.lock();
                        st.opened(id)?;
                        more.extend(Self::drain(&mut st));
                    }
                    Action::Finalize {
                        id,
                        mode,
                        mtime,
                        mtime_nsec,
                    } => {
                        let _ = self.fin_tx.send((id, mode, mtime, mtime_nsec));
                    }
                    Action::Finish { dirs } => {
                        if self.opts.sync.delete {
                            crate::dedup::delete_extraneous(self, &dirs)?;
                        }
                        if !self.opts.sync.dry_run {
                            self.sink.finish(&dirs)?;
                        }
                        // The chunk cache has every file and its index is
                        // saved before the sender hears `Done` (and a
                        // remote side started over ssh may be ended).
                        if let Some(c) = &self.opts.cache {
                            while self.caching.load(Ordering::SeqCst) > 0 && !self.sh.stopped() {
                                std::thread::sleep(Duration::from_millis(5));
                            }
                            if let Err(e) = c.save() {
                                tracing::warn!("could not save the chunk cache's index: {e}");
                            }
                        }
                        self.sh.lock().complete();
                    }
                }
            }
            actions = more;
        }
        self.sh.cv.notify_all();
        Ok(())
    }

    fn control_reader(&self, r: &mut FrameReader) {
        loop {
            match r.read_msg() {
                Ok(Some(msg)) => {
                    if self.sh.is_done() {
                        continue;
                    }
                    if let Msg::Zeros(list) = &msg {
                        if !self.place_zeros(list) {
                            return;
                        }
                        continue;
                    }
                    let remote = matches!(msg, Msg::Error { .. });
                    let actions = {
                        let mut st = self.sh.lock();
                        if let Err(e) = st.handle(msg) {
                            drop(st);
                            self.sh.fail(e.into(), !remote);
                            return;
                        }
                        let kept = &self.sh.progress.resumed_bytes;
                        kept.store(st.bytes_kept, std::sync::atomic::Ordering::Relaxed);
                        self.report(&st);
                        Self::drain(&mut st)
                    };
                    if let Err(e) = self.execute(actions) {
                        self.sh.fail(e, true);
                        return;
                    }
                }
                Ok(None) => return self.sh.control_ended(None),
                Err(e) => return self.sh.control_ended(Some(e)),
            }
        }
    }

    fn receive_blocks(&self, mut r: FrameReader) {
        loop {
            // Under --no-encrypt only the header is authenticated here; the
            // data is checked against the header's hash below (P-7).
            let body = match r.read_block_body() {
                Ok(Some(b)) => b,
                // The sender closes a data stream only when it has nothing
                // more to send; completion is decided on the control stream.
                Ok(None) => return,
                Err(e) => {
                    if !self.sh.is_done() {
                        // A frame that fails to open or is oversized is ours
                        // to report; a broken connection may have a reason
                        // waiting on the control stream.
                        match e {
                            FrameError::Io(_) => {
                                self.sh.fail_transport(e.into_transfer("receiving data"))
                            }
                            _ => self.sh.fail(e.into_transfer("receiving data"), true),
                        }
                    }
                    return;
                }
            };
            let h = match BlockHeader::decode(body) {
                Ok(h) => h,
                Err(e) => {
                    self.sh.fail(
                        TransferError::new(ErrorCode::Protocol, format!("bad block header: {e}")),
                        true,
                    );
                    return;
                }
            };
            let data = &body[BLOCK_HEADER_LEN..];
            if self.place_encoded(&h, data).is_none() {
                return;
            }
        }
    }

    /// Decodes a block as it came (P-30, P-31, P-33) and places it. The
    /// header is authenticated under every protection: a block longer
    /// than the session's blocks ends the session before anything is
    /// decoded. The bytes behind it are not under `--no-encrypt`: bytes
    /// that cannot decode within their bounds are refused before anything
    /// is allocated and the block is asked for again (`refuse`).
    pub(crate) fn place_encoded(&self, h: &BlockHeader, data: &[u8]) -> Option<BlockVerdict> {
        if h.len > self.block_size {
            let e = TransferError::new(
                ErrorCode::Protocol,
                format!(
                    "block {} of file {} is {} bytes, longer than the session's {}-byte blocks",
                    h.index, h.file, h.len, self.block_size
                ),
            );
            self.sh.fail(e, true);
            return None;
        }
        if h.codec == wire::CODEC_NONE {
            self.place(h, data)
        } else if h.codec & wire::CODEC_BUNDLE != 0 {
            crate::bundle::place(self, h, data)
        } else if h.codec & wire::CODEC_DELTA != 0 {
            match crate::compress::check_program(h.codec & !wire::CODEC_DELTA, data, h.len) {
                Ok(()) => self.place(h, &self.decode(h.file, h.codec, data, h.len)),
                Err(why) => self.refuse(h, &why),
            }
        } else {
            match crate::compress::decode_exact(h.codec, data, h.len, self.sh.progress) {
                Ok(decoded) => self.place(h, &decoded),
                Err(e) => self.refuse(h, &e.to_string()),
            }
        }
    }

    /// A block whose bytes did not decode (`why`): it fails its hash, and
    /// is asked for again, as any damaged block (P-15).
    pub(crate) fn refuse(&self, h: &BlockHeader, why: &str) -> Option<BlockVerdict> {
        tracing::warn!(
            "block {} of file {} was refused ({why}); asking for it again",
            h.index,
            h.file
        );
        let mut other = h.hash;
        other[0] ^= 1;
        self.place_with(h, &other, || Ok(()))
    }

    /// Checks a block against its hash and writes it if it is wanted.
    /// `None`: the transfer stopped (the error, if any, is recorded).
    pub(crate) fn place(&self, h: &BlockHeader, data: &[u8]) -> Option<BlockVerdict> {
        self.place_with(h, &block_hash(data), || {
            self.sink.write_block(h.file, h.offset, data)
        })
    }

    /// Places a block whose bytes are known to hash to `h.hash` (a bundle's
    /// member, P-33), without hashing them again.
    pub(crate) fn place_hashed(&self, h: &BlockHeader, data: &[u8]) -> Option<BlockVerdict> {
        self.place_with(h, &h.hash, || self.sink.write_block(h.file, h.offset, data))
    }

    /// The blocks a `Zeros` message announced (P-29): each is placed as a
    /// hole, with the hash of zeros.
    fn place_zeros(&self, list: &[(u32, u32)]) -> bool {
        for &(file, index) in list {
            let header = self.sh.lock().zero_header(file, index);
            let Some(h) = header else {
                let e = TransferError::new(
                    ErrorCode::Protocol,
                    format!("zeros announced for block {index} of unknown file {file}"),
                );
                self.sh.fail(e, true);
                return false;
            };
            let placed = self.place_with(&h, &h.hash, || {
                self.sink.write_zero(h.file, h.offset, h.len)
            });
            if placed.is_none() {
                return false;
            }
            if placed == Some(BlockVerdict::Write) {
                Progress::add(&self.sh.progress.zero_bytes, h.len as u64);
            }
        }
        true
    }

    fn place_with(
        &self,
        h: &BlockHeader,
        hash: &[u8; 32],
        write: impl FnOnce() -> Result<(), store::StoreError>,
    ) -> Option<BlockVerdict> {
        let hash = *hash;
        let started = Instant::now();
        let verdict = loop {
            let mut st = self.sh.lock();
            match st.block_arrived(h, &hash) {
                Ok(BlockVerdict::NotReady) => {
                    if self.sh.stopped() {
                        return None;
                    }
                    if started.elapsed() > ENTRY_WAIT {
                        drop(st);
                        let e = TransferError::new(
                            ErrorCode::Protocol,
                            format!("block for file {} arrived but its entry never did", h.file),
                        );
                        self.sh.fail(e, true);
                        return None;
                    }
                    let _ = self.sh.cv.wait_timeout(st, POLL);
                }
                Ok(v) => break v,
                Err(e) => {
                    drop(st);
                    self.sh.fail(e.into(), true);
                    return None;
                }
            }
        };
        if verdict == BlockVerdict::Rejected {
            tracing::warn!(
                "block {} of file {} failed its hash; asked for it again",
                h.index,
                h.file
            );
            self.sh.cv.notify_all();
        }
        if verdict != BlockVerdict::Write {
            return Some(verdict);
        }
        if let Err(e) = write() {
            self.sh.fail(e.into(), true);
            return None;
        }
        self.sink.record(h.file, h.index, &hash);
        let actions = {
            let mut st = self.sh.lock();
            if let Err(e) = st.block_written(h.file, h.index) {
                drop(st);
                self.sh.fail(e.into(), true);
                return None;
            }
            self.report(&st);
            Self::drain(&mut st)
        };
        if let Err(e) = self.execute(actions) {
            self.sh.fail(e, true);
            return None;
        }
        Some(verdict)
    }

    fn finalizer(&self, rx: mpsc::Receiver<(u32, u32, i64, u32)>) {
        while !self.sh.is_done() && !self.sh.stopped() {
            let first = match rx.recv_timeout(POLL) {
                Ok(f) => f,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let mut batch = vec![first];
            while batch.len() < 1024 {
                match rx.try_recv() {
                    Ok(f) => batch.push(f),
                    Err(_) => break,
                }
            }
            if let Err(e) = self.sink.finalize(&batch) {
                self.sh.fail(e.into(), true);
                return;
            }
            let actions = {
                let mut st = self.sh.lock();
                for (id, ..) in &batch {
                    st.placed(*id);
                    self.bases.close(*id);
                    if let (Some(tx), Some(rel)) = (&self.placed, st.path_of(*id)) {
                        self.caching.fetch_add(1, Ordering::SeqCst);
                        let _ = tx.send(rel.to_vec());
                    }
                }
                self.report(&st);
                Self::drain(&mut st)
            };
            if let Err(e) = self.execute(actions) {
                self.sh.fail(e, true);
                return;
            }
        }
    }
}
