//! Counters the engine updates and the CLI reads for its progress bar and
//! summary. Atomics only: reading them never slows the data path.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

#[derive(Default, Debug)]
pub struct Progress {
    /// File bytes in the manifest.
    pub total_bytes: AtomicU64,
    pub total_files: AtomicU64,
    /// File bytes verified by the receiver (acknowledged, on the sender).
    pub done_bytes: AtomicU64,
    /// Files placed under their final names.
    pub done_files: AtomicU64,
    /// Bytes this side wrote to and read from all its connections.
    pub wire_tx: AtomicU64,
    pub wire_rx: AtomicU64,
    /// Blocks sent again after the receiver rejected them.
    pub retransmitted: AtomicU64,
    /// Streams in use.
    pub streams: AtomicU64,
    /// UDP channel (P-23): datagram payload size in use (0: TCP streams).
    pub udp_payload: AtomicU64,
    /// Data datagrams this side sent, and how many of them were re-sends.
    pub dgrams_sent: AtomicU64,
    pub dgrams_resent: AtomicU64,
    /// Datagrams found missing (by this receiver, or as reported to this
    /// sender).
    pub dgrams_lost: AtomicU64,
    pub dgrams_received: AtomicU64,
    /// Parity datagrams this sender sent over the tail (P-47), and data
    /// datagrams this receiver rebuilt from parity instead of waiting for
    /// their re-send.
    pub dgrams_parity: AtomicU64,
    pub dgrams_rebuilt: AtomicU64,
    /// The sending rate now, bytes per second (the peer's, on a receiver).
    pub udp_rate: AtomicU64,
    /// 1 while the UDP sender still probes for the path's rate (its
    /// startup), when `udp_rate` is a floor, not the path's rate.
    pub udp_startup: AtomicU64,
    /// The UDP sender's measure of the path's capacity, bytes per second,
    /// once it left startup (0 before): where the next transfer to the
    /// same host may start (P-26).
    pub udp_estimate: AtomicU64,
    /// What a push's TCP streams delivered together at their most, bytes
    /// per second of payload (their sharing's measured peak, P-46); 0 if
    /// they never measured one. The ceiling of the next push to the same
    /// host is sized from it.
    pub tcp_peak: AtomicU64,
    /// 1 once automatic transport asked for the UDP channel and got none
    /// (a firewall, a server without UDP): the next transfer to the same
    /// host within a day goes over TCP streams at once (P-23).
    pub udp_failed: AtomicU64,
    /// Datagram bytes this side sent (sender) or received (receiver), and
    /// the microseconds from the first to the last of them: their ratio is
    /// the average rate while data flowed.
    pub udp_bytes: AtomicU64,
    pub udp_active_us: AtomicU64,
    /// Datagrams dropped by the receiving host's full socket buffers.
    pub udp_drops: AtomicU64,
    /// Receive buffer granted to the UDP socket, and whether the OS capped it.
    pub udp_buffer: AtomicU64,
    pub udp_buffer_capped: AtomicU64,
    /// File bytes in all-zero blocks, announced instead of sent (P-29):
    /// by this sender, or received as holes by this receiver.
    pub zero_bytes: AtomicU64,
    /// Blocks sent (or received) compressed (P-30): their bytes in the
    /// file, and on the wire.
    pub compressed_in: AtomicU64,
    pub compressed_out: AtomicU64,
    /// Receiver: output bytes and microseconds spent decompressing, per
    /// codec (lz4, zstd), reported to the sender's policy (P-30).
    pub decoded_lz4: AtomicU64,
    pub decoded_lz4_us: AtomicU64,
    pub decoded_zstd: AtomicU64,
    pub decoded_zstd_us: AtomicU64,
    /// File bytes the receiver copied from what it already held instead
    /// of receiving them (P-31).
    pub dedup_bytes: AtomicU64,
    /// File bytes a partial left by an interrupted transfer already held,
    /// verified, and that were not sent again (P-35).
    pub resumed_bytes: AtomicU64,
    /// Files found already in place and not sent (P-32), and their bytes.
    pub skipped_files: AtomicU64,
    pub skipped_bytes: AtomicU64,
    /// `--dry-run`: paths that would be sent, and their bytes.
    pub listed: std::sync::Mutex<Vec<String>>,
    pub listed_bytes: AtomicU64,
    /// `--delete`: paths removed (or that would be, in a dry run).
    pub deleted: std::sync::Mutex<Vec<String>>,
    /// `--itemize-changes` (P-44): each file received and how it differed
    /// from what was in place (`wire::CHANGE_*` bits).
    pub changed: std::sync::Mutex<Vec<(String, u8)>>,
    /// Paths deleted past those listed (a sender keeps a bounded list).
    pub deleted_more: AtomicU64,
    /// What the receiver noted about files (P-41): why a partial could
    /// not be resumed from, above all.
    pub notes: std::sync::Mutex<Vec<(wire::NoteKind, String)>>,
    /// When each step of the session first happened, for the summary's
    /// account of the wall time.
    pub timeline: Timeline,
    /// What the server imposes on this run: a pace shared with the key's
    /// other sessions, a stop, how errors read to the peer (issue 39).
    pub control: crate::control::RunControl,
}

