//! Setting up the UDP channel (P-23): the client's hello proves it holds
//! the session keys and tells the server where the client's datagrams come
//! from (NAT included); then the client probes the path MTU with
//! don't-fragment datagrams that the server echoes at the same size, so
//! both directions carry the size chosen. Set-up uses sequence numbers
//! below `DATA_SEQ_START`: the server's responder answers at most
//! [`SETUP_REPLIES_MAX`] datagrams, so however many a peer sends (or
//! replays), its numbers never reach the transfer's (P-39).
//!
//! Each side also sends one packet train (P-23, version 20): the client
//! with its hello, the server with the hello's answer. The other side
//! measures it ([`super::train`]), so the sender's first data can go at
//! the path's rate rather than probing up to it: the server answers the
//! client's with [`Signal::TrainRate`], and the client reports the
//! server's in `UseTransport`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use secure::DatagramKey;
use udp::{RecvBatch, UdpChannel};
use wire::datagram::{Signal, DATA_SEQ_START, MIN_PAYLOAD};

use super::train::{train_len, TrainMeter};
use super::{open, seal_signal, Opened};

/// Largest datagram tried: a 9000-byte MTU's payload.
const JUMBO_MTU: usize = 9000;
/// How long the server's responder, told to stop, still waits for the
/// client's first datagram when none has come yet (P-48).
const LATE_HELLO: Duration = Duration::from_secs(2);
/// Early transfer datagrams the server keeps for the receiver.
const BACKLOG: usize = 4096;
/// After the hello's answer, the longest the client waits for its train's
/// rate and the server's train. Both come right behind the answer (the
/// trains take under 8 ms on a path faster than the 100 Mbit/s a transfer
/// starts at, and a slower one needs neither), so the wait ends as soon
/// as both are in; this bounds it when one was lost, or when a server
/// busy with another session's end answers late (10 ms missed two first
/// transfers in ten on the 2-core test VM).
const TRAIN_GRACE: Duration = Duration::from_millis(50);
/// The size of the server's train cars: every path carries it.
const SERVER_CAR: usize = MIN_PAYLOAD as usize;

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
    /// Trains sent (one with each hello).
    trains: u16,
    sent: Instant,
}

impl Hello {
    /// The largest datagram payload this host's route carries.
    pub fn largest(&self) -> usize {
        self.sizes[0]
    }
}

/// What set-up found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// UDP payload bytes per datagram both directions carry.
    pub payload: usize,
    /// The rate, in datagram bytes per second, at which the client's train
    /// reached the server, and the server's reached the client, where they
    /// could be measured.
    pub to_server: Option<u64>,
    pub from_server: Option<u64>,
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
        trains: 0,
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
/// before the first data, 1 GiB at 1 Gbit/s, 150 ms). The client's train
/// follows, at the largest size. A probe or car that fails to send locally
/// is ignored here.
fn send_hello(channel: &UdpChannel, h: &mut Hello, session: [u8; 16], send_key: &DatagramKey) {
    let pair = [Signal::Hello(session), Signal::Probe(h.sizes[0] as u16)];
    for sig in pair.iter().chain(pair.iter()) {
        let d = seal_signal(send_key, h.seq, sig);
        h.seq += 1;
        let _ = channel.send(&d, d.len(), Duration::from_millis(100));
    }
    h.seq = send_train(channel, send_key, h.seq, h.trains, h.sizes[0]);
    h.trains = h.trains.wrapping_add(1);
    h.sent = Instant::now();
}

/// Sends train number `train` of `size`-byte cars back to back, in as few
/// send calls as segmentation offload allows, from sequence number `seq`;
/// returns the next one.
fn send_train(channel: &UdpChannel, key: &DatagramKey, seq: u64, train: u16, size: usize) -> u64 {
    let count = train_len(size);
    let mut cars = Vec::with_capacity(count as usize * size);
    for index in 0..count {
        let car = Signal::Train {
            size: size as u16,
            train,
            index,
            count,
        };
        cars.extend_from_slice(&seal_signal(key, seq + u64::from(index), &car));
    }
    for batch in cars.chunks(channel.max_segments(size) * size) {
        let _ = channel.send(batch, size, Duration::from_millis(100));
    }
    seq + u64::from(count)
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
) -> Result<Setup, SetupFailed> {
    let heard = await_welcome(channel, &mut hello, session, (send_key, recv_key), rtt)?;
    let found = |payload| Setup {
        payload,
        to_server: heard.to_server,
        from_server: heard.from_server,
    };
    if heard.largest_echoed {
        return Ok(found(hello.sizes[0]));
    }
    probe_sizes(channel, &hello, (send_key, recv_key), rtt).map(found)
}

