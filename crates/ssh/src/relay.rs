//! Carries a session's TCP connections through the ssh channel when the
//! hosts cannot connect directly (P-28). Each side turns local TCP
//! connections into numbered channels of relay frames on the ssh pipes:
//! the client accepts on a loopback port that the ordinary client dials,
//! and the remote side connects each channel to its own listener, so the
//! engine, handshake and sealing run unchanged over the relay.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use wire::stdio::{RelayHeader, RelayKind, RELAY_HEADER_LEN};

/// Bytes read from a local connection per relay frame.
const CHUNK: usize = 64 << 10;
/// Bytes of a channel that may be on their way or queued at the other
/// side before it grants more (P-28): enough for ssh's own window at long
/// round trips, small enough that a stalled connection holds little.
pub const CHANNEL_WINDOW: u64 = 16 << 20;
/// How often waiting threads look again at whether the relay closed.
const POLL: Duration = Duration::from_millis(200);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What arrived for a channel and is not yet written into its connection.
#[derive(Default)]
struct Inbox {
    queue: VecDeque<Vec<u8>>,
    eof: bool,
}

/// One relayed connection.
struct Channel {
    /// Bytes this side may still send (granted by the other side).
    credit: Mutex<u64>,
    credit_cv: Condvar,
    inbox: Mutex<Inbox>,
    inbox_cv: Condvar,
    closed: AtomicBool,
}

impl Channel {
    fn new() -> Arc<Channel> {
        Arc::new(Channel {
            credit: Mutex::new(CHANNEL_WINDOW),
            credit_cv: Condvar::new(),
            inbox: Mutex::new(Inbox::default()),
            inbox_cv: Condvar::new(),
            closed: AtomicBool::new(false),
        })
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.credit_cv.notify_all();
        self.inbox_cv.notify_all();
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// One side's end of the relay: the pipe it writes frames to and the local
/// connections of its channels. Frames from the pipe are only queued, never
/// written to a connection by the pipe's reader, and each channel may have
/// at most [`CHANNEL_WINDOW`] bytes queued: a connection whose reader
/// stalls (a receiver waiting for a manifest entry on another channel)
/// holds up nothing else.
pub struct Mux {
    out: Mutex<Option<Box<dyn Write + Send>>>,
    chans: Mutex<HashMap<u32, Arc<Channel>>>,
}

impl Mux {
    pub fn new(out: Box<dyn Write + Send>) -> Arc<Mux> {
        Arc::new(Mux {
            out: Mutex::new(Some(out)),
            chans: Mutex::new(HashMap::new()),
        })
    }

    fn send(&self, kind: RelayKind, channel: u32, len: u32, payload: &[u8]) -> io::Result<()> {
        let head = RelayHeader { kind, channel, len };
        let mut out = lock(&self.out);
        let w = out
            .as_mut()
            .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "relay closed"))?;
        w.write_all(&head.encode())?;
        w.write_all(payload)?;
        w.flush()
    }

    /// Closes the pipe (the other side reads its end) and every channel.
    pub fn close(&self) {
        lock(&self.out).take();
        for (_, c) in lock(&self.chans).drain() {
            c.close();
        }
    }

    /// Registers `channel`, so that frames for it are queued from now on.
    fn register(&self, channel: u32) -> Arc<Channel> {
        let chan = Channel::new();
        lock(&self.chans).insert(channel, chan.clone());
        chan
    }

    /// Adds a local connection as `channel`: its bytes go out as frames
    /// (as far as the other side grants), and frames for it are written
    /// into it, each on a thread of its own.
    fn attach(self: &Arc<Self>, channel: u32, stream: TcpStream) -> io::Result<()> {
        let chan = self
            .channel(channel)
            .unwrap_or_else(|| self.register(channel));
        let reader = stream.try_clone()?;
        let (mux, c) = (self.clone(), chan.clone());
        std::thread::Builder::new()
            .name(format!("relay-out-{channel}"))
            .spawn(move || mux.forward(channel, &c, reader))?;
        let mux = self.clone();
        std::thread::Builder::new()
            .name(format!("relay-in-{channel}"))
            .spawn(move || mux.deliver(channel, &chan, stream))?;
        Ok(())
    }

