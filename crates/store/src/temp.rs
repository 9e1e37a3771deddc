//! A received file's temporary: created fresh, or the resumable partial
//! an earlier transfer left opened again (P-35), with room reserved for
//! the file's size either way (P-17).

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::fs::{AtFlags, OFlags};

use crate::beneath::Beneath;
use crate::error::{StoreError, StoreErrorKind};
use crate::partial;

fn unlink(dir: &OwnedFd, name: &OsStr) {
    let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
}

/// Creates the temporary file `temp` in `dir` (never through a link:
/// it must be new), space reserved for `size` bytes. `final_path` is for
/// messages.
pub(crate) fn create_temp(
    dir: &OwnedFd,
    temp: &OsStr,
    final_path: &Path,
    size: u64,
) -> Result<File, StoreError> {
    let file = Beneath::open_in(
        dir,
        temp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
        0o600,
    )
    .map_err(|e| StoreError::io("create", &final_path.with_file_name(temp), &e))?;
    // Held like a partial, so `--delete` tells it from a leftover (P-41).
    let _ = partial::hold(&file);
    if size > 0 {
        if let Err(e) = reserve(&file, size) {
            unlink(dir, temp);
            return Err(StoreError::io("reserve space for", final_path, &e));
        }
    }
    Ok(file)
}

/// Reserves `size` bytes for `file`; fails only for a full disk or quota
/// (P-17). On tmpfs, space is memory, and reserving it zeroes every page
/// at once (150 ms for 512 MiB here) that a hole would then free again
/// (P-29), so there the free space is checked, and the size set, instead.
fn reserve(file: &File, size: u64) -> std::io::Result<()> {
    // SAFETY: fstatfs and fallocate on a descriptor we own; fstatfs writes
    // only into the zeroed struct we pass.
    unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        let statted = libc::fstatfs(file.as_raw_fd(), &mut fs) == 0;
        // f_type and the magic are i64 under glibc, u64 and i64 under musl.
        #[allow(clippy::unnecessary_cast)]
        let tmpfs = fs.f_type as i64 == libc::TMPFS_MAGIC as i64;
        if statted && tmpfs {
            let free = (fs.f_bavail as u64).saturating_mul(fs.f_bsize as u64);
            // A resumed partial already holds some of its pages.
            let held = file.metadata().map_or(0, |m| m.blocks() * 512);
            if size.saturating_sub(held) > free {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            // The size, as fallocate would have set it: a file whose every
            // block is a hole is never written.
            return file.set_len(size);
        }
        if libc::fallocate(file.as_raw_fd(), 0, 0, size as libc::off_t) != 0 {
            let e = std::io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Opens the resumable temporary file (P-35): what an earlier transfer
/// left there stays, cut or extended to `size` and reserved like a new
/// file. Says whether it held anything.
pub(crate) fn open_resumable(
    dir: &OwnedFd,
    temp: &OsStr,
    final_path: &Path,
    size: u64,
) -> Result<(File, bool), StoreError> {
    let (file, existed) = partial::open_locked(dir, temp).map_err(|e| {
        if e.kind() == std::io::ErrorKind::WouldBlock {
            StoreError::new(
                StoreErrorKind::Other,
                format!(
                    "{} is being received by another transfer right now; try again when it ends",
                    final_path.display()
                ),
            )
        } else {
            StoreError::io("create", &final_path.with_file_name(temp), &e)
        }
    })?;
    let had = existed && file.metadata().is_ok_and(|m| m.len() > 0);
    if had {
        file.set_len(size)
            .map_err(|e| StoreError::io("resize", &final_path.with_file_name(temp), &e))?;
    }
    if size > 0 {
        if let Err(e) = reserve(&file, size) {
            if !had {
                unlink(dir, temp);
            }
            return Err(StoreError::io("reserve space for", final_path, &e));
        }
    }
    Ok((file, had))
}
