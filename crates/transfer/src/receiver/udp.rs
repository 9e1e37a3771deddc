//! The receiving side of the UDP channel: one thread drains the socket in
//! batches, opens each datagram, and hands chunks to the
//! `DatagramReceiver`; completed blocks go to worker threads that check
//! their hash and write them exactly as blocks that came over TCP. The same
//! thread sends a report every interval.

use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use session::datagram::fec::{rebuilt_chunk, FecDecoder};
use session::datagram::{Completed, DatagramReceiver};
use session::BlockVerdict;
use udp::RecvBatch;
use wire::datagram::{Signal, DATA_SEQ_START};
use wire::{BlockHeader, ErrorCode};

use super::place::Receiving;
use connect::datagram::{open, seal_signal, Opened, UdpLink};
use connect::error::TransferError;
use connect::progress::{Mark, Progress};

fn since_epoch(t: SystemTime) -> Duration {
    t.duration_since(UNIX_EPOCH).unwrap_or_default()
}

pub(crate) fn run(rx: &Receiving, mut link: UdpLink) {
    // Unbounded, so the receiving thread never waits for the workers (a
    // file's preallocation can take a second): it keeps draining the
    // socket and reporting. The sender's window (unacknowledged blocks, at
    // most `udp_send_window`) bounds what can queue here.
    let (done_tx, done_rx) = mpsc::channel::<Completed>();
    let (reopen_tx, reopen_rx) = mpsc::channel::<(u32, u32)>();
    let done_rx = Mutex::new(done_rx);
    std::thread::scope(|scope| {
        for _ in 0..link.workers {
            let (done_rx, reopen_tx) = (&done_rx, reopen_tx.clone());
            scope.spawn(move || loop {
                let next = done_rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                // Once the session stops, what is queued is dropped: the
                // partial is let go of sooner, and a resume sends it again.
                let Ok(c) = next.map_err(drop).and_then(|c| match rx.sh.stopped() {
                    true => Err(()),
                    false => Ok(c),
                }) else {
                    return;
                };
                let h = BlockHeader {
                    file: c.file,
                    index: c.index,
                    offset: c.index as u64 * rx.block_size as u64,
                    len: c.len,
                    hash: c.hash,
                    codec: c.codec,
                    wire_len: c.data.len() as u32,
                };
                match rx.place_encoded(&h, &c.data) {
                    Ok(Some(BlockVerdict::Rejected)) => {
                        let _ = reopen_tx.send((c.file, c.index));
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => return,
                    Err(e) => return rx.sh.fail(e, true),
                }
            });
        }
        if let Err(e) = receive(rx, &mut link, done_tx, reopen_rx) {
            rx.sh.fail_transport(e);
        }
    });
}

fn receive(
    rx: &Receiving,
    link: &mut UdpLink,
    done: mpsc::Sender<Completed>,
    reopen: mpsc::Receiver<(u32, u32)>,
) -> Result<(), TransferError> {
    let sh = rx.sh;
    let p = sh.progress;
    let start = Instant::now();
    // One-way delays are taken at the kernel's receive time where it gives
    // one (P-26), on the wall clock: a receiving thread that waits for a
    // core (a worker placing a bundle of a thousand files) must not look
    // like a queue in the path. Only differences of delays count.
    let wall_start = since_epoch(SystemTime::now());
    let arrival_us = |stamp: Option<Duration>| {
        let at = stamp.unwrap_or_else(|| since_epoch(SystemTime::now()));
        at.saturating_sub(wall_start).as_micros() as u64
    };
    let mut r = DatagramReceiver::new(link.rtt, Duration::ZERO);
    let mut batch = RecvBatch::default();
    let drops_at_start = udp::receive_buffer_drops().unwrap_or(0);
    let mut seq = DATA_SEQ_START;
    let interval = r.report_interval();
    let mut next_report = interval;
    let mut last_heard = Instant::now();
    let (mut first_heard, mut bytes_heard) = (None::<Instant>, 0u64);
    Progress::set(&p.udp_payload, link.payload as u64);
    let mut backlog = std::mem::take(&mut link.backlog);
    // Erasure coding (P-47) only where every byte of a shard is
    // authenticated: integrity-only datagrams leave their chunk bytes open.
    let fec_on = link.recv_key.protection().encrypts();
    let mut fec = FecDecoder::new(link.payload);
    while !sh.stopped() && !sh.is_done() {
        let wait = next_report.saturating_sub(start.elapsed());
        let n = if backlog.is_empty() {
            link.channel
                .recv(&mut batch, wait.max(Duration::from_millis(1)))
                .map_err(|e| TransferError::lost("receiving datagrams", &e))?
        } else {
            backlog.len()
        };
        if n > 0 {
            let now = start.elapsed();
            let mut completed = Vec::new();
            let mut wire = 0u64;
            // Only authenticated datagrams count as hearing from the sender.
            let mut heard = false;
            // A datagram no honest sender sends (S-6, S-7) ends the session.
            let mut refused = None;
            // What erasure coding rebuilt in this batch: `(seq, shard)`.
            let mut rebuilt: Vec<(u64, Vec<u8>)> = Vec::new();
            let mut handle = |stamp: Option<Duration>, d: &mut [u8]| {
                let len = d.len();
                wire += (len + link.channel.header_overhead()) as u64;
                if refused.is_some() {
                    return;
                }
                match open(&link.recv_key, d) {
                    Some(Opened::Chunk {
                        seq,
                        header,
                        data,
                        covered,
                    }) => {
                        heard = true;
                        if let Some(c) = covered.filter(|_| fec_on) {
                            rebuilt.extend(fec.on_covered(seq, c));
                        }
                        p.timeline.mark(Mark::FirstData);
                        let wanted = |f, i| sh.lock().wanted(f, i);
                        let at = arrival_us(stamp);
                        // Trains only on the kernel's clock: a batch read at once
                        // would look like a train that took no time.
                        if stamp.is_some() {
                            r.trains.on_datagram(header.sent_us, at, len);
                        }
                        match r
                            .on_seq(now, seq, len)
                            .and_then(|_| r.on_chunk(now, at, &header, data, wanted))
                        {
                            Ok(Some(c)) => completed.push(c),
                            Ok(None) => {}
                            Err(e) => refused = Some(e),
                        }
                    }
                    Some(Opened::Parity { seq, header, shard }) => {
                        heard = true;
                        if let Err(e) = r.on_seq(now, seq, len) {
                            refused = Some(e);
                            return;
                        }
                        if fec_on {
                            rebuilt.extend(fec.on_parity(seq, &header, shard));
                        }
                    }
                    Some(Opened::Signal { seq, signal }) => {
                        heard = true;
                        if seq >= DATA_SEQ_START {
                            if let Err(e) = r.on_seq(now, seq, len) {
                                refused = Some(e);
                                return;
                            }
                        }
                        if let Signal::Stats {
                            sent,
                            retransmitted,
                            rate,
                        } = signal
                        {
                            Progress::set(&p.dgrams_sent, sent);
                            Progress::set(&p.dgrams_resent, retransmitted);
                            Progress::set(&p.udp_rate, rate);
                        }
                    }
                    None => {}
                }
            };
            if backlog.is_empty() {
                batch.for_each_stamped(|_, stamp, d| handle(stamp, d));
            } else {
                for mut d in backlog.drain(..) {
                    handle(None, &mut d);
                }
            }
            for (seq, shard) in rebuilt {
                let Some((header, data)) = rebuilt_chunk(link.payload, &shard) else {
                    continue;
                };
                let wanted = |f, i| sh.lock().wanted(f, i);
                // Its bytes did not cross the path: they count for nothing
                // in the rate (length 0), and its gap is filled.
                match r
                    .on_seq(now, seq, 0)
                    .and_then(|_| r.on_rebuilt_chunk(now, &header, &data, wanted))
                {
                    Ok(Some(c)) => completed.push(c),
                    Ok(None) => {}
                    Err(e) => refused = Some(e),
                }
            }
            Progress::add(&p.wire_rx, wire);
            // A key's `rate=` (issue 39): past it the socket's buffer
            // fills and the kernel drops, whatever the sender does.
            p.control.pace(wire);
            if let Some(e) = refused {
                sh.fail(TransferError::new(ErrorCode::Protocol, e.to_string()), true);
                return Ok(());
            }
            if heard {
                last_heard = Instant::now();
                bytes_heard += wire - (n as u64) * link.channel.header_overhead() as u64;
                let first = *first_heard.get_or_insert(last_heard);
                Progress::set(&p.udp_bytes, bytes_heard);
                Progress::set(&p.udp_active_us, first.elapsed().as_micros() as u64);
            }
            for c in completed {
                if done.send(c).is_err() {
                    return Ok(());
                }
            }
        }
        if last_heard.elapsed() > link.silence {
            return Err(TransferError::new(
                ErrorCode::ConnectionLost,
                format!(
                    "no datagrams from the sender for {}s (--timeout); the path stopped carrying UDP. What was verified is kept: run the same command again to resume",
                    link.silence.as_secs_f64()
                ),
            ));
        }
        while let Ok((f, i)) = reopen.try_recv() {
            r.reopen(f, i);
        }
        let now = start.elapsed();
        if now >= next_report {
            let drops = udp::receive_buffer_drops().unwrap_or(0);
            r.dropped = drops.saturating_sub(drops_at_start);
            for rep in r.poll_reports(now) {
                let d = seal_signal(&link.send_key, seq, &Signal::Report(rep));
                seq += 1;
                let _ = link.channel.send(&d, d.len(), Duration::from_millis(100));
                Progress::add(
                    &p.wire_tx,
                    (d.len() + link.channel.header_overhead()) as u64,
                );
            }
            next_report = now + interval;
            Progress::set(&p.dgrams_received, r.stats.datagrams);
            Progress::set(&p.dgrams_lost, r.stats.lost);
            Progress::set(&p.dgrams_rebuilt, fec.recovered);
            Progress::set(&p.udp_drops, r.dropped);
        }
    }
    Progress::set(&p.dgrams_received, r.stats.datagrams);
    Progress::set(&p.dgrams_lost, r.stats.lost);
    Progress::set(&p.dgrams_rebuilt, fec.recovered);
    // The sender's last counters may not have arrived: it numbered at
    // least as many datagrams as this side has seen numbers for.
    let sent = Progress::get(&p.dgrams_sent).max(r.numbered());
    Progress::set(&p.dgrams_sent, sent);
    Ok(())
}
