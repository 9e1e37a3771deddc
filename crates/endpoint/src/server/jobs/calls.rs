//! A `Job` session (P-45 J-1): the client's calls, one `JobCall` at a
//! time, each answered with a `JobAnswer` (a followed job with one every
//! second until it ends). A key sees and manages only the jobs it
//! submitted, an `operator` key every job; an id of another key's job is
//! answered as one that does not exist (J-8).

use std::sync::Arc;
use std::time::Duration;

use connect::error::TransferError;
use connect::framed::{FrameReader, FrameWriter};
use jobs::call::{Answer, Call, View};
use jobs::queue::Refused;
use jobs::{Id, Record};
use secure::PublicKey;
use wire::{ErrorCode, Msg};

use super::super::access::KeyOptions;
use super::{now_ms, Host, Service};

/// Most calls one session makes.
const MAX_CALLS: usize = 16;
/// Most jobs one listing shows, newest first.
const MAX_LISTED: usize = 1000;
/// How often a followed job is reported.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// The caller: its key, its name, what its line allows.
struct Caller<'a> {
    key: String,
    name: String,
    access: &'a KeyOptions,
}

impl Caller<'_> {
    fn sees(&self, owner: &str) -> bool {
        self.access.operator || owner == self.key
    }
}

impl Service {
    /// A `Job` session's calls, answered in turn.
    pub(crate) fn converse(
        self: &Arc<Self>,
        host: &dyn Host,
        peer: &PublicKey,
        name: Option<String>,
        access: &KeyOptions,
        ctrl: (&mut FrameReader, &mut FrameWriter),
    ) -> Result<String, TransferError> {
        converse(self, host, (peer, name, access), ctrl)
    }
}

fn converse(
    svc: &Arc<Service>,
    host: &dyn Host,
    (peer, name, access): (&PublicKey, Option<String>, &KeyOptions),
    (ctrl_r, ctrl_w): (&mut FrameReader, &mut FrameWriter),
) -> Result<String, TransferError> {
    let caller = Caller {
        key: wire::hex::encode(&peer.0),
        name: name.unwrap_or_else(|| peer.fingerprint()),
        access,
    };
    let mut said = Vec::new();
    for _ in 0..MAX_CALLS {
        let call = match ctrl_r.read_msg() {
            Ok(Some(Msg::JobCall(b))) => serde_json::from_slice::<Call>(&b)
                .map_err(|e| TransferError::new(ErrorCode::Protocol, format!("a job call: {e}")))?,
            Ok(None) => break,
            Ok(Some(m)) => {
                return Err(TransferError::new(
                    ErrorCode::Protocol,
                    format!("the client sent {} in a job session", m.name()),
                ))
            }
            Err(connect::framed::FrameError::Io(_)) => break,
            Err(e) => return Err(e.into_transfer("reading a job call")),
        };
        said.push(answer(host, svc, &caller, call, ctrl_w)?);
    }
    Ok(format!("job calls: {}", said.join(", ")))
}

fn send(w: &mut FrameWriter, jobs: Vec<View>) -> Result<(), TransferError> {
    send_answer(
        w,
        &Answer {
            jobs,
            measured: None,
        },
    )
}

fn send_answer(w: &mut FrameWriter, a: &Answer) -> Result<(), TransferError> {
    let body = serde_json::to_vec(a).expect("an answer serializes");
    w.send_msg(&Msg::JobAnswer(body))
        .map_err(|e| TransferError::lost("answering a job call", &e))
}

