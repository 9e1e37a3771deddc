//! The sending side of the UDP channel: worker threads read and hash blocks
//! (the same work-stealing session as TCP), and one pump thread feeds them
//! to the `DatagramSender`, paces datagrams at the controller's rate in GSO
//! batches, reads the receiver's reports, and sleeps between bursts rather
//! than spinning.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rate::Adaptive;
use session::datagram::fec::{cover_from, group_age, group_for, parity_for, FecEncoder, Parity};
use session::datagram::DatagramSender;
use session::SenderSession;
use store::BlockSource;
use udp::RecvBatch;
use wire::datagram::{ChunkHeader, FirstChunk, ParityHeader, Signal, FIRST_CHUNK_HEADER_LEN};
use wire::ErrorCode;

use super::prepare::read_next_block;
use crate::compress::Compression;
use crate::shared::Shared;
use connect::datagram::{open, seal_chunk, seal_parity, seal_signal, Opened, UdpLink};
use connect::error::TransferError;
use connect::progress::{Mark, Progress};

/// First rate tried: 100 Mbit/s, doubled every round trip from there. A
/// slower path sees one round trip of overshoot, which the in-flight cap
/// bounds and the retransmissions repair.
const INITIAL_RATE: u64 = 12_500_000;
/// Fresh bytes kept cut into chunks ahead of the pacer, at least.
const QUEUE_AHEAD: u64 = 8 << 20;
/// And at most: the tail that erasure coding covers (P-47) is what is
/// queued when the last block is read, so the queue holds a round trip
/// and more where it can.
const QUEUE_AHEAD_MAX: u64 = 128 << 20;
/// Longest sleep between checks of the socket and the queues.
const MAX_SLEEP: Duration = Duration::from_millis(5);
const STATS_EVERY: Duration = Duration::from_millis(250);

type ReadBlock = (session::BlockRef, [u8; 32], u8, Vec<u8>);

/// Where the pump's rate starts, and its cap.
pub(crate) struct Start {
    /// `--rate`: a hard cap.
    pub(crate) cap: Option<u64>,
    /// A first rate for startup, above the usual 100 Mbit/s (half what
    /// `haul probe` measured, P-36).
    pub(crate) first: Option<u64>,
    /// What the last transfer to this host measured: no startup at all.
    pub(crate) known: Option<u64>,
    /// How the path is shared with other traffic (P-46).
    pub(crate) share: rate::Share,
}

pub(crate) fn run(
    sh: &Shared<SenderSession>,
    link: UdpLink,
    sources: &dyn BlockSource,
    compression: &Compression,
    start: Start,
    acks: Receiver<Vec<(u32, u32)>>,
) {
    let (tx, rx) = mpsc::sync_channel::<ReadBlock>(2 * link.workers);
    // Set once every block has been read a first time: the tail.
    let tail = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..link.workers {
            let (tx, tail) = (tx.clone(), &tail);
            scope.spawn(move || {
                let mut buf = Vec::new();
                while let Some((b, h, codec)) =
                    read_next_block(sh, sources, compression, &mut buf, 0)
                {
                    let last = sh.lock().all_handed_out();
                    if tx.send((b, h, codec, std::mem::take(&mut buf))).is_err() {
                        return;
                    }
                    if last {
                        tail.store(true, Ordering::Relaxed);
                    }
                }
            });
        }
        drop(tx);
        if let Err(e) = pump(sh, &link, start, rx, acks, &tail) {
            sh.fail_transport(e);
        }
    });
}

