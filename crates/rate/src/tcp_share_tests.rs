//! Tests of the TCP sharing governor, driven with synthetic `TCP_INFO`
//! samples: alone it never caps, beside another flow's queue it holds
//! the streams, and a known path's ceiling rises and falls as P-46 says.

use super::*;

const RTT: Duration = Duration::from_millis(150);
/// 1 Gbit/s in bytes per second.
const LINK: f64 = 125_000_000.0;

/// Drives a governor for `secs` at `share_of_link` of the link with
/// `queue` on top of the round trip, from `t` and `acked`; returns the
/// actions with their times.
struct Drive {
    gov: TcpShare,
    t: Duration,
    actions: Vec<(Duration, TcpAction)>,
    /// Segments the streams lose in the sample at a time.
    lost: fn(Duration) -> u32,
}

impl Drive {
    fn new(share: Share) -> Drive {
        Drive::known(share, 0.0)
    }

    fn known(share: Share, known: f64) -> Drive {
        Drive {
            gov: TcpShare::new(share, (known * LINK) as u64),
            t: Duration::ZERO,
            actions: vec![],
            lost: |_| 0,
        }
    }

    fn run(&mut self, secs: f64, share_of_link: f64, queue: impl Fn(Duration) -> Duration) {
        self.run_with(secs, |_| share_of_link, queue);
    }

    /// As `run`, the streams' share of the link a function of time.
    fn run_with(
        &mut self,
        secs: f64,
        share_of_link: impl Fn(Duration) -> f64,
        queue: impl Fn(Duration) -> Duration,
    ) {
        let end = self.t + Duration::from_secs_f64(secs);
        while self.t < end {
            let step = self.gov.next_sample().saturating_sub(self.t).max(MIN_TICK);
            self.t += step;
            let rate = share_of_link(self.t).min(self.cap() / LINK);
            let s = TcpSample {
                delivery: (rate * LINK) as u64,
                srtt: RTT + queue(self.t),
                min_rtt: RTT,
                lost: (self.lost)(self.t),
                mss: 1448,
            };
            if let Some(a) = self.gov.on_sample(self.t, s) {
                self.actions.push((self.t, a));
            }
        }
    }

    /// Asserts that the governor's only action was the ceiling it
    /// took after its grace, from what it measured; returns it.
    fn only_the_ceiling(&self) -> u64 {
        let [(_, TcpAction::Cap(c))] = self.actions[..] else {
            panic!("{:?}", self.actions)
        };
        assert_eq!(c, (CEILING * self.gov.peak()) as u64, "{:?}", self.actions);
        assert_eq!(self.gov.ceiling, Some(c));
        c
    }

    /// Asserts that the governor's first action held the streams at
    /// about half the path, between `from` and `to`.
    fn held_at_half_between(&self, from: Duration, to: Duration) {
        let [(at, TcpAction::Cap(cap)), ..] = self.actions[..] else {
            panic!("{:?}", self.actions)
        };
        assert!(at > from && at < to, "{at:?}");
        let half = cap as f64 / LINK;
        assert!((0.4..=0.5).contains(&half), "{half}");
    }

