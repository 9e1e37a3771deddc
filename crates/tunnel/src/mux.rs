//! The tunnel multiplexer (P-37): many TCP connections over the lanes of
//! one session, as a state machine with no sockets, threads or clock.
//!
//! The driver feeds it what local sockets read ([`Mux::write`],
//! [`Mux::shutdown`], [`Mux::reset`]) and the frames that lanes received
//! ([`Mux::handle`]); it takes frames to send ([`Mux::poll_frame`]), bytes
//! for local sockets ([`Mux::read`]) and new connections
//! ([`Mux::poll_event`]).
//!
//! Flow control is per connection and per direction: a receiver gives
//! credit (an absolute offset) and a sender frames nothing past it, so a
//! slow local reader holds at most one window in the mux and never stalls
//! the other connections while the session's budget lasts: all the credit
//! given and not yet taken by local sockets stays within
//! [`MuxConfig::budget`], so the peer can make this side hold no more
//! (P-39). Frames of a connection may travel on any lane,
//! in any order: data carries its offset, a stream's end carries its final
//! offset, and credit only grows. Fairness: connections with bytes to send
//! take turns, one frame of at most `quantum` bytes each (byte round-robin,
//! deficit round-robin with frames cut to the quantum), after the small
//! control frames, so an interactive connection waits at most one frame of
//! each busy one.

use std::collections::{BTreeMap, VecDeque};

use wire::tunnel::{TunnelFrame, MAX_TUNNEL_DATA};
use wire::CODEC_NONE;

use crate::conn::{Conn, ConnStats};
use crate::MuxError;

/// Credit every new connection starts with in both directions, before any
/// `Credit` frame: the first bytes go without waiting a round trip.
pub const INITIAL_CREDIT: u64 = 256 << 10;

/// Most connections a server side creates for one frame naming a new id
/// (ids are given in order, so a gap means frames still on other lanes).
pub const MAX_OPEN_AHEAD: u32 = 4096;

/// How many closed connections' figures are kept for `--stats`.
const CLOSED_KEPT: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Accepts local connections and opens them through the tunnel.
    Client,
    /// Connects each connection the client opens to the tunnel's target.
    Server,
}

#[derive(Debug, Clone, Copy)]
pub struct MuxConfig {
    /// Receive window of each connection: bytes the peer may send past
    /// what the local socket took. Sized to the path's bandwidth-delay
    /// product by the driver.
    pub window: u64,
    /// Bytes each connection holds from its local socket before framing.
    pub send_buffer: usize,
    /// Most payload bytes in one data frame: the round-robin's turn.
    pub quantum: usize,
    /// Most connections open at once; the server resets any beyond.
    pub max_conns: usize,
    /// Most credit given and not yet taken by local sockets, over all
    /// connections: the most the peer can make this side hold (P-39).
    /// Past it, credit waits until local sockets take bytes, and a new
    /// connection is refused.
    pub budget: u64,
}

/// The default [`MuxConfig::budget`].
pub const CREDIT_BUDGET: u64 = 256 << 20;

impl Default for MuxConfig {
    fn default() -> Self {
        MuxConfig {
            window: 4 << 20,
            send_buffer: 1 << 20,
            quantum: 64 << 10,
            max_conns: 1024,
            budget: CREDIT_BUDGET,
        }
    }
}

/// What [`Mux::read`] has for a local socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// Bytes to write to the socket, in order.
    Data(Vec<u8>),
    /// The peer's side ended: shut the socket's write half.
    Eof,
    /// The connection was reset: close the socket.
    Reset(String),
    /// Nothing yet.
    Wait,
    /// No such connection (it ended).
    Gone,
}

/// Why [`Mux::write`] accepted nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Reset(String),
    /// The connection ended, or its write side was shut.
    Gone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Server: the client opened connection `id`; connect it to the target.
    Opened(u32),
}

pub struct Mux {
    role: Role,
    cfg: MuxConfig,
    conns: BTreeMap<u32, Conn>,
    /// Client: the next id to give. Server: one past the highest created.
    next_id: u32,
    /// Connections owing a control frame.
    dirty: VecDeque<u32>,
    /// Connections with bytes to frame, in turn order.
    ring: VecDeque<u32>,
    events: VecDeque<Event>,
    totals: ConnStats,
    closed: VecDeque<(u32, ConnStats)>,
    opened: u64,
    /// Credit given and not yet taken, over the connections not reset:
    /// at most `cfg.budget`.
    held_credit: u64,
}

/// Credit `c` holds against the budget.
fn claim(c: &Conn) -> u64 {
    if c.reset.is_some() {
        0
    } else {
        c.inc.credit - c.inc.taken
    }
}

