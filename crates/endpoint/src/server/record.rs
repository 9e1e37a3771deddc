//! One log line per finished session (issue 29): who (the key's comment
//! in `authorized_keys`, and its fingerprint), from where, what (the
//! operation and its paths), how much (files, file bytes, bytes on the
//! wire), how long, and how it ended; as text, or as one JSON object a
//! line with `--log-format json`, for a log collector.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use connect::error::TransferError;
use connect::progress::Progress;
use serde_json::json;

use super::log::printable;

/// What a session has told about itself so far.
#[derive(Default)]
struct Seen {
    key: Option<String>,
    comment: Option<String>,
    op: Option<&'static str>,
    paths: Vec<String>,
    progress: Option<Arc<Progress>>,
    /// Files and file bytes, as the finished session counted them.
    moved: Option<(u64, u64)>,
}

/// Filled in as a session goes, logged once when it ends.
pub(crate) struct Record {
    peer: String,
    started: Instant,
    seen: Mutex<Seen>,
}

impl Record {
    pub(crate) fn new(peer: String) -> Record {
        Record {
            peer,
            started: Instant::now(),
            seen: Mutex::default(),
        }
    }

    /// While it runs, for the status page: who, what, how far, how fast.
    /// `None` before its request.
    pub(crate) fn live(&self) -> Option<serde_json::Value> {
        let s = self.seen();
        let op = s.op?;
        let p = s.progress.as_ref()?;
        let secs = self.started.elapsed().as_secs_f64();
        // The file bytes verified so far; a receiving daemon counts them
        // as they are placed, a sending one as they are acknowledged.
        let done = Progress::get(&p.done_bytes);
        let wire = Progress::get(&p.wire_tx) + Progress::get(&p.wire_rx);
        let moved = if done > 0 { done } else { wire };
        Some(json!({
            "who": s.comment.clone().unwrap_or_else(|| "-".into()),
            "key": s.key.clone().unwrap_or_default(),
            "peer": self.peer,
            "op": op,
            "paths": s.paths,
            "done": moved,
            "total": Progress::get(&p.total_bytes),
            "rate": if secs > 0.0 { moved as f64 / secs } else { 0.0 },
            "seconds": secs,
        }))
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The client's key, once its handshake is through.
    pub(crate) fn key(&self, fingerprint: String, comment: Option<String>) {
        let mut s = self.seen();
        s.key = Some(fingerprint);
        s.comment = comment;
    }

    /// What it asked, and its counters.
    pub(crate) fn request(&self, op: &wire::Op, paths: &[String], progress: &Arc<Progress>) {
        let mut s = self.seen();
        s.op = Some(match op {
            wire::Op::Push => "push",
            wire::Op::Pull => "pull",
            wire::Op::Probe { .. } => "probe",
            wire::Op::Tunnel => "tunnel",
            wire::Op::Grant { .. } => "grant",
            wire::Op::Job => "job",
        });
        s.paths = paths.to_vec();
        s.progress = Some(progress.clone());
    }

    /// What the finished session moved: files and their bytes.
    pub(crate) fn moved(&self, files: u64, bytes: u64) {
        self.seen().moved = Some((files, bytes));
    }

    /// The finished session as one JSON object: `None` for a connection
    /// that never got as far as a request (a port scan, a refused key:
    /// those are logged where they fail).
    pub(crate) fn event(
        &self,
        outcome: &Result<String, TransferError>,
        took: Duration,
    ) -> Option<serde_json::Value> {
        let s = self.seen();
        let op = s.op?;
        let get = |f: fn(&Progress) -> &std::sync::atomic::AtomicU64| {
            s.progress.as_ref().map_or(0, |p| Progress::get(f(p)))
        };
        let (files, bytes) = s
            .moved
            .unwrap_or_else(|| (get(|p| &p.done_files), get(|p| &p.done_bytes)));
        let saved = json!({
            "zero": get(|p| &p.zero_bytes),
            "compression": get(|p| &p.compressed_in).saturating_sub(get(|p| &p.compressed_out)),
            "dedup": get(|p| &p.dedup_bytes),
        });
        let saved_total: u64 = ["zero", "compression", "dedup"]
            .iter()
            .map(|k| saved[k].as_u64().unwrap_or(0))
            .sum();
        let (ok, code, message) = match outcome {
            Ok(_) => (true, 0, String::new()),
            Err(e) => (false, e.code as u8, e.message.clone()),
        };
        Some(json!({
            "event": "transfer",
            "who": s.comment.clone().unwrap_or_else(|| "-".into()),
            "key": s.key.clone().unwrap_or_default(),
            "peer": self.peer,
            "op": op,
            "paths": s.paths,
            "files": files,
            "bytes": bytes,
            "wire_bytes": get(|p| &p.wire_tx) + get(|p| &p.wire_rx),
            "saved_bytes": saved_total,
            "saved": saved,
            "retransmitted": get(|p| &p.retransmitted),
            "seconds": (took.as_secs_f64() * 1000.0).round() / 1000.0,
            "ok": ok,
            "code": code,
            "error": message,
        }))
    }

    /// The log line: the event as JSON with `json`, as text otherwise.
    pub(crate) fn line(
        &self,
        outcome: &Result<String, TransferError>,
        took: Duration,
        json: bool,
    ) -> Option<String> {
        let e = self.event(outcome, took)?;
        if json {
            let level = match outcome {
                Ok(_) => super::log::Level::Info,
                Err(_) => super::log::Level::Warn,
            };
            let mut fields = e.as_object().cloned().unwrap_or_default();
            fields.remove("event");
            return Some(super::log::json_line(level, "transfer", fields));
        }
        let outcome = if e["ok"] == true {
            "ok".to_string()
        } else {
            format!(
                "failed (exit {}): {}",
                e["code"],
                printable(e["error"].as_str().unwrap_or(""))
            )
        };
        Some(format!(
            "transfer: {} ({}) from {} {} {}: {} files, {} bytes, {} on the wire, {:.2} s, {outcome}",
            printable(e["who"].as_str().unwrap_or("-")),
            e["key"].as_str().unwrap_or(""),
            self.peer,
            e["op"].as_str().unwrap_or(""),
            e["paths"],
            e["files"],
            e["bytes"],
            e["wire_bytes"],
            took.as_secs_f64()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_says_who_did_what_and_how_it_ended() {
        let r = Record::new("10.0.0.1:4000".into());
        assert_eq!(r.line(&Ok(String::new()), Duration::ZERO, true), None);
        r.key("b3:00".into(), Some("alice@lab".into()));
        let p = Arc::new(Progress::default());
        Progress::set(&p.done_bytes, 1234);
        Progress::set(&p.done_files, 2);
        r.request(&wire::Op::Push, &["in/".to_string()], &p);
        let j: serde_json::Value = serde_json::from_str(
            &r.line(&Ok(String::new()), Duration::from_millis(1500), true)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(j["who"], "alice@lab");
        assert_eq!(j["op"], "push");
        assert_eq!(j["bytes"], 1234);
        assert_eq!(j["ok"], true);
        let failed = Err(TransferError::new(wire::ErrorCode::DiskFull, "disk full"));
        let t = r.line(&failed, Duration::from_secs(2), false).unwrap();
        assert!(
            t.contains("alice@lab (b3:00)") && t.contains("failed (exit 9): disk full"),
            "{t}"
        );
        // A path or message a client chose cannot forge a line.
        r.request(&wire::Op::Pull, &["x\ntransfer: forged".to_string()], &p);
        let forged = Err(TransferError::new(
            wire::ErrorCode::NotFound,
            "no x\nforged\x1b[2J",
        ));
        let t = r.line(&forged, Duration::from_secs(2), false).unwrap();
        assert!(!t.contains('\n') && !t.contains('\x1b'), "{t}");
        assert!(t.contains("no x\\nforged\\u{1b}[2J"), "{t}");
    }
}
