//! `haul probe` (P-36): measures a path to a haul server and recommends how
//! to use it. One session after another, each a memory-to-memory test
//! (generated data, verified and discarded): TCP with the automatic
//! stream count, the UDP channel (whose set-up is followed by echo
//! measurements: round trips, loss, path MTU), and one TCP stream. Each
//! test grows its size until it lasts the span asked for, and is judged
//! by its steady rate, past the start and before the end.
//!
//! [`recommend`] is pure: it turns the measurements into the transport,
//! streams, rate and compression that `cp` then uses for that host.
//!
//! It owns the order of the tests and the advice; it must not set up
//! connections or move blocks itself: each test is a session of the
//! client (`endpoint`), and the echo is `connect::datagram::echo`'s.

use std::time::Duration;

use wire::ErrorCode;

use connect::datagram::echo::{EchoReport, RttStats};
use connect::error::TransferError;
use endpoint::client::{Advice, Connected, Transport};

/// What a probe does.
#[derive(Debug, Clone, Copy)]
pub struct ProbeOptions {
    /// How long each goodput test should last, about.
    pub span: Duration,
    /// How long the echo train runs.
    pub echo_span: Duration,
}

impl Default for ProbeOptions {
    fn default() -> ProbeOptions {
        ProbeOptions {
            span: Duration::from_secs(2),
            echo_span: Duration::from_secs(2),
        }
    }
}

/// Bytes of a test's first session.
pub const FIRST_BYTES: u64 = 8 << 20;
/// Sessions one test may take to reach its span.
const MAX_SESSIONS: usize = 4;

/// One goodput test.
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    pub transport: Transport,
    /// TCP streams used (0 on the UDP channel).
    pub streams: u16,
    /// Bytes of the session measured (its last), and how long its data
    /// took.
    pub bytes: u64,
    pub seconds: f64,
    /// Verified bytes per second once under way and before the tail (see
    /// [`steady_goodput`]).
    pub goodput: f64,
    /// Over the whole session, start and end included.
    pub average: f64,
    /// UDP channel: datagrams sent and found lost, for the loss under load.
    pub datagrams: Option<(u64, u64)>,
}

/// What `cp` is advised to do on this path (P-36).
#[derive(Debug, Clone, PartialEq)]
pub struct Recommendation {
    /// [`Transport::Tcp`] or [`Transport::Udp`].
    pub transport: Transport,
    /// TCP streams (also what a fallback from UDP uses).
    pub streams: u16,
    /// The goodput the recommended setting reached, bytes per second: the
    /// rate to expect, and where a pushing UDP sender starts (half of it)
    /// instead of climbing from 100 Mbit/s.
    pub rate: u64,
    pub compress: codec::Mode,
    /// Why, one line each.
    pub reasons: Vec<String>,
}

impl Recommendation {
    pub fn advice(&self) -> Advice {
        Advice {
            transport: self.transport,
            streams: self.streams,
            rate: self.rate,
        }
    }
}

/// Everything a probe found.
#[derive(Debug, Clone)]
pub struct Findings {
    /// Round trips the handshakes measured, one per session.
    pub handshake_rtts: Vec<Duration>,
    pub echo: Option<EchoReport>,
    /// Why the UDP channel could not be measured, if it could not.
    pub udp_failed: Option<String>,
    pub trials: Vec<Trial>,
    pub recommendation: Recommendation,
}

impl Findings {
    /// Round-trip statistics: the echo train's, else the handshakes'.
    pub fn rtt(&self) -> Option<RttStats> {
        match &self.echo {
            Some(e) if !e.rtts.is_empty() => RttStats::of(&e.rtts),
            _ => RttStats::of(&self.handshake_rtts),
        }
    }
}

/// Opens a session for a test: the transport, and the streams (`None`:
/// automatic).
pub type Connect<'a> = dyn FnMut(Transport, Option<u16>) -> Result<Connected, TransferError> + 'a;

