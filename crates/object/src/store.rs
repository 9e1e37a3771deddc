//! One object store as haul's threads use it: the store's calls
//! ([`Objects`]), the small tokio runtime they run on, and how many may be
//! in flight at once. The rest of haul is threads; they wait on this
//! runtime with [`Store::block_on`].

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use store::{StoreError, StoreErrorKind};

use crate::api::{Limits, Objects};
use crate::url::ObjectUrl;

/// Requests each transfer keeps in flight to the store: parts uploading,
/// ranges downloading. Enough that a store answering 100 MB/s per
/// connection keeps up with a 10 Gbit/s path.
pub const PARALLEL: usize = 16;

/// Bytes of parts an upload keeps in flight at once, in MiB: eight parts
/// of the default 8 MiB. The memory a client holds for uploads (issue
/// 41: 435 MB where rclone held 94 for a 1 GiB upload); at 100 ms to the
/// store it still moves 5 Gbit/s.
pub const UPLOAD_MIB: u32 = 32;

/// What every store takes from the command line besides its credentials.
#[derive(Debug, Clone, Default)]
pub struct Tuning {
    /// The smallest part of an upload (default [`crate::upload::PART`]).
    pub part_size: Option<u64>,
    /// Where the journals of uploads that may resume are kept
    /// (`$HAUL_HOME/s3-uploads`); none: an interrupted upload is aborted.
    pub journals: Option<PathBuf>,
}

/// A store's calls and the runtime they run on.
pub struct Store {
    rt: tokio::runtime::Runtime,
    pub api: Arc<dyn Objects>,
    /// Where the store is, for messages.
    pub endpoint: String,
    /// At most this many part uploads or range downloads at once.
    pub(crate) slots: Arc<tokio::sync::Semaphore>,
    /// MiB of parts in flight, at most [`UPLOAD_MIB`].
    pub(crate) upload_mib: Arc<tokio::sync::Semaphore>,
    /// Part buffers an upload gave back, for the next part: filled again
    /// instead of allocated (and paged in) anew.
    pub(crate) spare: std::sync::Mutex<Vec<Vec<u8>>>,
    pub(crate) part: Option<u64>,
    pub(crate) journals: Option<PathBuf>,
}

/// The runtime a store's requests run on: two threads, for haul's
/// threads to wait on.
pub fn runtime(name: &str) -> Result<tokio::runtime::Runtime, StoreError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(|e| {
            StoreError::new(
                StoreErrorKind::Other,
                format!("cannot start the object-store client: {e}"),
            )
        })
}

impl Store {
    /// A store reached by `api`, whose futures run on `rt` (the runtime
    /// the store's client was built on).
    pub fn new(rt: tokio::runtime::Runtime, api: Arc<dyn Objects>, tuning: &Tuning) -> Arc<Store> {
        Arc::new(Store {
            rt,
            endpoint: api.endpoint().to_string(),
            api,
            slots: Arc::new(tokio::sync::Semaphore::new(PARALLEL)),
            upload_mib: Arc::new(tokio::sync::Semaphore::new(UPLOAD_MIB as usize)),
            spare: std::sync::Mutex::new(Vec::new()),
            part: tuning.part_size,
            journals: tuning.journals.clone(),
        })
    }

    /// A zeroed buffer of `len` bytes for a part: a spare one if any.
    pub(crate) fn part_buffer(&self, len: usize) -> Vec<u8> {
        let spare = self.spare.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match spare {
            Some(mut b) => {
                b.clear();
                b.resize(len, 0);
                b
            }
            None => vec![0u8; len],
        }
    }

    /// Keeps `buf` for a later part; a few at most, as many as may be in
    /// flight.
    pub(crate) fn give_back(&self, buf: Vec<u8>) {
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        if spare.len() < 2 {
            spare.push(buf);
        }
    }

    pub fn limits(&self) -> Limits {
        self.api.limits()
    }

    /// Runs `f` on the store's runtime and waits for it; for haul's
    /// threads, never for a task of the runtime itself.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.handle().block_on(f)
    }

    pub(crate) fn spawn<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.rt.spawn(f);
    }

    /// Asks the store for one key under `url`, so that a wrong key, a
    /// missing bucket or an unreachable store is told before a transfer
    /// starts. Says whether anything is there.
    pub fn check(&self, url: &ObjectUrl) -> Result<bool, StoreError> {
        self.block_on(self.api.check(url))
    }
}
