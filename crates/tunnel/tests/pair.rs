//! Two muxes, a client and a server, joined by simulated lanes that
//! deliver frames in any order across lanes (each lane in order, like a
//! TCP connection): whatever the interleaving, every connection's bytes
//! arrive exactly, in order, followed by its end, and no receiver ever
//! holds more than its window, nor more credit than its budget (P-39).

use std::collections::{BTreeMap, VecDeque};

use proptest::prelude::*;
use tunnel::{Event, Mux, MuxConfig, MuxError, Read, Role, INITIAL_CREDIT};
use wire::tunnel::TunnelFrame;

const LANES: usize = 3;

fn pattern(id: u32, dir: u8, offset: u64) -> u8 {
    ((id as u64 * 31 + offset * 7 + dir as u64 * 13) % 251) as u8
}

/// One direction's bookkeeping for a connection.
#[derive(Default)]
struct Flow {
    sent: u64,
    got: Vec<u8>,
    shut: bool,
    eof: bool,
}

struct Pair {
    muxes: [Mux; 2],
    /// Lanes from side 0 (client) to 1, and from 1 to 0.
    lanes: [Vec<VecDeque<TunnelFrame>>; 2],
    /// Connection ids in opening order (the same at both sides).
    ids: Vec<u32>,
    /// flows[(id, dir)]: dir 0 client to server, 1 server to client.
    flows: BTreeMap<(u32, u8), Flow>,
    window: u64,
    /// Connections the server learnt of (it has a socket for them).
    known: std::collections::BTreeSet<u32>,
    /// Frames handled, round-trip encoded through the wire format.
    frames: u64,
    /// Connections the server refused for its budget (P-39).
    refused: std::collections::BTreeSet<u32>,
}

impl Pair {
    fn new(cfg: MuxConfig) -> Pair {
        Pair {
            muxes: [Mux::new(Role::Client, cfg), Mux::new(Role::Server, cfg)],
            lanes: [
                (0..LANES).map(|_| VecDeque::new()).collect(),
                (0..LANES).map(|_| VecDeque::new()).collect(),
            ],
            ids: Vec::new(),
            flows: BTreeMap::new(),
            window: cfg.window,
            known: Default::default(),
            frames: 0,
            refused: Default::default(),
        }
    }

    fn open(&mut self) {
        let id = match self.muxes[0].open() {
            Ok(id) => id,
            // The client's budget is given out: no more until some drain.
            Err(MuxError::Budget(_)) => return,
            Err(e) => panic!("cannot open: {e}"),
        };
        self.ids.push(id);
        self.flows.insert((id, 0), Flow::default());
        self.flows.insert((id, 1), Flow::default());
    }

    fn id(&self, pick: usize) -> Option<u32> {
        (!self.ids.is_empty()).then(|| self.ids[pick % self.ids.len()])
    }

    /// Side `side` writes up to `len` bytes on connection `id`.
    fn write(&mut self, side: usize, id: u32, len: usize) {
        let flow = self.flows.get_mut(&(id, side as u8)).expect("flow");
        if flow.shut {
            return;
        }
        let data: Vec<u8> = (0..len as u64)
            .map(|i| pattern(id, side as u8, flow.sent + i))
            .collect();
        if let Ok(n) = self.muxes[side].write(id, &data) {
            flow.sent += n as u64;
        }
    }

    fn shutdown(&mut self, side: usize, id: u32) {
        if side == 1 && !self.known.contains(&id) {
            return;
        }
        let flow = self.flows.get_mut(&(id, side as u8)).expect("flow");
        flow.shut = true;
        self.muxes[side].shutdown(id);
    }

