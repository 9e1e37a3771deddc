//! The adaptive controller driving a paced sender through the netsim link
//! model, with receiver reports coming back one delay later: simulated
//! minutes run in seconds, deterministically.

use std::time::Duration;

use netsim::{Link, LinkConfig};
use rate::{Adaptive, Feedback, RateController};

const PKT: usize = 8952;
const INTERVAL: Duration = Duration::from_millis(50);

struct Outcome {
    /// Delivered bytes per second over the second half of the run.
    goodput: f64,
    /// Sent bytes per second over the second half.
    send_rate: f64,
    /// Delivered bytes per second over the first half.
    early_goodput: f64,
    /// Mean queueing delay seen by the receiver over the second half.
    queueing: Duration,
    congestion_events: u64,
}

fn simulate(cfg: LinkConfig, ctl: &mut dyn RateController, secs: u64, seed: u64) -> Outcome {
    let one_way = cfg.delay;
    let mut link = Link::new(cfg, seed);
    let end = Duration::from_secs(secs);
    let half = end / 2;
    let mut now = Duration::ZERO;
    let mut next_send = Duration::ZERO;
    let mut next_report = INTERVAL;
    let mut seq = 0u64;
    // Receiver state for the current interval.
    let (mut bytes, mut packets, mut lost, mut run, mut expect) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut min_owd = Duration::MAX;
    // Reports on their way back to the sender.
    let mut reports: std::collections::VecDeque<(Duration, Feedback)> = Default::default();
    let (mut late_bytes, mut late_sent, mut early_bytes) = (0u64, 0u64, 0u64);
    let (mut qsum, mut qn) = (0f64, 0u64);
    let mut floor_owd = Duration::MAX;
    while now < end {
        // Sender.
        while next_send <= now {
            let mut p = vec![0u8; PKT];
            p[..8].copy_from_slice(&seq.to_le_bytes());
            p[8..16].copy_from_slice(&(next_send.as_nanos() as u64).to_le_bytes());
            link.send(next_send, p);
            seq += 1;
            if next_send >= half {
                late_sent += PKT as u64;
            }
            next_send += Duration::from_secs_f64(PKT as f64 / ctl.rate() as f64);
        }
        // Receiver.
        while let Some(p) = link.poll(now) {
            let s = u64::from_le_bytes(p[..8].try_into().unwrap());
            let sent = Duration::from_nanos(u64::from_le_bytes(p[8..16].try_into().unwrap()));
            if s > expect {
                lost += s - expect;
                run = run.max(s - expect);
            }
            expect = expect.max(s + 1);
            bytes += p.len() as u64;
            packets += 1;
            let owd = now - sent;
            min_owd = min_owd.min(owd);
            floor_owd = floor_owd.min(owd);
            if now < half {
                early_bytes += p.len() as u64;
            }
            if now >= half {
                late_bytes += p.len() as u64;
                qsum += (owd - floor_owd).as_secs_f64();
                qn += 1;
            }
        }
        if now >= next_report {
            let fb = Feedback {
                interval: INTERVAL,
                bytes,
                packets,
                lost,
                longest_loss_run: run,
                min_one_way: if packets > 0 { min_owd } else { one_way * 10 },
                app_limited: false,
                train_rate: 0,
            };
            if packets > 0 {
                reports.push_back((now + one_way, fb));
            }
            (bytes, packets, lost, run, min_owd) = (0, 0, 0, 0, Duration::MAX);
            next_report += INTERVAL;
        }
        while reports.front().is_some_and(|r| r.0 <= now) {
            let (t, fb) = reports.pop_front().unwrap();
            ctl.on_feedback(t, &fb);
        }
        // Next event.
        let mut next = next_send.min(next_report);
        if let Some(a) = link.next_arrival() {
            next = next.min(a);
        }
        if let Some(r) = reports.front() {
            next = next.min(r.0);
        }
        now = next.max(now + Duration::from_nanos(1));
    }
    let late = (end - half).as_secs_f64();
    Outcome {
        goodput: late_bytes as f64 / late,
        early_goodput: early_bytes as f64 / half.as_secs_f64(),
        send_rate: late_sent as f64 / late,
        queueing: Duration::from_secs_f64(if qn > 0 { qsum / qn as f64 } else { 0.0 }),
        congestion_events: 0,
    }
}

fn wan(loss: f64, delay_ms: u64) -> LinkConfig {
    LinkConfig {
        delay: Duration::from_millis(delay_ms),
        rate_bps: Some(1_000_000_000),
        loss,
        ..Default::default()
    }
}

const LINK: f64 = 125_000_000.0;

