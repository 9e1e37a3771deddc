//! The mux of one tunnel session and what its threads share: one lock,
//! one condition variable, the first error, and the sockets to shut when
//! the session ends.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use connect::error::TransferError;
use connect::framed::FrameWriter;
use connect::progress::Progress;
use tunnel::{Mux, Role};

use crate::coding::Coding;
use crate::options::Options;

/// The mux of one session and what its threads share.
pub(crate) struct Shared {
    pub(crate) mux: Mutex<Mux>,
    pub(crate) cv: Condvar,
    pub(crate) stop: AtomicBool,
    pub(crate) error: Mutex<Option<TransferError>>,
    pub(crate) progress: Arc<Progress>,
    /// The lanes' sockets, shut when the session ends so that no thread
    /// stays blocked on a silent peer.
    pub(crate) lanes: Mutex<Vec<TcpStream>>,
    pub(crate) coding: Coding,
    /// The control connection's writer, held open while the session runs:
    /// closing it would end the session at the peer. It carries only the
    /// `Error` of a session this side ends.
    pub(crate) ctrl: Mutex<Option<FrameWriter>>,
    /// Lane writers holding frames taken from the mux, not yet written.
    pub(crate) writing: std::sync::atomic::AtomicUsize,
}

/// How long a session this side ends waits for its lanes to carry the
/// connections' resets, with their reason, before it shuts them.
const RESET_GRACE: Duration = Duration::from_millis(500);

impl Shared {
    pub(crate) fn new(role: Role, opts: Options, progress: Arc<Progress>) -> Arc<Shared> {
        Arc::new(Shared {
            mux: Mutex::new(Mux::new(role, opts.mux)),
            coding: Coding::new(opts.cache, opts.compress),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            error: Mutex::new(None),
            progress,
            lanes: Mutex::new(Vec::new()),
            ctrl: Mutex::new(None),
            writing: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Mux> {
        self.mux.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a change, at most a while (so stop flags are seen).
    pub(crate) fn wait<'a>(&self, g: MutexGuard<'a, Mux>) -> MutexGuard<'a, Mux> {
        self.cv
            .wait_timeout(g, Duration::from_millis(200))
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0)
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Ends the session: the first error is kept, every connection reset,
    /// every thread woken.
    pub(crate) fn fail(&self, e: TransferError) {
        self.end(e, false);
    }

    /// Ends the session for what this side found wrong with the peer's
    /// frames (P-37, P-39): the peer is told, with an `Error` on control
    /// and, as far as the lanes still carry them, every connection's reset
    /// with the reason.
    pub(crate) fn fail_ours(&self, e: TransferError) {
        self.end(e, true);
    }

    pub(crate) fn end(&self, e: TransferError, tell: bool) {
        let first = {
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            let first = slot.is_none();
            if first {
                *slot = Some(e.clone());
            }
            first
        };
        let tell = tell && first;
        if tell {
            if let Some(w) = self.ctrl.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                let _ = w.send_msg(&wire::Msg::Error {
                    code: e.code,
                    message: e.message.clone(),
                });
            }
        }
        // Stopped only once the resets are queued, under the mux's lock: a
        // lane's writer stops when it finds the session stopped and
        // nothing to send.
        let mut mux = self.lock();
        mux.reset_all(&format!("the tunnel session ended: {}", e.message));
        self.stop.store(true, Ordering::Release);
        self.cv.notify_all();
        self.coding.wake();
        // The lanes' writers go on while the mux has frames, resets
        // included; a while only, for a peer that reads nothing.
        let until = std::time::Instant::now() + RESET_GRACE;
        while tell
            && (mux.has_output() || self.writing.load(Ordering::Acquire) > 0)
            && std::time::Instant::now() < until
        {
            mux = self.wait(mux);
        }
        drop(mux);
        for s in self.lanes.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    pub(crate) fn take_error(&self) -> Option<TransferError> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}
