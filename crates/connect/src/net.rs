//! Socket set-up for long fat paths (P-18).
//!
//! Linux autotunes TCP buffers up to `tcp_rmem`/`tcp_wmem` maxima; setting
//! SO_SNDBUF/SO_RCVBUF explicitly turns autotuning off and is capped by
//! `net.core.{r,w}mem_max`. So haul leaves autotuning alone unless it can
//! exceed those caps with SO_*BUFFORCE (root), and otherwise reports the cap
//! so the stream count can make up for it. BBR is asked for when offered.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, TcpKeepalive, Type};

/// Largest per-socket buffer haul asks for when it may force one.
pub const FORCED_BUFFER: usize = 64 << 20;

/// How the OS limits TCP buffers, read from /proc/sys.
#[derive(Debug, Clone, Copy)]
pub struct BufferLimits {
    pub wmem_max: u64,
    pub rmem_max: u64,
    pub tcp_wmem_max: u64,
    pub tcp_rmem_max: u64,
}

fn sysctl_u64(path: &str, field: usize) -> Option<u64> {
    fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .nth(field)?
        .parse()
        .ok()
}

impl BufferLimits {
    pub fn read() -> BufferLimits {
        BufferLimits {
            wmem_max: sysctl_u64("/proc/sys/net/core/wmem_max", 0).unwrap_or(212_992),
            rmem_max: sysctl_u64("/proc/sys/net/core/rmem_max", 0).unwrap_or(212_992),
            tcp_wmem_max: sysctl_u64("/proc/sys/net/ipv4/tcp_wmem", 2).unwrap_or(4 << 20),
            tcp_rmem_max: sysctl_u64("/proc/sys/net/ipv4/tcp_rmem", 2).unwrap_or(6 << 20),
        }
    }

    /// Bytes one stream can keep in flight without forcing buffers. Senders
    /// that wait for writability keep about 2/3 of the send buffer in flight.
    pub fn stream_window(&self, can_force: bool) -> u64 {
        if can_force {
            return FORCED_BUFFER as u64 / 2;
        }
        let send = self.tcp_wmem_max.max(self.wmem_max) * 2 / 3;
        send.min(self.tcp_rmem_max.max(self.rmem_max) / 2)
            .max(64 << 10)
    }
}

/// Whether this process may exceed the buffer caps with SO_*BUFFORCE.
/// That takes CAP_NET_ADMIN; haul assumes root has it and others do not,
/// and a refused setsockopt only costs the larger window.
pub fn can_force_buffers() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Congestion control algorithms this kernel offers to unprivileged users.
pub fn available_cc() -> Vec<String> {
    let path = if can_force_buffers() {
        "/proc/sys/net/ipv4/tcp_available_congestion_control"
    } else {
        "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
    };
    fs::read_to_string(path)
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// How long a peer may stay silent before a transfer gives up
/// (`--timeout`); shorter outages are ridden through.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Per-connection choices.
#[derive(Debug, Clone)]
pub struct Tuning {
    /// Congestion control to ask for; `None` keeps the system default.
    pub cc: Option<String>,
    /// Force buffers of this size (root only); `None` keeps autotuning.
    pub force_buffer: Option<usize>,
    /// How long the peer may stay silent: unacknowledged data or
    /// unanswered keepalives for this long end a TCP connection, no
    /// datagram for this long ends the UDP channel.
    pub timeout: Duration,
}

impl Tuning {
    /// BBR when offered, forced buffers when permitted, and the given
    /// silence `timeout`.
    pub fn auto(cc: Option<String>, timeout: Duration) -> Tuning {
        let cc = cc.or_else(|| {
            available_cc()
                .iter()
                .any(|c| c == "bbr")
                .then(|| "bbr".to_string())
        });
        Tuning {
            cc,
            force_buffer: can_force_buffers().then_some(FORCED_BUFFER),
            timeout,
        }
    }

    pub fn apply(&self, s: &Socket) {
        let _ = s.set_tcp_nodelay(true);
        // An idle connection is probed after half the timeout; probes or
        // data unacknowledged for the whole timeout mean the peer is gone
        // (the user timeout governs both).
        let second = Duration::from_secs(1);
        let ka = TcpKeepalive::new()
            .with_time((self.timeout / 2).max(second))
            .with_interval((self.timeout / 8).max(second))
            .with_retries(8);
        let _ = s.set_tcp_keepalive(&ka);
        let _ = s.set_tcp_user_timeout(Some(self.timeout.max(second)));
        if let Some(cc) = &self.cc {
            if let Err(e) = s.set_tcp_congestion(cc.as_bytes()) {
                tracing::warn!("congestion control {cc} refused: {e}");
            }
        }
        if let Some(size) = self.force_buffer {
            force_buffers(s.as_raw_fd(), size);
        }
    }
}

fn force_buffers(fd: i32, size: usize) {
    let v = size as libc::c_int;
    for (opt, name) in [
        (libc::SO_SNDBUFFORCE, "SO_SNDBUFFORCE"),
        (libc::SO_RCVBUFFORCE, "SO_RCVBUFFORCE"),
    ] {
        set_int(fd, libc::SOL_SOCKET, opt, v, name);
    }
}

/// Sets an integer socket option; a refusal is only logged, as every
/// option haul sets is advice the kernel may decline.
fn set_int(fd: i32, level: libc::c_int, opt: libc::c_int, v: libc::c_int, name: &str) {
    // SAFETY: setsockopt with a pointer to a live c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &v as *const _ as *const libc::c_void,
            std::mem::size_of_val(&v) as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!("{name} refused: {}", std::io::Error::last_os_error());
    }
}

