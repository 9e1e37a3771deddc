//! Managed transfers (issue 42, P-45): a transfer handed to a daemon that
//! runs it on its own, retrying every fault with backoff until it is
//! verified or the user's deadline or retry count is reached.
//!
//! - [`call`]: what a client asks of a daemon's jobs, and the views it
//!   gets back.
//! - [`spec`]: what a job runs, as its submitter described it (JSON on the
//!   wire and on disk), with every size bounded.
//! - [`event`]: what happens to a job, one journal line each, and the
//!   state the events add up to.
//! - [`queue`]: the sans-IO scheduler: submit, start, fault, retry,
//!   pause, resume, cancel, repeat; time passed in, effects returned, the
//!   driver arms one timer from [`queue::Queue::next_deadline`].
//! - [`journal`]: the jobs on disk, one directory each, written so that a
//!   crash at any point leaves a job as its last whole event says.

pub mod call;
pub mod event;
pub mod journal;
pub mod queue;
pub mod spec;

pub use event::{Event, State};
pub use queue::{Effect, Outcome, Queue};
pub use spec::{Id, Record, Spec};