/// What the client heard while it waited for the hello's answer.
#[derive(Default)]
struct Heard {
    welcomed: Option<Instant>,
    largest_echoed: bool,
    /// The trains' rates where measured, and whether each is settled
    /// (answered, or measured, be it 0).
    to_server: Option<u64>,
    from_server: Option<u64>,
    to_settled: bool,
    from_settled: bool,
    /// The server's train.
    meter: TrainMeter,
}

impl Heard {
    /// One received datagram (`len` bytes sealed), with the kernel's
    /// receive time.
    fn take(
        &mut self,
        signal: Signal,
        (session, largest): ([u8; 16], usize),
        at: Option<Duration>,
        len: usize,
    ) {
        match signal {
            Signal::HelloAck(s) if s == session => {
                self.welcomed.get_or_insert_with(Instant::now);
            }
            Signal::ProbeAck(n) => self.largest_echoed |= n as usize == largest,
            Signal::TrainRate { rate, .. } => {
                self.to_settled = true;
                self.to_server = self.to_server.or((rate > 0).then_some(rate));
            }
            Signal::Train {
                train,
                index,
                count,
                ..
            } => {
                // Only the kernel's receive times measure a train.
                let car = (train, index, count);
                if let Some((_, rate)) = at.and_then(|at| self.meter.on_car(car, len, at)) {
                    self.from_settled = true;
                    self.from_server = self.from_server.or((rate > 0).then_some(rate));
                }
            }
            _ => {}
        }
    }

    /// Welcomed, and the trains are settled or their grace is over.
    fn done(&self, now: Instant) -> bool {
        self.welcomed
            .is_some_and(|at| (self.to_settled && self.from_settled) || now >= at + TRAIN_GRACE)
    }
}

/// Step 4 of set-up (P-23): waits for the hello's answer, sending the
/// hello again now and then, and for the trains' rates right behind it.
fn await_welcome(
    channel: &mut UdpChannel,
    hello: &mut Hello,
    session: [u8; 16],
    (send_key, recv_key): (&DatagramKey, &DatagramKey),
    rtt: Duration,
) -> Result<Heard, SetupFailed> {
    let mut batch = RecvBatch::default();
    let patience = (rtt * 10).max(Duration::from_secs(3));
    let resend = (rtt * 2).max(Duration::from_millis(200));
    let accepted = Instant::now();
    let deadline = accepted + patience;
    // The server answers a hello that waited for its acceptance right
    // behind it: allow that answer half a round trip before sending again.
    let mut next_hello = (hello.sent + resend).max(accepted + rtt / 2);
    let mut heard = Heard::default();
    let mine = (session, hello.sizes[0]);
    while !heard.done(Instant::now()) {
        let now = Instant::now();
        if heard.welcomed.is_none() && now >= deadline {
            return Err(SetupFailed(format!(
                "no answer from UDP port {} within {:.1}s (a firewall between the hosts?)",
                hello.server,
                patience.as_secs_f64()
            )));
        }
        if heard.welcomed.is_none() && now >= next_hello {
            send_hello(channel, hello, session, send_key);
            next_hello = now + resend;
        }
        let until = heard
            .welcomed
            .map_or(next_hello.min(deadline), |at| at + TRAIN_GRACE);
        if channel
            .recv(&mut batch, until.saturating_duration_since(now))
            .unwrap_or(0)
            > 0
        {
            batch.for_each_stamped(|_, at, d| {
                let len = d.len();
                if let Some(Opened::Signal { signal, .. }) = open(recv_key, d) {
                    heard.take(signal, mine, at, len);
                }
            });
        }
    }
    // The server's train lost its last car: what came measures it.
    if let (None, Some((_, rate))) = (heard.from_server, heard.meter.flush()) {
        heard.from_server = (rate > 0).then_some(rate);
    }
    Ok(heard)
}

