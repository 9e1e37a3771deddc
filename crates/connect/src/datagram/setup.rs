//! Setting up the UDP channel (P-23): the client's hello proves it holds
//! the session keys and tells the server where the client's datagrams come
//! from (NAT included); then the client probes the path MTU with
//! don't-fragment datagrams that the server echoes at the same size, so
//! both directions carry the size chosen. Set-up uses sequence numbers
//! below `DATA_SEQ_START`: the server's responder answers at most
//! [`SETUP_REPLIES_MAX`] datagrams, so however many a peer sends (or
//! replays), its numbers never reach the transfer's (P-39).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use secure::DatagramKey;
use udp::{RecvBatch, UdpChannel};
use wire::datagram::{Signal, DATA_SEQ_START, MIN_PAYLOAD};

use super::{open, seal_signal, Opened};

/// Largest datagram tried: a 9000-byte MTU's payload.
const JUMBO_MTU: usize = 9000;
/// Early transfer datagrams the server keeps for the receiver.
const BACKLOG: usize = 4096;

/// Most datagrams the server's set-up responder sends in one session: a
/// hello's answer and every probe echo of set-up and of `haul probe`
/// (about 1 000), many times over. Its sequence numbers stay below this.
pub const SETUP_REPLIES_MAX: u64 = 1 << 20;
const _: () = assert!(SETUP_REPLIES_MAX < DATA_SEQ_START);

/// Why the channel could not be set up, for the fallback notice or error.
#[derive(Debug)]
pub struct SetupFailed(pub String);

/// A hello the client has sent, with what set-up goes on from.
pub struct Hello {
    /// The server's UDP address, which the channel is connected to.
    server: SocketAddr,
    /// Candidate payload sizes, largest first.
    sizes: Vec<usize>,
    /// The next set-up sequence number.
    seq: u64,
    sent: Instant,
}

/// Client: connects the channel to the server's UDP port and sends the
/// hello with the largest probe behind it. It may go before the server
/// has accepted the request: the server answers once it has (P-23).
pub fn client_hello(
    channel: &mut UdpChannel,
    server: SocketAddr,
    session: [u8; 16],
    send_key: &DatagramKey,
) -> Result<Hello, SetupFailed> {
    channel
        .connect(server)
        .map_err(|e| SetupFailed(format!("cannot reach UDP port {server}: {e}")))?;
    // Path MTU candidates: the route's, capped at jumbo size, then the
    // 1500-byte Ethernet size, then the IPv6 minimum.
    let overhead = channel.header_overhead();
    let route = channel.route_mtu().unwrap_or(1500).min(JUMBO_MTU);
    let mut sizes = vec![route - overhead];
    for s in [1500 - overhead, MIN_PAYLOAD as usize] {
        if s < sizes[sizes.len() - 1] {
            sizes.push(s);
        }
    }
    let mut hello = Hello {
        server,
        sizes,
        seq: 0,
        sent: Instant::now(),
    };
    send_hello(channel, &mut hello, session, send_key);
    Ok(hello)
}

/// The hello and, right behind it, the largest probe, so a path that
/// carries it costs no extra round trip; the pair goes twice, since a
/// lost hello or echo costs a resend interval (two round trips) or a
/// probe round (three), and at 1% loss one of the four datagrams of a
/// single pair was lost in about one set-up in 25 (measured: a second
/// before the first data, 1 GiB at 1 Gbit/s, 150 ms). A probe that fails
/// to send locally is ignored here.
fn send_hello(channel: &UdpChannel, h: &mut Hello, session: [u8; 16], send_key: &DatagramKey) {
    let pair = [Signal::Hello(session), Signal::Probe(h.sizes[0] as u16)];
    for sig in pair.iter().chain(pair.iter()) {
        let d = seal_signal(send_key, h.seq, sig);
        h.seq += 1;
        let _ = channel.send(&d, d.len(), Duration::from_millis(100));
    }
    h.sent = Instant::now();
}

