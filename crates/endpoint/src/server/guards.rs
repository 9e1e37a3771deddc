//! Counted sessions: one running, let go when dropped (P-39). Connections
//! in their greeting are counted in `greetings`.

use std::sync::atomic::{AtomicUsize, Ordering};

/// A session counted in `active` until dropped; `on_drop` runs then.
pub(super) struct SessionGuard<'a>(&'a AtomicUsize, fn());

impl<'a> SessionGuard<'a> {
    pub(super) fn enter(
        active: &'a AtomicUsize,
        max: usize,
        on_drop: fn(),
    ) -> Option<SessionGuard<'a>> {
        let prev = active.fetch_add(1, Ordering::AcqRel);
        if prev >= max {
            active.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(SessionGuard(active, on_drop))
    }
}

impl Drop for SessionGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
        (self.1)();
    }
}
