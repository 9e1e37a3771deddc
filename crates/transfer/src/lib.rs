//! The transfer engine: the block pipeline and the loops that run it, the
//! same whichever side is client or server.
//!
//! It owns the path of a block from the source to the wire and back to the
//! destination: read, zero check ([`zero_scan`]), deduplication against
//! what the receiver holds ([`dedup`]), compression and its policy
//! ([`compress`], [`cpu`]), bundling of small blocks (`bundle`), sealing
//! and sending over TCP (`send_blocks`) or the UDP channel
//! ([`datagram`]), and on receipt the mirror of each, down to the sink.
//! [`transfer`] runs the threads: one per data stream, the control reader
//! and writer, and the finalizer.
//!
//! It must not open connections, listen, or decide who talks to whom: it
//! is handed connected, keyed streams by `connect` and `endpoint`, sources
//! and a sink by `store`, and the sans-IO sessions by `session`.

pub(crate) mod bundle;
pub mod compress;
pub mod cpu;
pub mod datagram;
pub mod dedup;
pub mod engine;
pub(crate) mod send_blocks;
pub mod zero_scan;

pub use bundle::BUNDLE_MAX;
pub use dedup::ReceiveOptions;
pub use engine::{run_receiver, run_sender, RecvPath, SendPath, SenderReport, Sending};
pub use zero_scan::ZeroScan;
