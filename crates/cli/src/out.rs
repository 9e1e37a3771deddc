//! What a command writes to standard output for a reader that may stop
//! reading early (`haul completions zsh | head`, `haul plan … | less`): a
//! pipe closed behind it ends the command quietly, as it does for other
//! Unix tools, never with a panic.

use std::io::{ErrorKind, Write};

/// Writes `bytes` to standard output and flushes it. A closed pipe is
/// not an error; any other failure is, with its reason.
pub fn write(bytes: &[u8]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}
