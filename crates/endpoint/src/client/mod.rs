//! The client: connects, authenticates the server against pinned keys,
//! asks to push or pull, opens the data streams and runs the engine (P-22).
//!
//! - `config`: what a client is set up with.
//! - `connected`: dialing, the handshake and the request.
//! - `keyed`: a session keyed in the ssh greetings (P-27); `route`:
//!   where its data goes.
//! - `ops`: each operation (push, pull, list, probe, tunnel), from the
//!   request to the report.
//! - `managed`: a one-time grant asked for, and job calls (P-45).
//! - `report`: what comes back.

mod config;
mod connected;
mod dial;
mod keyed;
mod managed;
mod ops;
mod report;
mod route;

pub use config::{
    choose_transport, Advice, ClientConfig, KnownPath, Notice, Relay, Route, ServerTrust,
    Transport, AUTO_UDP_RTT,
};
pub use connected::Connected;
pub use dial::{auto_streams, stream_buffer};
pub use managed::{GrantAsk, JobSession};
pub use report::{ProbeRun, Report, UdpReport};
pub use route::SshRoute;
