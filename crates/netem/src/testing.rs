//! Helpers for tests that need the emulator: they need root, so they skip
//! with a printed reason elsewhere, and fail under CI, which runs as root
//! and must run them.

use std::sync::atomic::{AtomicU32, Ordering};

pub use crate::programs::{check_program, program};

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// True when the test may go on: the process is root. Otherwise prints
/// `SKIPPED: ...` and returns false, or panics when `CI=true`, since CI
/// runs as root and must run every test.
pub fn require_root(what: &str) -> bool {
    allowed(is_root(), what, "root")
}

/// Like [`require_root`], for tests that also need `/dev/net/tun`.
pub fn require_emulator(what: &str) -> bool {
    allowed(
        is_root() && std::path::Path::new("/dev/net/tun").exists(),
        what,
        "root and /dev/net/tun",
    )
}

fn allowed(ok: bool, what: &str, needs: &str) -> bool {
    if ok {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} needs {needs}, and CI must run it");
    }
    eprintln!("SKIPPED: {what} needs {needs} (run the suite as root to include it)");
    false
}

/// A namespace-name prefix unique to this process and call.
pub fn unique_name(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "hn{tag}{}x{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
