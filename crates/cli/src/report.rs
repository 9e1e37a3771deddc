//! What the user sees: a progress bar while bytes move (only on a terminal),
//! and a final summary, as text on stderr or as one JSON object on stdout.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use connect::progress::Mark;
use connect::Progress;
use endpoint::Report;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

/// When to show progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    Never,
    /// A bar, when stderr is a terminal.
    OnTerminal,
    /// A bar on a terminal, else a line a second (`--progress`).
    Always,
}

impl Show {
    /// What the options ask: `--quiet` never, `--progress` always,
    /// `--json` never, otherwise on a terminal.
    pub fn of(quiet: bool, json: bool, progress: bool) -> Show {
        if quiet || (json && !progress) {
            Show::Never
        } else if progress {
            Show::Always
        } else {
            Show::OnTerminal
        }
    }
}

/// A progress bar fed from the engine's counters by a small thread.
pub struct Bar {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Bar {
    pub fn start(progress: Arc<Progress>, show: Show) -> Bar {
        let stop = Arc::new(AtomicBool::new(false));
        let terminal = std::io::stderr().is_terminal();
        let s = stop.clone();
        if show == Show::Always && !terminal {
            let thread = std::thread::spawn(move || lines(&progress, &s));
            return Bar {
                stop,
                thread: Some(thread),
            };
        }
        if show == Show::Never || !terminal {
            return Bar { stop, thread: None };
        }
        let thread = std::thread::spawn(move || {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(8));
            bar.set_style(
                ProgressStyle::with_template(
                    "{bar:30.cyan/blue} {bytes}/{total_bytes} {rate} ETA {eta} {msg}",
                )
                .expect("static template")
                // In bits per second, as --rate, --progress lines and the
                // summary are.
                .with_key(
                    "rate",
                    |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = w.write_str(&bits_per_sec(state.per_sec() * 8.0));
                    },
                )
                .progress_chars("=> "),
            );
            while !s.load(Ordering::Relaxed) {
                bar.set_length(Progress::get(&progress.total_bytes));
                bar.set_position(Progress::get(&progress.done_bytes));
                let channel = match Progress::get(&progress.udp_payload) {
                    0 => format!("streams {}", Progress::get(&progress.streams)),
                    _ => format!(
                        "udp {} re-sent {}",
                        bits_per_sec(Progress::get(&progress.udp_rate) as f64 * 8.0),
                        Progress::get(&progress.dgrams_resent)
                    ),
                };
                bar.set_message(format!(
                    "files {}/{} {channel}",
                    Progress::get(&progress.done_files),
                    Progress::get(&progress.total_files),
                ));
                std::thread::sleep(Duration::from_millis(100));
            }
            bar.finish_and_clear();
        });
        Bar {
            stop,
            thread: Some(thread),
        }
    }

    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Progress as plain lines, one a second, for logs and pipes.
fn lines(progress: &Progress, stop: &AtomicBool) {
    let get = Progress::get;
    let mut last = (std::time::Instant::now(), 0u64);
    let mut ticks = 0u32;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        ticks += 1;
        if !ticks.is_multiple_of(10) {
            continue;
        }
        let (done, total) = (get(&progress.done_bytes), get(&progress.total_bytes));
        let now = std::time::Instant::now();
        let rate = done.saturating_sub(last.1) as f64 / now.duration_since(last.0).as_secs_f64();
        last = (now, done);
        let eta = if rate > 0.0 && total > done {
            format!(", ETA {:.0} s", (total - done) as f64 / rate)
        } else {
            String::new()
        };
        eprintln!(
            "haul: {:.1}% {} of {}, {}{eta}, files {}/{}",
            if total > 0 {
                done as f64 * 100.0 / total as f64
            } else {
                0.0
            },
            bytes(done),
            bytes(total),
            bits_per_sec(rate * 8.0),
            get(&progress.done_files),
            get(&progress.total_files),
        );
    }
}

