//! `haul tunnel`'s driver (P-37): the sockets and threads around the
//! sans-IO multiplexer of the `tunnel` crate.
//!
//! It owns the local sockets a tunnel carries, the lanes (the session's
//! data connections) and the coding of lane frames (byte cache and
//! compression). It must not set up the session (the client and server of
//! `endpoint` hand it connected lanes) nor decide what the mux does (that
//! is the `tunnel` crate's, which has no I/O).
//!
//! A tunnel session's data connections are its lanes. Every lane has a
//! writer thread that takes the next frames from the mux (so one busy
//! connection's frames spread over all lanes, and a long path is filled by
//! several TCP windows at once) and a reader thread that hands received
//! frames to it. Every tunnelled connection has two threads: one reads its
//! socket into the mux, one writes what the mux has for it. All of them
//! share one lock and one condition variable; none holds the lock while it
//! does I/O.

mod coding;
mod lanes;
mod options;
mod serve;
mod session;
mod shared;
mod socket;

pub use coding::HISTORY_WINDOW;
pub use options::{window_for, Options, LANE_FRAME_MAX, SESSION_HELD, TARGET_CONNECT_TIMEOUT};
pub use serve::{serve, TunnelTargets};
pub use session::Session;
