//! What one run of the engine carries besides its bytes, shared by the
//! transfer engine (`transfer`) and the tunnel's (`tunnel-driver`):
//!
//! - [`progress`]: the counters every side updates and the CLI reads, and
//!   the timeline of a session;
//! - [`control`]: what a server imposes on a run from outside the engine
//!   (a key's shared pace, a stop, how errors read to the peer);
//! - [`compress`]: the compression stage around `codec`'s sans-IO policy,
//!   fed the link rate and the CPU the process can have ([`cpu`]), and the
//!   `--compress` mode as a request carries it.
//!
//! It opens no connection and reads no file.

pub mod compress;
pub mod control;
pub mod cpu;
pub mod progress;

pub use control::{Pace, RunControl};
pub use progress::Progress;
