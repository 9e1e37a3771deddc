//! What a client asks of a daemon's jobs, and what it is told (P-45
//! J-1): a `Call` as the JSON of a `JobCall` message, and the `Answer`
//! of a `JobAnswer`: the jobs concerned, each as a [`View`] that shows
//! no secret (the grant's key stays on the daemon).

use serde::{Deserialize, Serialize};

use crate::event::{Event, State};
use crate::queue::Job;
use crate::spec::{Id, Kind, Options, Spec};

/// One call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case", deny_unknown_fields)]
pub enum Call {
    Submit {
        spec: Box<Spec>,
    },
    List {},
    Show {
        id: Id,
    },
    Cancel {
        id: Id,
    },
    Pause {
        id: Id,
    },
    Resume {
        id: Id,
    },
    Retry {
        id: Id,
    },
    /// The job's view now and then until it ends, the last with its
    /// events.
    Follow {
        id: Id,
    },
    /// What the sources of a job would come to now: their files and
    /// bytes (the size a grant is asked for).
    Measure {
        sources: Vec<String>,
        options: Box<Options>,
    },
}

/// The jobs a call concerns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub jobs: Vec<View>,
    /// `Measure`: files and bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<(u64, u64)>,
}

/// A job as its submitter sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct View {
    pub id: Id,
    pub state: State,
    pub kind: Kind,
    pub label: String,
    pub sources: Vec<String>,
    /// `HOST:PORT:PATH`.
    pub dest: String,
    /// The submitting key's name in the daemon's authorized keys.
    pub owner: String,
    pub created_ms: u64,
    pub parent: Option<Id>,
    pub every_secs: Option<u64>,
    pub attempts: u32,
    pub retry_at_ms: Option<u64>,
    /// File bytes verified at the destination so far (the running
    /// attempt's, or the last success's), and of the whole transfer.
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// Goodput of the running attempt or the last success, bit/s.
    pub rate_bps: u64,
    /// Why it failed, or the last fault while it retries.
    pub reason: Option<String>,
    /// The exit code `haul cp` would give: 0 once succeeded.
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
}

/// Live figures of a running attempt.
#[derive(Debug, Clone, Copy, Default)]
pub struct Live {
    pub done: u64,
    pub total: u64,
    pub rate_bps: u64,
}

impl View {
    /// `job` as its submitter sees it, with `live` figures if it runs,
    /// and its events if asked.
    pub fn of(job: &Job, live: Option<Live>, events: bool) -> View {
        let r = &job.record;
        let s = &r.spec;
        let mut v = View {
            id: r.id,
            state: job.standing.state,
            kind: s.kind,
            label: s.label.clone(),
            sources: s.sources.clone(),
            dest: format!("{}:{}:{}", s.dest.host, s.dest.port, s.dest.path),
            owner: r.owner_name.clone(),
            created_ms: r.created_ms,
            parent: r.parent,
            every_secs: s.every_secs,
            attempts: job.standing.attempts,
            retry_at_ms: job
                .standing
                .retry_at
                .filter(|_| job.standing.state == State::Retrying),
            bytes_done: 0,
            bytes_total: 0,
            rate_bps: 0,
            reason: None,
            exit_code: None,
            events: if events {
                job.events.clone()
            } else {
                Vec::new()
            },
        };
        for e in job.events.iter().rev() {
            match e {
                Event::Succeeded {
                    bytes, rate_bps, ..
                } if v.exit_code.is_none() => {
                    (v.bytes_done, v.bytes_total, v.rate_bps) = (*bytes, *bytes, *rate_bps);
                    v.exit_code = Some(0);
                }
                Event::Failed { code, reason, .. } if v.reason.is_none() => {
                    v.reason = Some(reason.clone());
                    v.exit_code = Some(if *code == 0 { 1 } else { *code as i32 });
                }
                Event::Fault { error, .. } if v.reason.is_none() => v.reason = Some(error.clone()),
                _ => {}
            }
            if v.reason.is_some() || v.exit_code.is_some() {
                break;
            }
        }
        if job.standing.state == State::Succeeded {
            v.reason = None;
        }
        if job.standing.state == State::Cancelled {
            v.exit_code = Some(1);
            v.reason = Some("cancelled".into());
        }
        if let Some(l) = live {
            (v.bytes_done, v.bytes_total, v.rate_bps) = (l.done, l.total, l.rate_bps);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_round_trip_and_unknown_fields_are_refused() {
        let spec = crate::spec::tests::spec();
        for c in [
            Call::Submit {
                spec: Box::new(spec.clone()),
            },
            Call::List {},
            Call::Follow { id: Id::random() },
            Call::Measure {
                sources: spec.sources.clone(),
                options: Box::new(spec.options.clone()),
            },
        ] {
            let b = serde_json::to_vec(&c).unwrap();
            assert_eq!(serde_json::from_slice::<Call>(&b).unwrap(), c);
        }
        assert!(serde_json::from_slice::<Call>(br#"{"call":"list","x":1}"#).is_err());
        assert!(serde_json::from_slice::<Call>(br#"{"call":"show","id":"zz"}"#).is_err());
        assert!(serde_json::from_slice::<Call>(br#"{"call":"rm"}"#).is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_as_a_call_or_a_journal_never_panic(
            b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)
        ) {
            let _ = serde_json::from_slice::<Call>(&b);
            let (events, good) = crate::journal::whole_events(&b);
            proptest::prop_assert!(good <= b.len());
            proptest::prop_assert!(events.len() <= b.iter().filter(|&&c| c == b'\n').count());
        }
    }
}
