//! Telling someone a job ended (P-45 J-9): the job's view, events
//! included, as JSON on the standard input of `--notify-exec`'s command
//! (run with `sh -c`, bounded to a minute) and POSTed to `--notify-url`
//! (retried with backoff). Both the daemon's own and the job's are used.
//! Each outcome is journaled as a `notified` event; a notification is
//! sent at most once (one a crash cut off is not sent again).

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobs::queue::Job;
use jobs::spec::Notify;

use super::Service;

/// How long a notification command may run.
const EXEC_LIMIT: Duration = Duration::from_secs(60);
/// Attempts of a POST (about 25 s of backoff in all).
const POST_ATTEMPTS: u32 = 8;

impl Service {
    /// Sends `job`'s notifications on a thread of their own.
    pub(super) fn notify_ended(self: &Arc<Self>, job: &Job, daemon: Notify) {
        send(self.clone(), job, daemon)
    }
}

fn send(svc: Arc<Service>, job: &Job, daemon: Notify) {
    let view = jobs::call::View::of(job, None, true);
    let json = serde_json::to_vec(&view).expect("a view serializes");
    let id = job.record.id;
    let state = view.state.name();
    let mine = &job.record.spec.notify;
    let execs: Vec<String> = [daemon.exec, mine.exec.clone()]
        .into_iter()
        .flatten()
        .collect();
    let urls: Vec<String> = [daemon.url, mine.url.clone()]
        .into_iter()
        .flatten()
        .collect();
    if execs.is_empty() && urls.is_empty() {
        return;
    }
    std::thread::spawn(move || {
        for cmd in execs {
            let r = exec(&cmd, &json, &id.hex(), state);
            if let Err(e) = &r {
                tracing::warn!("job {id}: --notify-exec {cmd:?}: {e}");
            }
            svc.notified(id, "exec", r);
        }
        for url in urls {
            let r = match object::http::post_json(&url, json.clone(), POST_ATTEMPTS) {
                Ok(s) if s.is_success() => Ok(format!("{url}: {s}")),
                Ok(s) => Err(format!("{url} answered {s}")),
                Err(e) => Err(format!("{url}: {e}")),
            };
            if let Err(e) = &r {
                tracing::warn!("job {id}: --notify-url: {e}");
            }
            svc.notified(id, "url", r);
        }
    });
}

/// Runs `cmd` with the job's JSON on its standard input, and its id and
/// state in `HAUL_JOB_ID` and `HAUL_JOB_STATE`.
fn exec(cmd: &str, json: &[u8], id: &str, state: &str) -> Result<String, String> {
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(cmd)
        .env("HAUL_JOB_ID", id)
        .env("HAUL_JOB_STATE", state)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(json);
    }
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(s)) if s.success() => return Ok("exit 0".into()),
            Ok(Some(s)) => return Err(format!("it ended with {s}")),
            Ok(None) if started.elapsed() > EXEC_LIMIT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "it ran past {}s and was killed",
                    EXEC_LIMIT.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(e.to_string()),
        }
    }
}