impl Mux {
    pub fn new(role: Role, cfg: MuxConfig) -> Mux {
        let cfg = MuxConfig {
            quantum: cfg.quantum.clamp(1, MAX_TUNNEL_DATA),
            window: cfg.window.max(INITIAL_CREDIT),
            budget: cfg.budget.max(INITIAL_CREDIT),
            ..cfg
        };
        Mux {
            role,
            cfg,
            conns: BTreeMap::new(),
            next_id: 1,
            dirty: VecDeque::new(),
            ring: VecDeque::new(),
            events: VecDeque::new(),
            totals: ConnStats::default(),
            closed: VecDeque::new(),
            opened: 0,
            held_credit: 0,
        }
    }

    pub fn config(&self) -> &MuxConfig {
        &self.cfg
    }

    /// Client: a local connection was accepted; returns its id. Its credit
    /// is the first frame the peer sees of it, and opens it there.
    pub fn open(&mut self) -> Result<u32, MuxError> {
        if self.role != Role::Client {
            return Err(MuxError::Usage("only the client opens connections"));
        }
        if self.conns.len() >= self.cfg.max_conns {
            return Err(MuxError::TooMany(self.cfg.max_conns));
        }
        if self.credit_left() < INITIAL_CREDIT {
            return Err(MuxError::Budget(self.cfg.budget >> 20));
        }
        if self.next_id == u32::MAX {
            return Err(MuxError::Usage("connection ids exhausted"));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.create(id);
        // The credit is always sent, even at the initial window: it is
        // what opens the connection at the server.
        if let Some(c) = self.conns.get_mut(&id) {
            c.credit_sent = 0;
        }
        Ok(id)
    }

    /// Credit the budget has left to give.
    fn credit_left(&self) -> u64 {
        self.cfg.budget.saturating_sub(self.held_credit)
    }

    /// Creates `id` with the initial credit, which the peer has without
    /// asking, and more up to a window as the budget allows.
    fn create(&mut self, id: u32) {
        let extra = self
            .credit_left()
            .saturating_sub(INITIAL_CREDIT)
            .min(self.cfg.window - INITIAL_CREDIT);
        let mut c = Conn::default();
        c.out.credit = INITIAL_CREDIT;
        c.inc.credit = INITIAL_CREDIT + extra;
        c.credit_sent = INITIAL_CREDIT;
        self.held_credit += claim(&c);
        self.conns.insert(id, c);
        self.opened += 1;
        self.mark_dirty(id);
    }

    /// Renews `id`'s credit to a window past what its socket took, as far
    /// as the budget allows.
    fn grant(&mut self, id: u32) {
        let (room, window) = (self.credit_left(), self.cfg.window);
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.reset.is_some() || c.inc.fin_at.is_some() {
            return;
        }
        let target = (c.inc.taken + window).min(c.inc.credit + room);
        if target > c.inc.credit {
            self.held_credit += target - c.inc.credit;
            c.inc.credit = target;
            self.mark_dirty(id);
        }
    }

    /// Marks `id` reset with `reason`; what it held leaves the budget.
    fn set_reset(&mut self, id: u32, reason: String) {
        if let Some(c) = self.conns.get_mut(&id) {
            self.held_credit -= claim(c);
            c.reset = Some(reason);
            c.out.buf.clear();
            c.inc.ready.clear();
            c.inc.ready_len = 0;
            c.inc.pending.clear();
        }
    }

    fn mark_dirty(&mut self, id: u32) {
        if let Some(c) = self.conns.get_mut(&id) {
            if !c.dirty {
                c.dirty = true;
                self.dirty.push_back(id);
            }
        }
    }

    fn enter_ring(&mut self, id: u32) {
        if let Some(c) = self.conns.get_mut(&id) {
            if !c.out.in_ring && c.out.frameable() > 0 && c.reset.is_none() {
                c.out.in_ring = true;
                self.ring.push_back(id);
            }
        }
    }

    /// Bytes [`Mux::write`] would take for `id` now; `None` once it cannot
    /// take any more ever (reset, shut, gone).
    pub fn room(&self, id: u32) -> Option<usize> {
        let c = self.conns.get(&id)?;
        if c.reset.is_some() || c.out.eof {
            return None;
        }
        Some(self.cfg.send_buffer.saturating_sub(c.out.buf.len()))
    }

    /// Bytes the local socket of `id` read. Takes what fits in the send
    /// buffer (possibly nothing: wait for frames to go, then retry).
    pub fn write(&mut self, id: u32, data: &[u8]) -> Result<usize, Ended> {
        let room = self.cfg.send_buffer;
        let c = self.conns.get_mut(&id).ok_or(Ended::Gone)?;
        if let Some(r) = &c.reset {
            return Err(Ended::Reset(r.clone()));
        }
        if c.out.eof {
            return Err(Ended::Gone);
        }
        let n = data.len().min(room.saturating_sub(c.out.buf.len()));
        c.out.buf.extend(&data[..n]);
        c.stats.from_app += n as u64;
        self.enter_ring(id);
        Ok(n)
    }

    /// The local socket of `id` reached end of file.
    pub fn shutdown(&mut self, id: u32) {
        if let Some(c) = self.conns.get_mut(&id) {
            if c.reset.is_none() && !c.out.eof {
                c.out.eof = true;
                if c.out.wants_fin() {
                    self.mark_dirty(id);
                }
            }
        }
    }

    /// Resets `id` from this side (a local socket failed, the target
    /// refused): the peer drops it too.
    pub fn reset(&mut self, id: u32, reason: &str) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.reset.is_some() {
            return;
        }
        c.reset_unsent = true;
        self.set_reset(id, reason.to_string());
        self.mark_dirty(id);
    }

