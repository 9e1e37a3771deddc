//! The sharing policy over the TCP data streams (P-46): samples their
//! `TCP_INFO` when [`rate::TcpShare`] asks, and caps or frees their
//! pacing as it says.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use rate::{Share, TcpAction, TcpSample, TcpShare};
use session::SenderSession;

use crate::shared::Shared;

/// Runs until the transfer ends, stops or is stopped from outside.
/// `path`: what the path carried when last measured, and its round trip
/// then.
pub(super) fn govern(sh: &Shared<SenderSession>, share: Share, path: Option<(u64, Duration)>) {
    let data = sh.sockets.get(1..).unwrap_or(&[]);
    let mut gov = TcpShare::new(share, path.map_or(0, |p| p.0));
    if !gov.acts() || data.is_empty() {
        return;
    }
    // Streams dialled while another flow held the queue never see the
    // path's least round trip; the control connection, opened first, or
    // the path's last measurement may have.
    let control = sh.sockets.first().and_then(connect::net::tcp_min_rtt);
    let base = control
        .into_iter()
        .chain(path.map(|p| p.1))
        .filter(|d| !d.is_zero())
        .min();
    let start = Instant::now();
    while wait_until(sh, start + gov.next_sample()) {
        let now = start.elapsed();
        let Some(s) = sample(data, base) else {
            gov.skip(now);
            continue;
        };
        tracing::trace!(
            "sharing: delivery {:.0} Mbit/s, srtt {:?}, least {:?}",
            s.delivery as f64 * 8e-6,
            s.srtt,
            s.min_rtt
        );
        if let Some(action) = gov.on_sample(now, s) {
            act(data, action, gov.peak());
        }
    }
}

/// Sleeps until `deadline` or the run's end; false once it ended.
fn wait_until(sh: &Shared<SenderSession>, deadline: Instant) -> bool {
    let mut st = sh.lock();
    loop {
        if sh.is_done() || sh.stopped() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        st = sh
            .cv
            .wait_timeout(st, deadline - now)
            .map_or_else(|p| p.into_inner().0, |r| r.0);
    }
}

/// The streams' figures together: their delivery rates summed, their mean
/// smoothed round trip and the least round trip of any (or `base`).
fn sample(data: &[TcpStream], base: Option<Duration>) -> Option<TcpSample> {
    let infos: Vec<_> = data
        .iter()
        .filter_map(connect::net::tcp_share_info)
        .collect();
    let n = u32::try_from(infos.len()).ok().filter(|&n| n > 0)?;
    Some(TcpSample {
        delivery: infos.iter().map(|i| i.0).sum(),
        srtt: infos.iter().map(|i| i.1).sum::<Duration>() / n,
        min_rtt: infos.iter().map(|i| i.2).chain(base).min()?,
    })
}

fn act(data: &[TcpStream], action: TcpAction, peak: f64) {
    match action {
        TcpAction::Cap(rate) => {
            tracing::debug!(
                "sharing: streams capped at {:.0} Mbit/s together (peak {:.0})",
                rate as f64 * 8e-6,
                peak * 8e-6
            );
            let each = (rate / data.len() as u64).max(1);
            for s in data {
                if let Err(e) = connect::net::set_max_pacing_rate(s, Some(each)) {
                    tracing::debug!("sharing: pacing cap refused: {e}");
                }
            }
        }
        TcpAction::Release(ceiling) => {
            tracing::debug!("sharing: the path has room again; streams restart");
            let each = ceiling.map(|c| (c / data.len() as u64).max(1));
            for s in data {
                let _ = connect::net::set_max_pacing_rate(s, each);
                if let Err(e) = connect::net::restart_congestion_control(s) {
                    tracing::debug!("sharing: congestion control not restarted: {e}");
                }
            }
        }
    }
}
