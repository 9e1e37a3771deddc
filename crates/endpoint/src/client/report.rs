//! What a client reports at the end: the summary the CLI prints, what the
//! UDP channel did, and a probe's measurements.

use std::sync::Arc;
use std::time::{Duration, Instant};

use secure::Protection;
use wire::Summary;

use connect::datagram::{self};
use connect::progress::{Mark, Progress};

use super::config::Route;

/// What the UDP channel did, for the summary.
#[derive(Debug, Clone, Copy, Default)]
pub struct UdpReport {
    pub payload: u64,
    pub sent: u64,
    pub resent: u64,
    pub lost: u64,
    pub received: u64,
    /// Parity datagrams sent over the tail (this side sent), and data
    /// datagrams rebuilt from parity (this side received), P-47.
    pub parity: u64,
    pub rebuilt: u64,
    /// The sending rate at the end, bytes per second.
    pub final_rate: u64,
    /// Datagram bytes per second while data flowed (first to last datagram).
    pub average_rate: u64,
    pub drops: u64,
    pub buffer: u64,
    pub buffer_capped: bool,
    /// The sender's capacity estimate at the end, bytes per second; 0 if
    /// it never left startup (or this side received).
    pub estimate: u64,
}

/// What the CLI prints at the end.
#[derive(Debug, Clone)]
pub struct Report {
    pub route: Route,
    /// Bytes saved by compression: file bytes of compressed blocks less
    /// their bytes on the wire (P-30).
    pub compress_saved: u64,
    /// File bytes the receiver copied from what it held (P-31).
    pub dedup_saved: u64,
    /// File bytes a partial already held, not sent again (P-35).
    pub resumed: u64,
    /// Files found already in place and not sent (P-32), and their bytes.
    pub skipped_files: u64,
    pub skipped_bytes: u64,
    /// `--dry-run`: paths that would be sent, and their bytes.
    pub dry_run: bool,
    pub listed: Vec<String>,
    pub listed_bytes: u64,
    /// `--delete`: paths removed (or that would be).
    pub deleted: Vec<String>,
    /// Paths deleted past those listed in `deleted`.
    pub deleted_more: u64,
    /// `--itemize-changes` (P-44): each file received, in the order the
    /// receiver took them, and how it differed (`wire::CHANGE_*` bits).
    pub changed: Vec<(String, u8)>,
    /// What the receiver noted about files (P-41): why a partial could
    /// not be resumed from, above all.
    pub notes: Vec<(wire::NoteKind, String)>,
    /// File bytes in all-zero blocks, announced instead of sent (P-29).
    pub zero_bytes: u64,
    pub duration: Duration,
    pub summary: Summary,
    pub wire_bytes: u64,
    pub streams: u16,
    pub retransmitted: u64,
    /// Blocks a pushing sender sent a second time near the end because
    /// their first copy was slow to be acknowledged (P-13); 0 on a pull.
    pub endgame_copies: u64,
    pub rtt: Duration,
    pub protection: Protection,
    pub stream_window: u64,
    /// Present when the UDP channel carried the data.
    pub udp: Option<UdpReport>,
    /// What a push's TCP streams delivered together at their most, bytes
    /// per second (their sharing's measured peak, P-46); 0 if none.
    pub tcp_peak: u64,
    /// Automatic transport asked for the UDP channel and got none, and the
    /// data went over TCP streams instead (P-23).
    pub udp_failed: bool,
    /// Transport and streams followed `haul probe`'s advice (P-36).
    pub advised: bool,
    /// Seconds from dialling to each step of the session reached.
    pub timeline: Vec<(Mark, f64)>,
    /// The request rode in a pinned start's first message, and the
    /// server took it (P-48).
    pub early_request: bool,
}

/// What the report needs once the connection is consumed.
pub(super) struct Tail {
    pub(super) progress: Arc<Progress>,
    pub(super) started: Instant,
    pub(super) rtt: Duration,
    pub(super) early: bool,
    pub(super) protection: Protection,
    pub(super) dry_run: bool,
    pub(super) advised: bool,
}

impl Tail {
    pub(super) fn report(
        &self,
        summary: Summary,
        streams: u16,
        sent: (u64, u64),
        window: u64,
    ) -> Report {
        let (retransmitted, endgame_copies) = sent;
        let p = &self.progress;
        let get = Progress::get;
        let udp = (get(&p.udp_payload) > 0).then(|| UdpReport {
            payload: get(&p.udp_payload),
            sent: get(&p.dgrams_sent),
            resent: get(&p.dgrams_resent),
            lost: get(&p.dgrams_lost),
            received: get(&p.dgrams_received),
            parity: get(&p.dgrams_parity),
            rebuilt: get(&p.dgrams_rebuilt),
            final_rate: get(&p.udp_rate),
            average_rate: (get(&p.udp_bytes) as f64 * 1e6 / get(&p.udp_active_us).max(1) as f64)
                as u64,
            drops: get(&p.udp_drops),
            buffer: get(&p.udp_buffer),
            buffer_capped: get(&p.udp_buffer_capped) != 0,
            estimate: get(&p.udp_estimate),
        });
        Report {
            route: Route::Daemon,
            zero_bytes: get(&p.zero_bytes),
            compress_saved: get(&p.compressed_in).saturating_sub(get(&p.compressed_out)),
            dedup_saved: get(&p.dedup_bytes),
            resumed: get(&p.resumed_bytes),
            skipped_files: get(&p.skipped_files),
            skipped_bytes: get(&p.skipped_bytes),
            dry_run: self.dry_run,
            listed: std::mem::take(&mut *p.listed.lock().unwrap_or_else(|e| e.into_inner())),
            listed_bytes: get(&p.listed_bytes),
            deleted: std::mem::take(&mut *p.deleted.lock().unwrap_or_else(|e| e.into_inner())),
            deleted_more: get(&p.deleted_more),
            changed: std::mem::take(&mut *p.changed.lock().unwrap_or_else(|e| e.into_inner())),
            notes: std::mem::take(&mut *p.notes.lock().unwrap_or_else(|e| e.into_inner())),
            udp,
            tcp_peak: get(&p.tcp_peak),
            udp_failed: get(&p.udp_failed) != 0,
            duration: self.started.elapsed(),
            summary,
            wire_bytes: Progress::get(&p.wire_tx) + Progress::get(&p.wire_rx),
            streams,
            retransmitted,
            endgame_copies,
            rtt: self.rtt,
            protection: self.protection,
            stream_window: window,
            advised: self.advised,
            timeline: p.timeline.since(self.started),
            early_request: self.early,
        }
    }
}

/// One memory-to-memory test of `haul probe` (P-36).
pub struct ProbeRun {
    pub report: Report,
    /// From the data path's set-up to the last block verified: what the
    /// goodput is measured over.
    pub data_time: Duration,
    /// The echo measurements, when asked for and the UDP channel came up.
    pub echo: Option<datagram::echo::EchoReport>,
    /// Verified bytes at moments since the data path was set up, every
    /// 10 ms, the end last.
    pub samples: Vec<(Duration, u64)>,
    /// Bytes read off the wire (TCP streams and control, or UDP
    /// datagrams) at the same moments.
    pub wire_samples: Vec<(Duration, u64)>,
}
