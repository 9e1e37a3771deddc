//! Where the data of a session keyed in the ssh greetings goes (P-27):
//! directly to the remote side if the direct check started with the
//! session answered, else through the ssh channel's relay.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Where a keyed session's data goes.
pub struct SshRoute {
    /// The remote side's address for direct data connections and its UDP
    /// channel, as its greeting named it.
    pub direct: SocketAddr,
    /// The direct TCP connection tried when the session started: the
    /// address that answered and the connection, or why none did.
    pub check: Option<JoinHandle<Result<(SocketAddr, TcpStream), String>>>,
    /// That connection, once settled: the first data stream of a session
    /// on TCP streams, so one of them need not dial.
    pub(super) spare: Option<TcpStream>,
    /// The relay's loopback address, for data when no direct connection
    /// answered.
    pub relay: SocketAddr,
    /// Set when the data goes through the relay (the route reported).
    pub relayed: Arc<AtomicBool>,
}

impl SshRoute {
    pub fn new(
        direct: SocketAddr,
        check: JoinHandle<Result<(SocketAddr, TcpStream), String>>,
        relay: SocketAddr,
        relayed: Arc<AtomicBool>,
    ) -> SshRoute {
        SshRoute {
            direct,
            check: Some(check),
            spare: None,
            relay,
            relayed,
        }
    }

    /// Waits for the direct check, once: where data connections go, and
    /// why not directly if they cannot.
    pub(super) fn settle(&mut self) -> Result<SocketAddr, String> {
        let Some(check) = self.check.take() else {
            return if self.relayed.load(Ordering::Relaxed) {
                Err("no direct connection answered".into())
            } else {
                Ok(self.direct)
            };
        };
        let answered = check
            .join()
            .unwrap_or_else(|_| Err("the direct connection's thread failed".into()));
        match answered {
            Ok((a, conn)) => {
                self.direct = a;
                self.spare = Some(conn);
                Ok(a)
            }
            Err(why) => {
                self.relayed.store(true, Ordering::Relaxed);
                Err(why)
            }
        }
    }
}
