//! The daemon's memory (P-39): what running sessions reserved of
//! `--memory`, and a session's part, given back when it ends.

/// The daemon's memory (`--memory`): what sessions reserved of it for
/// their buffers, and took for their manifests' bookkeeping.
pub(super) struct MemoryPool {
    pub(super) used: std::sync::Mutex<u64>,
    pub(super) limit: u64,
}

impl MemoryPool {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        self.used.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl session::Pool for MemoryPool {
    fn take(&self, bytes: u64) -> bool {
        let mut used = self.lock();
        if used.saturating_add(bytes) > self.limit {
            return false;
        }
        *used += bytes;
        true
    }

    fn give(&self, bytes: u64) {
        let mut used = self.lock();
        *used = used.saturating_sub(bytes);
    }
}

/// A session's part of the daemon's memory, given back when dropped.
pub(super) struct Reserved<'a> {
    pub(super) pool: &'a MemoryPool,
    pub(super) bytes: u64,
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        session::Pool::give(self.pool, self.bytes);
    }
}
