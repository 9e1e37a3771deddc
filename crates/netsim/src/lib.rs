//! One direction of a network link, as a pure state machine.
//!
//! Packets go in with [`Link::send`] at a time the caller gives, and come
//! out of [`Link::poll`] once their arrival time has passed. Nothing here
//! reads a clock or touches a socket, so the same model drives the TUN
//! emulator (`crates/netem`) and simulations, and a seed replays a run.
//!
//! The order of effects for each packet, as `netem` users expect:
//! outage → loss (random, then Gilbert-Elliott) → queue (tail drop when the
//! bytes waiting for the transmitter exceed the queue) → serialization at
//! the rate → propagation delay with jitter (never reordering by itself) →
//! reordering, duplication, corruption.

mod config;
mod link;
mod rng;

pub use config::{GilbertElliott, LinkConfig};
pub use link::{Counters, Link};
pub use rng::Rng;