    fn cap(&self) -> f64 {
        match self.actions.last() {
            Some((_, TcpAction::Cap(c) | TcpAction::Release(Some(c)))) => *c as f64,
            _ => f64::MAX,
        }
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A startup's share of the link: `from`, doubling every `secs`, up
/// to `top`.
fn doubling(from: f64, secs: f64, top: f64) -> impl Fn(Duration) -> f64 + Copy {
    move |t| (from * 2f64.powf(t.as_secs_f64() / secs)).min(top)
}

/// BBR alone: a queue of a quarter of the path for one round trip in
/// eight (its probing), none otherwise.
fn bbr_alone(t: Duration) -> Duration {
    let phase = (t.as_millis() / RTT.as_millis()) % 8;
    if phase == 0 {
        ms(37)
    } else {
        ms(2)
    }
}

/// CUBIC beside it: a queue between 15 and 60 ms, dipping under the
/// threshold now and then.
fn cubic_beside(t: Duration) -> Duration {
    let cycle = t.as_millis() % 4000;
    if cycle < 150 {
        ms(8)
    } else {
        ms(15 + (cycle as u64 * 45) / 4000)
    }
}

#[test]
fn an_idle_path_is_left_to_the_streams() {
    let mut d = Drive::new(Share::Fair);
    // startup's own queue, then BBR's cycles
    d.run(1.5, 0.5, |_| ms(120));
    d.run(60.0, 0.96, bbr_alone);
    assert!(
        (d.gov.peak() / LINK - 0.96).abs() < 0.02,
        "{}",
        d.gov.peak()
    );
    assert!(d.actions.is_empty(), "{:?}", d.actions);
}

#[test]
fn the_streams_own_queue_is_not_another_flow() {
    // Six BBR streams after their drain: a standing queue, the whole
    // path delivered.
    let mut d = Drive::new(Share::Fair);
    d.run(1.5, 0.97, |_| ms(150));
    d.run(20.0, 0.96, |_| ms(40));
    d.only_the_ceiling();
}

#[test]
fn noise_over_and_under_the_path_is_not_another_flow() {
    // Sixteen streams' summed samples: mostly the path, some read an
    // eighth over it, some a tenth under; a known figure at the path;
    // their own standing queue.
    let mut d = Drive::known(Share::Fair, 1.0);
    // One sample in each tick of a quarter round trip.
    let noise = |t: Duration| match (t.as_micros() / (RTT / 4).as_micros()) % 7 {
        0 | 3 => 1.12,
        5 => 0.86,
        _ => 0.965,
    };
    d.run_with(20.0, noise, |_| ms(40));
    assert!(!d.gov.capped(), "{:?}", d.actions);
    assert!(d.gov.peak() < 1.05 * LINK, "{}", d.gov.peak());
}

#[test]
fn a_startup_that_builds_a_queue_under_the_ceiling_is_not_another_flow() {
    // Thirty-two streams on a known path: doubling each round trip
    // from 1% of the link, their queue standing from half of it on.
    let mut d = Drive::known(Share::Fair, 1.0);
    let ramp = |t: Duration| (0.01 * 2f64.powf(t.as_secs_f64() / 0.15)).min(0.965);
    let queue = |t: Duration| if t > ms(850) { ms(40) } else { ms(1) };
    d.run_with(10.0, ramp, queue);
    assert!(!d.gov.capped(), "{:?}", d.actions);
    // The known figure read over what they deliver beside their own
    // queue: the ceiling comes down to a twentieth over that, once.
    let fitted = TcpAction::Cap((CEILING * 0.965 * LINK) as u64);
    assert_eq!(d.actions.len(), 2, "{:?}", d.actions);
    assert_eq!(d.actions[1].1, fitted, "{:?}", d.actions);
}

#[test]
fn a_startup_beside_a_queue_that_stood_before_it_yields_at_once() {
    // Joining a busy path: the other flow's queue from the first
    // sample, while the streams still double.
    let mut d = Drive::known(Share::Background, 0.95);
    let ramp = |t: Duration| (0.01 * 2f64.powf(t.as_secs_f64() / 0.15)).min(0.7);
    d.run_with(3.0, ramp, cubic_beside);
    let floor = (0.95 * LINK * BACKGROUND_SHARE) as u64;
    let held = d.actions.iter().find(|a| a.1 == TcpAction::Cap(floor));
    assert!(
        held.is_some_and(|a| a.0 < Duration::from_millis(1100)),
        "{:?}",
        d.actions
    );
}

#[test]
fn a_first_push_into_a_queue_another_flow_holds_is_held_once_its_startup_ends() {
    // No known path; dialled into the other flow's queue, so the
    // least round trip the streams know has part of it. They double
    // from under 1% of the link; the queue shows over that least from
    // 8% of it on; their startup then takes the path from the flow.
    let mut d = Drive::new(Share::Fair);
    let ramp = doubling(0.006, 0.2, 0.96);
    let queue = move |t: Duration| if ramp(t) > 0.08 { ms(100) } else { ms(15) };
    d.run_with(8.0, ramp, queue);
    d.held_at_half_between(ms(1500), ms(4000));
}

#[test]
fn a_first_push_into_a_busy_queue_is_held_even_if_a_dip_ended_its_grace() {
    // As above, slower, and the queue dips under the threshold for a
    // moment mid-ramp (which ends the grace) before the startup ends.
    let mut d = Drive::new(Share::Fair);
    let ramp = doubling(0.006, 0.5, 0.96);
    let queue = move |t: Duration| match ramp(t) {
        r if (0.2..0.25).contains(&r) => ms(5),
        r if r > 0.08 => ms(100),
        _ => ms(15),
    };
    d.run_with(10.0, ramp, queue);
    d.held_at_half_between(ms(3700), ms(7000));
}

#[test]
fn a_first_push_whose_queue_stands_only_near_the_path_is_not_held() {
    // Alone: the startup's queue stands from 0.6 of the path on.
    let mut d = Drive::new(Share::Fair);
    let ramp = doubling(0.006, 0.2, 0.96);
    let queue = |t: Duration| if ramp(t) > 0.6 { ms(120) } else { ms(2) };
    d.run_with(3.0, ramp, queue);
    d.run(20.0, 0.96, |_| ms(40));
    d.only_the_ceiling();
}

#[test]
fn a_tcp_average_sets_the_peak_and_the_guess_over_it_the_ceiling() {
    // Known from a TCP push: its average (0.85 of the link), and a
    // quarter over it for the ceiling. Startup, then a standing queue
    // of the streams' own, with a dip when the ramp ends.
    let mut d = Drive {
        gov: TcpShare::with_ceiling(Share::Fair, (0.85 * LINK) as u64, (1.06 * LINK) as u64),
        t: Duration::ZERO,
        actions: vec![],
        lost: |_| 0,
    };
    let ramp = |t: Duration| {
        let s = t.as_secs_f64();
        if (1.4..1.9).contains(&s) {
            0.8
        } else {
            (0.01 * 2f64.powf(s / 0.15)).min(0.965)
        }
    };
    let queue = |t: Duration| if t > ms(950) { ms(60) } else { ms(1) };
    d.run_with(10.0, ramp, queue);
    let ceiling = TcpAction::Cap((1.06 * LINK * CEILING) as u64);
    assert_eq!(d.actions[0], (MIN_TICK, ceiling));
    // The streams deliver the path beside a queue of their own under
    // that guess: it comes down to a twentieth over what they deliver,
    // and stays there.
    let fitted = TcpAction::Cap((CEILING * 0.965 * LINK) as u64);
    assert_eq!(d.actions.len(), 2, "{:?}", d.actions);
    assert_eq!(d.actions[1].1, fitted, "{:?}", d.actions);
    let clear = |_| ms(1);
    d.run(5.0, 0.965, clear);
    assert_eq!(d.actions.len(), 2, "{:?}", d.actions);
}

#[test]
fn a_dip_while_the_streams_own_queue_drains_is_not_another_flow() {
    // No ceiling yet: a full queue that never clears ends the grace,
    // then a dip (losses) while the queue drains.
    let mut d = Drive::new(Share::Fair);
    d.run(6.5, 0.965, |_| ms(150));
    let start = d.t;
    d.run(0.6, 0.75, |t| {
        ms(150).saturating_sub((t - start) * 250 / 1000)
    });
    d.run(3.0, 0.965, |_| ms(5));
    assert!(!d.gov.capped(), "{:?}", d.actions);
}

#[test]
fn a_flow_that_holds_the_queue_halves_the_streams_then_leaving_frees_them() {
    let mut d = Drive::new(Share::Fair);
    d.run(10.0, 0.96, bbr_alone);
    // The queue overflows every 8 s (from 14 s): the flow and the streams
    // lose segments.
    d.lost = |t| u32::from(t.as_secs() % 8 == 6 && t.subsec_millis() < 200);
    d.run(20.0, 0.7, cubic_beside);
    let (at, cap) = d.actions[0];
    assert!(
        at > Duration::from_secs(10) && at < Duration::from_secs(12),
        "{at:?}"
    );
    let TcpAction::Cap(cap) = cap else {
        panic!("{cap:?}")
    };
    assert!((cap as f64 / LINK - 0.48).abs() < 0.02, "{cap}");
    // Held as one CUBIC flow: three tenths off at each overflow, once.
    let TcpAction::Cap(cut) = d.actions[1].1 else {
        panic!("{:?}", d.actions)
    };
    assert!((cut as f64 / cap as f64 - 0.7).abs() < 0.01, "{cut}");
    assert!(
        d.actions
            .iter()
            .all(|a| matches!(a.1, TcpAction::Cap(c) if c <= cap)),
        "{:?}",
        d.actions
    );
    let n = d.actions.len();
    // The flow leaves: the cap climbs from its last cut (0.27 of the
    // link) to 0.9 of the peak in about 40 round trips, then is lifted.
    d.lost = |_| 0;
    d.run(10.0, 0.96, |_| ms(1));
    let (at, act) = *d.actions.last().unwrap();
    assert_eq!(act, TcpAction::Release(None));
    assert!(
        at > Duration::from_millis(35_000) && at < Duration::from_millis(36_400),
        "{at:?}"
    );
    assert!(!d.gov.capped());
    let caps = &d.actions[n..d.actions.len() - 1];
    assert!(caps.windows(2).all(|w| match (w[0].1, w[1].1) {
        (TcpAction::Cap(a), TcpAction::Cap(b)) => b > a,
        _ => false,
    }));
}

#[test]
fn a_queue_while_held_puts_a_first_push_s_cap_back_on_its_course() {
    let mut d = Drive::new(Share::Fair);
    d.run(10.0, 0.96, bbr_alone);
    d.run(5.0, 0.7, cubic_beside);
    d.run(0.3, 0.5, |_| ms(1));
    let Some(&(_, TcpAction::Cap(raised))) = d.actions.last() else {
        panic!("{:?}", d.actions)
    };
    assert!(raised as f64 > 0.5 * LINK, "{raised}");
    d.run(0.1, 0.5, |_| ms(40));
    // Back on the course: half, and what it grew in the few seconds
    // since it was held (the clear queue may have been the other flow
    // growing back from what the streams' startup left it).
    let (TcpAction::Cap(back), TcpAction::Cap(held)) =
        (d.actions.last().unwrap().1, d.actions[0].1)
    else {
        panic!("{:?}", d.actions)
    };
    assert!(back >= held && (back as f64) < held as f64 * 1.01, "{back}");
}

#[test]
fn a_queue_while_held_puts_a_known_path_s_cap_on_a_course_from_what_room_gave() {
    let mut d = Drive::known(Share::Fair, 0.95);
    d.run(6.0, 0.7, cubic_beside);
    assert!(d.gov.capped(), "{:?}", d.actions);
    d.run(0.3, 0.5, |_| ms(1));
    let raised = d.gov.cap.unwrap().0;
    assert!(raised > 0.5 * LINK, "{raised}");
    // A queue (BBR's probe, or the other flow back): the cap goes on
    // from where room took it, not back to the course from the floor.
    d.run(0.5, 0.7, |_| ms(40));
    let kept = d.gov.cap.unwrap().0;
    assert!(
        kept >= raised && kept < raised * 1.01,
        "{kept} against {raised}"
    );
    // An overflow cuts it, by three tenths.
    d.lost = |_| 2;
    d.run(0.1, 0.7, |_| ms(40));
    let cut = d.gov.cap.unwrap().0;
    assert!((cut / kept - 0.7).abs() < 0.02, "{cut} against {kept}");
}

#[test]
fn held_beside_loss_based_flows_the_cap_follows_one_cubic_flow() {
    let mut d = Drive::known(Share::Fair, 0.95);
    d.run(6.0, 0.7, cubic_beside);
    let held = d.gov.cap.unwrap().0;
    assert!((held / LINK - 0.475).abs() < 0.01, "{held}");
    // An overflow: every sample of a round trip loses; one cut.
    d.lost = |_| 2;
    d.run(0.14, 0.7, cubic_beside);
    let cut = d.gov.cap.unwrap().0;
    assert!((cut / held - 0.7).abs() < 0.02, "{cut}");
    // Back towards the top, concave: about 17 s to reach it at 150 ms.
    d.lost = |_| 0;
    d.run(8.0, 0.7, cubic_beside);
    let back = d.gov.cap.unwrap().0;
    assert!(back > cut * 1.2 && back < held * 0.97, "{back}");
    d.run(12.0, 0.7, cubic_beside);
    let top = d.gov.cap.unwrap().0;
    assert!(top > held * 0.99 && top < held * 1.05, "{top}");
    // Overflows every 3 s, each before the course is back: it converges
    // down, never under a thirty-second of the path.
    d.lost = |t| u32::from(t.as_millis() % 3000 < 100);
    d.run(120.0, 0.7, cubic_beside);
    let low = d.gov.cap.unwrap().0;
    assert!(
        low < held * 0.3 && low >= 0.95 * LINK * LEAST_SHARE,
        "{low}"
    );
    // Streams that do not fill the cap do not grow it.
    d.lost = |_| 0;
    let before = d.gov.cap.unwrap().0;
    d.run(20.0, 0.01, cubic_beside);
    assert_eq!(d.gov.cap.unwrap().0, before);
}

#[test]
fn losses_with_no_queue_over_the_threshold_do_not_cut_a_held_cap() {
    // Held beside a flow that then backs off: the queue sits between a
    // quarter of the threshold and the threshold, and the path drops one
    // packet in a thousand (segments lost in every sample). Those losses
    // are not an overflow: the cap keeps its course.
    let mut d = Drive::known(Share::Fair, 0.95);
    d.run(6.0, 0.7, cubic_beside);
    d.run(1.0, 0.7, |_| ms(8));
    let held = d.gov.cap.unwrap().0;
    d.lost = |_| 3;
    d.run(10.0, 0.7, |_| ms(8));
    let after = d.gov.cap.unwrap().0;
    assert!(after >= held, "{after} < {held}: {:?}", d.actions);
    // The same losses beside a standing queue are overflows: cut.
    d.run(1.0, 0.7, |_| ms(40));
    assert!(d.gov.cap.unwrap().0 < 0.8 * after, "{:?}", d.actions);
}

#[test]
fn the_peak_kept_for_the_next_push_is_only_a_free_run_s() {
    let mut free = Drive::new(Share::Fair);
    free.run(10.0, 0.96, bbr_alone);
    let peak = free.gov.measured() as f64 / LINK;
    assert!((peak - 0.96).abs() < 0.01, "{peak}");
    let mut held = Drive::known(Share::Fair, 0.95);
    held.run(6.0, 0.7, cubic_beside);
    assert!(held.gov.capped());
    assert_eq!(held.gov.measured(), 0);
}

#[test]
fn joining_a_full_path_holds_to_half_of_what_startup_reached() {
    // BBR's startup takes most of the path for a moment, then the
    // streams settle at their share beside the flow.
    let mut d = Drive::new(Share::Fair);
    d.run(2.0, 0.9, |_| ms(100));
    d.run(10.0, 0.65, cubic_beside);
    assert_eq!(d.actions.len(), 1, "{:?}", d.actions);
    let (at, TcpAction::Cap(cap)) = d.actions[0] else {
        panic!("{:?}", d.actions)
    };
    // The grace ends at the flow's first dip under the threshold (4 s),
    // then a watch of 1 s.
    assert!(
        at >= Duration::from_secs(5) && at < Duration::from_millis(5300),
        "{at:?}"
    );
    assert!((cap as f64 / LINK - 0.45).abs() < 0.01, "{cap}");
    // Streams that never measured more than their share cannot tell:
    // they take the queue for their own, and are held only a twentieth
    // over what they deliver.
    let mut d = Drive::new(Share::Fair);
    d.run(40.0, 0.7, cubic_beside);
    d.only_the_ceiling();
}

#[test]
fn a_known_path_sets_the_ceiling_and_the_floor_when_joining_a_full_one() {
    let mut d = Drive::known(Share::Fair, 0.95);
    // The streams double from their first windows into the flow's queue.
    d.run_with(10.0, doubling(0.01, 0.15, 0.7), cubic_beside);
    let ceiling = TcpAction::Cap((0.95 * LINK * CEILING) as u64);
    assert_eq!(d.actions[0], (MIN_TICK, ceiling));
    let (at, TcpAction::Cap(cap)) = d.actions[1] else {
        panic!("{:?}", d.actions)
    };
    // The queue stood before they delivered much: held once their
    // startup is over.
    assert!(at < Duration::from_millis(2500), "{at:?}");
    assert!((cap as f64 / LINK - 0.475).abs() < 0.01, "{cap}");
    // The flow leaves: back to the ceiling, not free.
    d.run(10.0, 0.9, |_| ms(1));
    let TcpAction::Cap(c) = ceiling else {
        unreachable!()
    };
    let back = TcpAction::Release(Some(c));
    assert!(
        d.actions[2..].iter().any(|a| a.1 == back),
        "{:?}",
        d.actions
    );
}

#[test]
fn a_ceiling_the_streams_press_against_on_a_clear_path_rises() {
    // Kept while sharing: half the path.
    let mut d = Drive::known(Share::Fair, 0.5);
    d.run(5.0, 0.96, bbr_alone);
    let caps: Vec<u64> = d
        .actions
        .iter()
        .map(|a| match a.1 {
            TcpAction::Cap(c) => c,
            TcpAction::Release(_) => panic!("{:?}", d.actions),
        })
        .collect();
    assert!(caps.windows(2).all(|w| w[1] > w[0]), "{caps:?}");
    assert!(*caps.last().unwrap() as f64 > 0.96 * LINK, "{caps:?}");
    // Probing past the path stops once the streams no longer keep up.
    let n = d.actions.len();
    d.run(5.0, 0.96, bbr_alone);
    assert!(d.actions.len() <= n + 1, "{:?}", d.actions);
}

#[test]
fn background_trickles_beside_another_flow_and_off_never_acts() {
    let mut d = Drive::known(Share::Background, 0.95);
    d.run(20.0, 0.7, cubic_beside);
    let floor = (0.95 * LINK * BACKGROUND_SHARE) as u64;
    assert_eq!(d.actions.get(1).map(|a| a.1), Some(TcpAction::Cap(floor)));
    let mut d = Drive::known(Share::Off, 0.95);
    d.run(20.0, 0.7, cubic_beside);
    assert!(d.actions.is_empty());
}

#[test]
fn a_queue_that_stands_after_the_grace_beside_the_whole_path_gets_a_ceiling() {
    // A first push whose grace a dip of the queue ended; sixteen BBR
    // streams then keep the queue full while delivering the path.
    let mut d = Drive::new(Share::Fair);
    d.run(1.5, 0.5, |_| ms(1));
    d.run(0.5, 0.96, |_| ms(120));
    d.run(0.3, 0.96, |_| ms(2));
    d.run(10.0, 0.96, |_| ms(150));
    let c = d.only_the_ceiling();
    assert!((c as f64 / LINK - 0.96 * CEILING).abs() < 0.02, "{c}");
}

#[test]
fn bbr_probe_rtt_on_every_stream_at_once_is_not_another_flow() {
    // Known path, the streams' own queue under the ceiling; every 10 s
    // their delivery falls to nothing for 200 ms and the queue drains,
    // then they ramp back over half a second with the queue standing.
    let mut d = Drive::known(Share::Fair, 0.96);
    let probe_rtt = |t: Duration| match t.as_millis() % 10_000 {
        m if m < 9_800 => 0.96,
        m if m < 10_000 => 0.01,
        _ => unreachable!(),
    };
    let ramp_back = |t: Duration| {
        let m = t.as_millis() % 10_000;
        if m < 500 && t > Duration::from_secs(1) {
            0.2 + 1.5 * m as f64 / 1000.0
        } else {
            probe_rtt(t)
        }
    };
    d.run_with(35.0, ramp_back, |t| match t.as_millis() % 10_000 {
        m if m >= 9_800 => ms(1),
        _ => ms(40),
    });
    assert!(!d.gov.capped(), "{:?}", d.actions);
    assert_eq!(d.actions.len(), 1, "{:?}", d.actions);
}

#[test]
fn a_deep_queue_in_startup_is_not_another_flow() {
    let mut d = Drive::new(Share::Fair);
    // As measured with six BBR streams: no queue while they ramp, a
    // full one from 1.5 s to 3 s, then BBR's cycles.
    d.run(1.5, 0.3, |_| ms(1));
    d.run(1.5, 0.97, |_| ms(150));
    d.run(20.0, 0.96, bbr_alone);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    // A queue that never clears ends the grace after 40 round trips
    // (6 s) with a ceiling from the peak; a watch later the streams are
    // held.
    let mut d = Drive::new(Share::Fair);
    d.run(2.0, 0.97, |_| ms(150));
    d.run(8.0, 0.7, |_| ms(150));
    let [(adopted, TcpAction::Cap(c)), (held, TcpAction::Cap(_)), ..] = d.actions[..] else {
        panic!("{:?}", d.actions)
    };
    assert!((c as f64 / LINK - 0.97 * CEILING).abs() < 0.01, "{c}");
    assert!(
        adopted >= Duration::from_secs(6) && adopted < Duration::from_millis(6100),
        "{adopted:?}"
    );
    assert!(
        held > Duration::from_secs(7) && held < Duration::from_millis(7100),
        "{held:?}"
    );
}

#[test]
fn the_history_stays_bounded_at_huge_round_trips() {
    let mut g = TcpShare::new(Share::Fair, 0);
    let mut t = Duration::ZERO;
    for i in 1..20_000u64 {
        t += MIN_TICK;
        g.on_sample(
            t,
            TcpSample {
                delivery: i * 1000,
                srtt: Duration::from_secs(30),
                min_rtt: Duration::from_secs(20),
                lost: 0,
                mss: 1448,
            },
        );
        assert!(g.watch.len() <= MAX_SAMPLES + 1);
    }
}

#[test]
fn streams_take_probe_rtt_in_turn_only_under_a_capped_pacing() {
    // Free streams (no ceiling, no hold): never.
    let mut g = TcpShare::new(Share::Fair, 0);
    assert_eq!(g.restart_due(Duration::from_secs(30), 16), None);
    // A known path: the ceiling from the first sample, then fifteen
    // turns, stream 0 keeping its own clock.
    let mut d = Drive::known(Share::Fair, 0.95);
    d.run(0.1, 0.5, |_| ms(1));
    let turns: Vec<usize> = (0..1000u32)
        .filter_map(|i| d.gov.restart_due(ms(100) + ms(20) * i, 16))
        .collect();
    assert_eq!(turns, (1..16).collect::<Vec<_>>());
    // `--fair off` never caps.
    let mut g = TcpShare::new(Share::Off, (0.95 * LINK) as u64);
    assert_eq!(g.restart_due(Duration::from_secs(30), 16), None);
}