/// A step of a session whose time the summary reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// The TCP connection to the server is up.
    Connected,
    /// The handshake is done: keys agreed, the server's key checked.
    Authenticated,
    /// The server accepted the request.
    Accepted,
    /// The data path (UDP channel or TCP streams) is ready.
    DataPath,
    /// The first data datagram or block frame left (sender) or arrived
    /// (receiver).
    FirstData,
    /// The UDP sender's rate left its startup: the path is full.
    FullRate,
    /// Every block has been sent once (the tail begins).
    LastFresh,
    /// The receiver's summary arrived (sender) or was sent (receiver).
    Finished,
}

impl Mark {
    pub const ALL: [Mark; 8] = [
        Mark::Connected,
        Mark::Authenticated,
        Mark::Accepted,
        Mark::DataPath,
        Mark::FirstData,
        Mark::FullRate,
        Mark::LastFresh,
        Mark::Finished,
    ];

    /// The name in `--json`'s `timeline_s`.
    pub fn name(self) -> &'static str {
        match self {
            Mark::Connected => "connected",
            Mark::Authenticated => "authenticated",
            Mark::Accepted => "accepted",
            Mark::DataPath => "data_path",
            Mark::FirstData => "first_data",
            Mark::FullRate => "full_rate",
            Mark::LastFresh => "last_fresh",
            Mark::Finished => "finished",
        }
    }
}

/// The first time each [`Mark`] was reached. Marking a step already
/// marked costs one atomic load.
#[derive(Default, Debug)]
pub struct Timeline {
    seen: AtomicU32,
    at: Mutex<Vec<(Mark, Instant)>>,
}

impl Timeline {
    pub fn mark(&self, m: Mark) {
        self.mark_at(m, Instant::now());
    }

    /// Whether `m` has been marked.
    pub fn reached(&self, m: Mark) -> bool {
        self.seen.load(Relaxed) & (1 << m as u32) != 0
    }

    pub fn mark_at(&self, m: Mark, t: Instant) {
        let bit = 1 << m as u32;
        if self.seen.fetch_or(bit, Relaxed) & bit == 0 {
            self.at
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((m, t));
        }
    }

    /// Seconds from `origin` to each step reached, in the order of
    /// [`Mark::ALL`].
    pub fn since(&self, origin: Instant) -> Vec<(Mark, f64)> {
        let at = self.at.lock().unwrap_or_else(|e| e.into_inner());
        Mark::ALL
            .iter()
            .filter_map(|m| {
                at.iter()
                    .find(|(k, _)| k == m)
                    .map(|(_, t)| (*m, t.saturating_duration_since(origin).as_secs_f64()))
            })
            .collect()
    }
}

impl Progress {
    pub fn get(v: &AtomicU64) -> u64 {
        v.load(Relaxed)
    }
    pub fn add(v: &AtomicU64, n: u64) {
        v.fetch_add(n, Relaxed);
    }
    pub fn set(v: &AtomicU64, n: u64) {
        v.store(n, Relaxed);
    }
}