    /// Takes up to `max` bytes for the local socket of `id`.
    pub fn read(&mut self, id: u32, max: usize) -> Read {
        let window = self.cfg.window;
        let Some(c) = self.conns.get_mut(&id) else {
            return Read::Gone;
        };
        if let Some(r) = &c.reset {
            let r = r.clone();
            c.reset_taken = true;
            self.remove_if_finished(id);
            return Read::Reset(r);
        }
        // Credit again once half the window was taken: one frame per half
        // window, and the peer never waits on us while it has half a
        // window in flight. A connection the budget kept short asks again
        // each time its socket looks.
        let renew = |c: &Conn| c.inc.fin_at.is_none() && c.inc.credit - c.inc.taken <= window / 2;
        if c.inc.ready_len > 0 {
            let data = c.inc.take(max.max(1));
            c.stats.to_app += data.len() as u64;
            let renew = renew(c);
            self.held_credit -= data.len() as u64;
            if renew {
                self.grant(id);
            }
            return Read::Data(data);
        }
        if c.inc.at_end() {
            c.inc.eof_taken = true;
            self.remove_if_finished(id);
            return Read::Eof;
        }
        if renew(c) {
            self.grant(id);
        }
        Read::Wait
    }

    /// A frame from a lane. An error is the peer's fault and ends the
    /// tunnel session.
    pub fn handle(&mut self, frame: TunnelFrame) -> Result<(), MuxError> {
        let id = frame.id();
        if id == 0 {
            return Err(MuxError::Protocol("tunnel connection id 0"));
        }
        match self.role {
            Role::Client if id >= self.next_id => {
                return Err(MuxError::Protocol(
                    "tunnel frame for a connection never opened",
                ))
            }
            Role::Server if id >= self.next_id => {
                if id - self.next_id >= MAX_OPEN_AHEAD {
                    return Err(MuxError::Protocol("tunnel connection id far ahead"));
                }
                for new in self.next_id..=id {
                    let full = if self.conns.len() >= self.cfg.max_conns {
                        Some(format!(
                            "the tunnel server has {} connections open",
                            self.cfg.max_conns
                        ))
                    } else if self.credit_left() < INITIAL_CREDIT {
                        Some(format!(
                            "the tunnel server's connections hold all {} MiB it gives a session; try again when they drain",
                            self.cfg.budget >> 20
                        ))
                    } else {
                        None
                    };
                    self.create(new);
                    if let Some(reason) = full {
                        self.reset(new, &reason);
                        // No local socket will ever take this reset.
                        if let Some(c) = self.conns.get_mut(&new) {
                            c.reset_taken = true;
                        }
                    } else {
                        self.events.push_back(Event::Opened(new));
                    }
                }
                self.next_id = id + 1;
            }
            _ => {}
        }
        let Some(c) = self.conns.get_mut(&id) else {
            // A connection that ended: late credit, or data sent before
            // the peer learnt of our reset.
            return Ok(());
        };
        if c.reset.is_some() {
            return Ok(());
        }
        match frame {
            TunnelFrame::Data {
                offset,
                codec,
                data,
                ..
            } => {
                if codec != CODEC_NONE {
                    return Err(MuxError::Usage("compressed data reached the mux"));
                }
                c.inc.place(offset, data)?;
            }
            TunnelFrame::Fin { end, .. } => c.inc.set_fin(end)?,
            TunnelFrame::Credit { max, .. } => {
                c.out.credit = c.out.credit.max(max);
                self.enter_ring(id);
            }
            TunnelFrame::Reset { reason, .. } => {
                let reason = if reason.is_empty() {
                    "reset by the peer".to_string()
                } else {
                    reason
                };
                self.set_reset(id, reason);
            }
        }
        Ok(())
    }

