//! The adaptive controller sharing one bottleneck with loss-based TCP
//! (CUBIC, RFC 9438, modelled per packet with SACK-like loss detection)
//! through the netsim link model: the shares each policy takes, measured
//! deterministically in simulated minutes.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use netsim::{Link, LinkConfig};
use rate::{Adaptive, Feedback, RateController, Share};

/// MTU 1500: TCP's segment and the UDP channel's datagram.
const PKT: usize = 1448;
const INTERVAL: Duration = Duration::from_millis(50);
const LINK: f64 = 125_000_000.0;

/// One CUBIC sender and its receiver's acknowledgements.
struct Cubic {
    id: u8,
    start: Duration,
    /// No new data after this: the flow ends.
    stop: Duration,
    cwnd: f64,
    ssthresh: f64,
    w_max: f64,
    k: f64,
    epoch: Duration,
    next: u64,
    /// Sent and not yet acknowledged: sequence number → time sent.
    out: BTreeMap<u64, Duration>,
    /// A loss at or above this sequence number is a new loss event.
    recover: u64,
    acks: VecDeque<(Duration, u64)>,
    delivered: u64,
}

const BETA: f64 = 0.7;
const C: f64 = 0.4;

impl Cubic {
    fn new(id: u8, (start, stop): (Duration, Duration)) -> Cubic {
        Cubic {
            id,
            start,
            stop,
            cwnd: 10.0,
            ssthresh: f64::MAX,
            w_max: 0.0,
            k: 0.0,
            epoch: Duration::ZERO,
            next: 0,
            out: BTreeMap::new(),
            recover: 0,
            acks: VecDeque::new(),
            delivered: 0,
        }
    }

    fn send(&mut self, now: Duration, link: &mut Link) {
        if now < self.start || now >= self.stop {
            return;
        }
        while (self.out.len() as f64) < self.cwnd {
            let mut p = vec![0u8; PKT];
            p[0] = self.id;
            p[1..9].copy_from_slice(&self.next.to_le_bytes());
            link.send(now, p);
            self.out.insert(self.next, now);
            self.next += 1;
        }
    }

    /// No acknowledgement for a second and more: everything out is lost
    /// and the window starts again from one segment (RFC 6298).
    fn rto(&self) -> Option<Duration> {
        // Sequence numbers go out in order: the first is the oldest.
        let (_, &oldest) = self.out.first_key_value()?;
        Some(oldest + Duration::from_secs(1))
    }

    fn on_timeout(&mut self, now: Duration) {
        if self.rto().is_some_and(|t| t <= now) {
            self.out.clear();
            self.ssthresh = (self.cwnd / 2.0).max(2.0);
            self.w_max = self.cwnd;
            self.cwnd = 1.0;
            self.recover = self.next;
        }
    }

    fn on_ack(&mut self, now: Duration, seq: u64, rtt: Duration) {
        if self.out.remove(&seq).is_none() {
            return;
        }
        self.delivered += PKT as u64;
        // Three later segments acknowledged: what is still out below them
        // is lost.
        let lost: Vec<u64> = self
            .out
            .range(..seq.saturating_sub(3))
            .map(|(&s, _)| s)
            .collect();
        for s in &lost {
            self.out.remove(s);
        }
        if lost.iter().any(|&s| s >= self.recover) {
            self.w_max = self.cwnd;
            self.cwnd = (self.cwnd * BETA).max(2.0);
            self.ssthresh = self.cwnd;
            self.k = (self.w_max * (1.0 - BETA) / C).cbrt();
            self.epoch = now;
            self.recover = self.next;
            return;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd += 1.0;
            return;
        }
        let t = (now - self.epoch + rtt).as_secs_f64();
        let target = self.w_max + C * (t - self.k).powi(3);
        let reno = self.w_max * BETA
            + 3.0 * (1.0 - BETA) / (1.0 + BETA) * (now - self.epoch).as_secs_f64()
                / rtt.as_secs_f64();
        if target > self.cwnd {
            self.cwnd += (target - self.cwnd) / self.cwnd;
        } else {
            self.cwnd += 0.01 / self.cwnd;
        }
        self.cwnd = self.cwnd.max(reno);
    }
}

/// The rate-controlled flow's receiver, reporting once per interval.
#[derive(Default)]
struct Reports {
    bytes: u64,
    packets: u64,
    lost: u64,
    run: u64,
    expect: u64,
    min_owd: Option<Duration>,
}