#[derive(Serialize)]
pub struct Json<'a> {
    pub ok: bool,
    pub direction: &'a str,
    pub files: u64,
    pub file_bytes: u64,
    pub wire_bytes: u64,
    pub duration_s: f64,
    /// Verified file bytes per second, in bits per second.
    pub goodput_bps: f64,
    pub streams: u16,
    pub blocks_retransmitted: u64,
    /// Blocks sent twice near the end of a push, their first copy slow.
    pub blocks_endgame_copies: u64,
    pub rtt_ms: f64,
    pub protection: &'a str,
    pub stream_window_bytes: u64,
    /// "tcp" or "udp".
    pub transport: &'a str,
    /// How the server was reached: "daemon", "ssh" (started over ssh, data
    /// direct) or "ssh-relay" (data through the ssh channel).
    /// The transport and streams came from `haul probe`'s advice (P-36).
    pub advised: bool,
    pub route: &'a str,
    /// File bytes in all-zero blocks, which were announced, not sent, and
    /// left as holes where the receiver's file system allows.
    pub saved_zero_bytes: u64,
    /// File bytes of compressed blocks less their bytes on the wire.
    pub saved_compression_bytes: u64,
    /// File bytes the receiver copied from what it already held (its old
    /// version of the file, or --basis) instead of receiving them.
    pub saved_dedup_bytes: u64,
    /// File bytes that a partial left by an interrupted transfer already
    /// held, verified, and were not sent again (resume).
    pub resumed_bytes: u64,
    /// Files (and their bytes) already in place, not sent (--update).
    pub skipped_files: u64,
    pub skipped_bytes: u64,
    /// --dry-run: nothing was sent; `would_send` lists what would be.
    pub dry_run: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_send: Option<&'a [String]>,
    pub would_send_bytes: u64,
    /// --delete: paths removed (or, in a dry run, that would be).
    pub deleted: &'a [String],
    /// Deleted past those listed.
    pub deleted_more: u64,
    /// What the receiver noted about files that did not stop the
    /// transfer: above all why a partial left by an interrupted transfer
    /// could not be resumed from (P-41).
    pub notes: Vec<NoteJson<'a>>,
    /// Present when the UDP channel carried the data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpJson>,
    /// Seconds from the start of the connection to each step of the
    /// session: where the wall time went.
    pub timeline_s: TimelineJson<'a>,
    /// The request rode in the handshake's first message (a pinned start
    /// to a server whose key is pinned, P-48): one round trip less.
    pub request_in_handshake: bool,
    /// Automatic transport asked for the UDP channel and got none; the
    /// data went over TCP streams, and so will the next day's transfers
    /// to the same host (P-23).
    pub udp_failed: bool,
}

/// Seconds from dialling the server to each step the session reached, by
/// the step's name ([`Mark::name`]), in the order of [`Mark::ALL`]; a step
/// not reached (a transfer over TCP streams under `--fair off` has no
/// `full_rate`) is left out.
pub struct TimelineJson<'a>(&'a [(Mark, f64)]);

impl Serialize for TimelineJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for &(mark, secs) in self.0 {
            m.serialize_entry(mark.name(), &((secs * 1e6).round() / 1e6))?;
        }
        m.end()
    }
}

#[derive(Serialize)]
pub struct NoteJson<'a> {
    /// `partial_held`, `partial_stale`, `partial_unjournaled`,
    /// `partial_damaged` or `other`.
    pub kind: &'static str,
    pub message: &'a str,
}

#[derive(Serialize)]
pub struct UdpJson {
    pub datagram_bytes: u64,
    pub datagrams_sent: u64,
    pub datagrams_retransmitted: u64,
    pub datagrams_lost: u64,
    pub datagrams_received: u64,
    /// Parity datagrams sent over the tail (a push), and data datagrams
    /// rebuilt from parity instead of re-sent (a pull): P-47.
    pub parity_datagrams_sent: u64,
    pub datagrams_rebuilt: u64,
    /// Datagram bits per second (UDP payload) while data flowed, from the
    /// first datagram to the last: the rate the pacer held.
    pub average_rate_bps: f64,
    /// The sender's rate when the transfer ended, bits per second.
    pub final_rate_bps: f64,
    /// Datagrams the receiving host dropped for lack of socket buffer.
    pub receiver_drops: u64,
    pub receive_buffer_bytes: u64,
    pub receive_buffer_capped: bool,
}

