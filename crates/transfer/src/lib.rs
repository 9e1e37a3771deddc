//! The transfer engine: the block pipeline and the loops that run it, the
//! same whichever side is client or server.
//!
//! A block's path, one stage a file:
//!
//! ```text
//! sender                                         receiver
//! session.next_block                             receiver::tcp | receiver::udp
//!  → sender::read     read, zero check, hash      → receiver::decode  decompress,
//!  → crate::delta     program vs. what the           rebuild a delta, split a bundle
//!                     receiver holds              → receiver::place   hash check, write,
//!  → sender::bundle   small files together                            journal, next actions
//!  → crate::compress  in place, by the policy    → receiver (finalizer) sync, rename
//!  → sender::tcp      seal and write a frame
//!  | sender::udp      chunk, seal, pace
//! ```
//!
//! `sender::prepare` runs the first four on a pool of workers; each stage
//! takes only what it uses (the sources, the compression policy, the
//! session behind its lock). [`sender`] and [`receiver`] run the threads
//! of each side: streams, the control reader and writer, the planner, the
//! answerer, the finalizer and the chunk cache's feeder. Storage is
//! reached only through `store::BlockSource` and `store::BlockSink`.
//!
//! It must not open connections, listen, or decide who talks to whom: it
//! is handed connected, keyed streams by `connect` and `endpoint`, sources
//! and a sink by `store`, and the sans-IO sessions by `session`.

pub mod bundle;
pub(crate) mod delta;
pub(crate) mod digest;
pub mod options;
pub mod receiver;
pub mod sender;
pub(crate) mod shared;
pub mod zero_scan;

pub use bundle::BUNDLE_MAX;
pub use options::{gate_receiver, gate_sender, selected, selection, Itemize, ReceiveOptions};
pub use receiver::{run_receiver, RecvPath};
/// The compression stage and the CPU it measures, from the run context.
pub use run::{compress, cpu};
pub use sender::{run_sender, KnownLink, SendPath, SenderReport, Sending};
pub use zero_scan::ZeroScan;
