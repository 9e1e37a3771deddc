//! What the receiver makes durable, and when (issue 24; docs/RELIABILITY.md,
//! "Crash consistency").
//!
//! The sink syncs at three kinds of moment only: a file's data before its
//! rename into place (`fsync`, or one `syncfs` for a batch), the directory
//! after the renames (`fsync` of the directory), and the whole destination
//! when a transfer finishes (`syncfs`). Everything else (blocks written
//! into a partial, journal records, temporaries created) is durable only
//! once the kernel writes it back, or at the next of those moments.
//!
//! A [`SyncObserver`] hears of each sync as it returns. Only tests install
//! one: a fault layer that keeps the image of the destination as a host
//! crash would leave it (what was synced, nothing else), to check that a
//! resumed transfer trusts nothing that was not synced and that nothing
//! unsynced is ever reachable under a final name.

use std::fs::File;
use std::os::fd::OwnedFd;

/// Told of every sync the sink makes, right after it returns.
pub trait SyncObserver: Send + Sync {
    /// `file`'s data and metadata are durable (`fsync`).
    fn file_synced(&self, file: &File);
    /// The entries of the directory `dir` are durable (`fsync`).
    fn dir_synced(&self, dir: &OwnedFd);
    /// Everything on the file system that holds `dir` is durable
    /// (`syncfs`).
    fn all_synced(&self, dir: &OwnedFd);
}
