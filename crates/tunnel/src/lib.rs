//! `haul tunnel`'s protocol core (P-37): the multiplexer that carries many
//! TCP connections over the lanes of one haul session, with credit-based
//! flow control per connection and fair turns between connections, and
//! the byte cache ([`history`]) that sends content seen before, in any
//! connection, as a reference.
//!
//! Pure state: the driver (`tunnel-driver`) owns the sockets and threads
//! and feeds this crate bytes and frames. Tests run two muxes against each
//! other over simulated lanes that deliver in any order.

mod conn;
pub mod history;
mod mux;

pub use conn::ConnStats;
pub use mux::{
    Ended, Event, Mux, MuxConfig, Read, Role, Stats, CREDIT_BUDGET, INITIAL_CREDIT, MAX_OPEN_AHEAD,
};

/// A misuse by the driver, or a peer that broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MuxError {
    /// The peer broke P-37: the session ends.
    #[error("tunnel protocol error: {0}")]
    Protocol(&'static str),
    #[error("{0}")]
    Usage(&'static str),
    #[error("{0} tunnelled connections are open; no more until one closes")]
    TooMany(usize),
    #[error("the tunnelled connections hold all {0} MiB this side gives a session; no more until they drain")]
    Budget(u64),
}
