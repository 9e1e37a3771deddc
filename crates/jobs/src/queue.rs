//! The jobs a daemon holds, as a sans-IO state machine (P-45 J-3 … J-7):
//! inputs are submissions, the user's calls, the outcome of each attempt
//! and the time, passed in; outputs are [`Effect`]s for the driver to
//! carry out in order (journal an event, start or stop an attempt,
//! notify, write a repeat's record). The driver arms one timer from
//! [`Queue::next_deadline`] and calls [`Queue::poll`] when it fires.

use std::collections::BTreeMap;

use crate::event::{Event, Standing, State};
use crate::spec::{Id, Record};

/// The first retry waits this long; each next one twice the last.
pub const FIRST_RETRY_MS: u64 = 2_000;
/// No retry waits longer than this.
pub const MAX_RETRY_MS: u64 = 120_000;

/// One job: its record, its events, and where they leave it.
#[derive(Debug, Clone)]
pub struct Job {
    pub record: Record,
    pub events: Vec<Event>,
    pub standing: Standing,
}

impl Job {
    fn push(&mut self, e: Event, out: &mut Vec<Effect>) {
        self.standing = self.standing.apply(&e);
        self.events.push(e.clone());
        out.push(Effect::Journal(self.record.id, e));
    }

    /// When the current series of attempts must have started its last:
    /// the user's deadline, and never past the grant's expiry.
    pub fn deadline(&self) -> u64 {
        let grant = self.record.spec.dest.grant_expires.saturating_mul(1000);
        match self.record.spec.retry.deadline_secs {
            Some(s) => grant.min(self.standing.since.saturating_add(s * 1000)),
            None => grant,
        }
    }

    /// When it may start next, if it is waiting to.
    fn ready_at(&self) -> Option<u64> {
        match self.standing.state {
            State::Queued => Some(self.record.not_before_ms.unwrap_or(0)),
            State::Retrying => self.standing.retry_at,
            _ => None,
        }
    }

    /// The last fault's error, for a failure's reason.
    fn last_error(&self) -> Option<(u8, String)> {
        self.events.iter().rev().find_map(|e| match e {
            Event::Fault { code, error, .. } => Some((*code, error.clone())),
            _ => None,
        })
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Verified and in place.
    Done {
        files: u64,
        bytes: u64,
        sent: u64,
        wire: u64,
        secs: f64,
        rate_bps: u64,
    },
    /// It failed; `permanent` if trying again cannot help (the key
    /// revoked, the grant refused, a path outside the root).
    Fault {
        code: u8,
        error: String,
        bytes: u64,
        wire: u64,
        permanent: bool,
    },
    /// The driver stopped it because the user paused or cancelled it
    /// (already journaled).
    Stopped,
}

/// What the driver does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Append this event to the job's journal before the next effect.
    Journal(Id, Event),
    /// Start an attempt of the job.
    Start(Id),
    /// Stop the job's running attempt.
    Stop(Id),
    /// The job ended (succeeded or failed): tell whom its spec names.
    Notify(Id),
    /// A repeat of a job (`--every`): write its record, then its events.
    Created(Box<Record>),
}

/// Why a call on a job was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    NoSuchJob,
    /// Not in a state the call applies to; the message says which.
    State(String),
}

/// Every job a daemon holds.
#[derive(Debug, Default)]
pub struct Queue {
    jobs: BTreeMap<Id, Job>,
    /// Most attempts running at once.
    pub max_running: usize,
}

impl Queue {
    pub fn new(max_running: usize) -> Queue {
        Queue {
            jobs: BTreeMap::new(),
            max_running: max_running.max(1),
        }
    }

