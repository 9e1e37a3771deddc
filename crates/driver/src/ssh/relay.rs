//! Carries a session's TCP connections through the ssh channel when the
//! hosts cannot connect directly (P-28). Each side turns local TCP
//! connections into numbered channels of relay frames on the ssh pipes:
//! the client accepts on a loopback port that the ordinary client dials,
//! and the remote side connects each channel to its own listener, so the
//! engine, handshake and sealing run unchanged over the relay.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use wire::stdio::{RelayHeader, RelayKind, MAX_RELAY_PAYLOAD, RELAY_HEADER_LEN};

/// Bytes read from a local connection per relay frame.
const CHUNK: usize = 64 << 10;

/// One side's end of the relay: the pipe it writes frames to and the local
/// connections of its channels.
pub struct Mux {
    out: Mutex<Option<Box<dyn Write + Send>>>,
    chans: Mutex<HashMap<u32, TcpStream>>,
}

impl Mux {
    pub fn new(out: Box<dyn Write + Send>) -> Arc<Mux> {
        Arc::new(Mux {
            out: Mutex::new(Some(out)),
            chans: Mutex::new(HashMap::new()),
        })
    }

    fn send(&self, kind: RelayKind, channel: u32, payload: &[u8]) -> io::Result<()> {
        let head = RelayHeader {
            kind,
            channel,
            len: payload.len() as u32,
        };
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let w = out
            .as_mut()
            .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "relay closed"))?;
        w.write_all(&head.encode())?;
        w.write_all(payload)?;
        w.flush()
    }

    /// Closes the pipe: the other side reads its end.
    pub fn close(&self) {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).take();
        for (_, s) in self.chans.lock().unwrap_or_else(|p| p.into_inner()).drain() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Adds a local connection as `channel`: its bytes go out as frames
    /// (on a thread of its own) and frames for it are written into it.
    fn attach(self: &Arc<Self>, channel: u32, stream: TcpStream) -> io::Result<()> {
        let reader = stream.try_clone()?;
        self.chans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(channel, stream);
        let mux = self.clone();
        std::thread::Builder::new()
            .name(format!("relay-{channel}"))
            .spawn(move || mux.forward(channel, reader))?;
        Ok(())
    }

    /// Local connection → pipe, until the connection ends.
    fn forward(&self, channel: u32, mut from: TcpStream) {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if self.send(RelayKind::Data, channel, &buf[..n]).is_err() {
                        let _ = from.shutdown(Shutdown::Both);
                        return;
                    }
                }
            }
        }
        let _ = self.send(RelayKind::Eof, channel, &[]);
    }

    fn channel(&self, channel: u32) -> Option<TcpStream> {
        self.chans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&channel)
            .and_then(|s| s.try_clone().ok())
    }

    /// Pipe → local connections, until the pipe ends (`Ok`) or carries
    /// something that is not a relay frame (`Err`). `open` makes the local
    /// connection for a channel the other side opened.
    pub fn pump(
        self: &Arc<Self>,
        mut input: impl Read,
        open: impl Fn(u32) -> io::Result<TcpStream>,
    ) -> io::Result<()> {
        let mut head = [0u8; RELAY_HEADER_LEN];
        let mut payload = vec![0u8; MAX_RELAY_PAYLOAD];
        loop {
            if !read_full_or_end(&mut input, &mut head)? {
                return Ok(());
            }
            let h = RelayHeader::decode(&head)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            match h.kind {
                RelayKind::Open => match open(h.channel).and_then(|s| self.attach(h.channel, s)) {
                    Ok(()) => {}
                    Err(e) => {
                        tracing::warn!("relay channel {}: cannot connect: {e}", h.channel);
                        self.send(RelayKind::Eof, h.channel, &[])?;
                    }
                },
                RelayKind::Data => {
                    let body = &mut payload[..h.len as usize];
                    input.read_exact(body)?;
                    if let Some(mut s) = self.channel(h.channel) {
                        if s.write_all(body).is_err() {
                            let _ = s.shutdown(Shutdown::Both);
                        }
                    }
                }
                RelayKind::Eof => {
                    if let Some(s) = self.channel(h.channel) {
                        let _ = s.shutdown(Shutdown::Write);
                    }
                }
            }
        }
    }
}

/// Fills `buf`, or returns `false` on a clean end before its first byte.
fn read_full_or_end(input: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// The client's end: a loopback port whose connections become channels.
pub struct ClientRelay {
    mux: Arc<Mux>,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl ClientRelay {
    /// Starts relaying over `to_remote` (ssh's stdin) and `from_remote`
    /// (ssh's stdout).
    pub fn start(
        to_remote: Box<dyn Write + Send>,
        from_remote: Box<dyn Read + Send>,
    ) -> io::Result<ClientRelay> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let mux = Mux::new(to_remote);
        let stop = Arc::new(AtomicBool::new(false));
        let (m, s) = (mux.clone(), stop.clone());
        std::thread::Builder::new()
            .name("relay-accept".into())
            .spawn(move || accept(listener, m, s))?;
        let m = mux.clone();
        std::thread::Builder::new()
            .name("relay-pump".into())
            .spawn(move || {
                let refuse = |_| -> io::Result<TcpStream> {
                    Err(io::Error::other("the remote side may not open channels"))
                };
                if let Err(e) = m.pump(from_remote, refuse) {
                    tracing::warn!("relay from the remote side ended: {e}");
                }
                m.close();
            })?;
        Ok(ClientRelay { mux, addr, stop })
    }

    /// Where the client connects to reach the remote server.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and closes the pipe to the remote side.
    pub fn close(&self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
        self.mux.close();
    }
}

fn accept(listener: TcpListener, mux: Arc<Mux>, stop: Arc<AtomicBool>) {
    let next = AtomicU32::new(1);
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(stream) = conn else { continue };
        let _ = stream.set_nodelay(true);
        let ch = next.fetch_add(1, Ordering::Relaxed);
        if mux.send(RelayKind::Open, ch, &[]).is_err() || mux.attach(ch, stream).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    /// Two muxes joined by socket pairs carry a connection both ways,
    /// including its end.
    #[test]
    fn relays_a_connection_both_ways() {
        let (c_out, s_in) = UnixStream::pair().unwrap();
        let (s_out, c_in) = UnixStream::pair().unwrap();
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = server.local_addr().unwrap();
        let remote = Mux::new(Box::new(s_out));
        std::thread::spawn(move || remote.pump(s_in, |_| TcpStream::connect(target)));
        let relay = ClientRelay::start(Box::new(c_out), Box::new(c_in)).unwrap();

        let mut c = TcpStream::connect(relay.addr()).unwrap();
        let (mut s, _) = server.accept().unwrap();
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7) as u8).collect();
        let d = data.clone();
        let writer = std::thread::spawn(move || {
            c.write_all(&d).unwrap();
            c.shutdown(Shutdown::Write).unwrap();
            let mut back = Vec::new();
            c.read_to_end(&mut back).unwrap();
            back
        });
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got, data);
        s.write_all(b"done").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        assert_eq!(writer.join().unwrap(), b"done");
        relay.close();
    }
}
