//! The client and the server: who connects to whom, what is asked and
//! what is allowed, and which engine runs each session.
//!
//! - [`client`]: dials a server (directly, or to a remote side an ssh
//!   start or relay made reachable), runs the handshake, joins data
//!   connections or the UDP channel, and asks for a push, a pull, a
//!   listing, a probe or a tunnel.
//! - [`server`]: `haul serve`: accepts, authenticates, confines every
//!   request to its root, admits sessions within the daemon's memory and
//!   session limits, and hands each to the engine.
//!
//! It owns the session's set-up and its policy; it must not move blocks
//! (that is `transfer`'s), frame or seal bytes (`connect`'s), or run ssh
//! (`ssh`'s). What a transfer did comes back as a [`Report`].

pub mod client;
pub mod server;

pub use client::{
    Advice, ClientConfig, Connected, GrantAsk, JobSession, KnownPath, ProbeRun, Report, Route,
    ServerTrust, Transport, UdpReport,
};
pub use server::{map_large_buffers, serve, ClientKeys, ServerConfig, TransferLog};

/// Default TCP port of `haul serve`.
pub const DEFAULT_PORT: u16 = 7050;
