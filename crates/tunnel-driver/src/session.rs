//! A running tunnel session as its owner sees it: started over its
//! lanes, given local connections to carry, watched on its control
//! connection, waited for.

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use connect::error::TransferError;
use connect::framed::{FrameReader, FrameWriter};
use connect::join::DataConn;
use connect::progress::Progress;
use tunnel::{Role, Stats};
use wire::ErrorCode;

use crate::options::Options;
use crate::shared::Shared;
use crate::{lanes, socket};

/// A running tunnel session, as its owner sees it.
pub struct Session {
    pub(crate) shared: Arc<Shared>,
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
