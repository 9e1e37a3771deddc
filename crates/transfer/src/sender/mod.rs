//! The sending side of a run (P-19): a pool of workers prepares blocks
//! (`prepare`: read, zero check, delta, bundle, compress), one thread per
//! TCP data stream seals and writes them (`tcp`), their pacing capped by
//! the sharing policy (`share`), or the UDP channel paces them (`udp`); the
//! control reader feeds acks and nacks back to the session, a planner cuts
//! answered files into chunks (`plan`), and the calling thread writes
//! control messages. The first error stops every
//! thread and is sent to the peer when it is ours.

pub(crate) mod bundle;
pub(crate) mod plan;
pub(crate) mod prepare;
pub(crate) mod read;
mod share;
pub use share::KnownLink;
pub(crate) mod tcp;
pub(crate) mod udp;

use std::net::Shutdown;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rate::TokenBucket;
use session::SenderSession;
use store::BlockSource;
use wire::{ErrorCode, Msg, Summary};

use connect::control_gap::ControlGap;
use connect::datagram::UdpLink;
use connect::error::TransferError;
use connect::framed::{FrameReader, FrameWriter};
use connect::progress::{Mark, Progress};

use crate::compress::Compression;
use crate::shared::{clones, Shared};
use prepare::{prepare_blocks, Buffers, Prepared};

/// How blocks travel: the TCP data connections, or the UDP channel.
pub enum SendPath {
    Tcp(Vec<FrameWriter>),
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
    /// The capacity, bytes per second, that the last transfer to this host
    /// measured at a similar round trip: the UDP channel starts there,
    /// with no startup (P-26). It wins over `start_rate`.
    pub known_rate: Option<u64>,
    /// A push with nothing to send but zeros, its manifest sent right
    /// behind the request (P-29): the server's welcome and its `Accept` of
    /// this session id, with no data connections, come first on control;
    /// a block that turns out not to be zeros fails the transfer.
    pub answer: Option<[u8; 16]>,
    /// What this path carried when last measured (a known path, either
    /// transport): the TCP streams' sharing (P-46).
    pub path: Option<KnownLink>,
    /// How the transfer shares the path (`--fair`, `--background`,
    /// P-46), over the UDP channel or the TCP streams.
    pub share: rate::Share,
}

impl Sending {
    /// The share policy a request's `share` code asks for (P-46).
    pub fn share_of(code: u8) -> rate::Share {
        match code {
            wire::SHARE_BACKGROUND => rate::Share::Background,
            wire::SHARE_OFF => rate::Share::Off,
            _ => rate::Share::Fair,
        }
    }

    /// A share policy's code in a request.
    pub fn share_code(share: rate::Share) -> u8 {
        match share {
            rate::Share::Fair => wire::SHARE_FAIR,
            rate::Share::Background => wire::SHARE_BACKGROUND,
            rate::Share::Off => wire::SHARE_OFF,
        }
    }
}

pub fn run_sender(
    ctrl_r: FrameReader,
    ctrl_w: FrameWriter,
    path: SendPath,
    session: SenderSession,
    sources: &dyn BlockSource,
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

/// The most a TCP data stream keeps written but not yet sent: a stream
/// takes its next block only once it is nearly through the last, so the
/// transfer's last blocks go to streams that are free rather than queue
/// behind a slow one's full send buffer (up to 4 MiB each by default, a
/// second or more at a sixteenth of a 1 Gbit/s path). 6 ms of a stream's
/// share of 10 Gbit/s over sixteen streams.
const STREAM_NOTSENT: usize = 512 << 10;

#[allow(clippy::too_many_arguments)]
fn run_sender_with(
    mut ctrl_r: FrameReader,
    ctrl_w: FrameWriter,
    data: Vec<FrameWriter>,
    udp: Option<UdpLink>,
    session: SenderSession,
    sources: &dyn BlockSource,
    how: Sending,
    progress: &Progress,
) -> Result<SenderReport, TransferError> {
    let sockets = clones(
        ctrl_r.get_ref(),
        data.iter().map(|w| w.get_ref().try_clone()),
    )?;
    for w in &data {
        connect::net::set_notsent_lowat(w.get_ref(), STREAM_NOTSENT);
    }
    let (rate, start_rate) = (how.rate, how.start_rate);
    let (known_rate, share, path) = (how.known_rate, how.share, how.path);
    let sh = Shared::new(session, ctrl_w, sockets, progress);
    // How this side compresses blocks: its policy learns from the
    // receiver's reports (P-30).
    let compression = Compression::new(how.compress).capped(how.rate);
    let compression = &compression;
    let bucket = rate.map(|r| Mutex::new(TokenBucket::new(r, (r / 50).max(256 << 10))));
    let (acks_tx, acks_rx) = mpsc::channel();
    let acks_tx = udp.is_some().then_some(acks_tx);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Prepared>(2 * workers);
    // One kept buffer a worker: what a worker reads into next.
    let buffers = Buffers::new(workers);
    let buffers = &buffers;
    // Held only by the threads that take from it: once the last has
    // ended, a worker waiting to queue a block is told at once (P-19).
    let ready_rx = Arc::new(Mutex::new(ready_rx));
    let mut ready_tx = Some(ready_tx);
    let answer = how.answer;
    // Blocks queued or being written: the last written marks every block
    // sent once (`tcp::Written`).
    let pending = &AtomicUsize::new(0);
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
                scope.spawn(move || {
                    prepare_blocks(sh, sources, compression, (buffers, pending), tx)
                });
            }
            drop(tx);
            let ready = ready_rx;
            if answer.is_some() {
                let (sh, ready) = (&sh, Arc::clone(&ready));
                scope.spawn(move || refuse_data(sh, sources, &ready));
            }
            if !data.is_empty() {
                let sh = &sh;
                scope.spawn(move || share::govern(sh, share, path));
            }
            for w in data {
                let (sh, bucket, ready) = (&sh, bucket.as_ref(), Arc::clone(&ready));
                let counts = (buffers, pending);
                scope.spawn(move || tcp::send_blocks(sh, w, &ready, bucket, counts));
            }
            drop(ready);
        }
        if let Some(link) = udp {
            let sh = &sh;
            scope.spawn(move || {
                let start = udp::Start {
                    cap: rate,
                    first: start_rate,
                    known: known_rate,
                    share,
                };
                udp::run(sh, link, sources, compression, start, acks_rx)
            });
        }
        scope.spawn(|| sender_control_reader(&sh, compression, &mut ctrl_r, acks_tx, answer));
        // Only a receiver that answers each file can ask for chunks.
        if sh.lock().is_gated() {
            scope.spawn(|| plan::planner(&sh, sources));
        }
        // This thread writes control messages, a gap apart (P-34).
        let mut gap = ControlGap::new();
        loop {
            if sh.stopped_from_outside() {
                break;
            }
            let msgs: Vec<Msg> = {
                let mut st = sh.lock();
                if !st.has_control() {
                    if sh.is_done() || sh.stopped() {
                        break;
                    }
                    drop(sh.wait(st, None));
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
    *progress.changed.lock().unwrap_or_else(|p| p.into_inner()) = std::mem::take(&mut st.changed);
    Progress::set(&progress.deleted_more, st.deleted_more);
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
    sources: &dyn BlockSource,
    ready: &Mutex<mpsc::Receiver<Prepared>>,
) {
    let got = ready.lock().unwrap_or_else(|p| p.into_inner()).recv();
    if let Ok((block, ..)) = got {
        let name = sources.name(block.file);
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
    compression: &Compression,
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
                    compression.record_decode(&msg);
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
                    sh.progress.timeline.mark(Mark::Finished);
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
