//! The UDP channel's sender and receiver, with the adaptive rate
//! controller, joined by netsim links in both directions on a virtual
//! clock. Each scenario moves real bytes and ends byte-exact; minutes of
//! simulated transfer run in well under a second. A failure names its seed.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use netsim::{GilbertElliott, Link, LinkConfig};
use rate::Adaptive;
use session::datagram::fec::{
    cover_from, group_age, group_for, parity_for, rebuilt_chunk, FecDecoder, FecEncoder,
};
use session::datagram::{report_interval, DatagramReceiver, DatagramSender};
use wire::datagram::{
    decode_prefix, encode_prefix, ChunkHeader, ParityHeader, Signal, DATAGRAM_PREFIX, KIND_DATA,
    KIND_DATA_FEC, KIND_PARITY,
};

const PAYLOAD: usize = 8952;
const BLOCK: usize = 1 << 20;
/// Stands in for the AEAD tag: a corrupted datagram fails it and is dropped.
const CHECK: usize = 8;

fn check_of(b: &[u8]) -> [u8; CHECK] {
    blake3::hash(b).as_bytes()[..CHECK].try_into().unwrap()
}

fn seal(mut b: Vec<u8>) -> Vec<u8> {
    let c = check_of(&b);
    b.extend_from_slice(&c);
    b
}

fn open(b: &[u8]) -> Option<&[u8]> {
    let (body, c) = b.split_at(b.len().checked_sub(CHECK)?);
    (check_of(body) == c).then_some(body)
}

fn block_data(index: u32, seed: u64) -> Vec<u8> {
    let mut x = seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut v = vec![0u8; BLOCK];
    for w in v.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
    }
    v
}

struct Outcome {
    secs: f64,
    /// From the last fresh chunk sent to the last block verified.
    tail: f64,
    sent: u64,
    retransmitted: u64,
    lost: u64,
}

impl Outcome {
    fn goodput(&self, blocks: u32) -> f64 {
        blocks as f64 * BLOCK as f64 / self.secs
    }
}

fn signal(seq: u64, s: &Signal) -> Vec<u8> {
    let mut b = vec![0u8; DATAGRAM_PREFIX];
    encode_prefix(&mut b, s.kind(), seq);
    b.extend_from_slice(&s.encode());
    seal(b)
}

/// Closes the sender's open group and returns its parity datagrams, as
/// `transfer::sender::udp` does (P-47).
fn parity(tx: &mut DatagramSender, fec: &mut FecEncoder, now: Duration) -> Vec<Vec<u8>> {
    let loss = tx.stats.reported_lost as f64 / tx.stats.datagrams.max(1) as f64;
    let Some(p) = fec.finish(parity_for(fec.len(), loss)) else {
        return Vec::new();
    };
    p.shards
        .iter()
        .enumerate()
        .map(|(i, shard)| {
            let mut b = vec![0u8; DATAGRAM_PREFIX];
            encode_prefix(&mut b, KIND_PARITY, tx.signal_seq(now));
            let h = ParityHeader {
                index: i as u8,
                ..p.header
            };
            b.extend_from_slice(&h.encode());
            b.extend_from_slice(shard);
            seal(b)
        })
        .collect()
}

/// What the receiver rebuilt from a covered or parity datagram: the
/// chunks, as `(seq, header, bytes)`.
fn rebuild(
    dec: &mut FecDecoder,
    kind: u8,
    seq: u64,
    body: &[u8],
) -> Vec<(u64, ChunkHeader, Vec<u8>)> {
    let got = match kind {
        KIND_DATA_FEC => dec.on_covered(seq, &body[4..]),
        KIND_PARITY => {
            let h = ParityHeader::decode(body).unwrap();
            dec.on_parity(seq, &h, &body[3..])
        }
        _ => Vec::new(),
    };
    got.into_iter()
        .map(|(s, shard)| {
            let (h, data) = rebuilt_chunk(PAYLOAD, &shard).expect("a rebuilt shard is a chunk");
            (s, h, data)
        })
        .collect()
}

