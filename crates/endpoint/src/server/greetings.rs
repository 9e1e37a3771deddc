//! Connections not yet authenticated (P-39, issue 39): how many may be in
//! their greeting at once, how many from one source, for how long, and
//! how many UDP sockets they may hold, so that no one without a key can
//! lock the authorized clients out.
//!
//! As sshd (`MaxStartups 10:30:100`, `PerSourceMaxStartups`,
//! `LoginGraceTime`):
//! - at most [`MAX_GREETING`] connections are in their greeting at once;
//!   past [`EARLY_DROP_FROM`] a new one is closed at random, more often
//!   the fuller (30% there, rising to 100% at the limit), so that a flood
//!   cannot keep every slot while clients that try again get through;
//! - at most `per_source` (`--max-startups-per-source`, 32) from one
//!   address (one /64 for IPv6), unless that address already runs an
//!   authenticated session (its data connections dial in at once);
//! - each has [`GREETING_GRACE`] in all for its preamble, handshake and
//!   join: one byte every few seconds no longer keeps a slot;
//! - a UDP socket is opened before authentication (so that its port rides
//!   in handshake message two) only while this source holds no other and
//!   such sockets are fewer than a quarter of `--data-ports` (64 without
//!   it); otherwise it is opened once the client is authenticated and named
//!   in `Accept` (P-23), a round trip later.

use std::collections::HashMap;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

/// Most connections in their greeting at once. Each holds a thread; past
/// this many a new connection is closed at once.
pub const MAX_GREETING: usize = 512;
/// From this many in their greeting, new connections are closed at random
/// (sshd's `MaxStartups` start).
pub const EARLY_DROP_FROM: usize = 256;
/// How often a connection is closed at [`EARLY_DROP_FROM`], in percent.
const EARLY_DROP_RATE: u64 = 30;
/// The most connections one address may have in their greeting, by default.
pub const PER_SOURCE: usize = 32;
/// Time for a connection's whole greeting: preamble, handshake, join.
pub const GREETING_GRACE: Duration = Duration::from_secs(20);
/// UDP sockets unauthenticated handshakes may hold without `--data-ports`.
const EARLY_UDP_ANY_PORT: usize = 64;

/// Why a new connection was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    Full,
    EarlyDrop,
    Source,
}

/// An address, as limits count it: IPv6 by its /64.
type Source = IpAddr;

