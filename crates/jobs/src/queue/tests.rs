//! The queue under a clock passed in: retries with backoff to success,
//! the deadline and --max-retries, permanent faults, pause, resume,
//! cancel, retry, repeats, the running limit, and a restart mid-run.

use super::*;
use crate::spec::tests::spec;

fn record(f: impl FnOnce(&mut Record)) -> Record {
    let mut r = Record {
        id: Id::random(),
        owner: "ee".repeat(32),
        owner_name: String::new(),
        created_ms: 0,
        parent: None,
        not_before_ms: None,
        spec: spec(),
    };
    f(&mut r);
    r
}

fn lost() -> Outcome {
    Outcome::Fault {
        code: 10,
        error: "connection lost".into(),
        bytes: 0,
        wire: 0,
        permanent: false,
    }
}

fn done() -> Outcome {
    Outcome::Done {
        files: 1,
        bytes: 10,
        sent: 10,
        wire: 11,
        secs: 1.0,
        rate_bps: 80,
    }
}

fn started(out: &[Effect]) -> Vec<Id> {
    out.iter()
        .filter_map(|e| match e {
            Effect::Start(id) => Some(*id),
            _ => None,
        })
        .collect()
}

fn state(q: &Queue, id: Id) -> State {
    q.get(&id).unwrap().standing.state
}

#[test]
fn faults_are_retried_with_growing_waits_until_it_succeeds() {
    let mut q = Queue::new(2);
    let r = record(|_| {});
    let id = r.id;
    assert_eq!(started(&q.submit(r, 0)), [id]);
    let mut now = 0;
    let mut waits = Vec::new();
    for _ in 0..6 {
        now += 1_000;
        let out = q.ended(id, lost(), now);
        assert!(started(&out).is_empty());
        assert_eq!(state(&q, id), State::Retrying);
        let at = q.next_deadline().unwrap();
        waits.push(at - now);
        assert!(started(&q.poll(at - 1)).is_empty());
        now = at;
        assert_eq!(started(&q.poll(now)), [id]);
    }
    assert!(waits.windows(2).all(|w| w[1] > w[0]), "{waits:?}");
    assert!(waits[0] >= FIRST_RETRY_MS * 3 / 4 && waits[0] <= FIRST_RETRY_MS * 5 / 4);
    let out = q.ended(id, done(), now + 5);
    assert!(out.contains(&Effect::Notify(id)));
    assert_eq!(state(&q, id), State::Succeeded);
    assert_eq!(q.next_deadline(), None);
    // Every event was handed to the journal: replayed, they give the same.
    let job = q.get(&id).unwrap();
    let replayed = job.events.iter().fold(Standing::new(0), |s, e| s.apply(e));
    assert_eq!(replayed, job.standing);
    assert_eq!(job.standing.attempts, 7);
}

#[test]
fn max_retries_deadline_and_permanent_faults_end_it_with_a_reason() {
    let mut q = Queue::new(4);
    let r = record(|r| r.spec.retry.max_retries = Some(1));
    let id = r.id;
    q.submit(r, 0);
    q.ended(id, lost(), 10);
    let at = q.next_deadline().unwrap();
    q.poll(at);
    let out = q.ended(id, lost(), at + 10);
    assert!(out.contains(&Effect::Notify(id)));
    assert_eq!(state(&q, id), State::Failed);
    let reason = q.get(&id).unwrap().events.iter().find_map(|e| match e {
        Event::Failed { reason, .. } => Some(reason.clone()),
        _ => None,
    });
    assert!(reason.unwrap().contains("connection lost"));

    let r = record(|r| r.spec.retry.deadline_secs = Some(3));
    let id = r.id;
    q.submit(r, 0);
    q.ended(id, lost(), 2_900);
    assert_eq!(
        state(&q, id),
        State::Failed,
        "the retry would start past the deadline"
    );

    let r = record(|_| {});
    let id = r.id;
    q.submit(r, 0);
    let permanent = Outcome::Fault {
        code: 4,
        error: "the grant was refused".into(),
        bytes: 0,
        wire: 0,
        permanent: true,
    };
    q.ended(id, permanent, 5);
    assert_eq!(state(&q, id), State::Failed);

    // The grant's expiry bounds every job.
    let r = record(|r| r.spec.dest.grant_expires = 10);
    let id = r.id;
    q.submit(r, 0);
    q.ended(id, lost(), 9_000);
    assert_eq!(state(&q, id), State::Failed);
}