/// Runs the probe. `note` shows what is being measured as it goes.
pub fn run(
    connect: &mut Connect,
    opts: &ProbeOptions,
    note: &dyn Fn(&str),
) -> Result<Findings, TransferError> {
    let mut rtts = Vec::new();
    let mut trials = Vec::new();
    note("TCP, automatic streams");
    let (tcp, _) = trial(
        connect,
        Transport::Tcp,
        None,
        FIRST_BYTES,
        opts,
        None,
        &mut rtts,
    )?;
    let first = |best: f64| ((best * opts.span.as_secs_f64() / 8.0) as u64).max(FIRST_BYTES);
    let auto_streams = tcp.streams;
    let mut best = tcp.goodput;
    trials.push(tcp);
    note("UDP channel, with echoes for round trips, loss and path MTU");
    let udp = trial(
        connect,
        Transport::Udp,
        None,
        first(best),
        opts,
        Some(opts.echo_span),
        &mut rtts,
    );
    let (mut echo, mut udp_failed) = (None, None);
    match udp {
        Ok((t, e)) => {
            best = best.max(t.goodput);
            echo = e;
            trials.push(t);
        }
        // The channel failed to come up (blocked): TCP only.
        Err(e) if e.code == ErrorCode::Connect => udp_failed = Some(e.message),
        Err(e) => return Err(e),
    }
    if auto_streams > 1 {
        note("TCP, one stream");
        let (t, _) = trial(
            connect,
            Transport::Tcp,
            Some(1),
            first(best),
            opts,
            None,
            &mut rtts,
        )?;
        trials.push(t);
    }
    let recommendation = recommend(&trials, echo.as_ref());
    Ok(Findings {
        handshake_rtts: rtts,
        echo,
        udp_failed,
        trials,
        recommendation,
    })
}

/// One test: sessions of growing size until one lasts the span.
fn trial(
    connect: &mut Connect,
    transport: Transport,
    streams: Option<u16>,
    mut bytes: u64,
    opts: &ProbeOptions,
    mut echo_span: Option<Duration>,
    rtts: &mut Vec<Duration>,
) -> Result<(Trial, Option<EchoReport>), TransferError> {
    let mut echo = None;
    let mut last = None;
    for _ in 0..MAX_SESSIONS {
        let conn = connect(transport, streams)?;
        rtts.push(conn.rtt());
        let run = conn.probe(bytes, echo_span.take())?;
        echo = echo.or(run.echo);
        let seconds = run.data_time.as_secs_f64().max(1e-6);
        let r = &run.report;
        let t = Trial {
            transport,
            streams: r.streams,
            bytes,
            seconds,
            goodput: steady(&run.samples, &run.wire_samples).unwrap_or(bytes as f64 / seconds),
            average: bytes as f64 / seconds,
            datagrams: r.udp.map(|u| (u.sent, u.lost)),
        };
        let next = next_size(bytes, t.goodput, seconds, opts.span);
        last = Some(t);
        match next {
            Some(b) => bytes = b,
            None => break,
        }
    }
    Ok((last.expect("at least one session"), echo))
}

/// The rate once a session is under way and before its tail, from (time,
/// bytes verified) samples in time order, the end last: from half its
/// time (past TCP's slow start and the UDP channel's doubling) to when 95%
/// of its bytes were verified (before the last blocks wait for their
/// repairs, a round trip or two that a long transfer spreads over much
/// more data). Both points are interpolated between samples. `None` with
/// too few samples, or if 95% came before half time.
pub fn steady_goodput(samples: &[(Duration, u64)]) -> Option<f64> {
    let &(end, total) = samples.last()?;
    if samples.len() < 10 {
        return None;
    }
    let pts: Vec<(f64, f64)> = samples
        .iter()
        .map(|&(t, b)| (t.as_secs_f64(), b as f64))
        .collect();
    // Bytes at time `t`.
    let half = end.as_secs_f64() / 2.0;
    let i = pts.iter().position(|p| p.0 >= half)?;
    let at_half = lerp(*pts.get(i.checked_sub(1)?)?, pts[i], half);
    // Time at which `mark` bytes were verified.
    let mark = total as f64 * 0.95;
    let j = pts.iter().position(|p| p.1 >= mark)?;
    let swap = |(t, b): (f64, f64)| (b, t);
    let at_mark = lerp(swap(*pts.get(j.checked_sub(1)?)?), swap(pts[j]), mark);
    if at_mark <= half {
        return None;
    }
    // The slope of a least-squares line through the samples between the
    // two points and the points themselves, not the two points alone: a
    // receiver that read late around half time (lagging on a busy host, or
    // reading a block frame 256 KiB at a time, P-19) moves one point, not
    // the line, and read 28% over a 200 Mbit/s link from the points alone.
    let mut line: Vec<(f64, f64)> = vec![(half, at_half)];
    line.extend(pts.iter().copied().filter(|p| p.0 > half && p.0 < at_mark));
    line.push((at_mark, mark));
    Some(slope(&line).max(0.0))
}

