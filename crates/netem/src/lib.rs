//! A WAN on one Linux box (needs root): two network namespaces, `NAME-a`
//! and `NAME-b`, each with a TUN device, and one thread per direction that
//! reads packets from one TUN, passes them through a [`netsim::Link`], and
//! writes them into the other when their arrival time comes.
//!
//! ```text
//!  NAME-a: tun-a 198.18.0.1 ──▶ [a→b Link] ──▶ tun-b 198.18.0.2 :NAME-b
//!                           ◀── [b→a Link] ◀──
//! ```
//!
//! 198.18.0.0/15 is the range set aside for benchmarking (RFC 2544); the
//! traffic never leaves the two namespaces.

pub mod emulator;
mod forward;
pub mod netns;
pub mod profile;
pub mod programs;
pub mod testing;
mod tun;

pub use emulator::{Emulator, EmulatorConfig, ADDR_A, ADDR_B};
