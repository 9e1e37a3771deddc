//! `haul tunnel`'s driver (P-37): the sockets and threads around the
//! sans-IO multiplexer of the `tunnel` crate.
//!
//! It owns the local sockets a tunnel carries, the lanes (the session's
//! data connections) and the coding of lane frames (byte cache and
//! compression). It must not set up the session (the client and server of
//! `endpoint` hand it connected lanes) nor decide what the mux does (that
//! is the `tunnel` crate's, which has no I/O).
//!
//! A tunnel session's data connections are its lanes. Every lane has a
//! writer thread that takes the next frames from the mux (so one busy
//! connection's frames spread over all lanes, and a long path is filled by
//! several TCP windows at once) and a reader thread that hands received
//! frames to it. Every tunnelled connection has two threads: one reads its
//! socket into the mux, one writes what the mux has for it. All of them
//! share one lock and one condition variable; none holds the lock while it
//! does I/O.

mod coding;
mod lanes;
mod serve;
mod socket;

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tunnel::{Mux, MuxConfig, Role, Stats};

use wire::ErrorCode;

use connect::error::TransferError;
use connect::framed::{FrameReader, FrameWriter};
use connect::join::DataConn;
use connect::progress::Progress;

pub use coding::HISTORY_WINDOW;
pub use serve::{serve, TunnelTargets};

/// How a tunnel codes its data (P-37): the byte cache, and compression.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub mux: MuxConfig,
    /// Send content seen before as copies of the history.
    pub cache: bool,
    pub compress: codec::Mode,
}

/// How the server's connect to the target may take.
pub const TARGET_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest frame a lane carries (P-37, P-39).
pub const LANE_FRAME_MAX: u32 = 1 << 20;

/// The most a tunnel peer can make this side hold, lanes aside (P-39): the
/// receive credit of all its connections ([`tunnel::CREDIT_BUDGET`]) and
/// the byte cache, what copies may still name and what arrived ahead of a
/// missing position ([`tunnel::history::MAX_AHEAD`]). 544 MiB.
pub const SESSION_HELD: u64 =
    tunnel::CREDIT_BUDGET + HISTORY_WINDOW / 2 + tunnel::history::MAX_AHEAD;

/// The receive window of each tunnelled connection: four times the path's
/// bandwidth-delay product at 1 Gbit/s, between 1 and 128 MiB (P-37). One
/// connection's frames cross on several lanes and are delivered in order,
/// so a lane repairing a loss holds up the others' frames for a round trip
/// or more; the window must cover that as well as the path (twice the BDP
/// carried 507 Mbit/s of one flow at 150 ms and 0.1% loss, four times
/// 555-632).
pub fn window_for(rtt: Duration) -> u64 {
    let bdp = 125_000_000.0 * rtt.as_secs_f64();
    ((4.0 * bdp) as u64).clamp(1 << 20, 128 << 20)
}

/// The mux of one session and what its threads share.
pub(crate) struct Shared {
    mux: Mutex<Mux>,
    cv: Condvar,
    stop: AtomicBool,
    error: Mutex<Option<TransferError>>,
    progress: Arc<Progress>,
    /// The lanes' sockets, shut when the session ends so that no thread
    /// stays blocked on a silent peer.
    lanes: Mutex<Vec<TcpStream>>,
    coding: coding::Coding,
    /// The control connection's writer, held open while the session runs:
    /// closing it would end the session at the peer. It carries only the
    /// `Error` of a session this side ends.
    ctrl: Mutex<Option<FrameWriter>>,
    /// Lane writers holding frames taken from the mux, not yet written.
    writing: std::sync::atomic::AtomicUsize,
}

/// How long a session this side ends waits for its lanes to carry the
/// connections' resets, with their reason, before it shuts them.
const RESET_GRACE: Duration = Duration::from_millis(500);

