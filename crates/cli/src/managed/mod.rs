//! Managed transfers from the command line (P-45): a transfer between
//! two daemons orchestrated from here (`submit`), handed over with
//! `--detach`, and `haul jobs` (`jobs`); which daemon holds each job
//! submitted from here (`registry`); `--through-client`'s relay
//! (`relay`); their options (`args`).

pub mod args;
mod jobs;
mod registry;
mod relay;
mod submit;

pub use jobs::run as jobs_command;
pub use submit::third_party;