pub fn json(r: &Report, direction: &str) -> String {
    let secs = r.duration.as_secs_f64().max(1e-9);
    serde_json::to_string(&Json {
        ok: true,
        direction,
        files: r.summary.files,
        file_bytes: r.summary.file_bytes,
        wire_bytes: r.wire_bytes,
        duration_s: secs,
        goodput_bps: goodput(r),
        streams: r.streams,
        blocks_retransmitted: r.retransmitted.max(r.summary.bad_blocks),
        blocks_endgame_copies: r.endgame_copies,
        rtt_ms: r.rtt.as_secs_f64() * 1e3,
        protection: r.protection.name(),
        stream_window_bytes: r.stream_window,
        transport: if r.udp.is_some() { "udp" } else { "tcp" },
        advised: r.advised,
        route: route_name(r.route),
        saved_zero_bytes: r.zero_bytes,
        saved_compression_bytes: r.compress_saved,
        saved_dedup_bytes: r.dedup_saved,
        resumed_bytes: r.resumed,
        skipped_files: r.skipped_files,
        skipped_bytes: r.skipped_bytes,
        dry_run: r.dry_run,
        would_send: r.dry_run.then_some(&r.listed[..]),
        would_send_bytes: r.listed_bytes,
        deleted: &r.deleted,
        deleted_more: r.deleted_more,
        notes: r
            .notes
            .iter()
            .map(|(k, m)| NoteJson {
                kind: k.name(),
                message: m,
            })
            .collect(),
        udp: r.udp.map(|u| UdpJson {
            datagram_bytes: u.payload,
            datagrams_sent: u.sent,
            datagrams_retransmitted: u.resent,
            datagrams_lost: u.lost,
            datagrams_received: u.received,
            parity_datagrams_sent: u.parity,
            datagrams_rebuilt: u.rebuilt,
            average_rate_bps: u.average_rate as f64 * 8.0,
            final_rate_bps: u.final_rate as f64 * 8.0,
            receiver_drops: u.drops,
            receive_buffer_bytes: u.buffer,
            receive_buffer_capped: u.buffer_capped,
        }),
        timeline_s: TimelineJson(&r.timeline),
        request_in_handshake: r.early_request,
        udp_failed: r.udp_failed,
    })
    .expect("plain struct serializes")
}

pub fn route_name(r: endpoint::Route) -> &'static str {
    match r {
        endpoint::Route::Daemon => "daemon",
        endpoint::Route::Ssh => "ssh",
        endpoint::Route::SshRelay => "ssh-relay",
        endpoint::Route::Local => "local",
        endpoint::Route::InsideStore => "inside-store",
    }
}

/// What `--itemize-changes` prints (rsync's letters: `>f+++++++++` a new
/// file, `>f.st......` one whose size and time differed, `*deleting` one
/// removed; '<' where the files went to another host), or, for `-v`, the
/// paths sent and `deleting PATH`.
pub fn itemized(r: &Report, away: bool, preserve: bool, letters: bool) -> Vec<String> {
    let mut out = Vec::new();
    let y = if away { '<' } else { '>' };
    for (path, bits) in &r.changed {
        if !letters {
            out.push(path.clone());
            continue;
        }
        let flag = |bit: u8, c: char| if bits & bit != 0 { c } else { '.' };
        let what = match bits & wire::CHANGE_NEW {
            0 => format!(
                "{}{}{}......",
                flag(wire::CHANGE_SUM, 'c'),
                flag(wire::CHANGE_SIZE, 's'),
                flag(wire::CHANGE_TIME, if preserve { 't' } else { 'T' }),
            ),
            _ => "+++++++++".to_string(),
        };
        out.push(format!("{y}f{what} {path}"));
    }
    let deleting = if letters { "*deleting   " } else { "deleting " };
    for d in &r.deleted {
        out.push(format!("{deleting}{d}"));
    }
    out
}

/// A command's failure as the user sees it: `haul: MESSAGE` on stderr,
/// and with `--json` the error's JSON on stdout; its exit code.
pub fn failed(e: &connect::TransferError, json: bool) -> i32 {
    let code = crate::exit::code(e.code);
    eprintln!("haul: {}", e.message);
    if json {
        println!("{}", json_error(code, &e.message));
    }
    code
}

