//! `haul serve --stdio` started as ssh would start it, with this process
//! playing the client's side of the ssh channel (P-27): it swaps greetings
//! with one-time keys on the child's standard input and output, then
//! connects a hostile [`Client`] to the port the greeting names.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use secure::{ssh_start_answer, Keypair, SessionKeys};
use wire::stdio::{Greeting, HsLine};
use wire::{ErrorCode, PROTOCOL_VERSION};

use crate::{Client, WAIT};
use connect::TransferError;

/// A running `haul serve --stdio`; it ends when this is dropped (its
/// standard input closes, then it is killed).
pub struct StdioServer {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The port its greeting named.
    pub port: u16,
    /// The one-time key the server admits: ours.
    pub identity: Keypair,
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl StdioServer {
    /// Starts `HAUL serve --stdio --listen 127.0.0.1:0 ARGS...` and swaps
    /// greetings with it.
    pub fn start(haul: &Path, args: &[&str]) -> Result<StdioServer, TransferError> {
        Ok(StdioServer::start_with(haul, args, false)?.0)
    }

    /// As [`StdioServer::start`], with the keyed start in the greetings
    /// (P-27): also the session keys they agreed.
    pub fn start_keyed(
        haul: &Path,
        args: &[&str],
    ) -> Result<(StdioServer, SessionKeys), TransferError> {
        let (server, keys) = StdioServer::start_with(haul, args, true)?;
        let keys = keys.ok_or_else(|| {
            TransferError::new(ErrorCode::Protocol, "the greeting answered no handshake")
        })?;
        Ok((server, keys))
    }

    fn start_with(
        haul: &Path,
        args: &[&str],
        keyed: bool,
    ) -> Result<(StdioServer, Option<SessionKeys>), TransferError> {
        let mut child = Command::new(haul)
            .args(["serve", "--stdio", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| TransferError::new(ErrorCode::Other, format!("cannot start: {e}")))?;
        let identity = Keypair::generate();
        let ours = Greeting {
            protocol: PROTOCOL_VERSION,
            release: "hostile".into(),
            key: identity.public.0,
            port: None,
            addr: None,
            udp: None,
            hs: None,
            keyed,
        };
        let mut stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let _ = stdin.write_all(ours.encode().as_bytes());
        let _ = stdin.flush();
        // Its greeting, read on a thread so that a silent child costs at
        // most WAIT.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
            // Keep reading (relay frames never come) until it ends.
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut r, &mut sink);
        });
        let line = rx.recv_timeout(WAIT).unwrap_or_default();
        let mut server = StdioServer {
            child,
            stdin: Some(stdin),
            port: 0,
            identity,
        };
        let theirs = Greeting::decode(line.trim_end()).map_err(|e| {
            TransferError::new(
                ErrorCode::Protocol,
                format!("no greeting from haul serve --stdio ({e}): {line:?}"),
            )
        })?;
        server.port = theirs.port.unwrap_or(0);
        let keys = match (keyed, theirs.hs.as_deref()) {
            (true, Some(m1)) => {
                let (m2, keys) = ssh_start_answer(PROTOCOL_VERSION, &theirs.key, m1)
                    .map_err(|e| TransferError::new(ErrorCode::Auth, e.to_string()))?;
                if let Some(stdin) = server.stdin.as_mut() {
                    let _ = stdin.write_all(HsLine(m2).encode().as_bytes());
                    let _ = stdin.flush();
                }
                Some(keys)
            }
            _ => None,
        };
        Ok((server, keys))
    }

    pub fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    /// A hostile client connected and authenticated with the one-time key.
    pub fn connect(&self, wish_udp: bool) -> Result<Client, TransferError> {
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        Client::connect(addr, &self.identity, wish_udp)
    }
}