/// Step 5 of set-up (P-23): finds the largest payload that crosses the
/// path both ways, each size probed up to three times.
fn probe_sizes(
    channel: &mut UdpChannel,
    hello: &Hello,
    (send_key, recv_key): (&DatagramKey, &DatagramKey),
    rtt: Duration,
) -> Result<usize, SetupFailed> {
    let mut batch = RecvBatch::default();
    let mut seq = hello.seq;
    // The echo may still be on its way: the first probe round waits for it.
    let wait = (rtt * 3).max(Duration::from_millis(100));
    for &size in &hello.sizes {
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
        "UDP port {} answered the hello but no probe of {} bytes or more came back",
        hello.server, MIN_PAYLOAD
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
    let mut r = Responder {
        session,
        send_key,
        recv_key,
        most,
        seq: 0,
        meter: TrainMeter::default(),
        train_sent: false,
        backlog: Vec::new(),
        data_from: None,
        replies: Vec::new(),
    };
    let mut batch = RecvBatch::default();
    let mut stopped = None;
    loop {
        // A pinned start's choice may overtake its hello (P-48): once told
        // to stop, the responder still waits a while for the datagram that
        // fixes the peer.
        if stop.load(Ordering::Acquire) {
            let at = *stopped.get_or_insert_with(Instant::now);
            if channel.peer().is_some() || at.elapsed() >= LATE_HELLO {
                break;
            }
        }
        // While a train arrives, a quiet socket soon means its last car
        // was lost: it is answered with what came.
        let wait = Duration::from_millis(if r.meter.is_open() { 2 } else { 20 });
        if channel.recv(&mut batch, wait).unwrap_or(0) == 0 {
            r.quiet(&channel);
        } else {
            batch.for_each_stamped(|from, at, d| r.take(from, at, d));
        }
        r.answer(&mut channel);
    }
    (channel, r.backlog)
}

/// The server's set-up state between receive calls.
struct Responder<'k> {
    session: [u8; 16],
    send_key: &'k DatagramKey,
    recv_key: &'k DatagramKey,
    /// Most datagrams sent, and the next sequence number.
    most: u64,
    seq: u64,
    meter: TrainMeter,
    train_sent: bool,
    backlog: Vec<Vec<u8>>,
    /// Where the first transfer datagram came from: with no hello yet (a
    /// pinned start's data follows its hello at once, P-48), it fixes the
    /// peer, as it proves the session's keys as well as a hello does.
    data_from: Option<SocketAddr>,
    /// Answers to send, each to the address its datagram came from.
    replies: Vec<(SocketAddr, Signal)>,
}

