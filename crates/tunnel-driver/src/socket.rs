//! One tunnelled connection's local socket (P-37): a thread reads it into
//! the mux, another writes what the mux received for it. End of file
//! travels as a half close both ways; a reset closes the socket at once.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;

use tunnel::{Ended, Read as MuxRead};

use crate::shared::Shared;

/// Bytes read from a local socket at once.
const READ_CHUNK: usize = 64 << 10;
/// Most bytes taken from the mux for one write to a local socket.
const WRITE_CHUNK: usize = 256 << 10;

/// Starts moving bytes between `stream` and connection `id` of the mux.
pub(crate) fn pump(shared: &Arc<Shared>, id: u32, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let reader = match stream.try_clone() {
        Ok(r) => r,
        Err(e) => {
            shared
                .lock()
                .reset(id, &format!("cannot use the socket: {e}"));
            shared.cv.notify_all();
            return;
        }
    };
    let s = shared.clone();
    spawn(format!("tun{id}-in"), move || from_socket(&s, id, reader));
    let s = shared.clone();
    spawn(format!("tun{id}-out"), move || to_socket(&s, id, stream));
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) {
    // A thread that cannot start leaves the connection to its peer's
    // timeout; the session goes on.
    if let Err(e) = std::thread::Builder::new().name(name).spawn(f) {
        tracing::warn!("cannot start a tunnel thread: {e}");
    }
}

/// The local socket's bytes, into the mux until end of file or a reset.
fn from_socket(shared: &Shared, id: u32, mut s: TcpStream) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) => {
                shared.lock().shutdown(id);
                shared.cv.notify_all();
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                shared
                    .lock()
                    .reset(id, &format!("the connection failed: {e}"));
                shared.cv.notify_all();
                return;
            }
        };
        let mut off = 0;
        let mut mux = shared.lock();
        while off < n {
            match mux.write(id, &buf[off..n]) {
                Ok(0) if shared.stopped() => return,
                Ok(0) => mux = shared.wait(mux),
                Ok(k) => {
                    off += k;
                    shared.cv.notify_all();
                }
                Err(Ended::Reset(_) | Ended::Gone) => return,
            }
        }
    }
}

/// What the mux received for the connection, onto the local socket.
fn to_socket(shared: &Shared, id: u32, mut s: TcpStream) {
    loop {
        let got = {
            let mut mux = shared.lock();
            loop {
                match mux.read(id, WRITE_CHUNK) {
                    MuxRead::Wait if !shared.stopped() => mux = shared.wait(mux),
                    MuxRead::Wait => break MuxRead::Reset("the tunnel stopped".into()),
                    other => break other,
                }
            }
        };
        match got {
            MuxRead::Data(d) => {
                // Credit may be owed to the peer now.
                shared.cv.notify_all();
                if let Err(e) = s.write_all(&d) {
                    shared
                        .lock()
                        .reset(id, &format!("the connection failed: {e}"));
                    shared.cv.notify_all();
                    abort(&s);
                    return;
                }
            }
            MuxRead::Eof => {
                let _ = s.shutdown(Shutdown::Write);
                shared.cv.notify_all();
                return;
            }
            MuxRead::Reset(why) => {
                tracing::debug!("tunnel connection {id} reset: {why}");
                abort(&s);
                shared.cv.notify_all();
                return;
            }
            MuxRead::Gone | MuxRead::Wait => return,
        }
    }
}

/// Closes the socket with a reset, not a clean end, once both threads let
/// go of it: the application must not take a cut stream for a complete
/// one. Shutting the read side wakes the reading thread without a FIN.
pub(crate) fn abort(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_linger(Some(std::time::Duration::ZERO));
    let _ = s.shutdown(Shutdown::Read);
}
