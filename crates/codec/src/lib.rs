//! Per-block stages between reading a block and sealing it (issue 6).
//!
//! - [`zero`]: all-zero blocks, which are not sent at all.
//! - [`compress`]: the codecs (lz4, zstd) and their round trip.
//! - [`estimate`]: a cheap guess of how well a block compresses.
//! - [`samples`]: log-like text and noise, for tests and measurements.
//! - [`policy`]: the `--compress auto` policy, which decides per block,
//!   from live measurements of the link and of both ends' codec speeds,
//!   whether compressing it raises goodput, and with what.
//! - [`taste`]: `haul taste`, the same model applied to a sample of the
//!   user's data for every mode at once, before any transfer.
//!
//! Everything here is computation on bytes; the policy never reads a clock
//! (callers pass in the times they measured), so it is tested with
//! simulated link rates and CPU speeds.

pub mod compress;
pub mod estimate;
pub mod policy;
pub mod samples;
pub mod taste;
pub mod zero;

pub use compress::{check_claim, Codec, CodecError, Coder, MAX_DECODED_LEN};
pub use policy::{Auto, Choice, Mode, DEFAULT_LINK};
pub use zero::is_zero;
