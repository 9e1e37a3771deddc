//! Dialling again while a connection's SYN may have been lost (P-22).
//!
//! A SYN or SYN-ACK lost on the path costs the kernel's initial
//! retransmission timeout, a whole second (RFC 6298), before anything
//! else can happen: at 1% loss each way about one dial in fifty, seen as a
//! 1.3 s start in a row of 0.3 s ones at 150 ms. Where the round trip is
//! known, a dial that has not connected after two of them is raced by a
//! fresh one, the first to connect kept and the others closed.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use socket2::{SockAddr, Socket};

use crate::net::{self, Tuning};

/// The most attempts one dial has under way at once.
pub const DIAL_ATTEMPTS: u32 = 3;

/// The wait before dialling again on a path of round trip `rtt`: two
/// round trips, at least 200 ms.
pub fn redial_after(rtt: Duration) -> Duration {
    (rtt * 2).max(Duration::from_millis(200))
}

/// Connects to `addr` within `timeout` as [`net::connect`] does; with
/// `again`, starts a new attempt each `again` while none has connected,
/// up to [`DIAL_ATTEMPTS`], and keeps the first that connects. A refusal
/// ends the dial at once; another attempt's error ends it once no
/// attempt is left under way.
pub fn connect(
    addr: &SocketAddr,
    tuning: &Tuning,
    timeout: Duration,
    again: Option<Duration>,
) -> io::Result<TcpStream> {
    let Some(again) = again else {
        return net::connect(addr, tuning, timeout);
    };
    let start = Instant::now();
    let deadline = start + timeout;
    let (mut tries, mut started): (Vec<Socket>, u32) = (Vec::new(), 0);
    let mut failed = None;
    loop {
        if started < DIAL_ATTEMPTS && Instant::now() >= start + again * started {
            tries.push(begin(addr, tuning)?);
            started += 1;
            continue;
        }
        if tries.is_empty() {
            return Err(failed.unwrap_or_else(|| io::ErrorKind::TimedOut.into()));
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection timed out",
            ));
        }
        let next = match started < DIAL_ATTEMPTS {
            true => (start + again * started).min(deadline),
            false => deadline,
        };
        for i in ready(&tries, next - now)?.into_iter().rev() {
            let s = tries.swap_remove(i);
            match s.take_error()? {
                None => {
                    s.set_nonblocking(false)?;
                    return Ok(s.into());
                }
                Some(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Err(e),
                Some(e) => failed = Some(e),
            }
        }
    }
}

/// A tuned socket with its SYN sent.
fn begin(addr: &SocketAddr, tuning: &Tuning) -> io::Result<Socket> {
    let s = net::tcp_socket(addr, tuning)?;
    s.set_nonblocking(true)?;
    match s.connect(&SockAddr::from(*addr)) {
        Ok(()) => Ok(s),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(s),
        Err(e) => Err(e),
    }
}

/// The indices, in order, of the attempts whose connect has finished,
/// well or not, within `wait`.
fn ready(tries: &[Socket], wait: Duration) -> io::Result<Vec<usize>> {
    let mut fds: Vec<libc::pollfd> = tries
        .iter()
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        })
        .collect();
    let ms = wait.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: `fds` is ours, of the length given, alive across the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::Interrupted => Ok(Vec::new()),
            _ => Err(e),
        };
    }
    Ok((0..fds.len()).filter(|&i| fds[i].revents != 0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Protocol, Type};
    use std::net::TcpListener;

    fn tuning() -> Tuning {
        Tuning {
            cc: None,
            force_buffer: None,
            timeout: Duration::from_secs(10),
        }
    }

    #[test]
    fn a_listening_server_is_reached_by_the_first_attempt() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = Instant::now();
        let s = connect(
            &addr,
            &tuning(),
            Duration::from_secs(5),
            Some(redial_after(Duration::ZERO)),
        );
        assert!(s.is_ok(), "{s:?}");
        assert!(t.elapsed() < Duration::from_millis(150));
        l.set_nonblocking(true).unwrap();
        assert!(l.accept().is_ok());
        assert!(l.accept().is_err(), "one connection made, not two");
    }

    #[test]
    fn a_refusal_ends_the_dial_at_once() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let t = Instant::now();
        let e = connect(
            &addr,
            &tuning(),
            Duration::from_secs(5),
            Some(Duration::from_millis(200)),
        );
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::ConnectionRefused);
        assert!(t.elapsed() < Duration::from_millis(150));
    }

    /// A listener whose queue is full drops SYNs, as a lossy path does:
    /// the kernel would send the dropped one again only after a second;
    /// the dial's next attempt, once the queue has room, connects then.
    #[test]
    fn a_dropped_syn_is_raced_by_a_new_attempt() {
        let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        s.bind(&SockAddr::from(SocketAddr::from(([127, 0, 0, 1], 0))))
            .unwrap();
        s.listen(0).unwrap();
        let l: TcpListener = s.into();
        let addr = l.local_addr().unwrap();
        // Fill the accept queue (a backlog of 0 holds one).
        let mut filling = Vec::new();
        for _ in 0..4 {
            match net::connect(&addr, &tuning(), Duration::from_millis(100)) {
                Ok(c) => filling.push(c),
                Err(_) => break,
            }
        }
        assert!(!filling.is_empty());
        let emptier = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            l.set_nonblocking(true).unwrap();
            let mut held = Vec::new();
            let until = Instant::now() + Duration::from_secs(3);
            while Instant::now() < until {
                match l.accept() {
                    Ok((c, _)) => held.push(c),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            held.len()
        });
        let t = Instant::now();
        let c = connect(
            &addr,
            &tuning(),
            Duration::from_secs(5),
            Some(Duration::from_millis(300)),
        );
        let took = t.elapsed();
        assert!(c.is_ok(), "{c:?}");
        assert!(
            took < Duration::from_millis(900),
            "connected after {took:?}"
        );
        drop(c);
        assert!(emptier.join().unwrap() >= filling.len());
    }
}
