//! One transfer split into shards that run on many hosts (P-42), and
//! nothing about networks or schedulers' processes.
//!
//! - [`plan`]: the deterministic split every shard computes alike.
//! - [`source`]: a shard's sending side, pieces read at their offsets.
//! - [`ledger`]: the records a split transfer keeps in its shared
//!   destination.
//! - [`sink`]: a shard's receiving side, which places a split file once
//!   every piece of it is verified.
//! - [`engine`]: the shard index and count from Slurm or Kubernetes.
//! - [`emit`]: the plan as JSON, a Slurm batch script, or a Kubernetes
//!   Indexed Job.

pub mod emit;
pub mod engine;
pub mod ledger;
pub mod plan;
pub mod sink;
pub mod source;

pub use plan::{short_id, Plan, PlanError, ShardView, Share, MAX_SHARDS};
pub use sink::ShardSink;
pub use source::ShardSource;
