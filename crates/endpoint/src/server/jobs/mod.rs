//! The daemon's driver of managed transfers (P-45): the `jobs` crate's
//! sans-IO [`Queue`] behind one lock, its effects carried out in order
//! under it (each event journaled and synced before the next effect),
//! one timer thread armed from the queue's next deadline, a thread per
//! running attempt, and the notifications.
//!
//! - [`Host`]: what the driver asks of the daemon (one attempt, what a
//!   key's sources come to, the daemon's notifications); the server's is
//!   in `server/job_run.rs`.
//! - `calls`: a client's `JobCall`s in a `Job` session.
//! - `notify`: `--notify-exec` and `--notify-url` when a job ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use connect::error::TransferError;
use connect::progress::Progress;
use jobs::call::Live;
use jobs::journal::Journal;
use jobs::spec::{Notify, Options};
use jobs::{Effect, Event, Id, Outcome, Queue, Record, State};
use wire::ErrorCode;

use super::access::KeyOptions;

mod calls;
mod notify;

/// What the driver asks of the daemon that holds it.
pub(crate) trait Host: Send + Sync {
    /// Runs one attempt of the job (P-45 J-4).
    fn attempt(&self, rec: &Record, slot: &Attempt, changed_streak: usize) -> Outcome;
    /// What `sources` come to for a key with `access` now (files, bytes),
    /// or why it may not read them.
    fn measure(
        &self,
        access: &KeyOptions,
        sources: &[String],
        options: &Options,
    ) -> Result<(u64, u64), TransferError>;
    /// The daemon's own `--notify-exec` and `--notify-url`.
    fn notify(&self) -> Notify;
}

/// Jobs the status page lists.
const LATEST: usize = 20;
/// Relayed connections a job holds unused, at most (J-11).
const MAX_RELAYS: usize = 32;

/// The jobs of one daemon.
pub struct Service {
    journal: Journal,
    inner: Mutex<Inner>,
    wake: Condvar,
    host: Weak<dyn Host>,
    /// Connections the clients of relayed jobs opened, not yet used.
    relays: Mutex<HashMap<Id, Vec<std::net::TcpStream>>>,
    relayed: Condvar,
}

struct Inner {
    queue: Queue,
    /// The attempt of each running job.
    running: HashMap<Id, Arc<Attempt>>,
}

/// A running attempt, as the driver sees it: its progress once it is
/// connected, and whether it was told to stop.
#[derive(Default)]
pub(super) struct Attempt {
    progress: Mutex<Option<Arc<Progress>>>,
    stopped: AtomicBool,
    started: Mutex<Option<std::time::Instant>>,
    /// Where a relayed job's connections come from (`--through-client`).
    pub(super) relay: Option<crate::client::Relay>,
}

impl Attempt {
    /// The attempt is connected: a stop from now on reaches its run.
    pub(crate) fn connected(&self, p: Arc<Progress>) -> Result<(), TransferError> {
        *lock(&self.progress) = Some(p);
        *lock(&self.started) = Some(std::time::Instant::now());
        if self.stopped.load(Ordering::SeqCst) {
            return Err(stopped());
        }
        Ok(())
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        if let Some(p) = &*lock(&self.progress) {
            p.control.stop(stopped());
        }
    }

    fn live(&self) -> Option<Live> {
        let p = lock(&self.progress).clone()?;
        let done = Progress::get(&p.done_bytes);
        let secs = lock(&self.started).map_or(0.0, |t| t.elapsed().as_secs_f64());
        Some(Live {
            done,
            total: Progress::get(&p.total_bytes),
            rate_bps: if secs > 0.0 {
                (done as f64 * 8.0 / secs) as u64
            } else {
                0
            },
        })
    }

    /// File bytes this attempt brought to the other end, verified there:
    /// those acknowledged, less those found there already (a partial
    /// resumed, a file in place, zeros, chunks it held). What a fault
    /// leaves of them is what the next attempt need not send (J-5).
    pub(super) fn sent(&self) -> u64 {
        let Some(p) = lock(&self.progress).clone() else {
            return 0;
        };
        let get = Progress::get;
        [
            &p.resumed_bytes,
            &p.skipped_bytes,
            &p.zero_bytes,
            &p.dedup_bytes,
        ]
        .iter()
        .fold(get(&p.done_bytes), |n, c| n.saturating_sub(get(c)))
    }

    /// Bytes this attempt wrote to its connections, framing included.
    pub(super) fn wire(&self) -> u64 {
        lock(&self.progress)
            .as_ref()
            .map_or(0, |p| Progress::get(&p.wire_tx))
    }
}