/// Moves `blocks` blocks of 1 MiB over `fwd`, reports back over `rev`.
fn transfer(fwd: LinkConfig, rev: LinkConfig, blocks: u32, seed: u64) -> Outcome {
    transfer_with(fwd, rev, blocks, seed, false)
}

/// [`transfer`], with erasure coding over the tail where `fec` (P-47):
/// the queue then holds what leaves in a round trip and more when the last
/// block is added, as the driver's does.
fn transfer_with(fwd: LinkConfig, rev: LinkConfig, blocks: u32, seed: u64, fec: bool) -> Outcome {
    let one_way = fwd.delay;
    let rtt = one_way * 2;
    let mut fwd = Link::new(fwd, seed);
    let mut rev = Link::new(rev, seed ^ 0xABCD);
    let mut tx = DatagramSender::new(
        PAYLOAD,
        rtt,
        Box::new(Adaptive::new(4_000_000, None).with_rtt(rtt)),
    );
    let mut rx = DatagramReceiver::new(rtt, Duration::ZERO);
    let hashes: Vec<[u8; 32]> = (0..blocks)
        .map(|i| *blake3::hash(&block_data(i, seed)).as_bytes())
        .collect();
    let mut next_block = 0u32;
    let mut done = vec![false; blocks as usize];
    let mut done_count = 0;
    // Block acks travel on the (reliable) control connection.
    let mut acks: VecDeque<(Duration, u32)> = VecDeque::new();
    let mut now = Duration::ZERO;
    let mut next_send = Duration::ZERO;
    let mut next_report = report_interval(rtt);
    let limit = Duration::from_secs(3600);
    let window = 256;
    let mut last_fresh: Option<Duration> = None;
    let mut enc = FecEncoder::new(PAYLOAD, group_age(rtt));
    let mut dec = FecDecoder::new(PAYLOAD);
    let cover_window = rtt + report_interval(rtt) * 2;
    let ahead = |rate: u64| match fec {
        true => cover_from(rate, cover_window),
        false => 2 * BLOCK as u64,
    };
    let mut covering = false;
    while done_count < blocks {
        if last_fresh.is_none() && next_block == blocks && tx.queued_bytes() == 0 {
            last_fresh = Some(now);
        }
        assert!(now < limit, "seed {seed}: not done after {limit:?}");
        while next_block < blocks
            && tx.queued_bytes() < ahead(tx.rate()).max(2 * BLOCK as u64)
            && tx.held_blocks() < window
        {
            let d = block_data(next_block, seed);
            let first = wire::datagram::FirstChunk {
                hash: hashes[next_block as usize],
                codec: wire::CODEC_NONE,
                len: d.len() as u32,
            };
            tx.add_block(0, next_block, first, Arc::new(d));
            next_block += 1;
            if next_block == blocks {
                tx.set_tail();
            }
        }
        tx.on_tick(now);
        // Sender, paced.
        let mut sent_any = false;
        covering |=
            fec && next_block == blocks && tx.queued_bytes() <= cover_from(tx.rate(), cover_window);
        let covered = covering;
        let loss = tx.stats.reported_lost as f64 / tx.stats.datagrams.max(1) as f64;
        let mut queue: VecDeque<Vec<u8>> = VecDeque::new();
        while next_send <= now {
            if queue.is_empty() && enc.due(now, group_for(loss)) {
                queue.extend(parity(&mut tx, &mut enc, now));
            }
            let pkt = if let Some(p) = queue.pop_front() {
                p
            } else if let Some(c) = tx.poll_transmit(now) {
                let mut b = vec![0u8; DATAGRAM_PREFIX];
                let kind = if covered { KIND_DATA_FEC } else { KIND_DATA };
                encode_prefix(&mut b, kind, c.seq);
                let h = ChunkHeader {
                    sent_us: now.as_micros() as u32,
                    ..c.header
                };
                let mut hb = [0u8; 64];
                let n = h.encode_into(&mut hb);
                b.extend_from_slice(&hb[..n]);
                b.extend_from_slice(&c.data[c.range.clone()]);
                if covered {
                    enc.add(now, c.seq, &hb[4..n], &c.data[c.range.clone()]);
                }
                seal(b)
            } else if !enc.is_empty() {
                queue.extend(parity(&mut tx, &mut enc, now));
                continue;
            } else if tx.wants_ping(now) {
                signal(tx.signal_seq(now), &Signal::Ping)
            } else {
                break;
            };
            let len = pkt.len() + 16 - CHECK;
            fwd.send(now, pkt);
            sent_any = true;
            next_send += Duration::from_secs_f64(len as f64 / tx.rate() as f64);
        }
        // Parity still to go leaves now, back to back.
        for pkt in queue {
            fwd.send(now, pkt);
        }
        if !sent_any && next_send < now {
            next_send = now;
        }
        // Receiver.
        while let Some(p) = fwd.poll(now) {
            let Some(body) = open(&p) else { continue };
            let (kind, seq) = decode_prefix(body).unwrap();
            rx.on_seq(now, seq, p.len() + 16 - CHECK).unwrap();
            let mut chunks = rebuild(&mut dec, kind, seq, &body[DATAGRAM_PREFIX..]);
            for (s, ..) in &chunks {
                rx.on_seq(now, *s, 0).unwrap();
            }
            if kind == KIND_DATA || kind == KIND_DATA_FEC {
                let (h, n) = ChunkHeader::decode(&body[DATAGRAM_PREFIX..]).unwrap();
                chunks.push((seq, h, body[DATAGRAM_PREFIX + n..].to_vec()));
            }
            for (s, h, data) in chunks {
                let wanted = |_, i: u32| match done[i as usize] {
                    true => session::Wanted::Already,
                    false => session::Wanted::Yes,
                };
                let chunk = match s == seq {
                    true => rx.on_chunk(now, now.as_micros() as u64 + 5_000_000, &h, &data, wanted),
                    false => rx.on_rebuilt_chunk(now, &h, &data, wanted),
                };
                let Some(c) = chunk.unwrap() else {
                    continue;
                };
                assert_eq!(c.hash, hashes[c.index as usize], "seed {seed}");
                assert_eq!(
                    *blake3::hash(&c.data).as_bytes(),
                    c.hash,
                    "seed {seed}: bytes differ"
                );
                assert!(
                    !done[c.index as usize],
                    "seed {seed}: block completed twice"
                );
                done[c.index as usize] = true;
                done_count += 1;
                acks.push_back((now + one_way, c.index));
            }
        }
        if now >= next_report {
            for r in rx.poll_reports(now) {
                rev.send(now, signal(0, &Signal::Report(r)));
            }
            next_report += report_interval(rtt);
        }
        while let Some(p) = rev.poll(now) {
            let Some(body) = open(&p) else { continue };
            let (kind, _) = decode_prefix(body).unwrap();
            if let Signal::Report(r) = Signal::decode(kind, &body[DATAGRAM_PREFIX..]).unwrap() {
                tx.on_report(now, &r);
            }
        }
        while acks.front().is_some_and(|a| a.0 <= now) {
            let (_, i) = acks.pop_front().unwrap();
            tx.block_acked(0, i);
        }
        let mut next = next_report.min(now + Duration::from_millis(5));
        if tx.queued_bytes() > 0 || tx.wants_ping(now) {
            next = next.min(next_send);
        } else {
            next = next.min(now + Duration::from_millis(1));
        }
        for t in [
            fwd.next_arrival(),
            rev.next_arrival(),
            acks.front().map(|a| a.0),
        ]
        .into_iter()
        .flatten()
        {
            next = next.min(t);
        }
        now = next.max(now + Duration::from_micros(1));
    }
    Outcome {
        secs: now.as_secs_f64(),
        tail: (now - last_fresh.unwrap_or(now)).as_secs_f64(),
        sent: tx.stats.datagrams,
        retransmitted: tx.stats.retransmitted,
        lost: rx.stats.lost,
    }
}