/// Client, once the server has accepted: waits for the hello's answer
/// (sending it again now and then), then finds the largest payload both
/// directions carry.
pub fn client(
    channel: &mut UdpChannel,
    mut hello: Hello,
    session: [u8; 16],
    send_key: &DatagramKey,
    recv_key: &DatagramKey,
    rtt: Duration,
) -> Result<usize, SetupFailed> {
    let server = hello.server;
    let mut batch = RecvBatch::default();
    let patience = (rtt * 10).max(Duration::from_secs(3));
    let resend = (rtt * 2).max(Duration::from_millis(200));
    let accepted = Instant::now();
    let deadline = accepted + patience;
    // The server answers a hello that waited for its acceptance right
    // behind it: allow that answer half a round trip before sending again.
    let mut next_hello = (hello.sent + resend).max(accepted + rtt / 2);
    let (mut welcomed, mut largest_echoed) = (false, false);
    while !welcomed {
        let now = Instant::now();
        if now >= deadline {
            return Err(SetupFailed(format!(
                "no answer from UDP port {server} within {:.1}s (a firewall between the hosts?)",
                patience.as_secs_f64()
            )));
        }
        if now >= next_hello {
            send_hello(channel, &mut hello, session, send_key);
            next_hello = now + resend;
        }
        let wait = next_hello.min(deadline).saturating_duration_since(now);
        if channel.recv(&mut batch, wait).unwrap_or(0) > 0 {
            batch.for_each(|_, d| match open(recv_key, d) {
                Some(Opened::Signal {
                    signal: Signal::HelloAck(s),
                    ..
                }) => welcomed |= s == session,
                Some(Opened::Signal {
                    signal: Signal::ProbeAck(n),
                    ..
                }) => largest_echoed |= n as usize == hello.sizes[0],
                _ => {}
            });
        }
    }
    let (sizes, mut seq) = (hello.sizes, hello.seq);
    if largest_echoed {
        return Ok(sizes[0]);
    }
    // The echo may still be on its way: the first probe round waits for it.
    let wait = (rtt * 3).max(Duration::from_millis(100));
    for size in sizes {
        for _ in 0..3 {
            let d = seal_signal(send_key, seq, &Signal::Probe(size as u16));
            seq += 1;
            // A datagram larger than the local interface fails at once.
            if channel
                .send(&d, d.len(), Duration::from_millis(100))
                .is_err()
            {
                break;
            }
            let until = Instant::now() + wait;
            let mut echoed = false;
            while !echoed && Instant::now() < until {
                let left = until.saturating_duration_since(Instant::now());
                if channel.recv(&mut batch, left).unwrap_or(0) > 0 {
                    batch.for_each(|_, d| {
                        if let Some(Opened::Signal {
                            signal: Signal::ProbeAck(n),
                            ..
                        }) = open(recv_key, d)
                        {
                            echoed |= n as usize == size;
                        }
                    });
                }
            }
            if echoed {
                return Ok(size);
            }
        }
    }
    Err(SetupFailed(format!(
        "UDP port {server} answered the hello but no probe of {} bytes or more came back",
        MIN_PAYLOAD
    )))
}

/// Server: answers hellos and probes until `stop` is set, then returns the
/// channel, connected to the client if a valid hello came, and the
/// transfer's datagrams that arrived before `stop` (the client starts
/// sending as soon as it has chosen), for the receiver to take first.
pub fn serve(
    channel: UdpChannel,
    session: [u8; 16],
    send_key: &DatagramKey,
    recv_key: &DatagramKey,
    stop: &AtomicBool,
) -> (UdpChannel, Vec<Vec<u8>>) {
    serve_within(
        channel,
        session,
        (send_key, recv_key),
        stop,
        SETUP_REPLIES_MAX,
    )
}

/// [`serve`], answering at most `most` datagrams.
fn serve_within(
    mut channel: UdpChannel,
    session: [u8; 16],
    (send_key, recv_key): (&DatagramKey, &DatagramKey),
    stop: &AtomicBool,
    most: u64,
) -> (UdpChannel, Vec<Vec<u8>>) {
    let mut backlog = Vec::new();
    let mut batch = RecvBatch::default();
    let mut seq = 0u64;
    while !stop.load(Ordering::Acquire) {
        if channel
            .recv(&mut batch, Duration::from_millis(20))
            .unwrap_or(0)
            == 0
        {
            continue;
        }
        let mut replies: Vec<(SocketAddr, Signal)> = Vec::new();
        batch.for_each(|from, d| {
            let raw = d.to_vec();
            match open(recv_key, d) {
                Some(Opened::Signal {
                    signal: Signal::Hello(s),
                    ..
                }) if s == session => replies.push((from, Signal::HelloAck(s))),
                Some(Opened::Signal {
                    signal: Signal::Probe(n),
                    ..
                }) => replies.push((from, Signal::ProbeAck(n))),
                Some(_) if backlog.len() < BACKLOG => backlog.push(raw),
                _ => {}
            }
        });
        for (from, reply) in replies {
            if matches!(reply, Signal::HelloAck(_)) && channel.peer().is_none() {
                // Only an authenticated hello fixes the peer.
                if let Err(e) = channel.connect(from) {
                    tracing::warn!("UDP channel: cannot connect to {from}: {e}");
                    continue;
                }
            }
            if channel.peer() != Some(from) {
                continue;
            }
            if seq >= most {
                if seq == most {
                    tracing::warn!(
                        "UDP set-up: the client sent more than {most} hellos and probes; answering no more"
                    );
                    seq += 1;
                }
                continue;
            }
            let d = seal_signal(send_key, seq, &reply);
            seq += 1;
            let _ = channel.send(&d, d.len(), Duration::from_millis(100));
        }
    }
    (channel, backlog)
}

#[cfg(test)]
mod tests {
    use super::*;
    use secure::Protection;

    fn keys() -> (DatagramKey, DatagramKey) {
        (
            DatagramKey::new(Protection::Aes256Gcm, &[1; 32]),
            DatagramKey::new(Protection::Aes256Gcm, &[2; 32]),
        )
    }

