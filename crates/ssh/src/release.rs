//! This build's release, which both sides' greetings carry: the launcher
//! and the remote side compare it, so it lives below both.

/// This build's release, as both sides' greetings show it.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");