    /// Local connection → pipe, within the credit granted, until the
    /// connection ends.
    fn forward(&self, channel: u32, chan: &Channel, mut from: TcpStream) {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let allowed = {
                let mut credit = lock(&chan.credit);
                while *credit == 0 && !chan.is_closed() {
                    credit = chan
                        .credit_cv
                        .wait_timeout(credit, POLL)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                if chan.is_closed() {
                    let _ = from.shutdown(Shutdown::Both);
                    return;
                }
                (*credit).min(CHUNK as u64) as usize
            };
            match from.read(&mut buf[..allowed]) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    *lock(&chan.credit) -= n as u64;
                    if self
                        .send(RelayKind::Data, channel, n as u32, &buf[..n])
                        .is_err()
                    {
                        let _ = from.shutdown(Shutdown::Both);
                        return;
                    }
                }
            }
        }
        let _ = self.send(RelayKind::Eof, channel, 0, &[]);
    }

    /// Queued frames → local connection; each write grants the other side
    /// as many bytes again.
    fn deliver(&self, channel: u32, chan: &Channel, mut to: TcpStream) {
        loop {
            let next = {
                let mut inbox = lock(&chan.inbox);
                loop {
                    if let Some(b) = inbox.queue.pop_front() {
                        break Some(b);
                    }
                    if inbox.eof || chan.is_closed() {
                        break None;
                    }
                    inbox = chan
                        .inbox_cv
                        .wait_timeout(inbox, POLL)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            };
            let Some(bytes) = next else {
                let _ = to.shutdown(Shutdown::Write);
                return;
            };
            if to.write_all(&bytes).is_err() {
                // The connection is gone; the rest of the channel is
                // dropped, and still credited so the sender is not held.
                let _ = to.shutdown(Shutdown::Both);
            }
            if self
                .send(RelayKind::Credit, channel, bytes.len() as u32, &[])
                .is_err()
            {
                return;
            }
        }
    }

    fn channel(&self, channel: u32) -> Option<Arc<Channel>> {
        lock(&self.chans).get(&channel).cloned()
    }

    /// Pipe → channels, until the pipe ends (`Ok`) or carries something
    /// that is not a relay frame (`Err`). `open` makes the local
    /// connection for a channel the other side opened. Never blocks on a
    /// local connection.
    pub fn pump(
        self: &Arc<Self>,
        mut input: impl Read,
        open: impl Fn(u32) -> io::Result<TcpStream>,
    ) -> io::Result<()> {
        let mut head = [0u8; RELAY_HEADER_LEN];
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
                        self.send(RelayKind::Eof, h.channel, 0, &[])?;
                    }
                },
                RelayKind::Data => {
                    let mut body = vec![0u8; h.len as usize];
                    input.read_exact(&mut body)?;
                    if let Some(c) = self.channel(h.channel) {
                        let mut inbox = lock(&c.inbox);
                        let queued: usize = inbox.queue.iter().map(Vec::len).sum();
                        if (queued + body.len()) as u64 > CHANNEL_WINDOW {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!("relay channel {} sent beyond its window", h.channel),
                            ));
                        }
                        inbox.queue.push_back(body);
                        c.inbox_cv.notify_all();
                    }
                }
                RelayKind::Eof => {
                    if let Some(c) = self.channel(h.channel) {
                        lock(&c.inbox).eof = true;
                        c.inbox_cv.notify_all();
                    }
                }
                RelayKind::Credit => {
                    if let Some(c) = self.channel(h.channel) {
                        let mut credit = lock(&c.credit);
                        *credit = credit.saturating_add(h.len as u64).min(CHANNEL_WINDOW);
                        c.credit_cv.notify_all();
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
        // Registered before the other side hears of it, started after: no
        // frame of the channel can come before its Open, or find it missing.
        mux.register(ch);
        if mux.send(RelayKind::Open, ch, 0, &[]).is_err() || mux.attach(ch, stream).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    /// A client relay and a remote mux joined by socket pairs, the remote
    /// side connecting its channels to the returned listener.
    fn joined() -> (ClientRelay, TcpListener) {
        let (c_out, s_in) = UnixStream::pair().unwrap();
        let (s_out, c_in) = UnixStream::pair().unwrap();
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = server.local_addr().unwrap();
        let remote = Mux::new(Box::new(s_out));
        std::thread::spawn(move || remote.pump(s_in, |_| TcpStream::connect(target)));
        let relay = ClientRelay::start(Box::new(c_out), Box::new(c_in)).unwrap();
        (relay, server)
    }

    /// Two muxes joined by socket pairs carry a connection both ways,
    /// including its end.
    #[test]
    fn relays_a_connection_both_ways() {
        let (relay, server) = joined();

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

    /// A connection whose reader stalls holds up no other: a receiver
    /// waiting for a manifest entry must still get the control connection.
    #[test]
    fn a_stalled_connection_does_not_block_the_others() {
        let (relay, server) = joined();

        let mut stalled = TcpStream::connect(relay.addr()).unwrap();
        let (mut stalled_far, _) = server.accept().unwrap();
        let mut control = TcpStream::connect(relay.addr()).unwrap();
        let (mut control_far, _) = server.accept().unwrap();
        // Far more than a window and every socket buffer on the way.
        let total = 4 * CHANNEL_WINDOW as usize;
        let flood = std::thread::spawn(move || {
            let chunk = vec![7u8; 1 << 20];
            let mut sent = 0;
            while sent < total {
                stalled.write_all(&chunk).unwrap();
                sent += chunk.len();
            }
            stalled.shutdown(Shutdown::Write).unwrap();
        });
        std::thread::sleep(Duration::from_millis(300));
        control.write_all(b"entry").unwrap();
        control_far
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = [0u8; 5];
        control_far.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"entry");
        // Now the stalled reader catches up, and everything arrives.
        let mut n = 0usize;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match stalled_far.read(&mut buf).unwrap() {
                0 => break,
                k => n += k,
            }
        }
        assert_eq!(n, total);
        flood.join().unwrap();
        relay.close();
    }
}