/// Tunes a control connection for what it carries: few, small messages
/// (acknowledgements, a file's end, the summary) that a transfer's end
/// waits on. A lost one is re-sent after a timeout, and each loss in a row
/// doubles the timeout; thin-stream linear timeouts
/// (`TCP_THIN_LINEAR_TIMEOUTS`) keep the first six re-sends from doubling
/// while fewer than four segments are in flight, which is the state of a
/// control connection at a transfer's end on a lossy path. Data
/// connections keep the kernel's defaults. The option is advice: a kernel
/// that refuses it keeps its default.
pub fn tune_control(stream: &TcpStream) {
    set_int(
        stream.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_THIN_LINEAR_TIMEOUTS,
        1,
        "TCP_THIN_LINEAR_TIMEOUTS",
    );
}

/// Keeps at most `bytes` written but not yet sent in `stream`'s send
/// buffer (`TCP_NOTSENT_LOWAT`): a writer blocks sooner, so what it writes
/// next (an interactive connection's frame in a tunnel, P-37) waits behind
/// little, while the bytes in flight still fill the window.
pub fn set_notsent_lowat(stream: &TcpStream, bytes: usize) {
    set_int(
        stream.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        bytes.min(libc::c_int::MAX as usize) as libc::c_int,
        "TCP_NOTSENT_LOWAT",
    );
}

/// Wakes a thread waiting for `stream` to be readable only once `bytes`
/// are queued (`SO_RCVLOWAT`), not at each segment: a data stream's thread
/// reads a block in a few wake-ups instead of one per burst. The kernel
/// still wakes it when its buffer or the window runs short, or at the
/// stream's end. The mark counts the queue, not what a blocking read has
/// copied so far: wait in [`wait_readable`] with nothing copied, and with
/// a mark no larger than the bytes still to come. Advice: a kernel that
/// refuses it wakes the reader as before.
pub fn set_rcvlowat(stream: &TcpStream, bytes: usize) {
    set_int(
        stream.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVLOWAT,
        bytes.clamp(1, libc::c_int::MAX as usize) as libc::c_int,
        "SO_RCVLOWAT",
    );
}