/// Answers one call; says what it was, for the log.
fn answer(
    host: &dyn Host,
    svc: &Arc<Service>,
    caller: &Caller<'_>,
    call: Call,
    w: &mut FrameWriter,
) -> Result<String, TransferError> {
    let mine = |id: &Id| -> Result<(), TransferError> {
        let owner = super::lock(&svc.inner)
            .queue
            .get(id)
            .map(|j| j.record.owner.clone());
        match owner {
            Some(o) if caller.sees(&o) => Ok(()),
            _ => Err(TransferError::new(
                ErrorCode::NotFound,
                format!("no job {id} of this key on this server"),
            )),
        }
    };
    let refused = |r: Refused| match r {
        Refused::NoSuchJob => TransferError::new(ErrorCode::NotFound, "no such job"),
        Refused::State(why) => TransferError::new(ErrorCode::BadRequest, why),
    };
    match call {
        Call::Submit { spec } => {
            let id = submit(host, svc, caller, *spec)?;
            send(w, svc.view(&id, false).into_iter().collect())?;
            Ok(format!("submit {id}"))
        }
        Call::List {} => {
            let inner = super::lock(&svc.inner);
            let mut jobs: Vec<View> = inner
                .queue
                .iter()
                .filter(|j| caller.sees(&j.record.owner))
                .map(|j| {
                    View::of(
                        j,
                        inner.running.get(&j.record.id).and_then(|a| a.live()),
                        false,
                    )
                })
                .collect();
            drop(inner);
            jobs.sort_by_key(|v| std::cmp::Reverse(v.created_ms));
            jobs.truncate(MAX_LISTED);
            let n = jobs.len();
            send(w, jobs)?;
            Ok(format!("list ({n})"))
        }
        Call::Measure { sources, options } => {
            let (files, bytes) = host.measure(caller.access, &sources, &options)?;
            let a = Answer {
                jobs: Vec::new(),
                measured: Some((files, bytes)),
            };
            send_answer(w, &a)?;
            Ok(format!("measure ({bytes} bytes)"))
        }
        Call::Show { id } => {
            mine(&id)?;
            send(w, svc.view(&id, true).into_iter().collect())?;
            Ok(format!("show {id}"))
        }
        Call::Follow { id } => {
            mine(&id)?;
            follow(svc, id, w)?;
            Ok(format!("follow {id}"))
        }
        Call::Cancel { id } | Call::Pause { id } | Call::Resume { id } | Call::Retry { id } => {
            mine(&id)?;
            let what = match &call {
                Call::Cancel { .. } => "cancel",
                Call::Pause { .. } => "pause",
                Call::Resume { .. } => "resume",
                _ => "retry",
            };
            let done: Result<(), Refused> = svc.with(|q, now| {
                let r = match what {
                    "cancel" => q.cancel(id, now),
                    "pause" => q.pause(id, now),
                    "resume" => q.resume(id, now),
                    _ => q.retry(id, now),
                };
                match r {
                    Ok(effects) => (Ok(()), effects),
                    Err(e) => (Err(e), Vec::new()),
                }
            });
            done.map_err(refused)?;
            send(w, svc.view(&id, false).into_iter().collect())?;
            Ok(format!("{what} {id}"))
        }
    }
}

/// Reports the job every second until it ends (the last with its
/// events). A client that goes away from an attached job cancels it.
fn follow(svc: &Arc<Service>, id: Id, w: &mut FrameWriter) -> Result<(), TransferError> {
    loop {
        let Some(v) = svc.view(&id, false) else {
            return Ok(());
        };
        let done = v.state.is_final();
        let view = if done { svc.view(&id, true) } else { Some(v) };
        if let Err(e) = send(w, view.into_iter().collect()) {
            let attached = super::lock(&svc.inner)
                .queue
                .get(&id)
                .is_some_and(|j| j.record.spec.attached);
            if attached && !done {
                svc.with(|q, now| match q.cancel(id, now) {
                    Ok(effects) => ((), effects),
                    Err(_) => ((), Vec::new()),
                });
                tracing::info!("job {id}: its client went away; the attached job is cancelled");
            }
            return Err(e);
        }
        if done {
            return Ok(());
        }
        svc.changed(FOLLOW_EVERY);
    }
}

/// A new job from `caller`: its spec checked against what the key may
/// do now (its sources must be readable beneath its root; a command to
/// run on this host only from an operator key), then written and queued.
fn submit(
    host: &dyn Host,
    svc: &Arc<Service>,
    caller: &Caller<'_>,
    spec: jobs::Spec,
) -> Result<Id, TransferError> {
    let bad = |m: String| TransferError::new(ErrorCode::BadRequest, m);
    spec.check().map_err(bad)?;
    let d = &spec.dest;
    caller.access.may_push_to(&d.host, d.port, &d.addrs)?;
    if spec.notify.exec.is_some() && !caller.access.operator {
        return Err(TransferError::new(
            ErrorCode::Permission,
            "--notify-exec runs a command on the server's host: only an operator key (operator in its line) may give one; use --notify-url",
        ));
    }
    let record = Record {
        id: Id::random(),
        owner: caller.key.clone(),
        owner_name: caller.name.clone(),
        created_ms: now_ms(),
        parent: None,
        not_before_ms: None,
        spec,
    };
    // What the key may read, judged now so that a wrong path is said at
    // once; every attempt judges it again.
    host.measure(caller.access, &record.spec.sources, &record.spec.options)?;
    svc.submit(record)
}
