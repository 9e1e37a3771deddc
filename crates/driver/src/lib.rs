//! Sockets and threads, kept thin.
//!
//! - [`net`]: socket set-up (buffers sized to the path, congestion control,
//!   keepalive) and what the OS allows.
//! - [`framed`]: length-prefixed sealed frames over a TCP stream.
//! - [`handshake`]: runs the sans-IO Noise handshake over a connection.
//! - [`control_gap`]: how often a control writer writes, so small
//!   messages merge instead of spending a slow-starting window's packets.
//! - [`compress`] and [`cpu`]: the `--compress` policy fed the link rate
//!   and the cores this process can have now.
//! - `send_blocks`: the sender's block path, from the session's next block
//!   to a sealed frame on a data stream.
//! - [`engine`]: the transfer loops shared by client and server: one thread
//!   per data stream, control reader and writer, and a finalizer.
//! - [`datagram`]: the UDP data channel's set-up, paced sender and
//!   receiver, feeding `session::datagram`.
//! - [`server`] and [`client`]: who connects to whom, and what is asked.
//! - [`probe`]: `haul probe`'s tests one after another, and the advice
//!   drawn from them.
//! - [`tunnel`]: `haul tunnel`: local sockets and the session's lanes
//!   around the `tunnel` crate's multiplexer.
//! - [`ssh`]: no-daemon use: the remote side started over ssh, and the
//!   relay through the ssh channel when hosts cannot connect directly.

pub(crate) mod bundle;
pub mod client;
pub mod compress;
pub mod control_gap;
pub mod cpu;
pub mod datagram;
pub mod dedup;
pub mod engine;
pub mod error;
pub mod framed;
pub mod handshake;
pub mod join;
pub mod net;
pub mod ports;
pub mod probe;
pub mod progress;
pub(crate) mod send_blocks;
pub mod server;
pub mod ssh;
pub mod tunnel;
pub mod zero_scan;

pub use client::{
    ClientConfig, Connected, ProbeRun, Report, Route, ServerTrust, Transport, UdpReport,
};
pub use dedup::ReceiveOptions;
pub use error::TransferError;
pub use ports::PortRange;
pub use progress::Progress;
pub use server::{serve, ClientKeys, ServerConfig};
pub use zero_scan::ZeroScan;

/// Default TCP port of `haul serve`.
pub const DEFAULT_PORT: u16 = 7050;
