//! The receiving side of a run (P-19): one thread per TCP data stream
//! (`tcp`) or the UDP channel (`udp`) opens blocks, decodes them
//! (`decode`: delta, bundle, decompression) and places them (`place`:
//! checked against their hash, written, journaled); the control reader
//! carries out manifest actions; an answerer decides, file by file, what
//! a gated session still needs (`answer`); a finalizer syncs and renames
//! verified files in batches; the chunk cache is fed what was placed
//! (`cache`); the calling thread writes acks and the final `Done`.

pub(crate) mod answer;
pub(crate) mod bases;
pub(crate) mod cache;
pub(crate) mod decode;
pub(crate) mod delete;
pub(crate) mod place;
pub(crate) mod tcp;
pub(crate) mod udp;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use session::ReceiverSession;
use store::BlockSink;
use wire::{Msg, Summary};

use connect::control_gap::ControlGap;
use connect::datagram::UdpLink;
use connect::error::TransferError;
use connect::framed::{FrameReader, FrameWriter};
use connect::progress::{Mark, Progress};

use crate::options::ReceiveOptions;
use crate::shared::{clones, Shared};
use bases::Bases;
use place::Receiving;

pub enum RecvPath {
    Tcp(Vec<FrameReader>),
    Udp(Box<UdpLink>),
}

/// Runs the receiving side until every file is placed and the sender is told.
pub fn run_receiver(
    mut ctrl_r: FrameReader,
    ctrl_w: FrameWriter,
    path: RecvPath,
    session: ReceiverSession,
    sink: &dyn BlockSink,
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
    // `--delete` into a store that cannot delete is refused before
    // anything arrives, not after every file is placed.
    if opts.sync.delete && !sink.capabilities().delete {
        let e = TransferError::from(store::unsupported(
            "delete what the source lacks (--delete)",
        ));
        let mut w = ctrl_w;
        let _ = w.send_msg(&Msg::Error {
            code: e.code,
            message: progress.control.shown(&e.message),
        });
        return Err(e);
    }
    let sh = Shared::new(session, ctrl_w, sockets, progress);
    let (fin_tx, fin_rx) = mpsc::channel::<Option<store::Verified>>();
    let (block_size, gated) = {
        let st = sh.lock();
        (st.block_size(), st.is_gated())
    };
    let (q_tx, q_rx) = mpsc::channel();
    let (cache_tx, cache_rx) = mpsc::channel();
    // Another session wants a partial this one holds: a word to the peer
    // at once shows whether it is still there (P-41).
    let poked = std::sync::Arc::new(AtomicBool::new(false));
    let (flag, wake) = (poked.clone(), sh.waker());
    sink.on_contention(std::sync::Arc::new(move || {
        flag.store(true, Ordering::Release);
        wake();
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
            scope.spawn(move || udp::run(rx, *link));
        }
        scope.spawn(move || rx.control_reader(&mut ctrl_r));
        scope.spawn(move || rx.finalizer(fin_rx));
        // This thread writes acks, nacks, file confirmations and `Done`,
        // and tells the sender how fast this side decompresses.
        // Writes are a gap apart (P-34), except the last.
        let mut meter = crate::compress::DecodeMeter::default();
        let mut gap = ControlGap::new();
        loop {
            if sh.stopped_from_outside() {
                break;
            }
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
                    drop(sh.wait(st, meter.due(sh.progress)));
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
        rx.end_queues();
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
    progress.timeline.mark(Mark::Finished);
    Ok(summary)
}

impl Receiving<'_, '_> {
    pub(crate) fn control_reader(&self, r: &mut FrameReader) {
        loop {
            match r.read_msg() {
                Ok(Some(msg)) => {
                    if self.sh.is_done() {
                        continue;
                    }
                    if let Msg::Zeros(list) = &msg {
                        match self.place_zeros(list) {
                            Ok(true) => continue,
                            Ok(false) => return,
                            Err(e) => return self.sh.fail(e, true),
                        }
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

    pub(crate) fn finalizer(&self, rx: mpsc::Receiver<Option<store::Verified>>) {
        while let Ok(Some(first)) = rx.recv() {
            if self.sh.is_done() || self.sh.stopped() {
                return;
            }
            let mut batch = vec![first];
            let mut ended = false;
            while batch.len() < 1024 {
                match rx.try_recv() {
                    Ok(Some(f)) => batch.push(f),
                    Ok(None) => {
                        ended = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            if let Err(e) = self.sink.finalize(&batch) {
                self.sh.fail(e.into(), true);
                return;
            }
            let actions = {
                let mut st = self.sh.lock();
                for v in &batch {
                    st.placed(v.id);
                    self.bases.close(v.id);
                    if let (Some(tx), Some(rel)) = (&self.placed, st.path_of(v.id)) {
                        self.caching.fetch_add(1, Ordering::SeqCst);
                        let _ = tx.send(Some(rel.to_vec()));
                    }
                }
                self.report(&st);
                Self::drain(&mut st)
            };
            if let Err(e) = self.execute(actions) {
                self.sh.fail(e, true);
                return;
            }
            if ended {
                return;
            }
        }
    }
}