fn wan(loss: f64) -> LinkConfig {
    LinkConfig {
        delay: Duration::from_millis(75),
        rate_bps: Some(1_000_000_000),
        loss,
        ..Default::default()
    }
}

fn back(cfg: &LinkConfig) -> LinkConfig {
    LinkConfig {
        rate_bps: None,
        ..cfg.clone()
    }
}

const LINK: f64 = 125_000_000.0;

fn run(cfg: LinkConfig, blocks: u32, seed: u64) -> Outcome {
    let out = transfer(cfg.clone(), back(&cfg), blocks, seed);
    eprintln!(
        "seed {seed}: {blocks} MiB in {:.2}s simulated (tail {:.3}s): {:.3} of 1 Gbit/s; {} datagrams, {} re-sent, {} lost",
        out.secs,
        out.tail,
        out.goodput(blocks) / LINK,
        out.sent,
        out.retransmitted,
        out.lost
    );
    out
}

#[test]
fn clean_long_path_is_byte_exact_and_fast() {
    let out = run(wan(0.0), 512, 1);
    // Startup (a few round trips) is included in the figure.
    assert!(out.goodput(512) / LINK > 0.80);
    // Startup's overshoot may cost a little more than one queue's worth.
    assert!(out.retransmitted <= out.sent * 3 / 100);
}