/// The least-squares slope of `y` over `x` through `pts` (at least two,
/// not all at one `x`).
fn slope(pts: &[(f64, f64)]) -> f64 {
    let n = pts.len() as f64;
    let (mx, my) = pts
        .iter()
        .fold((0.0, 0.0), |(x, y), p| (x + p.0 / n, y + p.1 / n));
    let (sxy, sxx) = pts.iter().fold((0.0, 0.0), |(xy, xx), p| {
        (xy + (p.0 - mx) * (p.1 - my), xx + (p.0 - mx) * (p.0 - mx))
    });
    sxy / sxx
}

/// The steady goodput of a session, from its verified bytes and the
/// bytes read off the wire at the same moments: the lesser of the two
/// steady rates. Verified bytes read high when verifying lagged the link
/// at half time (a busy receiver catching up; seen 17% above the link on
/// two shared cores); wire bytes read high by their headers and
/// re-sent datagrams; each error leaves the other estimate alone.
pub fn steady(verified: &[(Duration, u64)], wire: &[(Duration, u64)]) -> Option<f64> {
    match (steady_goodput(verified), steady_goodput(wire)) {
        (Some(v), Some(w)) => Some(v.min(w)),
        (v, w) => v.or(w),
    }
}

/// The `y` at `x` on the line through points `a` and `b` (`b`'s `y` if
/// they share their `x`).
fn lerp((x0, y0): (f64, f64), (x1, y1): (f64, f64), x: f64) -> f64 {
    if x1 > x0 {
        y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    } else {
        y1
    }
}

/// The next session's size, if the last (of `bytes`, at a steady
/// `goodput`, over `seconds`) was shorter than `span`: enough for the span
/// at that goodput, and a quarter more (start-up takes its share), between
/// twice and sixteen times the last.
pub fn next_size(bytes: u64, goodput: f64, seconds: f64, span: Duration) -> Option<u64> {
    if seconds >= span.as_secs_f64() || bytes >= wire::MAX_PROBE_BYTES {
        return None;
    }
    let want = (goodput * span.as_secs_f64() * 1.25) as u64;
    Some(
        want.clamp(bytes.saturating_mul(2), bytes.saturating_mul(16))
            .min(wire::MAX_PROBE_BYTES),
    )
}

/// A setting is taken over a cheaper one only if it beats it by this much:
/// TCP over the UDP channel (the kernel's TCP costs less CPU and shares
/// the path by the usual rules), fewer streams over more.
const MARGIN: f64 = 1.05;