#[test]
fn pause_resume_cancel_and_retry() {
    let mut q = Queue::new(4);
    let r = record(|_| {});
    let id = r.id;
    q.submit(r, 0);
    assert_eq!(
        q.pause(id, 1).unwrap(),
        [
            Effect::Journal(id, Event::Paused { at: 1 }),
            Effect::Stop(id)
        ]
    );
    assert!(q.ended(id, Outcome::Stopped, 2).is_empty());
    assert!(q.poll(1_000_000).is_empty(), "a paused job waits");
    assert!(q.pause(id, 3).is_err());
    assert_eq!(started(&q.resume(id, 4).unwrap()), [id]);
    // A fault of the attempt a cancel stopped is journaled, and it stays
    // cancelled.
    q.cancel(id, 5).unwrap();
    q.ended(id, lost(), 6);
    assert_eq!(state(&q, id), State::Cancelled);
    assert!(q.cancel(id, 7).is_err());
    assert_eq!(q.poll(1_000_000), []);
    assert_eq!(started(&q.retry(id, 8).unwrap()), [id]);
    assert_eq!(q.get(&id).unwrap().standing.attempts, 1, "a new series");
    assert_eq!(q.retry(Id::random(), 9), Err(Refused::NoSuchJob));
}

#[test]
fn no_more_run_at_once_than_allowed() {
    let mut q = Queue::new(2);
    let ids: Vec<Id> = (0..5)
        .map(|i| {
            let r = record(|r| r.created_ms = i);
            let id = r.id;
            q.submit(r, i);
            id
        })
        .collect();
    let running = |q: &Queue| {
        ids.iter()
            .filter(|id| state(q, **id) == State::Running)
            .count()
    };
    assert_eq!(running(&q), 2);
    let first = *ids
        .iter()
        .find(|id| state(&q, **id) == State::Running)
        .unwrap();
    assert_eq!(started(&q.ended(first, done(), 10)).len(), 1);
    assert_eq!(running(&q), 2);
}

#[test]
fn a_repeat_is_a_job_of_its_own_due_every_period() {
    let mut q = Queue::new(4);
    let r = record(|r| r.spec.every_secs = Some(3600));
    let id = r.id;
    q.submit(r, 1_000);
    let out = q.ended(id, done(), 60_000);
    let next = out
        .iter()
        .find_map(|e| match e {
            Effect::Created(r) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(next.parent, Some(id));
    assert_eq!(next.not_before_ms, Some(1_000 + 3_600_000));
    assert_eq!(state(&q, next.id), State::Queued);
    assert!(started(&q.poll(3_600_999)).is_empty());
    assert_eq!(q.next_deadline(), Some(3_601_000));
    assert_eq!(started(&q.poll(3_601_000)), [next.id]);
    // Cancelling the queued repeat ends the series.
    q.ended(next.id, Outcome::Stopped, 3_601_001);
    let r = record(|r| r.spec.every_secs = Some(3600));
    let id2 = r.id;
    q.submit(r, 0);
    q.pause(id2, 1).unwrap();
    q.cancel(id2, 2).unwrap();
    assert!(q
        .ended(id2, Outcome::Stopped, 3)
        .iter()
        .all(|e| !matches!(e, Effect::Created(_))));
}

#[test]
fn a_job_running_when_the_daemon_stopped_is_retried() {
    let r = record(|_| {});
    let id = r.id;
    let events = vec![
        Event::Submitted { at: 0 },
        Event::Started { at: 1, attempt: 1 },
    ];
    let mut q = Queue::new(4);
    let out = q.load(r, events, 100);
    assert!(out
        .iter()
        .any(|e| matches!(e, Effect::Journal(_, Event::Fault { .. }))));
    assert_eq!(state(&q, id), State::Retrying);
    let at = q.next_deadline().unwrap();
    assert_eq!(started(&q.poll(at)), [id]);
    assert_eq!(q.get(&id).unwrap().standing.attempts, 2);
}

#[test]
fn an_attached_job_ends_when_the_daemon_restarts() {
    let r = record(|r| r.spec.attached = true);
    let id = r.id;
    let events = vec![
        Event::Submitted { at: 0 },
        Event::Started { at: 1, attempt: 1 },
    ];
    let mut q = Queue::new(4);
    let out = q.load(r, events, 100);
    assert!(out.contains(&Effect::Notify(id)));
    assert_eq!(state(&q, id), State::Failed);
    assert_eq!(q.next_deadline(), None);
}