    /// Side `side` reads for connection `id` (the bytes the other side
    /// sent).
    fn read(&mut self, side: usize, id: u32, max: usize) {
        let flow = self.flows.get_mut(&(id, 1 - side as u8)).expect("flow");
        match self.muxes[side].read(id, max) {
            Read::Data(d) => {
                assert!(!d.is_empty() && d.len() <= max.max(1));
                flow.got.extend(d);
            }
            // Like a socket, the end reads again until both sides end.
            Read::Eof => flow.eof = true,
            // The server's budget was given out when the client opened it.
            Read::Reset(r) if r.contains("it gives a session") => {
                self.refused.insert(id);
            }
            Read::Reset(r) => panic!("connection {id} reset: {r}"),
            Read::Wait | Read::Gone => {}
        }
    }

    /// Moves up to `count` frames from side `side`'s mux onto lanes.
    fn pump(&mut self, side: usize, count: usize, lane_seed: usize) {
        for k in 0..count {
            let Some(f) = self.muxes[side].poll_frame() else {
                return;
            };
            // Through the wire format, as a lane would carry it.
            let mut body = Vec::new();
            f.encode_into(&mut body);
            let mut back = TunnelFrame::decode_all(&body).expect("decodes");
            assert_eq!(back.len(), 1);
            self.lanes[side][(lane_seed + k * 7) % LANES].push_back(back.remove(0));
        }
    }

    /// Delivers up to `count` frames of one lane from `side` to the other.
    fn deliver(&mut self, side: usize, lane: usize, count: usize) {
        for _ in 0..count {
            let Some(f) = self.lanes[side][lane % LANES].pop_front() else {
                break;
            };
            self.frames += 1;
            self.muxes[1 - side].handle(f).expect("no protocol error");
        }
        while let Some(Event::Opened(id)) = self.muxes[1].poll_event() {
            assert!(self.ids.contains(&id), "server opened {id} the client gave");
            self.known.insert(id);
        }
        for s in 0..2 {
            let mut held = 0;
            for id in self.ids.clone() {
                assert!(
                    self.muxes[s].held(id) <= self.window,
                    "side {s} holds more than a window of {id}"
                );
                held += self.muxes[s].held(id);
            }
            let m = &self.muxes[s];
            assert!(held <= m.held_credit(), "side {s} holds past its credit");
            assert!(
                m.held_credit() <= m.config().budget,
                "side {s} gave {} of credit, past its budget",
                m.held_credit()
            );
        }
    }

    /// Ends every connection and runs until nothing moves.
    fn finish(&mut self) {
        self.settle();
        for id in self.ids.clone() {
            for side in 0..2 {
                if !self.flows[&(id, side as u8)].shut {
                    self.shutdown(side, id);
                }
            }
        }
        self.settle();
        self.check();
    }

    /// Sends, delivers and reads until nothing moves.
    fn settle(&mut self) {
        for _ in 0..100_000 {
            let mut moved = false;
            for side in 0..2 {
                while self.muxes[side].has_output() {
                    self.pump(side, 64, 0);
                    moved = true;
                }
                for lane in 0..LANES {
                    if !self.lanes[side][lane].is_empty() {
                        self.deliver(side, lane, usize::MAX);
                        moved = true;
                    }
                }
                for id in self.ids.clone() {
                    let before = {
                        let f = &self.flows[&(id, 1 - side as u8)];
                        (f.got.len(), f.eof)
                    };
                    self.read(side, id, 1 << 20);
                    let f = &self.flows[&(id, 1 - side as u8)];
                    moved |= (f.got.len(), f.eof) != before;
                }
                // A connection the budget kept short is given credit when
                // its socket looks again.
                moved |= self.muxes[side].has_output();
            }
            if !moved {
                break;
            }
        }
    }

