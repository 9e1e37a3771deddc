//! What every thread of one run shares, on either side: the session
//! behind its lock and condition variable, the first error, the stop and
//! done flags, the sockets to shut when the run ends, and the control
//! connection's writer. Nothing about blocks: each side's stages keep
//! their own state (the sender's compression, the receiver's sink and
//! bases) and are handed only what they use.

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use wire::{ErrorCode, Msg};

use connect::error::TransferError;
use connect::framed::{FrameError, FrameWriter};
use connect::progress::Progress;

/// How long a broken data stream waits for the peer's stated reason.
const REASON_WAIT: Duration = Duration::from_secs(2);
/// How long to wait for the peer to close after the transfer is complete.
const LINGER: Duration = Duration::from_secs(30);

pub(crate) struct Shared<'a, S> {
    /// The session and the condition variable its threads sleep on, each
    /// behind an `Arc` so that a wake-up can come from outside the run
    /// (a stop, another session's word): see [`Shared::waker`].
    pub(crate) state: Arc<Mutex<S>>,
    pub(crate) cv: Arc<Condvar>,
    error: Mutex<Option<TransferError>>,
    stop: AtomicBool,
    done: AtomicBool,
    pub(crate) sockets: Vec<TcpStream>,
    pub(crate) ctrl: Mutex<FrameWriter>,
    pub(crate) progress: &'a Progress,
}

impl<'a, S: Send + 'static> Shared<'a, S> {
    /// The run's shared state; a stop from outside it (a revoked key,
    /// issue 39) wakes its threads at once.
    pub(crate) fn new(
        state: S,
        ctrl: FrameWriter,
        sockets: Vec<TcpStream>,
        progress: &'a Progress,
    ) -> Self {
        let sh = Shared {
            state: Arc::new(Mutex::new(state)),
            cv: Arc::new(Condvar::new()),
            error: Mutex::new(None),
            stop: AtomicBool::new(false),
            done: AtomicBool::new(false),
            sockets,
            ctrl: Mutex::new(ctrl),
            progress,
        };
        progress.control.on_stop(Box::new(sh.waker()));
        sh
    }

    /// Wakes every thread asleep on the session, from anywhere, for as
    /// long as the run lasts: it takes the lock first, so a thread that
    /// looked and is about to sleep hears it.
    pub(crate) fn waker(&self) -> impl Fn() + Send + Sync + 'static {
        let (state, cv): (Weak<Mutex<S>>, Weak<Condvar>) =
            (Arc::downgrade(&self.state), Arc::downgrade(&self.cv));
        move || {
            if let (Some(state), Some(cv)) = (state.upgrade(), cv.upgrade()) {
                drop(state.lock().unwrap_or_else(|p| p.into_inner()));
                cv.notify_all();
            }
        }
    }
}

impl<'a, S> Shared<'a, S> {
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
                message: self.progress.control.shown(&e.message),
            });
        }
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.wake_all();
    }

    /// Wakes every thread waiting on the session after a flag changed.
    /// The lock is taken first: a thread that read the flags under it and
    /// is about to wait then waits before the wake-up, not after it.
    fn wake_all(&self) {
        drop(self.lock());
        self.cv.notify_all();
    }

    /// Sleeps, the session locked as `st`, until something changes (a
    /// message handled, a block read or placed, the run stopping or
    /// ending) or until `deadline`, the one its caller's core named; with
    /// none, only a change wakes it. Returns at once if the run stopped,
    /// ended, or was told to stop from outside.
    pub(crate) fn wait<'g>(
        &self,
        st: MutexGuard<'g, S>,
        deadline: Option<Instant>,
    ) -> MutexGuard<'g, S> {
        if self.stopped() || self.is_done() || self.progress.control.stopped().is_some() {
            return st;
        }
        match deadline {
            None => self.cv.wait(st).unwrap_or_else(|p| p.into_inner()),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                match self.cv.wait_timeout(st, left) {
                    Ok((g, _)) => g,
                    Err(p) => p.into_inner().0,
                }
            }
        }
    }

    /// Whether the side running this session stopped it (a revoked key,
    /// issue 39); if so, the run fails with its reason, told to the peer.
    pub(crate) fn stopped_from_outside(&self) -> bool {
        match self.progress.control.stopped() {
            Some(e) => {
                self.fail(e, true);
                true
            }
            None => false,
        }
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
    pub(crate) fn control_ended(&self, err: Option<FrameError>) {
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

    pub(crate) fn finish(&self) {
        self.done.store(true, Ordering::Release);
        self.wake_all();
    }

    pub(crate) fn take_error(&self) -> Option<TransferError> {
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

    pub(crate) fn linger(&self) {
        for s in &self.sockets {
            let _ = s.set_read_timeout(Some(LINGER));
        }
    }
}

pub(crate) fn clones(
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
