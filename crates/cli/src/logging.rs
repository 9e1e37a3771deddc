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
        0 => "warn,aws_config=error,aws_smithy_runtime=error,aws_sdk_s3=error",
        1 => "info,aws_config=error,aws_smithy_runtime=error,aws_sdk_s3=error",
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

/// A daemon's log: peer text escaped, no colours.
pub fn init_daemon(verbose: u8) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter(verbose))
        .with_ansi(false)
        .with_writer(|| Escaped(std::io::stderr()))
        .try_init();
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