#[test]
fn random_loss_is_recovered_with_little_waste() {
    for (seed, loss) in [(2, 0.001), (3, 0.01), (4, 0.10)] {
        let out = run(wan(loss), 64, seed);
        // Re-sent datagrams track what was lost, not more than a point more.
        assert!(
            out.retransmitted as f64 <= out.sent as f64 * (loss + 0.01) + 20.0,
            "seed {seed}: {} re-sent of {}",
            out.retransmitted,
            out.sent
        );
    }
}

#[test]
fn burst_loss_reordering_duplication_and_corruption() {
    let mut cfg = wan(0.0);
    cfg.gilbert_elliott = Some(GilbertElliott {
        p_good_to_bad: 0.001,
        p_bad_to_good: 0.1,
        loss_bad: 0.8,
        loss_good: 0.0,
    });
    run(cfg, 32, 5);
    for (seed, reorder, dup, corrupt) in [
        (6, 0.05, 0.0, 0.0),
        (7, 0.0, 0.05, 0.0),
        (8, 0.0, 0.0, 0.02),
    ] {
        let mut cfg = wan(0.001);
        cfg.reorder = reorder;
        cfg.duplicate = dup;
        cfg.corrupt = corrupt;
        cfg.jitter = Duration::from_millis(1);
        run(cfg, 32, seed);
    }
}

#[test]
fn a_ten_second_outage_is_ridden_through() {
    let mut cfg = wan(0.001);
    cfg.outages = vec![(Duration::from_secs(1), Duration::from_secs(11))];
    let out = run(cfg, 128, 9);
    assert!(out.secs > 11.0);
}

#[test]
fn many_seeds_with_loss_all_end_byte_exact() {
    for seed in 10..20 {
        let mut cfg = wan(0.02);
        cfg.delay = Duration::from_millis(5 + seed * 7);
        cfg.reorder = 0.01;
        run(cfg, 8, seed);
    }
}

#[test]
fn erasure_coding_over_the_tail_saves_its_round_trip() {
    // At 1% loss the last round trip always loses a chunk or more: without
    // coding the end waits a report and a re-send (a round trip and a
    // half at least); with it, the group's parity rebuilds them on arrival.
    for seed in [21, 22, 23] {
        let plain = transfer(wan(0.01), back(&wan(0.01)), 192, seed);
        let coded = transfer_with(wan(0.01), back(&wan(0.01)), 192, seed, true);
        eprintln!(
            "seed {seed}: tail {:.3}s plain, {:.3}s coded; re-sent {} and {} of {} and {}",
            plain.tail,
            coded.tail,
            plain.retransmitted,
            coded.retransmitted,
            plain.sent,
            coded.sent
        );
        assert!(
            coded.tail + 0.05 < plain.tail,
            "seed {seed}: tail {:.3}s coded, {:.3}s plain",
            coded.tail,
            plain.tail
        );
        // Parity replaces re-sends; it adds none.
        assert!(coded.retransmitted <= plain.retransmitted + coded.sent / 100);
    }
    // Heavy loss: groups shrink and carry more parity, and every byte
    // still arrives exact.
    let coded = transfer_with(wan(0.10), back(&wan(0.10)), 16, 24, true);
    assert!(coded.retransmitted as f64 <= coded.sent as f64 * 0.11 + 20.0);
}