fn check(loss: f64, delay_ms: u64, secs: u64, want: f64) {
    let mut ctl = Adaptive::new(1_250_000, None).with_rtt(Duration::from_millis(2 * delay_ms));
    let out = simulate(wan(loss, delay_ms), &mut ctl, secs, 3);
    let ratio = out.goodput / LINK;
    eprintln!("controller at the end: {}", ctl.state());
    eprintln!(
        "loss {loss} rtt {} ms: goodput {:.3} of the link, sending {:.3}, mean queueing {:?}, congestion events {}",
        2 * delay_ms,
        ratio,
        out.send_rate / LINK,
        out.queueing,
        ctl.congestion_events + out.congestion_events
    );
    assert!(
        ratio >= want,
        "goodput {ratio:.3} of the link, want >= {want}"
    );
    // Re-sent bytes will track what is lost: sending may exceed delivery
    // only by about the loss rate (plus probing).
    assert!(
        out.send_rate / LINK <= 1.0 + loss + 0.12,
        "sending {:.3}",
        out.send_rate / LINK
    );
}

#[test]
fn clean_long_path_fills_the_link() {
    check(0.0, 75, 30, 0.95);
}

#[test]
fn random_loss_is_noise_not_congestion() {
    check(0.001, 75, 30, 0.95);
    check(0.01, 75, 30, 0.90);
    check(0.10, 75, 40, 0.80);
}

#[test]
fn very_long_path_with_loss() {
    check(0.01, 300, 60, 0.90);
}

#[test]
fn the_cap_holds() {
    let mut ctl = Adaptive::new(1_250_000, Some(62_500_000));
    let out = simulate(wan(0.0, 75), &mut ctl, 30, 5);
    let err = (out.send_rate - 62_500_000.0).abs() / 62_500_000.0;
    assert!(
        err < 0.03,
        "sending {:.0} B/s under a 62.5 MB/s cap",
        out.send_rate
    );
}

#[test]
fn no_standing_queue() {
    let mut ctl = Adaptive::new(1_250_000, None).with_rtt(Duration::from_millis(150));
    let out = simulate(wan(0.0, 75), &mut ctl, 30, 6);
    assert!(
        out.queueing < Duration::from_millis(20),
        "mean queueing {:?}",
        out.queueing
    );
}

#[test]
fn recovers_after_an_outage() {
    let mut cfg = wan(0.0, 75);
    cfg.outages = vec![(Duration::from_secs(10), Duration::from_secs(15))];
    let mut ctl = Adaptive::new(1_250_000, None).with_rtt(Duration::from_millis(150));
    // The second half (15..30 s) starts as the link returns.
    let out = simulate(cfg, &mut ctl, 30, 7);
    assert!(
        out.goodput / LINK >= 0.85,
        "goodput after the outage {:.3}",
        out.goodput / LINK
    );
}

/// A transfer that starts at what the last one to the same host measured
/// (P-26) fills the path from its first round trip: over the first two
/// seconds at 150 ms it delivers nearly the link, where one probing up
/// from 10 Mbit/s delivers far less.
#[test]
fn a_known_path_is_full_from_the_start() {
    let rtt = Duration::from_millis(150);
    let mut fresh = Adaptive::new(1_250_000, None).with_rtt(rtt);
    let probing = simulate(wan(0.0, 75), &mut fresh, 4, 8).early_goodput / LINK;
    let mut known = Adaptive::new(1_250_000, None)
        .with_rtt(rtt)
        .resuming(LINK as u64);
    assert!(!known.in_startup());
    let out = simulate(wan(0.0, 75), &mut known, 4, 8);
    let resumed = out.early_goodput / LINK;
    eprintln!("first 2 s: {resumed:.3} of the link resumed, {probing:.3} probing up");
    // The first 75 ms carry nothing: 0.96 at most.
    assert!(resumed >= 0.88, "resumed {resumed:.3}");
    assert!(
        resumed > probing + 0.15,
        "resumed {resumed:.3}, probing {probing:.3}"
    );
    assert!(out.goodput / LINK >= 0.95, "then {:.3}", out.goodput / LINK);
}

/// A known rate ten times what the path carries now (another route,
/// another load) comes down within a few round trips, and the queue it
/// built drains: a stale measurement costs a moment, not the transfer.
#[test]
fn a_known_rate_too_high_comes_down() {
    let mut cfg = wan(0.0, 75);
    cfg.rate_bps = Some(100_000_000);
    let slow = 12_500_000.0;
    let mut ctl = Adaptive::new(1_250_000, None)
        .with_rtt(Duration::from_millis(150))
        .resuming(LINK as u64);
    let out = simulate(cfg, &mut ctl, 20, 9);
    eprintln!(
        "second half: goodput {:.3}, sending {:.3} of the link, queueing {:?}, congestion events {}",
        out.goodput / slow,
        out.send_rate / slow,
        out.queueing,
        ctl.congestion_events
    );
    assert!(
        out.goodput / slow >= 0.85,
        "goodput {:.3}",
        out.goodput / slow
    );
    assert!(
        out.send_rate / slow <= 1.12,
        "sending {:.3}",
        out.send_rate / slow
    );
    assert!(
        out.queueing < Duration::from_millis(20),
        "mean queueing {:?}",
        out.queueing
    );
}