/// The advice (P-36): the UDP channel if it beat the best TCP test by
/// more than [`MARGIN`], else TCP; the fewest streams within the margin of
/// the best TCP test; the rate the chosen setting reached; compression
/// left to the automatic policy, which weighs the link's rate against
/// both ends' codec speed block by block.
pub fn recommend(trials: &[Trial], echo: Option<&EchoReport>) -> Recommendation {
    let mbit = |b: f64| b * 8.0 / 1e6;
    let tcp_best = trials
        .iter()
        .filter(|t| t.transport == Transport::Tcp)
        .map(|t| t.goodput)
        .fold(0.0, f64::max);
    let tcp = trials
        .iter()
        .filter(|t| t.transport == Transport::Tcp && t.goodput * MARGIN >= tcp_best)
        .min_by_key(|t| t.streams);
    let udp = trials.iter().find(|t| t.transport == Transport::Udp);
    let mut reasons = Vec::new();
    let (transport, rate) = match (tcp, udp) {
        (Some(t), Some(u)) if u.goodput > t.goodput * MARGIN => {
            reasons.push(format!(
                "the UDP channel reached {:.0} Mbit/s, TCP at best {:.0} Mbit/s ({} streams)",
                mbit(u.goodput),
                mbit(t.goodput),
                t.streams
            ));
            (Transport::Udp, u.goodput)
        }
        (Some(t), u) => {
            reasons.push(match u {
                Some(u) => format!(
                    "TCP reached {:.0} Mbit/s with {} stream{}, the UDP channel {:.0} Mbit/s: TCP, cheaper, unless UDP wins by {:.0}%",
                    mbit(t.goodput),
                    t.streams,
                    if t.streams == 1 { "" } else { "s" },
                    mbit(u.goodput),
                    (MARGIN - 1.0) * 100.0
                ),
                None => format!(
                    "TCP reached {:.0} Mbit/s with {} stream{}; the UDP channel was not measured",
                    mbit(t.goodput),
                    t.streams,
                    if t.streams == 1 { "" } else { "s" }
                ),
            });
            (Transport::Tcp, t.goodput)
        }
        (None, Some(u)) => (Transport::Udp, u.goodput),
        (None, None) => (Transport::Tcp, 0.0),
    };
    let streams = tcp.map_or(1, |t| t.streams.max(1));
    if let Some(t) = tcp {
        if let Some(more) = trials
            .iter()
            .filter(|o| o.transport == Transport::Tcp && o.streams > t.streams)
            .max_by_key(|o| o.streams)
        {
            reasons.push(format!(
                "{} TCP stream{} reached {:.0} Mbit/s, {} reached {:.0} Mbit/s",
                t.streams,
                if t.streams == 1 { "" } else { "s" },
                mbit(t.goodput),
                more.streams,
                mbit(more.goodput)
            ));
        }
    }
    if let Some(e) = echo {
        let loss = e.one_way_loss();
        if loss >= 0.001 {
            reasons.push(format!(
                "about {:.2}% of packets are lost each way: TCP streams back off at each loss, the UDP channel re-sends without slowing",
                loss * 100.0
            ));
        }
    }
    reasons.push(format!(
        "compression auto: it compresses a block only where that raises goodput at the link's rate; `haul taste FILES --rate {:.0}M` shows what your data would gain",
        mbit(rate).max(1.0)
    ));
    Recommendation {
        transport,
        streams,
        rate: rate as u64,
        compress: codec::Mode::Auto,
        reasons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(transport: Transport, streams: u16, mbit: f64) -> Trial {
        Trial {
            transport,
            streams,
            bytes: 1 << 30,
            seconds: 2.0,
            goodput: mbit * 1e6 / 8.0,
            average: mbit * 1e6 / 8.0,
            datagrams: None,
        }
    }

    #[test]
    fn sessions_grow_until_they_last_half_the_span() {
        let span = Duration::from_secs(2);
        // 8 MiB at 40 MB/s: enough for 2.5 s, within 2x..16x.
        assert_eq!(next_size(8 << 20, 40e6, 0.2, span), Some(100_000_000));
        // A very slow start grows at least twofold, a fast one 16-fold.
        assert_eq!(next_size(8 << 20, 1e6, 0.5, span), Some(16 << 20));
        assert_eq!(next_size(8 << 20, 1e10, 0.001, span), Some(128 << 20));
        assert_eq!(next_size(8 << 20, 8e6, 2.0, span), None);
        assert_eq!(next_size(wire::MAX_PROBE_BYTES, 1e12, 0.1, span), None);
    }

    #[test]
    fn the_steady_rate_leaves_out_the_start_and_the_tail() {
        let ms = Duration::from_millis;
        // A second of slow start (1 MB), then 100 MB/s for a second, then
        // 300 ms waiting for the last 1 MB's repairs.
        let mut s: Vec<(Duration, u64)> = (0..=100).map(|i| (ms(i * 10), i * 10_000)).collect();
        s.extend((1..=100).map(|i| (ms(1000 + i * 10), 1_000_000 + i * 1_000_000)));
        s.extend((1..=30).map(|i| (ms(2000 + i * 10), 101_000_000)));
        s.push((ms(2300), 102_000_000));
        let g = steady_goodput(&s).unwrap();
        assert!((g - 100e6).abs() < 1e6, "{g}");
        // Verified 4 MB at a time at 100 MB/s, seen every 10 ms: the steps
        // move the rate by a few percent at most.
        let steps: Vec<(Duration, u64)> = (0..=200)
            .map(|i| (ms(i * 10), (i * 10 / 40) * 4_000_000))
            .collect();
        let g = steady_goodput(&steps).unwrap();
        assert!((g - 100e6).abs() < 5e6, "{g}");
        // Too few samples: no steady rate.
        assert_eq!(steady_goodput(&[(ms(0), 0), (ms(100), 10)]), None);
        // Verifying lagged at half time and caught up: the wire's rate,
        // 100 MB/s with 2% of headers, is the lesser and taken.
        let lagged: Vec<(Duration, u64)> = (0..=200)
            .map(|i| {
                let b = i * 1_000_000;
                (
                    ms(i * 10),
                    if (85..106).contains(&i) {
                        80_000_000
                    } else {
                        b
                    },
                )
            })
            .collect();
        let wire: Vec<(Duration, u64)> = (0..=200).map(|i| (ms(i * 10), i * 1_020_000)).collect();
        // Its lag shows still, if less than between the two points (122 MB/s).
        assert!(steady_goodput(&lagged).unwrap() > 103e6);
        let g = steady(&lagged, &wire).unwrap();
        assert!((g - 102e6).abs() < 2e6, "{g}");
        assert_eq!(steady(&[], &wire), steady_goodput(&wire));
    }

    #[test]
    fn udp_only_when_it_clearly_wins() {
        let r = recommend(
            &[
                t(Transport::Tcp, 16, 300.0),
                t(Transport::Udp, 0, 900.0),
                t(Transport::Tcp, 1, 90.0),
            ],
            None,
        );
        assert_eq!(r.transport, Transport::Udp);
        assert_eq!(r.streams, 16);
        assert_eq!(r.rate, 112_500_000);
        assert_eq!(r.compress, codec::Mode::Auto);
        let r = recommend(
            &[t(Transport::Tcp, 4, 940.0), t(Transport::Udp, 0, 960.0)],
            None,
        );
        assert_eq!(r.transport, Transport::Tcp);
        assert_eq!(r.rate, 117_500_000);
    }

    #[test]
    fn the_fewest_streams_within_the_margin() {
        let r = recommend(
            &[
                t(Transport::Tcp, 4, 940.0),
                t(Transport::Udp, 0, 930.0),
                t(Transport::Tcp, 1, 920.0),
            ],
            None,
        );
        assert_eq!((r.transport, r.streams), (Transport::Tcp, 1));
        let r = recommend(
            &[t(Transport::Tcp, 4, 940.0), t(Transport::Tcp, 1, 700.0)],
            None,
        );
        assert_eq!(r.streams, 4);
    }

    #[test]
    fn without_udp_tcp_and_the_loss_is_explained() {
        let echo = EchoReport {
            rtts: vec![Duration::from_millis(150); 950],
            sent: 1000,
            answered: 950,
            payload: 1472,
            mtu: 1500,
            route_mtu: Some(1500),
        };
        let r = recommend(&[t(Transport::Tcp, 8, 200.0)], Some(&echo));
        assert_eq!((r.transport, r.streams), (Transport::Tcp, 8));
        assert!(r.reasons.iter().any(|l| l.contains("lost each way")));
        assert!(r.reasons.iter().any(|l| l.contains("not measured")));
    }
}
