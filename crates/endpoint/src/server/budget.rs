//! A one-time grant's byte budget (P-45 G-4), as a layer over the sink
//! of a push through it: each file opened is charged its size, and a
//! file past the budget is refused before a byte of it is written.

use std::sync::atomic::{AtomicU64, Ordering};

use store::{BlockSink, Capabilities, DirTimes, Stamp, StoreError, StoreErrorKind, Verified};

pub(super) struct Budgeted {
    inner: Box<dyn BlockSink>,
    budget: u64,
    used: AtomicU64,
}

impl Budgeted {
    pub(super) fn new(inner: Box<dyn BlockSink>, budget: u64) -> Budgeted {
        Budgeted {
            inner,
            budget,
            used: AtomicU64::new(0),
        }
    }
}

impl BlockSink for Budgeted {
    fn make_dir(&self, rel: &[u8], mode: u32) -> Result<(), StoreError> {
        self.inner.make_dir(rel, mode)
    }

    fn open_file(&self, id: u32, rel: &[u8], stamp: &Stamp) -> Result<(), StoreError> {
        let before = self.used.fetch_add(stamp.size, Ordering::Relaxed);
        if before.saturating_add(stamp.size) > self.budget {
            return Err(StoreError::new(
                StoreErrorKind::Permission,
                format!(
                    "the one-time grant allows {} bytes, and this push brings more; grant a larger budget",
                    self.budget
                ),
            ));
        }
        self.inner.open_file(id, rel, stamp)
    }

    fn write_block(&self, id: u32, offset: u64, data: &[u8]) -> Result<(), StoreError> {
        self.inner.write_block(id, offset, data)
    }

    fn finalize(&self, files: &[Verified]) -> Result<(), StoreError> {
        self.inner.finalize(files)
    }

    fn finish(&self, dirs: &[DirTimes]) -> Result<(), StoreError> {
        self.inner.finish(dirs)
    }

    fn abort(&self) {
        self.inner.abort()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn inner(&self) -> Option<&dyn BlockSink> {
        Some(&*self.inner)
    }
}
