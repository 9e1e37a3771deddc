//! What a receiving side does beyond storing what arrives (P-31, P-32):
//! the request's sync bits, a basis, the chunk cache; and how each side of
//! a gated session is prepared before it starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use session::SenderSession;
use store::{BlockSource, ChunkCache, Held, StoreError};

use connect::error::TransferError;

use crate::digest::file_digest;

/// What the receiving side does beyond storing what arrives.
#[derive(Clone, Default)]
pub struct ReceiveOptions {
    /// The request's dedup, update, checksum, delete and dry-run bits
    /// (P-31, P-32); `gated` is decided by [`ReceiveOptions::gated`].
    pub sync: wire::SyncOptions,
    /// The basis of the one file sent, instead of its old version: its
    /// path (for messages) and the file, opened when the request was
    /// accepted (a server opens it beneath its root, P-38).
    pub basis: Option<(PathBuf, Arc<dyn Held>)>,
    /// The receiver's chunk cache (`--cache`): announced to the sender,
    /// and fed every file received.
    pub cache: Option<Arc<ChunkCache>>,
    /// A source named a directory's contents (`dir/`): `--delete` also
    /// cleans the destination itself.
    pub contents: bool,
}

impl ReceiveOptions {
    /// Whether this receiver answers every file before it is sent: only
    /// when there can be something to answer, so a copy into a fresh
    /// destination pays no round trip. `dest_exists`: anything is already
    /// where the files go.
    pub fn gated(&self, dest_exists: bool) -> bool {
        let cached = self.cache.as_ref().is_some_and(|c| !c.is_empty());
        let s = &self.sync;
        (s.dedup && (dest_exists || self.basis.is_some() || cached))
            || (s.update && dest_exists)
            || s.dry_run
    }
}

/// Prepares a sender whose receiver answers every file: under
/// `--checksum`, each file's digest follows its entry, so every source is
/// read once here, before anything is sent (as rsync does).
pub fn gate_sender(
    session: &mut SenderSession,
    sync: &wire::SyncOptions,
    sources: &dyn BlockSource,
    block_size: u32,
) -> Result<(), TransferError> {
    session.gate();
    if sync.dry_run {
        session.dry_run();
        return Ok(());
    }
    if sync.update && sync.checksum {
        for (id, size) in session
            .file_sizes()
            .into_iter()
            .filter(|(_, size)| *size > 0)
        {
            let held = sources.open(id)?;
            let digest = file_digest(&*held, size, block_size).map_err(|e| {
                TransferError::from(StoreError::io("read", Path::new(&sources.name(id)), &e))
            })?;
            session.add_digest(id, digest);
        }
    }
    Ok(())
}

/// Prepares a receiver that answers every file (P-31, P-32): it first
/// announces its cache.
pub fn gate_receiver(session: &mut session::ReceiverSession, opts: &ReceiveOptions) {
    let sync = &opts.sync;
    session.gate();
    if sync.update && sync.checksum && !sync.dry_run {
        session.expect_digests();
    }
    if sync.dry_run {
        session.dry_run();
        return;
    }
    if let (Some(c), true) = (&opts.cache, sync.dedup) {
        session.announce_cache(c.ids());
    }
}