pub fn json_error(code: i32, message: &str) -> String {
    serde_json::json!({ "ok": false, "exit_code": code, "error": message }).to_string()
}

pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn bits_per_sec(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.1} Mbit/s", bps / 1e6)
    } else {
        format!("{:.1} kbit/s", bps / 1e3)
    }
}

/// The most the streams' windows allow at this RTT, in bits per second.
pub fn window_limit(r: &Report) -> f64 {
    r.streams as f64 * r.stream_window as f64 * 8.0 / r.rtt.as_secs_f64().max(1e-6)
}

/// The human summary, in the spirit of Tsunami's end-of-transfer report:
/// what arrived, then what the channel (TCP streams or UDP) did.
pub fn text(r: &Report) -> String {
    let mut lines = String::new();
    for d in &r.deleted {
        lines += &format!(
            "{}{d}\n",
            if r.dry_run {
                "would delete "
            } else {
                "deleted "
            }
        );
    }
    if r.deleted_more > 0 {
        lines += &format!("and {} more deleted, not listed\n", r.deleted_more);
    }
    if r.dry_run {
        for l in &r.listed {
            lines += &format!("would send {l}\n");
        }
        return lines
            + &format!(
                "haul: dry run: {} file{} ({}) would be sent, {} already up to date{}; nothing was changed",
                r.listed.len(),
                if r.listed.len() == 1 { "" } else { "s" },
                bytes(r.listed_bytes),
                r.skipped_files,
                if r.deleted.is_empty() {
                    String::new()
                } else {
                    format!(", {} would be deleted", r.deleted.len() as u64 + r.deleted_more)
                }
            );
    }
    for (_, n) in &r.notes {
        lines += &format!("note: {n}\n");
    }
    lines + &summary_text(r)
}

/// Goodput: the file bytes this run delivered, verified, per second. A
/// resumed partial's bytes were delivered by an earlier run, and count
/// only there.
fn goodput(r: &Report) -> f64 {
    let secs = r.duration.as_secs_f64().max(1e-9);
    r.summary.file_bytes.saturating_sub(r.resumed) as f64 * 8.0 / secs
}

fn summary_text(r: &Report) -> String {
    let secs = r.duration.as_secs_f64().max(1e-9);
    let s = &r.summary;
    if r.route == endpoint::Route::InsideStore {
        return format!(
            "haul: {} file{}, {} in {secs:.2} s: {} copied inside the store, no byte leaving it",
            s.files,
            if s.files == 1 { "" } else { "s" },
            bytes(s.file_bytes),
            bits_per_sec(goodput(r)),
        );
    }
    let goodput = goodput(r);
    let moved = s.file_bytes.saturating_sub(r.resumed);
    // Against the bytes this run moved; a run that moved none has no
    // such share.
    let overhead = match moved {
        0 => String::new(),
        m => format!(
            " ({:.1}% of file bytes",
            r.wire_bytes as f64 * 100.0 / m as f64
        ),
    };
    let mut zeros = String::new();
    if r.zero_bytes > 0 {
        zeros += &format!(", {} in zero blocks not sent", bytes(r.zero_bytes));
    }
    if r.compress_saved > 0 {
        zeros += &format!(", {} saved by compression", bytes(r.compress_saved));
    }
    if r.dedup_saved > 0 {
        zeros += &format!(", {} already at the receiver (dedup)", bytes(r.dedup_saved));
    }
    if r.resumed > 0 {
        zeros += &format!(", {} resumed from a partial", bytes(r.resumed));
    }
    if r.skipped_files > 0 {
        zeros += &format!(
            "; {} file{} ({}) already up to date, skipped",
            r.skipped_files,
            if r.skipped_files == 1 { "" } else { "s" },
            bytes(r.skipped_bytes)
        );
    }
    let head = if moved == 0 {
        // Nothing moved (a sync with everything up to date, a resume with
        // nothing left): no rate to speak of.
        let zeros = zeros.trim_start_matches([',', ';', ' ']);
        format!(
            "haul: {} file{}, {} in {:.2} s: nothing needed sending{}{zeros}\n  wire {}, ",
            s.files,
            if s.files == 1 { "" } else { "s" },
            bytes(s.file_bytes),
            secs,
            if zeros.is_empty() { "" } else { ": " },
            bytes(r.wire_bytes),
        )
    } else {
        let close = if overhead.is_empty() { "" } else { ")" };
        format!(
            "haul: {} file{}, {} in {:.2} s: goodput {} (verified)\n  \
             wire {}{overhead}{zeros}{close}, ",
            s.files,
            if s.files == 1 { "" } else { "s" },
            bytes(s.file_bytes),
            secs,
            bits_per_sec(goodput),
            bytes(r.wire_bytes),
        )
    };
    let route = match r.route {
        endpoint::Route::Daemon | endpoint::Route::Local | endpoint::Route::InsideStore => "",
        endpoint::Route::Ssh => "\n  remote side started over ssh, data on direct connections",
        endpoint::Route::SshRelay => {
            "\n  remote side started over ssh, data through the ssh channel"
        }
    };
    let channel = match &r.udp {
        Some(u) => udp_text(r, u),
        None => tcp_text(r, goodput),
    };
    head + &channel + route
}

