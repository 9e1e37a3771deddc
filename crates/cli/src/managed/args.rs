//! The command-line options of managed transfers (P-45): those of `cp`
//! and `sync` between two daemons or handed over with `--detach`, of
//! and of the daemon that runs jobs (`haul serve`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::units::{parse_age, parse_size};

/// What `cp` and `sync` take for a job.
#[derive(Args, Clone, Default)]
pub struct ManagedArgs {
    /// Hand the transfer to the daemon on the source's end and return at
    /// once, printing the job's id: it retries every fault with backoff,
    /// resuming from what is verified, until it succeeds or --deadline
    /// or --max-retries is reached. Follow it with `haul jobs`.
    #[arg(long)]
    pub detach: bool,
    /// Start no new attempt this long after submission (90s, 30m, 12h,
    /// 7d). Default: until the grant expires.
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub deadline: Option<Duration>,
    /// Most retries after the first attempt (default: until the deadline
    /// with --detach, 2 without).
    #[arg(long, value_name = "N")]
    pub max_retries: Option<u32>,
    /// When the job ends, run CMD on the daemon's host (sh -c) with the
    /// job as JSON on its standard input: only for an operator key.
    #[arg(long, value_name = "CMD")]
    pub notify_exec: Option<String>,
    /// When the job ends, POST the job as JSON to URL (retried).
    #[arg(long, value_name = "URL")]
    pub notify_url: Option<String>,
    /// With --detach: run the transfer again this long after each run
    /// started (1h, 1d); each run is a job of its own. Mostly for sync.
    #[arg(long, value_name = "AGE", value_parser = parse_age, requires = "detach")]
    pub every: Option<Duration>,
    /// How long the destination's one-time grant lasts: no attempt starts
    /// after it (default: the deadline; else 1d, or 30d with --every).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub grant_lifetime: Option<Duration>,
    /// Relay the data through this host, for two hosts that cannot reach
    /// each other (as scp -3): the source's daemon connects to the
    /// destination's through connections this host opens to it, TCP
    /// only; the session stays sealed end to end. Not with --detach.
    #[arg(long, conflicts_with = "detach")]
    pub through_client: bool,
    /// Most bytes the grant lets the source bring (10G, 500M; default:
    /// the sources' size now, with a tenth and 64 MiB to spare, or four
    /// times that with --every).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub grant_bytes: Option<u64>,
}

/// What `haul serve` takes for jobs and grants.
#[derive(Args, Clone)]
pub struct ServeJobArgs {
    /// Where the daemon keeps jobs and one-time grants (private; default
    /// $HAUL_HOME/state).
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// Take no jobs and issue no grants.
    #[arg(long, conflicts_with = "state")]
    pub no_jobs: bool,
    /// Most jobs running at once.
    #[arg(long, default_value_t = 4)]
    pub max_jobs: usize,
    /// Run CMD (sh -c) when any job ends, with the job as JSON on its
    /// standard input and HAUL_JOB_ID, HAUL_JOB_STATE set.
    #[arg(long = "notify-exec", value_name = "CMD")]
    pub notify_exec: Option<String>,
    /// POST every ended job as JSON to URL (retried).
    #[arg(long = "notify-url", value_name = "URL")]
    pub notify_url: Option<String>,
}