    /// The next frame to send: control frames first, then data in turn.
    pub fn poll_frame(&mut self) -> Option<TunnelFrame> {
        while let Some(id) = self.dirty.pop_front() {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            let frame = if c.reset_unsent {
                c.reset_unsent = false;
                Some(TunnelFrame::Reset {
                    id,
                    reason: c.reset.clone().unwrap_or_default(),
                })
            } else if c.reset.is_some() {
                None
            } else if c.inc.credit > c.credit_sent && !c.inc.eof_taken {
                c.credit_sent = c.inc.credit;
                Some(TunnelFrame::Credit {
                    id,
                    max: c.inc.credit,
                })
            } else if c.out.wants_fin() {
                c.out.fin_sent = true;
                Some(TunnelFrame::Fin {
                    id,
                    end: c.out.framed,
                })
            } else {
                None
            };
            let owes = c.reset_unsent
                || (c.reset.is_none()
                    && ((c.inc.credit > c.credit_sent && !c.inc.eof_taken) || c.out.wants_fin()));
            if owes {
                self.dirty.push_front(id);
            } else {
                c.dirty = false;
            }
            self.remove_if_finished(id);
            if frame.is_some() {
                return frame;
            }
        }
        while let Some(id) = self.ring.pop_front() {
            let quantum = self.cfg.quantum;
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            let n = c.out.frameable().min(quantum);
            if n == 0 || c.reset.is_some() {
                c.out.in_ring = false;
                continue;
            }
            let data: Vec<u8> = c.out.buf.drain(..n).collect();
            let offset = c.out.framed;
            c.out.framed += n as u64;
            if c.out.frameable() > 0 {
                self.ring.push_back(id);
            } else {
                c.out.in_ring = false;
            }
            if c.out.wants_fin() {
                self.mark_dirty(id);
            }
            // Its history position and coding are the lane's to give.
            return Some(TunnelFrame::Data {
                id,
                offset,
                pos: 0,
                codec: CODEC_NONE,
                raw_len: n as u32,
                plain_len: n as u32,
                data,
            });
        }
        None
    }

    /// Whether [`Mux::poll_frame`] may have a frame.
    pub fn has_output(&self) -> bool {
        !self.dirty.is_empty() || !self.ring.is_empty()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn remove_if_finished(&mut self, id: u32) {
        if self.conns.get(&id).is_some_and(Conn::finished) {
            let c = self.conns.remove(&id).expect("present");
            self.held_credit -= claim(&c);
            let s = c.stats;
            self.totals.from_app += s.from_app;
            self.totals.to_app += s.to_app;
            self.totals.wire_out += s.wire_out;
            self.totals.wire_in += s.wire_in;
            if self.closed.len() == CLOSED_KEPT {
                self.closed.pop_front();
            }
            self.closed.push_back((id, s));
        }
    }

    /// Counts lane bytes of `id`'s frames (after compression).
    pub fn note_wire(&mut self, id: u32, out: u64, inc: u64) {
        let s = match self.conns.get_mut(&id) {
            Some(c) => &mut c.stats,
            None => &mut self.totals,
        };
        s.wire_out += out;
        s.wire_in += inc;
    }

    /// Figures of the open connections, of the last closed ones, and the
    /// total of all, open and closed.
    pub fn stats(&self) -> Stats {
        let open: Vec<(u32, ConnStats)> = self.conns.iter().map(|(i, c)| (*i, c.stats)).collect();
        let mut total = self.totals;
        for (_, s) in &open {
            total.from_app += s.from_app;
            total.to_app += s.to_app;
            total.wire_out += s.wire_out;
            total.wire_in += s.wire_in;
        }
        Stats {
            open,
            closed: self.closed.iter().copied().collect(),
            total,
            opened: self.opened,
        }
    }

    /// Connections open now.
    pub fn live(&self) -> usize {
        self.conns.len()
    }

    /// Bytes the mux holds for `id`'s local socket (ready and out of
    /// order): at most one window.
    pub fn held(&self, id: u32) -> u64 {
        self.conns.get(&id).map_or(0, |c| c.inc.held())
    }

    /// Credit given and not yet taken by local sockets, over all
    /// connections: at most [`MuxConfig::budget`].
    pub fn held_credit(&self) -> u64 {
        self.held_credit
    }

    /// Resets every connection (the session ended).
    pub fn reset_all(&mut self, reason: &str) {
        let ids: Vec<u32> = self.conns.keys().copied().collect();
        for id in ids {
            self.reset(id, reason);
        }
    }
}

/// What `haul tunnel --stats` shows.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub open: Vec<(u32, ConnStats)>,
    pub closed: Vec<(u32, ConnStats)>,
    pub total: ConnStats,
    /// Connections opened since the start.
    pub opened: u64,
}