/// The TCP streams' part of the summary, with a note when the OS's window
/// caps are what limited the transfer.
fn tcp_text(r: &Report, goodput: f64) -> String {
    if r.streams == 0 {
        // Nothing but zeros: announced behind the request (P-29).
        return format!(
            "no data connections (every block announced), {}, rtt {:.1} ms",
            r.protection.name(),
            r.rtt.as_secs_f64() * 1e3,
        );
    }
    let limit = window_limit(r);
    let note = if r.summary.file_bytes >= 64 << 20 && goodput * 1.5 > limit {
        format!(
            "\n  note: the OS caps each stream's TCP window near {}, so {} streams reach at most {} at this RTT; \
             use more --streams, or raise net.core.wmem_max/rmem_max and tcp_wmem/tcp_rmem (or run as root)",
            bytes(r.stream_window),
            r.streams,
            bits_per_sec(limit)
        )
    } else {
        String::new()
    };
    format!(
        "{} stream{}, {}, rtt {:.1} ms, blocks retransmitted {}",
        r.streams,
        if r.streams == 1 { "" } else { "s" },
        r.protection.name(),
        r.rtt.as_secs_f64() * 1e3,
        r.retransmitted.max(r.summary.bad_blocks),
    ) + &note
}

/// The UDP channel's part of the summary: datagrams sent, re-sent and lost,
/// the average and final rates, and receiver overload (the counterpart of
/// Tsunami's performance figure).
fn udp_text(r: &Report, u: &endpoint::UdpReport) -> String {
    let pct = |a: u64, b: u64| {
        if b > 0 {
            a as f64 * 100.0 / b as f64
        } else {
            0.0
        }
    };
    let mut out = format!(
        "UDP {}-byte datagrams, {}, rtt {:.1} ms\n  \
         datagrams sent {}, re-sent {} ({:.2}%), lost {}; rate average {}, final {}",
        u.payload,
        r.protection.name(),
        r.rtt.as_secs_f64() * 1e3,
        u.sent,
        u.resent,
        pct(u.resent, u.sent),
        u.lost,
        bits_per_sec(u.average_rate as f64 * 8.0),
        bits_per_sec(u.final_rate as f64 * 8.0),
    );
    if u.parity > 0 || u.rebuilt > 0 {
        out += &format!(
            "\n  erasure coding over the tail: parity sent {}, datagrams rebuilt {}",
            u.parity, u.rebuilt
        );
    }
    if u.drops > 0 {
        out += &format!(
            "\n  note: the receiving host dropped {} datagrams for lack of socket buffer (receiver overload)",
            u.drops
        );
    }
    if u.buffer_capped {
        out += &format!(
            "\n  note: the OS capped this side's UDP socket buffer at {} (net.core.rmem_max/wmem_max); \
             raise them, or run as root, if datagrams are dropped",
            bytes(u.buffer)
        );
    }
    out
}