struct Shares {
    /// Bytes per second each flow delivered over the measured window:
    /// the rate-controlled flow first, then each TCP flow.
    ours: f64,
    tcp: Vec<f64>,
}

/// The controller's flow joins at `join` (TCP flows start and stop at
/// theirs);
/// shares are measured over `[from, end)`.
fn run(
    ctl: &mut dyn RateController,
    tcp_flows: &[(Duration, Duration)],
    join: Duration,
    from: Duration,
    end: Duration,
) -> Shares {
    let delay = Duration::from_millis(75);
    let rtt = 2 * delay;
    let mut link = Link::new(
        LinkConfig {
            delay,
            rate_bps: Some(1_000_000_000),
            ..Default::default()
        },
        11,
    );
    let mut tcp: Vec<Cubic> = tcp_flows
        .iter()
        .enumerate()
        .map(|(i, &f)| Cubic::new(i as u8 + 1, f))
        .collect();
    let mut now = Duration::ZERO;
    let mut next_send = join;
    let mut next_report = join + INTERVAL;
    let mut seq = 0u64;
    let mut rx = Reports::default();
    let mut reports: VecDeque<(Duration, Feedback)> = VecDeque::new();
    let mut ours = 0u64;
    // What each TCP flow had delivered at `from`.
    let mut tcp_from: Option<Vec<u64>> = None;
    while now < end {
        if now >= from && tcp_from.is_none() {
            tcp_from = Some(tcp.iter().map(|c| c.delivered).collect());
        }
        while next_send <= now {
            let mut p = vec![0u8; PKT];
            p[1..9].copy_from_slice(&seq.to_le_bytes());
            p[9..17].copy_from_slice(&(next_send.as_nanos() as u64).to_le_bytes());
            link.send(next_send, p);
            seq += 1;
            next_send += Duration::from_secs_f64(PKT as f64 / ctl.rate() as f64);
        }
        for c in &mut tcp {
            c.on_timeout(now);
            c.send(now, &mut link);
        }
        while let Some(p) = link.poll(now) {
            let s = u64::from_le_bytes(p[1..9].try_into().unwrap());
            if p[0] != 0 {
                tcp[p[0] as usize - 1].acks.push_back((now + delay, s));
                continue;
            }
            if now >= from {
                ours += PKT as u64;
            }
            let sent = Duration::from_nanos(u64::from_le_bytes(p[9..17].try_into().unwrap()));
            if s > rx.expect {
                rx.lost += s - rx.expect;
                rx.run = rx.run.max(s - rx.expect);
            }
            rx.expect = rx.expect.max(s + 1);
            rx.bytes += PKT as u64;
            rx.packets += 1;
            let owd = now - sent;
            rx.min_owd = Some(rx.min_owd.map_or(owd, |m| m.min(owd)));
        }
        for c in &mut tcp {
            while c.acks.front().is_some_and(|a| a.0 <= now) {
                let (_, s) = c.acks.pop_front().unwrap();
                c.on_ack(now, s, rtt);
            }
        }
        if now >= next_report {
            if let Some(min_one_way) = rx.min_owd {
                let fb = Feedback {
                    interval: INTERVAL,
                    bytes: rx.bytes,
                    packets: rx.packets,
                    lost: rx.lost,
                    longest_loss_run: rx.run,
                    min_one_way,
                    app_limited: false,
                    train_rate: 0,
                };
                reports.push_back((now + delay, fb));
            }
            rx = Reports {
                expect: rx.expect,
                ..Default::default()
            };
            next_report += INTERVAL;
        }
        while reports.front().is_some_and(|r| r.0 <= now) {
            let (t, fb) = reports.pop_front().unwrap();
            ctl.on_feedback(t, &fb);
            if std::env::var_os("SHARE_TRACE").is_some() && t.subsec_millis() < 50 {
                let cw: Vec<String> = tcp.iter().map(|c| format!("{:.0}", c.cwnd)).collect();
                eprintln!(
                    "{:>5.1}s rate {:>6.1} Mbit/s delivered {:>6.1} owd {:?} lost {} | {} | cwnd {}",
                    t.as_secs_f64(),
                    ctl.rate() as f64 * 8e-6,
                    fb.delivery_rate() * 8e-6,
                    fb.min_one_way,
                    fb.lost,
                    ctl.state(),
                    cw.join(" ")
                );
            }
        }
        let mut next = next_send.min(next_report);
        for c in &tcp {
            if let Some(a) = c.acks.front() {
                next = next.min(a.0);
            }
            if now < c.start {
                next = next.min(c.start);
            }
            if let Some(t) = c.rto() {
                next = next.min(t);
            }
        }
        if let Some(a) = link.next_arrival() {
            next = next.min(a);
        }
        if let Some(r) = reports.front() {
            next = next.min(r.0);
        }
        now = next.max(now + Duration::from_nanos(1));
    }
    let secs = (end - from).as_secs_f64();
    Shares {
        ours: ours as f64 / secs,
        tcp: tcp
            .iter()
            .zip(tcp_from.unwrap_or_default())
            .map(|(c, f)| (c.delivered - f) as f64 / secs)
            .collect(),
    }
}

