//! The UDP data channel without I/O (P-24 to P-26): blocks cut into chunks
//! that fit one datagram, each datagram numbered, the receiver reporting
//! what arrived and what is missing, and the sender re-sending what was
//! reported while fresh chunks keep the pipe full.
//!
//! - [`DatagramSender`]: chunking, sequence numbers, the retransmission
//!   queue (served before fresh chunks), and the rate controller fed by
//!   the receiver's reports.
//! - [`DatagramReceiver`]: loss detection from sequence gaps, block
//!   assembly from chunks in any order, periodic reports, and requests for
//!   blocks that stopped making progress.
//!
//! - [`fec`]: erasure coding over the tail's datagrams (P-47), so a loss
//!   in the last round trip costs no further one.
//!
//! Blocks complete here only as bytes; the block hash is checked by the
//! [`crate::ReceiverSession`] exactly as for blocks that came over TCP.

mod chunking;
pub mod fec;
mod receive;
mod reporting;
mod send;
mod train;

pub use chunking::{chunk_capacity, chunks};
pub use receive::{
    Completed, DatagramError, DatagramReceiver, ReceiverStats, MAX_ASSEMBLIES, MAX_ASSEMBLY_BYTES,
    MAX_SEQ_AHEAD,
};
pub use reporting::{
    feedback_interval, report_interval, FEEDBACK_INTERVAL, REPORT_INTERVAL, REPORT_REPEATS,
};
pub use send::{ChunkTransmit, DatagramSender, SenderStats};
pub use train::TrainMeter;
