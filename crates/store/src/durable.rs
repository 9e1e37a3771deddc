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
//! Blocks are handed to the kernel's writeback as soon as they are written
//! ([`start_writeback`]). That makes nothing durable by itself and so
//! changes none of the above; it only lets the disk work while the network
//! does, so that the sync at a file's end waits for the last few blocks
//! instead of all of them. On loopback to ext4 the sync of a 1 GiB file had
//! been 0.5 s of a 1.3 s transfer (docs/BENCHMARKS.md).
//!
//! A [`SyncObserver`] hears of each sync as it returns. Only tests install
//! one: a fault layer that keeps the image of the destination as a host
//! crash would leave it (what was synced, nothing else), to check that a
//! resumed transfer trusts nothing that was not synced and that nothing
//! unsynced is ever reachable under a final name.

use std::fs::File;
use std::os::fd::OwnedFd;

/// Asks the kernel to start writing `len` bytes of `file` at `offset` to
/// the disk now (`sync_file_range` with `SYNC_FILE_RANGE_WRITE`), without
/// waiting for it. It is advice: where it fails or does not exist nothing
/// is lost, the final sync still writes everything.
pub fn start_writeback(file: &File, offset: u64, len: usize) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        // SAFETY: the descriptor is open for as long as `file` is
        // borrowed; the call reads no memory of ours.
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

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