/// Reads what `stream` has queued now, without waiting: `WouldBlock`
/// when nothing is, whatever the socket's blocking mode.
pub fn recv_now(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: recv into a live, writable buffer of the length given.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    match n {
        n if n >= 0 => Ok(n as usize),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Sleeps until `stream` is readable: its wake-up mark
/// ([`set_rcvlowat`]) reached, its end or an error. An interrupted wait
/// returns `Ok` early; the caller reads again either way.
pub fn wait_readable(stream: &TcpStream) -> std::io::Result<()> {
    let mut pfd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd we own; no timeout.
    match unsafe { libc::poll(&mut pfd, 1, -1) } {
        n if n >= 0 => Ok(()),
        _ => match std::io::Error::last_os_error() {
            e if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            e => Err(e),
        },
    }
}

/// A TCP socket for `addr`'s family, tuned before it connects or listens,
/// so that the window scale covers the buffers.
pub fn tcp_socket(addr: &SocketAddr, tuning: &Tuning) -> std::io::Result<Socket> {
    let s = Socket::new(
        Domain::for_address(*addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    tuning.apply(&s);
    Ok(s)
}

/// Connects with a timeout (a dial raced where a SYN may be lost:
/// [`crate::race::connect`]).
pub fn connect(
    addr: &SocketAddr,
    tuning: &Tuning,
    timeout: Duration,
) -> std::io::Result<TcpStream> {
    let s = tcp_socket(addr, tuning)?;
    s.connect_timeout(&SockAddr::from(*addr), timeout)?;
    Ok(s.into())
}

/// A listening socket whose accepted connections inherit the tuning.
pub fn listen(addr: &SocketAddr, tuning: &Tuning) -> std::io::Result<std::net::TcpListener> {
    let s = tcp_socket(addr, tuning)?;
    s.set_reuse_address(true)?;
    s.bind(&SockAddr::from(*addr))?;
    s.listen(1024)?;
    Ok(s.into())
}

/// Tunes an accepted connection (options not inherited from the listener).
pub fn tune_accepted(stream: &TcpStream, tuning: &Tuning) {
    tuning.apply(&socket2::SockRef::from(stream));
}

/// What TCP connections could carry now, in bytes per second: for each,
/// its congestion window over its smoothed round trip (`TCP_INFO`), or,
/// where the pacing rate is lower (BBR), the pacing rate but at least half
/// the window's rate; summed. A window the sender does not fill does not
/// grow, so this is what sending raw would reach, whether or not the
/// sender is busy compressing. BBR keeps twice the path's delivery in its
/// window, so there the window alone read 27 MB/s on a 12.5 MB/s link
/// (cubic's pacing rate is 1.2-2 times the window, so there the window
/// stays the figure). `None` if no connection reports it.
pub fn tcp_path_rate(sockets: &[TcpStream]) -> Option<f64> {
    let mut total = 0.0;
    let mut any = false;
    for s in sockets {
        let Some(info) = tcp_info(s) else {
            continue;
        };
        if info.tcpi_rtt == 0 {
            continue;
        }
        let window = info.tcpi_snd_cwnd as f64 * info.tcpi_snd_mss as f64;
        let mut rate = window / (info.tcpi_rtt as f64 * 1e-6);
        let pacing = info.tcpi_pacing_rate as f64;
        if info.tcpi_pacing_rate > 0 && info.tcpi_pacing_rate < u64::MAX / 2 && pacing < rate {
            // BBR: its pacing rate, but never below half its window's
            // rate, since its estimate falls with what a sender busy
            // compressing delivers (on loopback it read a few Gbit/s and
            // talked auto into compressing random data).
            rate = pacing.max(rate / 2.0);
        }
        total += rate;
        any = true;
    }
    any.then_some(total)
}

/// A data connection's figures for the sharing governor (P-46).
#[derive(Debug, Clone, Copy)]
pub struct ShareInfo {
    /// Segments delivered so far, selectively acknowledged ones as they
    /// arrive (the cumulative acknowledgement jumps a whole window after a
    /// repair); wraps.
    pub delivered: u32,
    /// The payload of a full segment, bytes.
    pub mss: u32,
    /// Whether anything is in flight: an idle connection's round trips
    /// are stale.
    pub in_flight: bool,
    pub srtt: Duration,
    pub min_rtt: Duration,
    /// Segments sent again so far (lost, or taken for lost).
    pub retrans: u32,
}

/// `s`'s [`ShareInfo`]; `None` before its first round trip is measured.
pub fn tcp_share_info(s: &TcpStream) -> Option<ShareInfo> {
    let info = tcp_info(s)?;
    (info.tcpi_rtt > 0 && info.tcpi_min_rtt > 0).then(|| ShareInfo {
        delivered: info.tcpi_delivered,
        mss: info.tcpi_snd_mss,
        in_flight: info.tcpi_unacked > 0,
        srtt: Duration::from_micros(info.tcpi_rtt as u64),
        min_rtt: Duration::from_micros(info.tcpi_min_rtt as u64),
        retrans: info.tcpi_total_retrans,
    })
}

/// Caps a connection's pacing (`SO_MAX_PACING_RATE`) at `rate` bytes per
/// second; `None` lifts the cap.
pub fn set_max_pacing_rate(s: &TcpStream, rate: Option<u64>) -> std::io::Result<()> {
    let v: u64 = rate.unwrap_or(u64::MAX);
    // SAFETY: a u64 the kernel reads with its length, on a descriptor we
    // own.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            &v as *const u64 as *const libc::c_void,
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Starts a connection's congestion control afresh (BBR from its startup),
/// keeping the window it has: the kernel restarts an algorithm only when
/// another is set, so reno (which every kernel allows) goes in between.
pub fn restart_congestion_control(s: &TcpStream) -> std::io::Result<()> {
    let sock = socket2::SockRef::from(s);
    let name = sock.tcp_congestion()?;
    let name: Vec<u8> = name.split(|&b| b == 0).next().unwrap_or_default().to_vec();
    if name == b"reno" {
        return Ok(());
    }
    sock.set_tcp_congestion(b"reno")?;
    sock.set_tcp_congestion(&name)
}

/// What a connection may have in flight now, bytes: its congestion window
/// in full segments (`TCP_INFO`).
pub fn tcp_window(s: &TcpStream) -> Option<usize> {
    let info = tcp_info(s)?;
    Some(info.tcpi_snd_cwnd as usize * info.tcpi_snd_mss as usize)
}

/// The least round trip a connection has seen, once it has one.
pub fn tcp_min_rtt(s: &TcpStream) -> Option<Duration> {
    let info = tcp_info(s)?;
    (info.tcpi_min_rtt > 0).then(|| Duration::from_micros(info.tcpi_min_rtt as u64))
}

/// The kernel's smoothed round-trip time of a connection, once it has one.
pub fn tcp_rtt(s: &TcpStream) -> Option<Duration> {
    let info = tcp_info(s)?;
    (info.tcpi_rtt > 0).then(|| Duration::from_micros(info.tcpi_rtt as u64))
}

fn tcp_info(s: &TcpStream) -> Option<libc::tcp_info> {
    // SAFETY: `tcp_info` is plain old data; getsockopt writes at most `len`
    // bytes into it on a descriptor we own.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut info as *mut libc::tcp_info as *mut libc::c_void,
            &mut len,
        );
        (rc == 0).then_some(info)
    }
}