    /// The client's whole set-up: hello, then its answer and the probes.
    fn set_up(
        c: &mut UdpChannel,
        server: SocketAddr,
        session: [u8; 16],
        (c2s, s2c): (&DatagramKey, &DatagramKey),
        rtt: Duration,
    ) -> Result<usize, SetupFailed> {
        let hello = client_hello(c, server, session, c2s)?;
        client(c, hello, session, c2s, s2c, rtt)
    }

    #[test]
    fn hello_and_probe_over_loopback() {
        let (c2s, s2c) = keys();
        let server = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let h = scope.spawn(|| serve(server, [7; 16], &s2c, &c2s, &stop));
            let mut c = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let payload = set_up(
                &mut c,
                addr,
                [7; 16],
                (&c2s, &s2c),
                Duration::from_millis(1),
            )
            .expect("set-up succeeds");
            // Loopback's MTU is large: the jumbo size is chosen.
            assert_eq!(payload, 9000 - 28);
            stop.store(true, Ordering::Release);
            let (server, _) = h.join().unwrap();
            assert_eq!(server.peer(), Some(c.local_addr().unwrap()));
        });
    }

    #[test]
    fn a_silent_port_fails_with_a_reason() {
        let (c2s, s2c) = keys();
        // Bound but never answering, like a firewall that drops datagrams.
        let silent = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut c = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let t0 = Instant::now();
        let e = set_up(
            &mut c,
            silent.local_addr().unwrap(),
            [7; 16],
            (&c2s, &s2c),
            Duration::ZERO,
        )
        .unwrap_err();
        assert!(e.0.contains("firewall"), "{}", e.0);
        assert!(t0.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_hello_for_another_session_is_ignored() {
        let (c2s, s2c) = keys();
        let server = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let h = scope.spawn(|| serve(server, [7; 16], &s2c, &c2s, &stop));
            let mut c = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
            assert!(set_up(&mut c, addr, [8; 16], (&c2s, &s2c), Duration::ZERO).is_err());
            stop.store(true, Ordering::Release);
            assert_eq!(h.join().unwrap().0.peer(), None);
        });
    }

    /// The hello leaves before the server accepts (P-23, version 8): it
    /// waits in the socket's buffer, and the responder answers it as soon
    /// as it runs, with no second hello.
    #[test]
    fn a_hello_sent_before_the_server_accepts_is_answered_when_it_does() {
        let (c2s, s2c) = keys();
        let server = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.local_addr().unwrap();
        let mut c = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let hello = client_hello(&mut c, addr, [7; 16], &c2s).unwrap();
        // The request is on its way and the server walks its tree.
        std::thread::sleep(Duration::from_millis(100));
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let h = scope.spawn(|| serve(server, [7; 16], &s2c, &c2s, &stop));
            // A 1 s round trip: a second hello would wait 2 s after the first.
            let accepted = Instant::now();
            let payload = client(&mut c, hello, [7; 16], &c2s, &s2c, Duration::from_secs(1))
                .expect("set-up succeeds");
            assert_eq!(payload, 9000 - 28);
            assert!(
                accepted.elapsed() < Duration::from_secs(1),
                "answered from the first hello, took {:?}",
                accepted.elapsed()
            );
            stop.store(true, Ordering::Release);
            let (server, _) = h.join().unwrap();
            assert_eq!(server.peer(), Some(c.local_addr().unwrap()));
        });
    }

    /// However many hellos and probes arrive (a peer's, or replays of
    /// them), the responder answers a bounded number, so its sequence
    /// numbers never reach the transfer's (P-39).
    #[test]
    fn the_responder_answers_a_bounded_number_of_datagrams() {
        let (c2s, s2c) = keys();
        let server = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let h = scope.spawn(|| serve_within(server, [7; 16], (&s2c, &c2s), &stop, 3));
            let mut c = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
            // The hello and a probe, then five probes more: eight asked.
            let hello = client_hello(&mut c, addr, [7; 16], &c2s).unwrap();
            for seq in hello.seq..hello.seq + 6 {
                let d = seal_signal(&c2s, seq, &Signal::Probe(MIN_PAYLOAD));
                c.send(&d, d.len(), Duration::from_millis(100)).unwrap();
            }
            let mut batch = RecvBatch::default();
            let (mut answers, mut highest) = (0, 0);
            let until = Instant::now() + Duration::from_millis(500);
            while Instant::now() < until {
                if c.recv(&mut batch, Duration::from_millis(50)).unwrap_or(0) > 0 {
                    batch.for_each(|_, d| {
                        if let Some(Opened::Signal { seq, .. }) = open(&s2c, d) {
                            answers += 1;
                            highest = highest.max(seq);
                        }
                    });
                }
            }
            stop.store(true, Ordering::Release);
            h.join().unwrap();
            assert_eq!(answers, 3);
            assert_eq!(highest, 2);
        });
    }
}