    pub fn get(&self, id: &Id) -> Option<&Job> {
        self.jobs.get(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values()
    }

    /// How many jobs are in each state.
    pub fn counts(&self) -> Vec<(State, usize)> {
        State::ALL
            .iter()
            .map(|&s| (s, self.iter().filter(|j| j.standing.state == s).count()))
            .collect()
    }

    /// A job read back from the journal. One that was running when the
    /// daemon stopped had a fault: it is retried now (J-6).
    pub fn load(&mut self, record: Record, events: Vec<Event>, now: u64) -> Vec<Effect> {
        let mut standing = Standing::new(record.created_ms);
        for e in &events {
            standing = standing.apply(e);
        }
        let id = record.id;
        let mut job = Job {
            record,
            events,
            standing,
        };
        let mut out = Vec::new();
        if job.record.spec.attached && !standing.state.is_final() {
            // Its client followed it, and is gone with the daemon: it ends
            // (J-7); the same command resumes from what was verified.
            let reason = "the daemon stopped while its client followed this job; run the same command again to resume from what was verified".to_string();
            let failed = Event::Failed {
                at: now,
                code: 10,
                reason,
            };
            finish(&mut job, failed, now, &mut out);
            self.jobs.insert(id, job);
        } else if standing.state == State::Running {
            let fault = Outcome::Fault {
                code: 10,
                error: "the daemon stopped while this job ran".into(),
                bytes: 0,
                wire: 0,
                permanent: false,
            };
            self.jobs.insert(id, job);
            out = self.ended(id, fault, now);
        } else {
            // A final job whose notification the crash cut off is not
            // notified twice: notifications are at most once.
            job.standing = standing;
            self.jobs.insert(id, job);
        }
        out
    }

    /// A new job, queued.
    pub fn submit(&mut self, record: Record, now: u64) -> Vec<Effect> {
        let id = record.id;
        let mut job = Job {
            standing: Standing::new(record.created_ms),
            record,
            events: Vec::new(),
        };
        let mut out = Vec::new();
        job.push(Event::Submitted { at: now }, &mut out);
        self.jobs.insert(id, job);
        out.extend(self.poll(now));
        out
    }

    /// Takes in the repeats that `out` created, each journaled as
    /// submitted.
    fn adopt(&mut self, out: &mut Vec<Effect>, now: u64) {
        let created: Vec<Record> = out
            .iter()
            .filter_map(|e| match e {
                Effect::Created(r) if !self.jobs.contains_key(&r.id) => Some((**r).clone()),
                _ => None,
            })
            .collect();
        for r in created {
            let mut job = Job {
                standing: Standing::new(r.created_ms),
                record: r,
                events: Vec::new(),
            };
            job.push(Event::Submitted { at: now }, out);
            self.jobs.insert(job.record.id, job);
        }
    }

    fn running(&self) -> usize {
        self.iter()
            .filter(|j| j.standing.state == State::Running)
            .count()
    }

    /// Starts the jobs whose time has come, oldest first, as many as may
    /// run; ends those past their deadline instead.
    pub fn poll(&mut self, now: u64) -> Vec<Effect> {
        let mut out = Vec::new();
        let mut ready: Vec<(u64, Id)> = self
            .iter()
            .filter_map(|j| Some((j.ready_at()?, j.record.id)))
            .filter(|&(at, _)| at <= now)
            .collect();
        ready.sort();
        let mut slots = self.max_running.saturating_sub(self.running());
        for (_, id) in ready {
            let job = self.jobs.get_mut(&id).expect("listed");
            if now > job.deadline() {
                let (code, last) = job
                    .last_error()
                    .map_or((0, String::new()), |(c, e)| (c, format!(": {e}")));
                let why = if now > job.record.spec.dest.grant_expires.saturating_mul(1000) {
                    "the destination's grant expired before the job could finish; submit it again"
                } else {
                    "its deadline passed before it could finish (--deadline)"
                };
                let reason = format!("{why}, after {} attempt(s){last}", job.standing.attempts);
                finish(
                    job,
                    Event::Failed {
                        at: now,
                        code,
                        reason,
                    },
                    now,
                    &mut out,
                );
                continue;
            }
            if slots == 0 {
                continue;
            }
            slots -= 1;
            let attempt = job.standing.attempts + 1;
            job.push(Event::Started { at: now, attempt }, &mut out);
            out.push(Effect::Start(id));
        }
        self.adopt(&mut out, now);
        out
    }

    /// When [`Queue::poll`] has something to do next, if ever: the
    /// earliest retry or queued start.
    pub fn next_deadline(&self) -> Option<u64> {
        self.iter().filter_map(Job::ready_at).min()
    }

    /// An attempt of `id` ended.
    pub fn ended(&mut self, id: Id, outcome: Outcome, now: u64) -> Vec<Effect> {
        let mut out = Vec::new();
        let Some(job) = self.jobs.get_mut(&id) else {
            return out;
        };
        let attempt = job.standing.attempts;
        match outcome {
            Outcome::Stopped => {}
            Outcome::Done {
                files,
                bytes,
                sent,
                wire,
                secs,
                rate_bps,
            } => {
                let done = Event::Succeeded {
                    at: now,
                    attempt,
                    files,
                    bytes,
                    sent,
                    wire,
                    secs,
                    rate_bps,
                };
                finish(job, done, now, &mut out);
            }
            Outcome::Fault {
                code,
                error,
                bytes,
                wire,
                permanent,
            } => {
                let retry_at = next_try(job, permanent, now);
                let paused = job.standing.state == State::Paused;
                let cancelled = job.standing.state == State::Cancelled;
                job.push(
                    Event::Fault {
                        at: now,
                        attempt,
                        code,
                        error: error.clone(),
                        bytes,
                        wire,
                        retry_at: retry_at.filter(|_| !cancelled),
                    },
                    &mut out,
                );
                if retry_at.is_none() && !paused && !cancelled {
                    let reason = if permanent {
                        error
                    } else {
                        format!("{error} (after {attempt} attempt(s); --max-retries or --deadline reached)")
                    };
                    finish(
                        job,
                        Event::Failed {
                            at: now,
                            code,
                            reason,
                        },
                        now,
                        &mut out,
                    );
                }
            }
        }
        self.adopt(&mut out, now);
        out.extend(self.poll(now));
        out
    }

    /// `haul jobs pause`: a queued, retrying or running job waits until
    /// resumed; a running attempt is stopped (its verified blocks stay).
    pub fn pause(&mut self, id: Id, now: u64) -> Result<Vec<Effect>, Refused> {
        let when = &[State::Queued, State::Retrying, State::Running];
        self.change(
            id,
            when,
            "only a queued, retrying or running job pauses",
            Event::Paused { at: now },
            now,
        )
    }

    /// `haul jobs resume`: a paused job is queued again.
    pub fn resume(&mut self, id: Id, now: u64) -> Result<Vec<Effect>, Refused> {
        self.change(
            id,
            &[State::Paused],
            "only a paused job resumes",
            Event::Resumed { at: now },
            now,
        )
    }

    /// `haul jobs cancel`: the job ends, and a repeat series with it.
    pub fn cancel(&mut self, id: Id, now: u64) -> Result<Vec<Effect>, Refused> {
        let when = &[
            State::Queued,
            State::Retrying,
            State::Running,
            State::Paused,
        ];
        self.change(
            id,
            when,
            "it has ended already",
            Event::Cancelled { at: now },
            now,
        )
    }

    /// `haul jobs retry`: a failed or cancelled job runs again, with a
    /// new series of attempts (and deadline), from what is verified.
    pub fn retry(&mut self, id: Id, now: u64) -> Result<Vec<Effect>, Refused> {
        let when = &[State::Failed, State::Cancelled];
        self.change(
            id,
            when,
            "only a failed or cancelled job is retried",
            Event::Retried { at: now },
            now,
        )
    }

    /// The user's call on a job in one of the states `when`: `event`
    /// journaled, a running attempt stopped where the job no longer runs,
    /// and whatever may start now started.
    fn change(
        &mut self,
        id: Id,
        when: &[State],
        only: &str,
        event: Event,
        now: u64,
    ) -> Result<Vec<Effect>, Refused> {
        let job = self.jobs.get_mut(&id).ok_or(Refused::NoSuchJob)?;
        let state = job.standing.state;
        if !when.contains(&state) {
            return Err(Refused::State(format!(
                "the job is {}; {only}",
                state.name()
            )));
        }
        let mut out = Vec::new();
        job.push(event, &mut out);
        if state == State::Running && job.standing.state != State::Running {
            out.push(Effect::Stop(id));
        }
        out.extend(self.poll(now));
        Ok(out)
    }

    /// A notification's outcome, journaled.
    pub fn notified(
        &mut self,
        id: Id,
        how: &str,
        result: Result<String, String>,
        now: u64,
    ) -> Vec<Effect> {
        let mut out = Vec::new();
        if let Some(job) = self.jobs.get_mut(&id) {
            let (ok, detail) = match result {
                Ok(d) => (true, d),
                Err(d) => (false, d),
            };
            job.push(
                Event::Notified {
                    at: now,
                    how: how.into(),
                    ok,
                    detail,
                },
                &mut out,
            );
        }
        out
    }
}

/// The job ends with `event` (succeeded or failed): journaled, notified,
/// and its next run made if it repeats.
fn finish(job: &mut Job, event: Event, now: u64, out: &mut Vec<Effect>) {
    job.push(event, out);
    out.push(Effect::Notify(job.record.id));
    out.extend(repeat(job, now));
}

/// When the next attempt of a job whose attempt just failed starts:
/// exponential backoff with a jitter of up to a quarter drawn from the
/// job's id, so that jobs cut by one outage do not all come back at
/// once; `None` if none will (a permanent fault, `--max-retries`, or past
/// the deadline). A paused job waits for resume instead (`Some` all the
/// same, ignored while paused).
fn next_try(job: &Job, permanent: bool, now: u64) -> Option<u64> {
    if permanent {
        return None;
    }
    let attempt = job.standing.attempts.max(1);
    let retries_left = job
        .record
        .spec
        .retry
        .max_retries
        .is_none_or(|m| attempt <= m);
    if !retries_left {
        return None;
    }
    let base = FIRST_RETRY_MS
        .saturating_mul(1u64 << (attempt - 1).min(20))
        .min(MAX_RETRY_MS);
    let seed = job.record.id.0[(attempt as usize) % 16] as u64;
    let at = now + base - base / 4 + (base / 2) * seed / 255;
    (at <= job.deadline()).then_some(at)
}

/// The next run of a repeating job (`--every`) that just ended, as a job
/// of its own: due `every` after this run's first start, or now if that
/// has passed; none once the grant has expired.
fn repeat(job: &Job, now: u64) -> Option<Effect> {
    let every = job.record.spec.every_secs? * 1000;
    let first = job
        .events
        .iter()
        .find_map(|e| match e {
            Event::Started { at, .. } => Some(*at),
            _ => None,
        })
        .unwrap_or(now);
    let due = (first + every).max(now);
    if due > job.record.spec.dest.grant_expires.saturating_mul(1000) {
        return None;
    }
    Some(Effect::Created(Box::new(Record {
        id: Id::random(),
        created_ms: now,
        parent: Some(job.record.parent.unwrap_or(job.record.id)),
        not_before_ms: Some(due),
        ..job.record.clone()
    })))
}

#[cfg(test)]
mod tests;