fn source(ip: IpAddr) -> Source {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

#[derive(Default)]
struct State {
    total: usize,
    by_source: HashMap<Source, usize>,
    /// Addresses with an authenticated session running, and how many.
    trusted: HashMap<Source, usize>,
    /// Each greeting's deadline and a handle to shut its socket.
    timed: HashMap<u64, (Instant, TcpStream)>,
    next: u64,
    rng: u64,
    /// UDP sockets opened before authentication, in all and by source.
    early_udp: usize,
    early_udp_by_source: HashMap<Source, usize>,
}

/// The greetings of one server.
pub(super) struct Greetings {
    state: Mutex<State>,
    per_source: usize,
    /// The most UDP sockets unauthenticated handshakes may hold.
    early_udp_max: usize,
    reaper: Once,
}

/// A connection in its greeting, counted until dropped.
pub(super) struct Greeting {
    greetings: Arc<Greetings>,
    source: Source,
    id: u64,
    per_source: bool,
}

/// An authenticated session from an address, until dropped.
pub(super) struct Trusted {
    greetings: Arc<Greetings>,
    source: Source,
}

/// A UDP socket opened before authentication, counted until dropped (or
/// until its session is authenticated).
pub(super) struct EarlyUdp {
    greetings: Arc<Greetings>,
    source: Source,
}

impl Greetings {
    /// `data_ports`: how many ports `--data-ports` gives UDP channels, if
    /// it is given.
    pub(super) fn new(per_source: usize, data_ports: Option<usize>) -> Arc<Greetings> {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        Arc::new(Greetings {
            state: Mutex::new(State {
                rng: seed,
                ..State::default()
            }),
            per_source: per_source.max(1),
            early_udp_max: data_ports.map_or(EARLY_UDP_ANY_PORT, |n| n / 4),
            reaper: Once::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a new connection from `peer`, or says why it is closed at
    /// once. Its socket is shut when its grace time is over.
    pub(super) fn enter(
        self: &Arc<Self>,
        stream: &TcpStream,
        peer: IpAddr,
    ) -> Result<Greeting, Refused> {
        self.reaper.call_once(|| {
            let g = self.clone();
            std::thread::spawn(move || g.reap());
        });
        let src = source(peer);
        let mut st = self.lock();
        if st.total >= MAX_GREETING {
            return Err(Refused::Full);
        }
        if st.total >= EARLY_DROP_FROM {
            // xorshift64: not for secrets, only to pick whom to close.
            st.rng ^= st.rng << 13;
            st.rng ^= st.rng >> 7;
            st.rng ^= st.rng << 17;
            let span = (MAX_GREETING - EARLY_DROP_FROM) as u64;
            let p = EARLY_DROP_RATE
                + (100 - EARLY_DROP_RATE) * (st.total - EARLY_DROP_FROM) as u64 / span;
            if st.rng % 100 < p {
                return Err(Refused::EarlyDrop);
            }
        }
        let per_source = !st.trusted.contains_key(&src);
        if per_source && st.by_source.get(&src).copied().unwrap_or(0) >= self.per_source {
            return Err(Refused::Source);
        }
        st.total += 1;
        if per_source {
            *st.by_source.entry(src).or_default() += 1;
        }
        let id = st.next;
        st.next += 1;
        if let Ok(s) = stream.try_clone() {
            st.timed.insert(id, (Instant::now() + GREETING_GRACE, s));
        }
        Ok(Greeting {
            greetings: self.clone(),
            source: src,
            id,
            per_source,
        })
    }

    /// Shuts the sockets of greetings past their grace time, for ever.
    fn reap(&self) {
        loop {
            std::thread::sleep(Duration::from_millis(250));
            let now = Instant::now();
            let mut st = self.lock();
            st.timed.retain(|_, (deadline, s)| {
                let over = *deadline <= now;
                if over {
                    let _ = s.shutdown(Shutdown::Both);
                }
                !over
            });
        }
    }

    /// An authenticated session from `peer`: its address's next
    /// connections (its data connections) are not held to the per-source
    /// limit while it runs.
    pub(super) fn trust(self: &Arc<Self>, peer: IpAddr) -> Trusted {
        let src = source(peer);
        *self.lock().trusted.entry(src).or_default() += 1;
        Trusted {
            greetings: self.clone(),
            source: src,
        }
    }

    /// Room for a UDP socket before `peer` is authenticated, if this
    /// source holds none yet and such sockets are few enough.
    pub(super) fn early_udp(self: &Arc<Self>, peer: IpAddr) -> Option<EarlyUdp> {
        let src = source(peer);
        let mut st = self.lock();
        if st.early_udp >= self.early_udp_max
            || st.early_udp_by_source.get(&src).copied().unwrap_or(0) > 0
        {
            return None;
        }
        st.early_udp += 1;
        *st.early_udp_by_source.entry(src).or_default() += 1;
        Some(EarlyUdp {
            greetings: self.clone(),
            source: src,
        })
    }

    /// How many connections are in their greeting now.
    #[cfg(test)]
    fn count(&self) -> usize {
        self.lock().total
    }
}

fn decrement(map: &mut HashMap<Source, usize>, src: &Source) {
    if let Some(n) = map.get_mut(src) {
        *n -= 1;
        if *n == 0 {
            map.remove(src);
        }
    }
}

impl Greeting {
    /// A data connection that named an authenticated session: bounded by
    /// that session's streams from here on, not by the grace time or the
    /// per-source limit (it may wait for its session's answer).
    pub(super) fn joined_session(&mut self) {
        let mut st = self.greetings.lock();
        st.timed.remove(&self.id);
        if self.per_source {
            decrement(&mut st.by_source, &self.source);
            self.per_source = false;
        }
    }
}

impl Drop for Greeting {
    fn drop(&mut self) {
        let mut st = self.greetings.lock();
        st.total -= 1;
        st.timed.remove(&self.id);
        if self.per_source {
            decrement(&mut st.by_source, &self.source);
        }
    }
}

impl Drop for Trusted {
    fn drop(&mut self) {
        decrement(&mut self.greetings.lock().trusted, &self.source);
    }
}

impl Drop for EarlyUdp {
    fn drop(&mut self) {
        let mut st = self.greetings.lock();
        st.early_udp -= 1;
        decrement(&mut st.early_udp_by_source, &self.source);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(l: &TcpListener) -> TcpStream {
        TcpStream::connect(l.local_addr().unwrap()).unwrap()
    }

    #[test]
    fn one_source_holds_at_most_its_share_unless_it_runs_a_session() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let g = Greetings::new(3, None);
        let s = pair(&l);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let held: Vec<_> = (0..3).map(|_| g.enter(&s, ip).unwrap()).collect();
        assert_eq!(g.enter(&s, ip).err(), Some(Refused::Source));
        assert!(g.enter(&s, "10.0.0.2".parse().unwrap()).is_ok());
        // An authenticated session from there: its data connections pass.
        let t = g.trust(ip);
        assert!(g.enter(&s, ip).is_ok());
        drop(t);
        assert_eq!(g.enter(&s, ip).err(), Some(Refused::Source));
        drop(held);
        assert!(g.enter(&s, ip).is_ok());
        assert_eq!(g.count(), 0);
        // IPv6 counts by /64.
        let a: IpAddr = "2001:db8::1".parse().unwrap();
        let b: IpAddr = "2001:db8::2:3".parse().unwrap();
        let _v6: Vec<_> = (0..3).map(|_| g.enter(&s, a).unwrap()).collect();
        assert_eq!(g.enter(&s, b).err(), Some(Refused::Source));
    }

    #[test]
    fn past_half_full_new_connections_are_dropped_at_random_and_full_is_full() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let g = Greetings::new(MAX_GREETING, None);
        let s = pair(&l);
        let mut held = Vec::new();
        let mut dropped = 0;
        let mut n = 0u32;
        while held.len() < MAX_GREETING {
            n += 1;
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n));
            match g.enter(&s, ip) {
                Ok(x) => held.push(x),
                Err(Refused::EarlyDrop) => dropped += 1,
                Err(e) => panic!("{e:?} at {}", held.len()),
            }
            assert!(n < 100_000);
        }
        // Between half and full about half were dropped (30% to 100%).
        assert!(dropped > 100, "{dropped}");
        let ip = "10.9.9.9".parse().unwrap();
        assert_eq!(g.enter(&s, ip).err(), Some(Refused::Full));
    }

    #[test]
    fn a_greeting_past_its_grace_time_is_shut() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let g = Greetings::new(8, None);
        let client = pair(&l);
        let (served, _) = l.accept().unwrap();
        let mut greeting = g.enter(&served, "10.0.0.1".parse().unwrap()).unwrap();
        // Its deadline moved to now: the reaper shuts the socket.
        g.lock().timed.get_mut(&greeting.id).unwrap().0 = Instant::now();
        let mut b = [0u8; 1];
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert!(matches!(std::io::Read::read(&mut &client, &mut b), Ok(0)));
        greeting.joined_session();
        drop(greeting);
        assert_eq!(g.count(), 0);
    }

    #[test]
    fn early_udp_sockets_are_one_a_source_and_a_quarter_of_the_ports() {
        let g = Greetings::new(8, Some(8));
        let (a, b, c) = (
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            "10.0.0.3".parse().unwrap(),
        );
        let first = g.early_udp(a).unwrap();
        assert!(g.early_udp(a).is_none(), "one a source");
        let _second = g.early_udp(b).unwrap();
        assert!(g.early_udp(c).is_none(), "a quarter of 8 ports");
        drop(first);
        assert!(g.early_udp(c).is_some());
        assert!(Greetings::new(8, Some(3)).early_udp(a).is_none());
    }
}
