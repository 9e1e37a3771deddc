//! Batched UDP I/O for the data channel, and nothing else.
//!
//! A [`UdpChannel`] wraps one UDP socket with `quinn-udp`'s state: sends go
//! out as one `sendmsg` per batch of equal-sized datagrams using UDP GSO
//! where the kernel has it (falling back to one datagram per call when a
//! driver refuses), and receives use `recvmmsg` with GRO. Datagrams are
//! sent with the don't-fragment bit (quinn-udp sets `IP_PMTUDISC_PROBE`), so
//! a datagram too large for the path is dropped rather than fragmented: the
//! path-MTU probe relies on that. Buffer sizing reports what the OS allows.
//! The socket is non-blocking; waits use `poll` with a timeout, so no
//! thread blocks forever.

use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use quinn_udp::{RecvMeta, Transmit, UdpSockRef, UdpSocketState};

/// Datagram slots per receive call.
const BATCH: usize = 32;
/// Bytes per receive slot: room for a GRO batch of coalesced datagrams.
const SLOT: usize = 64 * 1024;
/// Largest UDP payload of one datagram.
pub const MAX_PAYLOAD: usize = 65_507;

/// What buffer sizes the OS granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buffers {
    pub recv: usize,
    pub send: usize,
    /// The OS gave less than was asked for.
    pub capped: bool,
}

pub struct UdpChannel {
    socket: UdpSocket,
    state: UdpSocketState,
    peer: Option<SocketAddr>,
}