    fn check(&self) {
        for ((id, dir), f) in &self.flows {
            if self.refused.contains(id) {
                continue;
            }
            assert_eq!(
                f.got.len() as u64,
                f.sent,
                "connection {id} direction {dir}"
            );
            let expected: Vec<u8> = (0..f.sent).map(|o| pattern(*id, *dir, o)).collect();
            assert!(
                f.got == expected,
                "connection {id} direction {dir}: bytes differ"
            );
            assert!(f.eof, "connection {id} direction {dir}: no end of file");
        }
        assert_eq!(self.muxes[0].live(), 0, "client connections all ended");
        assert_eq!(self.muxes[1].live(), 0, "server connections all ended");
        // Bytes written into a connection the server refused went nowhere.
        if self.refused.is_empty() {
            let (c, s) = (self.muxes[0].stats().total, self.muxes[1].stats().total);
            assert_eq!(c.from_app, s.to_app);
            assert_eq!(s.from_app, c.to_app);
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Open,
    Write {
        side: usize,
        pick: usize,
        len: usize,
    },
    Shutdown {
        side: usize,
        pick: usize,
    },
    Read {
        side: usize,
        pick: usize,
        max: usize,
    },
    Pump {
        side: usize,
        count: usize,
        lane: usize,
    },
    Deliver {
        side: usize,
        lane: usize,
        count: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => Just(Op::Open),
        4 => (0..2usize, any::<usize>(), 1..70_000usize)
            .prop_map(|(side, pick, len)| Op::Write { side, pick, len }),
        1 => (0..2usize, any::<usize>()).prop_map(|(side, pick)| Op::Shutdown { side, pick }),
        3 => (0..2usize, any::<usize>(), 1..100_000usize)
            .prop_map(|(side, pick, max)| Op::Read { side, pick, max }),
        4 => (0..2usize, 1..20usize, any::<usize>())
            .prop_map(|(side, count, lane)| Op::Pump { side, count, lane }),
        4 => (0..2usize, any::<usize>(), 1..20usize)
            .prop_map(|(side, lane, count)| Op::Deliver { side, lane, count }),
    ]
}

fn run(cfg: MuxConfig, ops: &[Op]) {
    let mut p = Pair::new(cfg);
    for op in ops {
        match *op {
            Op::Open => p.open(),
            Op::Write { side, pick, len } => {
                if let Some(id) = p.id(pick) {
                    p.write(side, id, len)
                }
            }
            Op::Shutdown { side, pick } => {
                if let Some(id) = p.id(pick) {
                    p.shutdown(side, id)
                }
            }
            Op::Read { side, pick, max } => {
                if let Some(id) = p.id(pick) {
                    p.read(side, id, max)
                }
            }
            Op::Pump { side, count, lane } => p.pump(side, count, lane),
            Op::Deliver { side, lane, count } => p.deliver(side, lane, count),
        }
    }
    p.finish();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_delivers_every_byte_in_order(
        ops in prop::collection::vec(op(), 1..120),
        window_kib in 256u64..2048,
        quantum in 1usize..70_000,
        budget_kib in 256u64..8192,
    ) {
        let cfg = MuxConfig {
            window: window_kib << 10,
            send_buffer: 100_000,
            quantum,
            max_conns: 64,
            budget: budget_kib << 10,
        };
        run(cfg, &ops);
    }
}

#[test]
fn an_interactive_connection_waits_at_most_one_frame_per_busy_one() {
    let cfg = MuxConfig::default();
    let mut m = Mux::new(Role::Client, cfg);
    let bulk: Vec<u32> = (0..3).map(|_| m.open().unwrap()).collect();
    for id in &bulk {
        assert_eq!(
            m.write(*id, &vec![1u8; cfg.send_buffer]),
            Ok(cfg.send_buffer)
        );
    }
    // The bulk connections are mid-flow when the interactive one speaks.
    for _ in 0..10 {
        m.poll_frame().unwrap();
    }
    let chat = m.open().unwrap();
    assert_eq!(m.write(chat, b"SELECT 1;"), Ok(9));
    let mut frames = 0;
    loop {
        let f = m.poll_frame().expect("frames to send");
        frames += 1;
        if let TunnelFrame::Data { id, data, .. } = f {
            if id == chat {
                assert_eq!(data, b"SELECT 1;");
                break;
            }
        }
    }
    // Its credit, then at most one data frame of each bulk connection.
    assert!(frames <= 1 + bulk.len() + 1, "waited {frames} frames");
}

#[test]
fn a_stalled_reader_stops_only_its_own_connection() {
    let cfg = MuxConfig {
        window: 512 << 10,
        send_buffer: 256 << 10,
        ..MuxConfig::default()
    };
    let mut p = Pair::new(cfg);
    p.open();
    p.open();
    let (stalled, flowing) = (p.ids[0], p.ids[1]);
    for _ in 0..40 {
        p.write(0, stalled, 64 << 10);
        p.write(0, flowing, 64 << 10);
        p.pump(0, 100, 0);
        for lane in 0..LANES {
            p.deliver(0, lane, usize::MAX);
        }
        p.read(1, flowing, 1 << 20);
        p.pump(1, 100, 0);
        for lane in 0..LANES {
            p.deliver(1, lane, usize::MAX);
        }
    }
    let flowed = p.flows[&(flowing, 0)].got.len() as u64;
    assert!(
        flowed >= 2 << 20,
        "the reading connection moved {flowed} bytes"
    );
    assert!(p.muxes[1].held(stalled) <= cfg.window);
    assert!(
        p.flows[&(stalled, 0)].sent <= cfg.window + cfg.send_buffer as u64,
        "the stalled one was held back by its credit"
    );
    p.finish();
}

#[test]
fn a_reset_reaches_the_other_side_and_ends_the_connection() {
    let mut p = Pair::new(MuxConfig::default());
    p.open();
    let id = p.ids[0];
    p.write(0, id, 1000);
    p.pump(0, 10, 0);
    for lane in 0..LANES {
        p.deliver(0, lane, usize::MAX);
    }
    p.muxes[1].reset(id, "connection refused by 10.0.0.1:5432");
    assert_eq!(
        p.muxes[1].read(id, 10),
        Read::Reset("connection refused by 10.0.0.1:5432".into())
    );
    p.pump(1, 10, 0);
    for lane in 0..LANES {
        p.deliver(1, lane, usize::MAX);
    }
    assert_eq!(
        p.muxes[0].read(id, 10),
        Read::Reset("connection refused by 10.0.0.1:5432".into())
    );
    p.pump(0, 10, 0);
    assert_eq!(p.muxes[0].live(), 0);
    assert_eq!(p.muxes[1].live(), 0);
    assert!(p.muxes[0].write(id, b"x").is_err());
}

#[test]
fn the_server_refuses_connections_past_its_limit_and_frames_far_ahead() {
    let cfg = MuxConfig {
        max_conns: 2,
        ..MuxConfig::default()
    };
    let mut s = Mux::new(Role::Server, cfg);
    s.handle(TunnelFrame::Credit {
        id: 3,
        max: 1 << 20,
    })
    .unwrap();
    let opened: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert_eq!(opened, vec![Event::Opened(1), Event::Opened(2)]);
    let mut resets = 0;
    while let Some(f) = s.poll_frame() {
        if let TunnelFrame::Reset { id, reason } = f {
            assert_eq!(id, 3);
            assert!(reason.contains("2 connections"), "{reason}");
            resets += 1;
        }
    }
    assert_eq!(resets, 1);
    let far = TunnelFrame::Credit {
        id: 10_000_000,
        max: 1,
    };
    assert!(s.handle(far).is_err());
    let mut c = Mux::new(Role::Client, cfg);
    assert!(
        c.handle(TunnelFrame::Fin { id: 1, end: 0 }).is_err(),
        "the client never opened 1"
    );
}

fn data(id: u32, offset: u64, len: usize) -> TunnelFrame {
    TunnelFrame::Data {
        id,
        offset,
        pos: 0,
        codec: wire::CODEC_NONE,
        raw_len: len as u32,
        plain_len: len as u32,
        data: vec![7; len],
    }
}

/// The credit a mux gives stays within its budget: past it a client opens
/// no more connections, a server resets new ones, and a connection kept
/// short is given more once the local sockets take bytes (P-39).
#[test]
fn credit_stays_within_the_budget_and_comes_back_as_sockets_drain() {
    let cfg = MuxConfig {
        window: 512 << 10,
        budget: 1 << 20,
        ..MuxConfig::default()
    };
    let mut c = Mux::new(Role::Client, cfg);
    assert!(c.open().is_ok() && c.open().is_ok());
    assert_eq!(c.held_credit(), 1 << 20, "two windows: the budget");
    assert_eq!(c.open(), Err(MuxError::Budget(1)));

    let mut s = Mux::new(Role::Server, cfg);
    s.handle(TunnelFrame::Credit {
        id: 3,
        max: INITIAL_CREDIT,
    })
    .unwrap();
    let opened: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert_eq!(opened, vec![Event::Opened(1), Event::Opened(2)]);
    let mut credits = BTreeMap::new();
    while let Some(f) = s.poll_frame() {
        match f {
            TunnelFrame::Credit { id, max } => {
                credits.insert(id, max);
            }
            TunnelFrame::Reset { id, reason } => {
                assert_eq!(id, 3);
                assert!(reason.contains("1 MiB"), "{reason}");
            }
            f => panic!("unexpected {f:?}"),
        }
    }
    assert_eq!(credits[&1], 512 << 10);
    assert_eq!(credits[&2], 512 << 10);
    // Connection 1's peer sends out of order, which nothing takes; 2's
    // sends its window, which its socket takes: 2 gets its credit back.
    s.handle(data(1, 1, (512 << 10) - 1)).unwrap();
    s.handle(data(2, 0, 512 << 10)).unwrap();
    assert!(s.handle(data(2, 512 << 10, 1)).is_err(), "past the credit");
}

#[test]
fn a_connection_kept_short_gets_credit_when_another_lets_go() {
    let cfg = MuxConfig {
        window: 512 << 10,
        budget: 768 << 10,
        ..MuxConfig::default()
    };
    let mut s = Mux::new(Role::Server, cfg);
    let credits = |s: &mut Mux| {
        let mut got = BTreeMap::new();
        while let Some(f) = s.poll_frame() {
            if let TunnelFrame::Credit { id, max } = f {
                got.insert(id, max);
            }
        }
        got
    };
    s.handle(TunnelFrame::Credit { id: 2, max: 1 }).unwrap();
    // 1 has a window; 2 only the initial credit, all the budget had left.
    let got = credits(&mut s);
    assert_eq!(got.get(&1), Some(&(512 << 10)));
    assert_eq!(got.get(&2), None, "the initial credit needs no frame");
    assert_eq!(s.held_credit(), 768 << 10);
    // 2's socket takes what its peer sent: it gets back only what it freed.
    s.handle(data(2, 0, INITIAL_CREDIT as usize)).unwrap();
    assert!(matches!(s.read(2, usize::MAX), Read::Data(d) if d.len() == INITIAL_CREDIT as usize));
    assert_eq!(
        credits(&mut s).get(&2),
        Some(&(512 << 10)),
        "half a window ahead"
    );
    assert_eq!(s.read(2, usize::MAX), Read::Wait);
    assert!(credits(&mut s).is_empty(), "nothing left to give");
    assert_eq!(s.held_credit(), 768 << 10);
    // 1 is reset (its target refused): 2 gets a whole window once its
    // socket looks again.
    s.reset(1, "the target refused");
    assert_eq!(s.held_credit(), 256 << 10);
    assert_eq!(s.read(2, usize::MAX), Read::Wait);
    assert_eq!(credits(&mut s).get(&2), Some(&(768 << 10)));
    assert_eq!(s.held_credit(), 512 << 10);
}
