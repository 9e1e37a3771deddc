//! Helpers for tests that need the emulator: they need root, so they skip
//! with a printed reason elsewhere, and fail under CI, which runs as root
//! and must run them.

use std::sync::atomic::{AtomicU32, Ordering};

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// True when the test may go on. Prints `SKIPPED: ...` and returns false
/// when not root; panics instead when `CI=true`.
pub fn require_root(what: &str) -> bool {
    if is_root() && std::path::Path::new("/dev/net/tun").exists() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} needs root and /dev/net/tun, and CI must run it");
    }
    eprintln!("SKIPPED: {what} needs root and /dev/net/tun (run the suite as root to include it)");
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