fn controller(share: Share) -> Adaptive {
    Adaptive::new(12_500_000, None)
        .with_rtt(Duration::from_millis(150))
        .with_share(share)
}

const S: fn(u64) -> Duration = Duration::from_secs;
/// A TCP flow from `start` to the end of the run.
fn from(start: u64) -> (Duration, Duration) {
    (S(start), Duration::MAX)
}

fn report(what: &str, s: &Shares) {
    let tcp: Vec<String> = s.tcp.iter().map(|t| format!("{:.3}", t / LINK)).collect();
    eprintln!(
        "{what}: ours {:.3} of the link, tcp [{}]",
        s.ours / LINK,
        tcp.join(", ")
    );
}

/// The case: one CUBIC flow fills the link, haul joins 10 s later.
#[test]
fn joining_a_cubic_flow_takes_a_fair_share() {
    let s = run(
        &mut controller(Share::Fair),
        &[from(0)],
        S(10),
        S(40),
        S(100),
    );
    report("fair, joining one cubic flow", &s);
    let ours = s.ours / LINK;
    assert!((0.4..=0.6).contains(&ours), "ours {ours:.3}");
    assert!(s.ours + s.tcp[0] >= 0.9 * LINK, "the link is not kept full");
}

/// A CUBIC flow joins a link haul holds.
#[test]
fn a_cubic_flow_joining_gets_a_fair_share() {
    let s = run(
        &mut controller(Share::Fair),
        &[from(10)],
        S(0),
        S(40),
        S(100),
    );
    report("fair, cubic joins", &s);
    let ours = s.ours / LINK;
    assert!((0.4..=0.6).contains(&ours), "ours {ours:.3}");
}

/// Against two CUBIC flows, between a third and a half: competing keeps
/// CUBIC's law between a 32nd and 0.55 of the path (here the second flow
/// joining the first takes little, as CUBIC flows do beside one another).
#[test]
fn against_two_flows_at_most_half() {
    let s = run(
        &mut controller(Share::Fair),
        &[from(0), from(2)],
        S(10),
        S(40),
        S(100),
    );
    report("fair, two cubic flows", &s);
    let ours = s.ours / LINK;
    assert!((0.3..=0.55).contains(&ours), "ours {ours:.3}");
}

/// The CUBIC flow ends: the whole path again, within seconds.
#[test]
fn the_path_comes_back_when_the_other_flow_ends() {
    let s = run(
        &mut controller(Share::Fair),
        &[(S(0), S(40))],
        S(10),
        S(50),
        S(70),
    );
    report("fair, after the cubic flow ended", &s);
    assert!(s.ours / LINK >= 0.9, "ours {:.3}", s.ours / LINK);
}

/// `--fair=off`, for a dedicated path: the rate found is held when a CUBIC
/// flow joins.
#[test]
fn off_holds_the_path() {
    let s = run(
        &mut controller(Share::Off),
        &[from(10)],
        S(0),
        S(40),
        S(100),
    );
    report("off, cubic joins", &s);
    assert!(s.ours / LINK >= 0.7, "ours {:.3}", s.ours / LINK);
}

/// `--background` yields to a CUBIC flow and takes the link when it is
/// idle.
#[test]
fn background_yields_and_fills_an_idle_link() {
    let s = run(
        &mut controller(Share::Background),
        &[from(0)],
        S(10),
        S(20),
        S(60),
    );
    report("background, one cubic flow", &s);
    assert!(s.ours / LINK <= 0.10, "ours {:.3}", s.ours / LINK);
    let s = run(&mut controller(Share::Background), &[], S(0), S(10), S(30));
    report("background, idle link", &s);
    assert!(s.ours / LINK >= 0.93, "ours {:.3}", s.ours / LINK);
}