impl UdpChannel {
    /// Binds a socket (port 0 for any) and prepares it for batching.
    pub fn bind(addr: SocketAddr) -> io::Result<UdpChannel> {
        let socket = UdpSocket::bind(addr)?;
        let state = UdpSocketState::new(UdpSockRef::from(&socket))?;
        Ok(UdpChannel {
            socket,
            state,
            peer: None,
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Fixes the peer: sends go there and only its datagrams are received.
    pub fn connect(&mut self, peer: SocketAddr) -> io::Result<()> {
        self.socket.connect(peer)?;
        self.peer = Some(peer);
        Ok(())
    }

    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Asks for `want` bytes of receive and send buffer, forcing past the
    /// OS cap (`SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`) when `force` and allowed.
    pub fn size_buffers(&self, want: usize, force: bool) -> Buffers {
        let fd = self.socket.as_raw_fd();
        let sock = socket2::SockRef::from(&self.socket);
        let mut forced = false;
        if force {
            forced =
                set_int(fd, libc::SO_RCVBUFFORCE, want) && set_int(fd, libc::SO_SNDBUFFORCE, want);
        }
        if !forced {
            let _ = sock.set_recv_buffer_size(want);
            let _ = sock.set_send_buffer_size(want);
        }
        // Linux reports twice what was set (the bookkeeping share).
        let recv = sock.recv_buffer_size().unwrap_or(0) / 2;
        let send = sock.send_buffer_size().unwrap_or(0) / 2;
        Buffers {
            recv,
            send,
            capped: recv < want,
        }
    }

    /// Datagrams of `payload` bytes one send call may carry: 1 without
    /// GSO, and a GSO batch may not exceed 64 KiB in all.
    pub fn max_segments(&self, payload: usize) -> usize {
        let fit = 65_000 / payload.max(1);
        self.state.max_gso_segments().min(fit).clamp(1, 64)
    }

    /// Sends `contents`, which holds datagrams of `segment` bytes each (the
    /// last may be shorter), to the peer. Waits up to `timeout` for room in
    /// the socket buffer.
    pub fn send(&self, contents: &[u8], segment: usize, timeout: Duration) -> io::Result<()> {
        let dest = self
            .peer
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no UDP peer yet"))?;
        self.send_to(dest, contents, segment, timeout)
    }

    /// Like [`UdpChannel::send`], to `dest`.
    pub fn send_to(
        &self,
        dest: SocketAddr,
        contents: &[u8],
        segment: usize,
        timeout: Duration,
    ) -> io::Result<()> {
        if contents.len() > segment && self.max_segments(segment) > 1 {
            match self.send_one(dest, contents, Some(segment), timeout) {
                Ok(()) => return Ok(()),
                // The driver refused segmentation offload: quinn-udp stops
                // offering it, and this batch goes out one by one.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::EINVAL)) => {}
                Err(e) => return Err(e),
            }
        }
        for d in contents.chunks(segment.max(1)) {
            self.send_one(dest, d, None, timeout)?;
        }
        Ok(())
    }

    fn send_one(
        &self,
        dest: SocketAddr,
        contents: &[u8],
        segment: Option<usize>,
        timeout: Duration,
    ) -> io::Result<()> {
        let t = Transmit {
            destination: dest,
            ecn: None,
            contents,
            segment_size: segment,
            src_ip: None,
        };
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match self.state.try_send(UdpSockRef::from(&self.socket), &t) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "UDP socket buffer stayed full",
                        ));
                    }
                    wait(self.socket.as_raw_fd(), libc::POLLOUT, left)?;
                }
                // A refused datagram (ICMP port unreachable from an earlier
                // send) is the path's business; the protocol recovers.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Receives what is waiting, waiting up to `timeout` for the first
    /// datagram. Returns the number of datagrams in `batch`.
    pub fn recv(&self, batch: &mut RecvBatch, timeout: Duration) -> io::Result<usize> {
        batch.n = 0;
        loop {
            let mut iovs: Vec<IoSliceMut<'_>> =
                batch.bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
            match self
                .state
                .recv(UdpSockRef::from(&self.socket), &mut iovs, &mut batch.metas)
            {
                Ok(n) => {
                    batch.n = n;
                    return Ok(batch.len());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if timeout.is_zero() || !wait(self.socket.as_raw_fd(), libc::POLLIN, timeout)? {
                        return Ok(0);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    // ICMP unreachable for an earlier send; nothing to read.
                    return Ok(0);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The MTU the kernel knows for the route to the peer (`IP_MTU`), if
    /// connected.
    pub fn route_mtu(&self) -> Option<usize> {
        let fd = self.socket.as_raw_fd();
        let v6 = self.peer?.is_ipv6();
        let (level, opt) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_MTU)
        } else {
            (libc::IPPROTO_IP, libc::IP_MTU)
        };
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` are valid for writes of the sizes given.
        let r = unsafe {
            libc::getsockopt(
                fd,
                level,
                opt,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (r == 0 && v > 0).then_some(v as usize)
    }

    /// IP and UDP header bytes per datagram to the peer.
    pub fn header_overhead(&self) -> usize {
        match self.peer {
            Some(SocketAddr::V6(_)) => 48,
            _ => 28,
        }
    }
}

/// Buffers for one receive call.
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    metas: Vec<RecvMeta>,
    n: usize,
}

impl Default for RecvBatch {
    fn default() -> Self {
        RecvBatch {
            bufs: (0..BATCH).map(|_| vec![0u8; SLOT]).collect(),
            metas: vec![RecvMeta::default(); BATCH],
            n: 0,
        }
    }
}

impl RecvBatch {
    /// Datagrams received (GRO batches split back into datagrams).
    pub fn len(&self) -> usize {
        self.metas[..self.n]
            .iter()
            .map(|m| m.len.div_ceil(m.stride.max(1)))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with each datagram's source and bytes (mutable, to open
    /// in place).
    pub fn for_each(&mut self, mut f: impl FnMut(SocketAddr, &mut [u8])) {
        self.for_each_stamped(|from, _, d| f(from, d));
    }

    /// Like [`RecvBatch::for_each`], with the time the kernel received each
    /// datagram (`SO_TIMESTAMPNS`, since the Unix epoch) where it says:
    /// unlike the time this process gets to it, that does not move when
    /// the receiving thread waits for a core.
    pub fn for_each_stamped(&mut self, mut f: impl FnMut(SocketAddr, Option<Duration>, &mut [u8])) {
        for (meta, buf) in self.metas[..self.n].iter().zip(self.bufs.iter_mut()) {
            let stride = meta.stride.max(1);
            for d in buf[..meta.len].chunks_mut(stride) {
                f(meta.addr, meta.timestamp, d);
            }
        }
    }
}

/// Datagrams the host's UDP sockets dropped for want of buffer space
/// (`RcvbufErrors` in `/proc/net/snmp`, per network namespace).
pub fn receive_buffer_drops() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let names = lines.next()?;
    let values = lines.next()?;
    let i = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(i)?.parse().ok()
}

fn set_int(fd: i32, opt: libc::c_int, v: usize) -> bool {
    let v = v.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: passes a valid pointer to an int of the size given.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// Waits until `fd` is ready for `events` or `timeout` passes.
fn wait(fd: i32, events: libc::c_short, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    loop {
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r >= 0 {
            return Ok(r > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cross_loopback_whole() {
        let mut a = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut b = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        b.connect(a.local_addr().unwrap()).unwrap();
        let mut contents = Vec::new();
        for i in 0..10u8 {
            contents.extend_from_slice(&[i; 1000]);
        }
        contents.extend_from_slice(&[99; 10]);
        a.send(&contents, 1000, Duration::from_secs(1)).unwrap();
        let mut got = Vec::new();
        let mut batch = RecvBatch::default();
        for _ in 0..50 {
            if b.recv(&mut batch, Duration::from_millis(100)).unwrap() > 0 {
                batch.for_each(|_, d| got.push(d.to_vec()));
            }
            if got.len() == 11 {
                break;
            }
        }
        assert_eq!(got.len(), 11);
        for (i, d) in got[..10].iter().enumerate() {
            assert_eq!(d, &vec![i as u8; 1000]);
        }
        assert_eq!(got[10], vec![99; 10]);
        assert!(b.route_mtu().unwrap() >= 1280);
        // Nothing more: a bounded wait returns empty.
        assert_eq!(b.recv(&mut batch, Duration::from_millis(10)).unwrap(), 0);
    }
}
