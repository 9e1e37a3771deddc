//! Counted connections: one in its greeting, one session running, each
//! let go when dropped (P-39).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A connection counted in [`Server::greeting`] until dropped.
pub(super) struct Greeting(Arc<AtomicUsize>);

impl Greeting {
    pub(super) fn enter(count: &Arc<AtomicUsize>, max: usize) -> Option<Greeting> {
        if count.fetch_add(1, Ordering::AcqRel) >= max {
            count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Greeting(count.clone()))
    }
}

impl Drop for Greeting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

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