fn pump(
    sh: &Shared<SenderSession>,
    link: &UdpLink,
    how: Start,
    blocks: Receiver<ReadBlock>,
    acks: Receiver<Vec<(u32, u32)>>,
    tail: &AtomicBool,
) -> Result<(), TransferError> {
    let start = Instant::now();
    // A rate `haul probe` measured on this path (P-36) may start it higher.
    let cap = how.cap;
    let first = how.first.unwrap_or(INITIAL_RATE).max(INITIAL_RATE);
    let initial = cap.map_or(first, |c| c.min(first));
    let mut controller = Adaptive::new(initial, cap)
        .with_rtt(link.rtt)
        .with_segment(link.payload)
        .with_share(how.share);
    if let Some(known) = how.known {
        tracing::debug!(
            "udp sender: starting at {known} B/s, measured by the last transfer to this host"
        );
        controller = controller.resuming(known);
    } else if let Some(train) = link.path_rate {
        tracing::debug!("udp sender: set-up's packet train crossed the path at {train} B/s");
        controller = controller.from_setup_train(train);
    }
    let mut tx = DatagramSender::new(link.payload, link.rtt, Box::new(controller));
    let p = sh.progress;
    Progress::set(&p.udp_payload, link.payload as u64);
    // The rate, and that it is a floor, for the compression policy.
    publish(p, &tx);
    let segments = link.channel.max_segments(link.payload);
    let mut out: Vec<u8> = Vec::with_capacity(segments * link.payload);
    let mut batch = RecvBatch::default();
    let mut credit = 0f64;
    let mut last = Instant::now();
    let mut last_report = Instant::now();
    let mut last_stats = Instant::now();
    let send_timeout = Duration::from_secs(5);
    let (mut first_sent, mut bytes_sent) = (None::<Instant>, 0u64);
    let mut full = false;
    let mut fec = Cover::new(link);
    while !sh.stopped() && !sh.is_done() {
        let now = start.elapsed();
        while let Ok(list) = acks.try_recv() {
            for (f, i) in list {
                tx.block_acked(f, i);
            }
        }
        // Read before taking blocks, so the last block is queued first.
        let in_tail = tail.load(Ordering::Relaxed);
        while tx.queued_bytes() < queue_ahead(tx.rate(), link.rtt) {
            match blocks.try_recv() {
                Ok((b, hash, codec, data)) => {
                    let first = FirstChunk {
                        hash,
                        codec,
                        len: b.len,
                    };
                    tx.add_block(b.file, b.index, first, Arc::new(data))
                }
                Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => break,
            }
        }
        if in_tail {
            tx.set_tail();
            if tx.queued_bytes() == 0 {
                p.timeline.mark(Mark::LastFresh);
            }
        }
        // Reports waiting on the socket.
        take_reports(
            link,
            &mut batch,
            &mut tx,
            start,
            Duration::ZERO,
            &mut last_report,
        );
        tx.on_tick(now);
        if !full && first_sent.is_some() && !tx.in_startup() {
            full = true;
            p.timeline.mark(Mark::FullRate);
        }
        if last_report.elapsed() > link.silence {
            return Err(TransferError::new(
                ErrorCode::ConnectionLost,
                format!(
                    "no reports from the receiver over UDP for {}s (--timeout); the path stopped carrying datagrams. What was verified is kept: run the same command again to resume",
                    link.silence.as_secs_f64()
                ),
            ));
        }
        if tx.seqs_spent() {
            return Err(TransferError::new(
                ErrorCode::Limit,
                "this session sent the most datagrams one may (2^48); what was verified is kept: run the same command again to resume",
            ));
        }
        // Pacing: credit accrues at the controller's rate. A GSO batch
        // leaves at once, so it carries at most a millisecond's worth: 64
        // datagrams at 100 Mbit/s queued 7.5 ms at the bottleneck, most
        // of the 10 ms congestion threshold, and every report saw
        // congestion. Bursts are bounded to a few milliseconds' worth (at
        // least two batches): more than one sleep's overshoot, so
        // oversleeping loses no rate.
        let rate = tx.rate() as f64;
        let per_send = ((rate * 0.001 / link.payload as f64) as usize).clamp(1, segments);
        let t = Instant::now();
        credit += rate * t.duration_since(last).as_secs_f64();
        last = t;
        let burst = (rate * 0.004).max((2 * per_send * link.payload) as f64);
        credit = credit.min(burst);
        let mut sent_any = false;
        // Credit left but nothing sendable: nothing queued, or the in-flight
        // cap reached; only a report or a new block changes that.
        let mut starved = false;
        let group = group_for(loss_share(&tx));
        while credit >= link.payload as f64 {
            out.clear();
            let mut n = 0;
            while n < per_send {
                // A due group's parity goes before any other number.
                if fec.due(now, group) {
                    break;
                }
                let Some(c) = tx.poll_transmit(now) else {
                    break;
                };
                let mut h = c.header;
                // Modulo 2^32: only differences count (P-24).
                h.sent_us = start.elapsed().as_micros() as u64 as u32;
                let data = &c.data[c.range.clone()];
                let len = if fec.covers(in_tail, &tx, link.rtt) {
                    fec.seal(now, link, (c.seq, &h, data), &mut out, &tx)
                } else {
                    seal_chunk(&link.send_key, c.seq, &h, data, false, &mut out)
                };
                n += 1;
                if len < link.payload {
                    // A short datagram ends a GSO batch.
                    break;
                }
            }
            if n == 0 {
                // A group due, or nothing left to send: its parity, paced
                // as data.
                if !fec.is_empty() {
                    credit -= fec.send_parity(p, link, &mut tx, now)? as f64;
                    continue;
                }
                if tx.wants_ping(now) {
                    let seq = tx.signal_seq(now);
                    out = seal_signal(&link.send_key, seq, &Signal::Ping);
                    n = 1;
                } else {
                    starved = true;
                    break;
                }
            }
            link.channel
                .send(&out, link.payload, send_timeout)
                .map_err(|e| TransferError::lost("sending datagrams", &e))?;
            Progress::add(
                &p.wire_tx,
                (out.len() + n * link.channel.header_overhead()) as u64,
            );
            // A key's `rate=`, shared by its sessions (issue 39).
            p.control.pace(out.len() as u64);
            credit -= out.len() as f64;
            sent_any = true;
            bytes_sent += out.len() as u64;
            let first = *first_sent.get_or_insert_with(|| {
                let t = Instant::now();
                p.timeline.mark_at(Mark::FirstData, t);
                // A known path (P-26) is at full rate from the start.
                if !tx.in_startup() {
                    p.timeline.mark_at(Mark::FullRate, t);
                }
                t
            });
            Progress::set(&p.udp_bytes, bytes_sent);
            Progress::set(&p.udp_active_us, first.elapsed().as_micros() as u64);
        }
        // Counters for the receiver's summary: regularly, and more often
        // once idle near the end, so the last ones arrive before it ends.
        let idle = tx.queued_bytes() == 0 && !sent_any;
        let every = if idle {
            link.rtt.max(Duration::from_millis(20))
        } else {
            STATS_EVERY
        };
        if last_stats.elapsed() >= every {
            last_stats = Instant::now();
            let s = tx.stats;
            tracing::debug!(
                "udp sender: rate {} B/s ({}), in flight {} of {}, sent {}, re-sent {}, queued {}, held {}",
                tx.rate(),
                tx.controller_state(),
                tx.in_flight(),
                tx.in_flight_cap(),
                s.datagrams,
                s.retransmitted,
                tx.queued_bytes(),
                tx.held_blocks()
            );
            // A group's numbers follow each other: its parity first.
            fec.send_parity(p, link, &mut tx, now)?;
            let seq = tx.signal_seq(now);
            let d = seal_signal(
                &link.send_key,
                seq,
                &Signal::Stats {
                    sent: s.datagrams,
                    retransmitted: s.retransmitted,
                    rate: tx.rate(),
                },
            );
            let _ = link.channel.send(&d, d.len(), send_timeout);
            publish(p, &tx);
        }
        // Sleep until the next datagram's credit, watching for reports;
        // a millisecond (or until a report) when nothing can be sent.
        let wait = if starved || (tx.queued_bytes() == 0 && !sent_any) {
            Duration::from_millis(1)
        } else {
            let need = (link.payload as f64 - credit).max(0.0);
            Duration::from_secs_f64(need / rate.max(1.0)).min(MAX_SLEEP)
        };
        if wait >= Duration::from_millis(1) {
            take_reports(link, &mut batch, &mut tx, start, wait, &mut last_report);
        } else if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
    publish(p, &tx);
    Ok(())
}

/// Fresh bytes to keep queued: what erasure coding covers (P-47), within
/// [`QUEUE_AHEAD`] … [`QUEUE_AHEAD_MAX`]. A loss in the last round trip's
/// data costs the transfer's end a round trip unless it is covered, and
/// coverage can start only once the last block is read: so that much must
/// still be queued then.
fn queue_ahead(rate: u64, rtt: Duration) -> u64 {
    cover_from(rate, cover_window(rtt)).clamp(QUEUE_AHEAD, QUEUE_AHEAD_MAX)
}

/// A round trip and the reports' delay: a loss longer before the end is
/// re-sent in time.
fn cover_window(rtt: Duration) -> Duration {
    rtt + session::datagram::report_interval(rtt) * 2
}

/// The share of the datagrams sent so far that the receiver reported lost.
fn loss_share(tx: &DatagramSender) -> f64 {
    tx.stats.reported_lost as f64 / tx.stats.datagrams.max(1) as f64
}

/// Erasure coding over the tail (P-47): covered datagrams sealed into
/// groups, each group's parity sent right behind it.
struct Cover {
    /// Only where every byte is sealed: under `--no-encrypt` a chunk's
    /// bytes are not authenticated, and a shard rebuilt from them could
    /// not be trusted.
    on: bool,
    coder: FecEncoder,
    started: bool,
}

impl Cover {
    fn new(link: &UdpLink) -> Cover {
        Cover {
            on: link.send_key.protection().encrypts(),
            coder: FecEncoder::new(link.payload, group_age(link.rtt)),
            started: false,
        }
    }

    /// Whether the next data datagram is covered: from when every block
    /// has been read and what is still queued would leave within a round
    /// trip and the reports' delay, on.
    fn covers(&self, in_tail: bool, tx: &DatagramSender, rtt: Duration) -> bool {
        self.on
            && in_tail
            && (self.started || tx.queued_bytes() <= cover_from(tx.rate(), cover_window(rtt)))
    }

    fn is_empty(&self) -> bool {
        self.coder.is_empty()
    }

    fn due(&self, now: Duration, group: usize) -> bool {
        self.coder.due(now, group)
    }

    /// Seals chunk `seq` as a covered datagram at the end of `out`, and
    /// adds its shard to the open group; returns the datagram's length.
    fn seal(
        &mut self,
        now: Duration,
        link: &UdpLink,
        (seq, h, data): (u64, &ChunkHeader, &[u8]),
        out: &mut Vec<u8>,
        tx: &DatagramSender,
    ) -> usize {
        if !self.started {
            self.started = true;
            tracing::debug!(
                "udp sender: erasure coding covers the tail from seq {seq}: {} fresh bytes queued, rate {} B/s",
                tx.queued_bytes(),
                tx.rate()
            );
        }
        let len = seal_chunk(&link.send_key, seq, h, data, true, out);
        let mut hb = [0u8; FIRST_CHUNK_HEADER_LEN];
        let hn = h.encode_into(&mut hb);
        // The shard is the body less `sent_us`.
        self.coder.add(now, seq, &hb[4..hn], data);
        len
    }

    /// Closes the open group and sends its parity, each datagram numbered
    /// right after the group; returns the bytes sent.
    fn send_parity(
        &mut self,
        p: &Progress,
        link: &UdpLink,
        tx: &mut DatagramSender,
        now: Duration,
    ) -> Result<usize, TransferError> {
        let count = parity_for(self.coder.len(), loss_share(tx));
        match self.coder.finish(count) {
            Some(parity) => send_parity(p, link, tx, parity, now),
            None => Ok(0),
        }
    }
}

/// Sends a group's parity datagrams, numbered from the sender's next
/// number; returns the bytes sent.
fn send_parity(
    p: &Progress,
    link: &UdpLink,
    tx: &mut DatagramSender,
    parity: Parity,
    now: Duration,
) -> Result<usize, TransferError> {
    let mut out = Vec::new();
    let mut segment = 0;
    for (i, shard) in parity.shards.iter().enumerate() {
        let h = ParityHeader {
            index: i as u8,
            ..parity.header
        };
        let d = seal_parity(&link.send_key, tx.signal_seq(now), &h, shard);
        segment = d.len();
        out.extend_from_slice(&d);
    }
    let per_send = link.channel.max_segments(segment) * segment;
    for batch in out.chunks(per_send) {
        link.channel
            .send(batch, segment, Duration::from_secs(5))
            .map_err(|e| TransferError::lost("sending parity datagrams", &e))?;
    }
    let wire = out.len() + parity.shards.len() * link.channel.header_overhead();
    Progress::add(&p.wire_tx, wire as u64);
    Progress::add(&p.dgrams_parity, parity.shards.len() as u64);
    p.control.pace(out.len() as u64);
    Ok(out.len())
}

/// Takes the receiver's reports waiting on the socket, waiting up to
/// `wait` for the first; a report of arrivals keeps the channel alive.
fn take_reports(
    link: &UdpLink,
    batch: &mut RecvBatch,
    tx: &mut DatagramSender,
    start: Instant,
    wait: Duration,
    last_report: &mut Instant,
) {
    if link.channel.recv(batch, wait).unwrap_or(0) == 0 {
        return;
    }
    let now = start.elapsed();
    batch.for_each(|_, d| {
        if let Some(Opened::Signal {
            signal: Signal::Report(r),
            ..
        }) = open(&link.recv_key, d)
        {
            tx.on_report(now, &r);
            if r.packets > 0 {
                *last_report = Instant::now();
            }
        }
    });
}

/// The sender's counters, for the progress bar and the summary.
fn publish(p: &Progress, tx: &DatagramSender) {
    let s = tx.stats;
    Progress::set(&p.dgrams_sent, s.datagrams);
    Progress::set(&p.dgrams_resent, s.retransmitted);
    Progress::set(&p.dgrams_lost, s.reported_lost);
    Progress::set(&p.udp_drops, s.receiver_dropped);
    Progress::set(&p.udp_rate, tx.rate());
    Progress::set(&p.udp_startup, tx.in_startup() as u64);
    if !tx.in_startup() {
        Progress::set(&p.udp_estimate, tx.estimate());
    }
}