fn stopped() -> TransferError {
    TransferError::new(ErrorCode::Other, "stopped: the job was paused or cancelled")
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Milliseconds since the epoch.
pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Starts the jobs of a daemon with a state directory `dir`: those its
/// journal holds are taken up again (one that was running when it
/// stopped is retried), and the timer thread runs from now on.
pub(crate) fn start(
    host: Arc<dyn Host>,
    dir: &std::path::Path,
    max_jobs: usize,
) -> Option<Arc<Service>> {
    let dir = dir.join("jobs");
    let journal = Journal::open(&dir)
        .and_then(|j| j.load().map(|l| (j, l)))
        .inspect_err(|e| tracing::warn!("{}: {e}; this daemon takes no jobs", dir.display()));
    let (journal, loaded) = journal.ok()?;
    for n in &loaded.notes {
        tracing::warn!("{n}");
    }
    let svc = Arc::new(Service {
        journal,
        inner: Mutex::new(Inner {
            queue: Queue::new(max_jobs),
            running: HashMap::new(),
        }),
        wake: Condvar::new(),
        host: Arc::downgrade(&host),
        relays: Mutex::new(HashMap::new()),
        relayed: Condvar::new(),
    });
    let now = now_ms();
    {
        let mut inner = lock(&svc.inner);
        let count = loaded.jobs.len();
        for (record, events) in loaded.jobs {
            let effects = inner.queue.load(record, events, now);
            svc.apply(&mut inner, effects);
        }
        if count > 0 {
            tracing::info!(
                "{count} job(s) read back from {}",
                svc.journal.dir().display()
            );
        }
    }
    let timer = svc.clone();
    std::thread::spawn(move || timer.timer());
    Some(svc)
}

impl Service {
    /// Polls the queue whenever its next deadline comes, or something
    /// changed; at least once a minute.
    fn timer(self: Arc<Self>) {
        let mut inner = lock(&self.inner);
        loop {
            let effects = inner.queue.poll(now_ms());
            self.apply(&mut inner, effects);
            let wait = inner
                .queue
                .next_deadline()
                .map_or(60_000, |d| d.saturating_sub(now_ms()).min(60_000))
                .max(5);
            inner = self
                .wake
                .wait_timeout(inner, Duration::from_millis(wait))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Carries out the queue's effects in order, under its lock.
    fn apply(self: &Arc<Self>, inner: &mut Inner, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::Journal(id, ev) => {
                    if let Err(e) = self.journal.append(&id, &ev) {
                        tracing::error!("job {id}: cannot journal an event: {e}");
                    }
                }
                Effect::Created(r) => {
                    if let Err(e) = self.journal.create(&r) {
                        tracing::error!("job {}: cannot write its record: {e}", r.id);
                    }
                }
                Effect::Start(id) => self.start_attempt(inner, id),
                Effect::Stop(id) => {
                    if let Some(a) = inner.running.get(&id) {
                        a.stop();
                    }
                }
                Effect::Notify(id) => {
                    if let Some(job) = inner.queue.get(&id) {
                        self.notify_ended(job, self.default_notify());
                    }
                }
            }
        }
        self.wake.notify_all();
    }

    fn default_notify(&self) -> Notify {
        self.host.upgrade().map(|h| h.notify()).unwrap_or_default()
    }

    /// A thread runs one attempt of `id` and hands its outcome back.
    fn start_attempt(self: &Arc<Self>, inner: &mut Inner, id: Id) {
        let Some(job) = inner.queue.get(&id) else {
            return;
        };
        let record = job.record.clone();
        let changed_streak = job
            .events
            .iter()
            .rev()
            .filter(|e| !matches!(e, Event::Started { .. }))
            .take_while(|e| matches!(e, Event::Fault { error, .. } if error.contains(store::source::CHANGED)))
            .count();
        let relay = record.spec.relay.then(|| {
            let svc = self.clone();
            let r: crate::client::Relay = Arc::new(move |t| svc.take_relay(id, t));
            r
        });
        let attempt = Arc::new(Attempt {
            relay,
            ..Attempt::default()
        });
        inner.running.insert(id, attempt.clone());
        let svc = self.clone();
        std::thread::spawn(move || {
            let outcome = match svc.host.upgrade() {
                Some(host) => host.attempt(&record, &attempt, changed_streak),
                None => return,
            };
            svc.ended(id, outcome);
        });
    }

    /// An attempt ended: a fault of one the user stopped is no fault.
    fn ended(self: &Arc<Self>, id: Id, outcome: Outcome) {
        let mut inner = lock(&self.inner);
        inner.running.remove(&id);
        let state = inner.queue.get(&id).map(|j| j.standing.state);
        let outcome = match outcome {
            Outcome::Fault { .. } if matches!(state, Some(State::Paused | State::Cancelled)) => {
                Outcome::Stopped
            }
            o => o,
        };
        let effects = inner.queue.ended(id, outcome, now_ms());
        self.apply(&mut inner, effects);
        if inner
            .queue
            .get(&id)
            .is_some_and(|j| j.standing.state.is_final())
        {
            lock(&self.relays).remove(&id);
        }
    }

    /// A connection the client of job `id` relays to its other end: kept
    /// for the job's attempts if it is a relayed job still running, and
    /// holds fewer than [`MAX_RELAYS`]; `false` (and dropped) otherwise.
    pub(crate) fn relayed(&self, id: [u8; 16], s: std::net::TcpStream) -> bool {
        let id = Id(id);
        let takes = lock(&self.inner)
            .queue
            .get(&id)
            .is_some_and(|j| j.record.spec.relay && !j.standing.state.is_final());
        let mut relays = lock(&self.relays);
        let held = relays.entry(id).or_default();
        if !takes || held.len() >= MAX_RELAYS {
            return false;
        }
        held.push(s);
        self.relayed.notify_all();
        true
    }

    /// A live relayed connection for job `id`, waiting up to `limit`.
    fn take_relay(&self, id: Id, limit: Duration) -> std::io::Result<std::net::TcpStream> {
        let until = std::time::Instant::now() + limit;
        let mut relays = lock(&self.relays);
        loop {
            while let Some(s) = relays.get_mut(&id).and_then(|v| v.pop()) {
                // One its client closed meanwhile is no use.
                s.set_nonblocking(true)?;
                let live = !matches!(s.peek(&mut [0u8; 1]), Ok(0));
                s.set_nonblocking(false)?;
                if live {
                    return Ok(s);
                }
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the job's client relayed no connection in time (is it still running?)",
                ));
            }
            relays = self
                .relayed
                .wait_timeout(relays, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Waits until something changes in the queue (an event), or `limit`:
    /// a follower hears of a job's end at once.
    fn changed(&self, limit: Duration) {
        let inner = lock(&self.inner);
        let _ = self.wake.wait_timeout(inner, limit);
    }

    /// Runs `f` on the queue under its lock and carries out its effects.
    fn with<T>(self: &Arc<Self>, f: impl FnOnce(&mut Queue, u64) -> (T, Vec<Effect>)) -> T {
        let mut inner = lock(&self.inner);
        let (t, effects) = f(&mut inner.queue, now_ms());
        self.apply(&mut inner, effects);
        t
    }

    /// The job's view, with live figures while it runs.
    fn view(&self, id: &Id, events: bool) -> Option<jobs::call::View> {
        let inner = lock(&self.inner);
        let job = inner.queue.get(id)?;
        let live = inner.running.get(id).and_then(|a| a.live());
        Some(jobs::call::View::of(job, live, events))
    }

    /// How many jobs have not ended (queued, running, retrying, paused).
    pub fn unfinished(&self) -> usize {
        lock(&self.inner)
            .queue
            .iter()
            .filter(|j| !j.standing.state.is_final())
            .count()
    }

    /// What the metrics and the status page show of the jobs: how many
    /// are in each state, and the latest, newest first.
    pub fn summary(&self) -> serde_json::Value {
        let inner = lock(&self.inner);
        let counts: serde_json::Map<String, serde_json::Value> = inner
            .queue
            .counts()
            .into_iter()
            .map(|(s, n)| (s.name().to_string(), n.into()))
            .collect();
        let mut latest: Vec<jobs::call::View> = inner
            .queue
            .iter()
            .map(|j| {
                let live = inner.running.get(&j.record.id).and_then(|a| a.live());
                jobs::call::View::of(j, live, false)
            })
            .collect();
        latest.sort_by_key(|v| std::cmp::Reverse(v.created_ms));
        latest.truncate(LATEST);
        serde_json::json!({ "counts": counts, "latest": latest })
    }

    /// Writes a job's record, durable before it is queued.
    fn submit(self: &Arc<Self>, record: jobs::Record) -> Result<Id, TransferError> {
        self.journal.create(&record).map_err(|e| {
            TransferError::new(
                ErrorCode::Other,
                format!("the server cannot keep the job: {e}"),
            )
        })?;
        let id = record.id;
        self.with(|q, now| ((), q.submit(record, now)));
        Ok(id)
    }

    fn notified(self: &Arc<Self>, id: Id, how: &str, result: Result<String, String>) {
        self.with(|q, now| ((), q.notified(id, how, result, now)));
    }
}
