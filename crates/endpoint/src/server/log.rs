//! A daemon's own lines on stderr, beside the tracing log: `haul serve:
//! MESSAGE` as text, or, under `--log-format json`, one JSON object a
//! line, as every other line of the log then is: an RFC 3339 timestamp,
//! a level, an event name, the message and the event's fields. Control
//! characters are escaped either way, so text a client chose cannot forge
//! a line (issue 39).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{json, Map, Value};

static JSON: AtomicBool = AtomicBool::new(false);

/// `--log-format json`: from now on, every line is a JSON object.
pub fn set_json(on: bool) {
    JSON.store(on, Ordering::Relaxed);
}

pub fn is_json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// How much a line matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        }
    }
}

/// Now, as RFC 3339 in UTC to the microsecond, always six digits of
/// them (a fixed width: lines sort and align as text).
pub fn timestamp() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

/// One JSON line: `timestamp`, `level`, `event`, then `fields` (a
/// `message` among them, where there is one).
pub fn json_line(level: Level, event: &str, fields: Map<String, Value>) -> String {
    let mut v = Map::new();
    v.insert("timestamp".into(), json!(timestamp()));
    v.insert("level".into(), json!(level.name()));
    v.insert("event".into(), json!(event));
    v.extend(fields);
    Value::Object(v).to_string()
}

/// Says `message` on stderr in one write: `haul serve: MESSAGE` (a
/// warning says so), or a JSON object of `event`.
pub fn say(level: Level, event: &str, message: &str) {
    let line = if is_json() {
        let mut f = Map::new();
        f.insert("message".into(), json!(message));
        json_line(level, event, f)
    } else {
        let warning = if level == Level::Warn {
            "warning: "
        } else {
            ""
        };
        format!("haul serve: {warning}{}", printable(message))
    };
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// `text` with every control character escaped (`\n`, `\u{1b}`), as a
/// log line may carry it: text a client chose (a path, an error message)
/// must not forge a line or a terminal sequence (issue 39).
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_line_has_a_timestamp_a_level_and_an_event() {
        let mut f = Map::new();
        f.insert("message".into(), json!("a\nb"));
        let line = json_line(Level::Warn, "refused", f);
        assert!(!line.contains('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            (v["level"].as_str(), v["event"].as_str()),
            (Some("WARN"), Some("refused"))
        );
        let t = v["timestamp"].as_str().unwrap();
        assert!(
            t.len() == 27 && t.ends_with('Z') && t.as_bytes()[10] == b'T',
            "{t}"
        );
    }
}
