//! Where `haul`'s log lines go and how many there are: `-v`, `-vv`, or
//! `HAUL_LOG`, always on stderr so stdout stays for `--json`. The S3
//! SDK's own lines (a region not found in instance metadata, say) only at
//! `-vv`: haul says what failed in its own words.
//!
//! A daemon's log is read by operators and collectors, and carries text
//! its clients chose (paths, error messages): there every control
//! character is written escaped (`\n`, `\x1b`), so a client cannot forge
//! a line or a terminal sequence (issue 39), and there are no colours.

use std::io::{IsTerminal, Write};

fn filter(verbose: u8) -> tracing_subscriber::EnvFilter {
    let level = match verbose {
        // Every crate of the AWS SDK (its targets all start `aws`): its
        // warnings (a config file not found, no region in instance
        // metadata) say less than haul's own message does.
        0 => "warn,aws=error",
        1 => "info,aws=error",
        _ => "debug",
    };
    // An empty HAUL_LOG is no setting, not a filter that shows nothing.
    match std::env::var("HAUL_LOG") {
        Ok(v) if !v.trim().is_empty() => tracing_subscriber::EnvFilter::try_new(v)
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        _ => tracing_subscriber::EnvFilter::new(level),
    }
}

pub fn init(verbose: u8) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter(verbose))
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ))
        .with_writer(std::io::stderr)
        .try_init();
}

/// Colours only on a terminal, and not where `NO_COLOR` is set to
/// anything (no-color.org): a log file or a pipe gets plain text.
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// A daemon's log: peer text escaped, no colours; with `json`, every
/// line one JSON object (`--log-format json`), the daemon's own notices
/// (`endpoint::server::log::say`) and each session's line included.
pub fn init_daemon(verbose: u8, json: bool) {
    endpoint::server::log::set_json(json);
    if json {
        use tracing_subscriber::prelude::*;
        let _ = tracing_subscriber::registry()
            .with(filter(verbose))
            .with(JsonLines)
            .try_init();
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter(verbose))
        .with_ansi(false)
        .with_writer(|| Escaped(std::io::stderr()))
        .try_init();
}

/// Each tracing event as one JSON line (`endpoint::server::log`): its
/// `event` field names it (else `log`), its target and fields beside.
struct JsonLines;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for JsonLines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        use endpoint::server::log::{json_line, Level};
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        let level = match *meta.level() {
            tracing::Level::ERROR => Level::Error,
            tracing::Level::WARN => Level::Warn,
            tracing::Level::INFO => Level::Info,
            _ => Level::Debug,
        };
        let name = match fields.0.remove("event") {
            Some(serde_json::Value::String(s)) => s,
            _ => "log".to_string(),
        };
        fields.0.insert("target".into(), meta.target().into());
        let line = json_line(level, &name, fields.0) + "\n";
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
}

/// An event's fields as JSON values.
#[derive(Default)]
struct Fields(serde_json::Map<String, serde_json::Value>);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
        self.0.insert(f.name().into(), format!("{v:?}").into());
    }
    fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
        self.0.insert(f.name().into(), v.into());
    }
    fn record_u64(&mut self, f: &tracing::field::Field, v: u64) {
        self.0.insert(f.name().into(), v.into());
    }
    fn record_i64(&mut self, f: &tracing::field::Field, v: i64) {
        self.0.insert(f.name().into(), v.into());
    }
    fn record_bool(&mut self, f: &tracing::field::Field, v: bool) {
        self.0.insert(f.name().into(), v.into());
    }
}

/// Writes each line with its control characters escaped, but its end.
struct Escaped<W>(W);

impl<W: Write> Write for Escaped<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let (body, end) = match buf.strip_suffix(b"\n") {
            Some(b) => (b, "\n"),
            None => (buf, ""),
        };
        let line = endpoint::server::printable(&String::from_utf8_lossy(body)) + end;
        self.0.write_all(line.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("".into())));
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None));
    }

    #[test]
    fn a_peers_newline_or_escape_cannot_forge_a_log_line() {
        let mut out = Escaped(Vec::new());
        out.write_all(b"WARN peer: refused \"x\nINFO forged\x1b[2J\"\n")
            .unwrap();
        assert_eq!(
            String::from_utf8(out.0).unwrap(),
            "WARN peer: refused \"x\\nINFO forged\\u{1b}[2J\"\n"
        );
    }
}
