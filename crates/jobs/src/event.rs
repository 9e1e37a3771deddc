//! What happens to a job, one journal line each (P-45 J-2), and the state
//! its events add up to. Times are milliseconds since the epoch.

use serde::{Deserialize, Serialize};

/// One thing that happened to a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    Submitted {
        at: u64,
    },
    Started {
        at: u64,
        attempt: u32,
    },
    /// An attempt failed; `retry_at` is when the next starts, `None` if
    /// none will (a `Failed` follows).
    Fault {
        at: u64,
        attempt: u32,
        code: u8,
        error: String,
        /// File bytes this attempt brought, verified, to the destination:
        /// what the next one need not send.
        bytes: u64,
        /// Bytes it wrote to its connections (framing included; some may
        /// never have left the host's socket buffers).
        #[serde(default)]
        wire: u64,
        retry_at: Option<u64>,
    },
    Succeeded {
        at: u64,
        attempt: u32,
        files: u64,
        /// File bytes of the transfer, in place and verified.
        bytes: u64,
        /// File bytes this attempt sent (the rest were there, verified).
        sent: u64,
        /// Bytes it wrote to its connections, framing included.
        #[serde(default)]
        wire: u64,
        secs: f64,
        /// Goodput of the last attempt, bits per second.
        rate_bps: u64,
    },
    Failed {
        at: u64,
        code: u8,
        reason: String,
    },
    Paused {
        at: u64,
    },
    Resumed {
        at: u64,
    },
    Cancelled {
        at: u64,
    },
    /// `haul jobs retry`: a failed or cancelled job runs again.
    Retried {
        at: u64,
    },
    /// A notification went (or could not).
    Notified {
        at: u64,
        how: String,
        ok: bool,
        detail: String,
    },
}

impl Event {
    pub fn at(&self) -> u64 {
        match self {
            Event::Submitted { at }
            | Event::Started { at, .. }
            | Event::Fault { at, .. }
            | Event::Succeeded { at, .. }
            | Event::Failed { at, .. }
            | Event::Paused { at }
            | Event::Resumed { at }
            | Event::Cancelled { at }
            | Event::Retried { at }
            | Event::Notified { at, .. } => *at,
        }
    }
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Queued,
    Running,
    /// Waiting to retry after a fault.
    Retrying,
    Paused,
    Succeeded,
    Failed,
    Cancelled,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Running => "running",
            State::Retrying => "retrying",
            State::Paused => "paused",
            State::Succeeded => "succeeded",
            State::Failed => "failed",
            State::Cancelled => "cancelled",
        }
    }

    /// It will not run again on its own.
    pub fn is_final(self) -> bool {
        matches!(self, State::Succeeded | State::Failed | State::Cancelled)
    }

    pub const ALL: [State; 7] = [
        State::Queued,
        State::Running,
        State::Retrying,
        State::Paused,
        State::Succeeded,
        State::Failed,
        State::Cancelled,
    ];
}

/// What a job's events add up to: its state, attempts, the next start
/// of a retry, and when the current series of attempts began (a retry
/// asked for by the user begins a new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub state: State,
    pub attempts: u32,
    pub retry_at: Option<u64>,
    pub since: u64,
}

impl Standing {
    pub fn new(created: u64) -> Standing {
        Standing {
            state: State::Queued,
            attempts: 0,
            retry_at: None,
            since: created,
        }
    }

    /// The standing after `e`.
    pub fn apply(mut self, e: &Event) -> Standing {
        match e {
            Event::Submitted { .. } | Event::Notified { .. } => {}
            Event::Started { attempt, .. } => {
                self.state = State::Running;
                self.attempts = *attempt;
                self.retry_at = None;
            }
            Event::Fault { retry_at, .. } => {
                self.retry_at = *retry_at;
                if !matches!(self.state, State::Paused | State::Cancelled) {
                    self.state = State::Retrying;
                }
            }
            Event::Succeeded { .. } => self.state = State::Succeeded,
            Event::Failed { .. } => self.state = State::Failed,
            Event::Cancelled { .. } => self.state = State::Cancelled,
            Event::Paused { .. } => self.state = State::Paused,
            Event::Resumed { .. } => {
                self.state = State::Queued;
                self.retry_at = None;
            }
            Event::Retried { at } => {
                self.state = State::Queued;
                self.attempts = 0;
                self.retry_at = None;
                self.since = *at;
            }
        }
        self
    }
}