impl Responder<'_> {
    /// One received datagram, with the kernel's receive time.
    fn take(&mut self, from: SocketAddr, at: Option<Duration>, d: &mut [u8]) {
        let raw = d.to_vec();
        let Some(opened) = open(self.recv_key, d) else {
            return;
        };
        let reply = match opened {
            Opened::Signal {
                signal: Signal::Hello(s),
                ..
            } if s == self.session => Signal::HelloAck(s),
            Opened::Signal {
                signal: Signal::Probe(n),
                ..
            } => Signal::ProbeAck(n),
            Opened::Signal {
                signal:
                    Signal::Train {
                        train,
                        index,
                        count,
                        ..
                    },
                ..
            } => {
                // Only the kernel's receive times measure a train.
                let car = (train, index, count);
                match at.and_then(|at| self.meter.on_car(car, raw.len(), at)) {
                    Some((train, rate)) => Signal::TrainRate { train, rate },
                    None => return,
                }
            }
            other => {
                let seq = match other {
                    Opened::Chunk { seq, .. }
                    | Opened::Parity { seq, .. }
                    | Opened::Signal { seq, .. } => seq,
                };
                if self.backlog.len() < BACKLOG {
                    self.backlog.push(raw);
                }
                // Set-up's numbers (a hello for another session) fix
                // nothing.
                if seq >= DATA_SEQ_START {
                    self.data_from.get_or_insert(from);
                }
                return;
            }
        };
        self.replies.push((from, reply));
    }

    /// Nothing waits on the socket: a train whose last car was lost is
    /// answered with what came.
    fn quiet(&mut self, channel: &UdpChannel) {
        if let (Some((train, rate)), Some(peer)) = (self.meter.flush(), channel.peer()) {
            self.replies.push((peer, Signal::TrainRate { train, rate }));
        }
    }

    /// Sends the answers: only to the client whose hello fixed the peer,
    /// a train's rate twice (a lost one would cost the transfer its
    /// start), and the server's own train right behind the first
    /// `HelloAck`.
    fn answer(&mut self, channel: &mut UdpChannel) {
        if let (None, Some(from)) = (channel.peer(), self.data_from) {
            if let Err(e) = channel.connect(from) {
                tracing::warn!("UDP channel: cannot connect to {from}: {e}");
            }
        }
        for (from, reply) in std::mem::take(&mut self.replies) {
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
            let times = if matches!(reply, Signal::TrainRate { .. }) {
                2
            } else {
                1
            };
            for _ in 0..times {
                self.send(channel, &reply);
            }
            if matches!(reply, Signal::HelloAck(_)) && !self.train_sent {
                self.train_sent = true;
                if self.seq + u64::from(train_len(SERVER_CAR)) <= self.most {
                    self.seq = send_train(channel, self.send_key, self.seq, 0, SERVER_CAR);
                }
            }
        }
    }

    /// Seals and sends one answer, unless `most` have gone.
    fn send(&mut self, channel: &UdpChannel, reply: &Signal) {
        if self.seq >= self.most {
            if self.seq == self.most {
                tracing::warn!(
                    "UDP set-up: the client sent more than {} hellos and probes; answering no more",
                    self.most
                );
                self.seq += 1;
            }
            return;
        }
        let d = seal_signal(self.send_key, self.seq, reply);
        self.seq += 1;
        let _ = channel.send(&d, d.len(), Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secure::Protection;
    use wire::datagram::SETUP_TRAIN_MAX;

    fn keys() -> (DatagramKey, DatagramKey) {
        (
            DatagramKey::new(Protection::Aes256Gcm, &[1; 32]),
            DatagramKey::new(Protection::Aes256Gcm, &[2; 32]),
        )
    }

    /// Every signal that reached `c` within `wait`, opened with `key`,
    /// with its sequence number and sealed length; `None` for one that
    /// did not open.
    fn heard(
        c: &UdpChannel,
        key: &DatagramKey,
        wait: Duration,
    ) -> Vec<Option<(u64, Signal, usize)>> {
        let mut batch = RecvBatch::default();
        let mut got = Vec::new();
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if c.recv(&mut batch, Duration::from_millis(50)).unwrap_or(0) > 0 {
                batch.for_each(|_, d| {
                    let len = d.len();
                    got.push(match open(key, d) {
                        Some(Opened::Signal { seq, signal }) => Some((seq, signal, len)),
                        _ => None,
                    });
                });
            }
        }
        got
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
        client(c, hello, session, c2s, s2c, rtt).map(|s| s.payload)
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

    /// A pinned start's data follows its hello at once (P-48): with the
    /// hello lost, its first authenticated datagram fixes the peer, and
    /// the data waits for the receiver.
    #[test]
    fn data_without_a_hello_fixes_the_peer_and_is_kept() {
        let (c2s, s2c) = keys();
        let c = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let me = c.local_addr().unwrap();
        let forged = seal_signal(&s2c, DATA_SEQ_START, &Signal::Ping);
        let d = seal_signal(&c2s, DATA_SEQ_START, &Signal::Ping);
        let (server, backlog) = serve_while((&c2s, &s2c), |addr| {
            let mut c = c;
            c.connect(addr).unwrap();
            for x in [&forged, &d] {
                c.send(x, x.len(), Duration::from_millis(100)).unwrap();
            }
            std::thread::sleep(Duration::from_millis(100));
        });
        assert_eq!(server.peer(), Some(me));
        assert_eq!(backlog, vec![d], "only the datagram that opened is kept");
    }

    /// Runs the responder on loopback for session `[7; 16]` while `client`
    /// runs with its address; returns what the responder ended with.
    fn serve_while(
        (c2s, s2c): (&DatagramKey, &DatagramKey),
        client: impl FnOnce(SocketAddr),
    ) -> (UdpChannel, Vec<Vec<u8>>) {
        let server = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let h = scope.spawn(|| serve(server, [7; 16], s2c, c2s, &stop));
            client(addr);
            stop.store(true, Ordering::Release);
            h.join().unwrap()
        })
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
                .expect("set-up succeeds")
                .payload;
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

    /// The hello carries the client's train; the server answers it with
    /// its rate (twice) and sends its own train of 1200-byte cars once,
    /// right behind the hello's answer (P-23, version 20).
    #[test]
    fn trains_go_both_ways_with_the_hello() {
        let (c2s, s2c) = keys();
        let server = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let h = scope.spawn(|| serve(server, [7; 16], &s2c, &c2s, &stop));
            let mut c = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let hello = client_hello(&mut c, addr, [7; 16], &c2s).unwrap();
            assert_eq!(hello.seq, 4 + u64::from(train_len(9000 - 28)));
            let (mut rates, mut cars, mut acks) = (0, Vec::new(), 0);
            for got in heard(&c, &s2c, Duration::from_millis(500)) {
                let (_, signal, len) = got.expect("everything the server sends opens");
                match signal {
                    Signal::HelloAck(_) => acks += 1,
                    Signal::TrainRate { train: 0, .. } => rates += 1,
                    Signal::Train { index, count, .. } => cars.push((index, count, len)),
                    _ => {}
                }
            }
            stop.store(true, Ordering::Release);
            h.join().unwrap();
            // Both hellos of the double pair are answered; the train goes once.
            assert_eq!(acks, 2);
            assert_eq!(rates, 2);
            assert_eq!(cars.len(), 64);
            assert!(cars
                .iter()
                .enumerate()
                .all(|(i, &c)| c == (i as u16, 64, 1200)));
        });
    }

    /// A client that sends train after train, and cars that claim more
    /// than 64 in their train, gets at most 16 trains answered, each
    /// twice, and nothing for the cars out of range (P-23, S-limits).
    #[test]
    fn a_flood_of_trains_is_answered_a_bounded_number_of_times() {
        let (c2s, s2c) = keys();
        let server = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let h = scope.spawn(|| serve(server, [7; 16], &s2c, &c2s, &stop));
            let mut c = UdpChannel::bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let hello = client_hello(&mut c, addr, [7; 16], &c2s).unwrap();
            let mut seq = hello.seq;
            for train in 1..100u16 {
                seq = send_train(&c, &c2s, seq, train, MIN_PAYLOAD as usize);
            }
            for count in [SETUP_TRAIN_MAX + 1, u16::MAX] {
                let car = Signal::Train {
                    size: MIN_PAYLOAD,
                    train: 500,
                    index: count - 1,
                    count,
                };
                let d = seal_signal(&c2s, seq, &car);
                seq += 1;
                c.send(&d, d.len(), Duration::from_millis(100)).unwrap();
            }
            let answered: Vec<u16> = heard(&c, &s2c, Duration::from_millis(800))
                .into_iter()
                .filter_map(|got| match got {
                    Some((_, Signal::TrainRate { train, .. }, _)) => Some(train),
                    _ => None,
                })
                .collect();
            stop.store(true, Ordering::Release);
            h.join().unwrap();
            assert!(!answered.contains(&500), "{answered:?}");
            assert!(
                answered.len() <= 2 * crate::datagram::train::TRAINS_ANSWERED_MAX as usize,
                "{} answers",
                answered.len()
            );
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
            let seqs: Vec<u64> = heard(&c, &s2c, Duration::from_millis(500))
                .into_iter()
                .flatten()
                .map(|(seq, _, _)| seq)
                .collect();
            let (answers, highest) = (seqs.len(), seqs.iter().copied().max().unwrap_or(0));
            stop.store(true, Ordering::Release);
            h.join().unwrap();
            assert_eq!(answers, 3);
            assert_eq!(highest, 2);
        });
    }
}