impl Shared {
    fn new(role: Role, opts: Options, progress: Arc<Progress>) -> Arc<Shared> {
        Arc::new(Shared {
            mux: Mutex::new(Mux::new(role, opts.mux)),
            coding: coding::Coding::new(opts.cache, opts.compress),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            error: Mutex::new(None),
            progress,
            lanes: Mutex::new(Vec::new()),
            ctrl: Mutex::new(None),
            writing: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Mux> {
        self.mux.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a change, at most a while (so stop flags are seen).
    fn wait<'a>(&self, g: MutexGuard<'a, Mux>) -> MutexGuard<'a, Mux> {
        self.cv
            .wait_timeout(g, Duration::from_millis(200))
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Ends the session: the first error is kept, every connection reset,
    /// every thread woken.
    fn fail(&self, e: TransferError) {
        self.end(e, false);
    }

    /// Ends the session for what this side found wrong with the peer's
    /// frames (P-37, P-39): the peer is told, with an `Error` on control
    /// and, as far as the lanes still carry them, every connection's reset
    /// with the reason.
    fn fail_ours(&self, e: TransferError) {
        self.end(e, true);
    }

    fn end(&self, e: TransferError, tell: bool) {
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

    fn take_error(&self) -> Option<TransferError> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// A running tunnel session, as its owner sees it.
pub struct Session {
    shared: Arc<Shared>,
    lanes: Mutex<Vec<std::thread::JoinHandle<()>>>,
    count: usize,
}

impl Session {
    /// Starts the lanes' threads.
    pub fn start(
        role: Role,
        opts: Options,
        conns: Vec<DataConn>,
        progress: Arc<Progress>,
    ) -> Session {
        let shared = Shared::new(role, opts, progress);
        let count = conns.len();
        let lanes = Mutex::new(lanes::start(&shared, conns));
        Session {
            shared,
            lanes,
            count,
        }
    }

    /// Carries `stream`, a local connection just accepted, through the
    /// tunnel (client side). Fails when too many are open, closing the
    /// connection with a reset.
    pub fn carry(&self, stream: TcpStream) -> Result<u32, TransferError> {
        let opened = self.shared.lock().open();
        let id = match opened {
            Ok(id) => id,
            Err(e) => {
                socket::abort(&stream);
                return Err(TransferError::new(ErrorCode::Busy, e.to_string()));
            }
        };
        self.shared.cv.notify_all();
        socket::pump(&self.shared, id, stream);
        Ok(id)
    }

    /// How many lanes (data connections) carry the session.
    pub fn lanes(&self) -> usize {
        self.count
    }

    pub fn stats(&self) -> Stats {
        self.shared.lock().stats()
    }

    /// Bytes the byte cache and compression kept off the wire, both
    /// directions.
    pub fn saved(&self) -> (u64, u64) {
        let c = &self.shared.coding;
        (
            c.saved_cache.load(Ordering::Relaxed),
            c.saved_compress.load(Ordering::Relaxed),
        )
    }

    /// Whether the session still runs.
    pub fn running(&self) -> bool {
        !self.shared.stopped()
    }

    /// Waits until the session ends; its error, if it failed.
    pub fn wait(&self) -> Result<(), TransferError> {
        let handles = std::mem::take(&mut *self.lanes.lock().unwrap_or_else(|p| p.into_inner()));
        for h in handles {
            let _ = h.join();
        }
        self.shared.take_error().map_or(Ok(()), Err)
    }

    /// Ends the session when the peer reports an error on the control
    /// connection or closes it.
    pub fn watch(&self, ctrl_r: FrameReader, ctrl_w: FrameWriter) {
        watch_control(&self.shared, ctrl_r, ctrl_w);
    }
}

/// Watches the control connection of a tunnel session: an `Error` from
/// the peer, or its close, ends the session.
fn watch_control(shared: &Arc<Shared>, mut ctrl_r: FrameReader, ctrl_w: FrameWriter) {
    *shared.ctrl.lock().unwrap_or_else(|p| p.into_inner()) = Some(ctrl_w);
    let shared = shared.clone();
    std::thread::spawn(move || {
        let e = match ctrl_r.read_msg() {
            Ok(Some(wire::Msg::Error { code, message })) => {
                TransferError::new(code, format!("peer: {message}"))
            }
            Ok(None) => TransferError::new(ErrorCode::ConnectionLost, "the peer closed the tunnel"),
            Ok(Some(_)) => TransferError::new(
                ErrorCode::Protocol,
                "unexpected control message in a tunnel session",
            ),
            Err(e) => e.into_transfer("watching the tunnel's control connection"),
        };
        shared.fail(e);
    });
}
