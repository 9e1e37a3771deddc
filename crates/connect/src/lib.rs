//! Connection set-up and carriage: everything between two hosts that
//! comes before, and beneath, a transfer's blocks.
//!
//! It owns the sockets' options ([`net`]: buffers, congestion control,
//! keepalive, what the OS allows), sealed length-prefixed frames
//! ([`framed`]), the handshake over a connection ([`handshake`]), how data
//! connections join a session and whose they are ([`join`], [`ports`]),
//! dials raced where a SYN may have been lost ([`race`]), the warm-ups
//! that grow their first window ([`warmup`]),
//! the pacing of control writes ([`control_gap`]), the windows and buffers
//! each side asks for ([`sizing`]), and the UDP channel's set-up, echo,
//! sealing and opening ([`datagram`]). It also holds what every driver path
//! returns and counts, named here from the crates that own them:
//! [`TransferError`] (`wire`) and the run context, [`Progress`] and what a
//! server imposes on a run ([`control`]), from `run`.
//!
//! It must not touch files, blocks or the transfer's state machines: the
//! engine (`transfer`) moves blocks over what this crate sets up, and the
//! client and server (`endpoint`) decide who connects to whom.

pub mod control_gap;
pub mod datagram;
pub mod error;
pub mod framed;
pub mod handshake;
pub mod join;
pub mod net;
pub mod ports;
pub mod race;
pub mod sizing;
pub mod warmup;

pub use error::TransferError;
pub use ports::PortRange;
/// The run context, which lives in `run`, named here for the crates
/// that reach it through their connections.
pub use run::{control, progress, Pace, Progress, RunControl};
