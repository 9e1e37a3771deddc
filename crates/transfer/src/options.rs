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
    /// What the sender selected (P-44): `--delete` leaves alone what it
    /// leaves out.
    pub select: filter::Select,
    /// `--itemize-changes` (P-44): where how each file differs goes.
    pub itemize: Itemize,
}

/// Where a receiver says how each file differs from what was in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Itemize {
    #[default]
    Off,
    /// To the sender, in `Changes` (a push that asked).
    Send,
    /// Into this side's progress (the client's pull).
    Keep,
}

/// Which of a manifest's entries `select` sends (P-44): one verdict an
/// entry, in order.
pub fn selected(select: &filter::Select, entries: &[wire::Entry]) -> Vec<bool> {
    if select.is_all() {
        return vec![true; entries.len()];
    }
    select.keep(entries.iter().map(|e| {
        let kind = match e.kind {
            wire::EntryKind::Dir { .. } => filter::Kind::Dir,
            wire::EntryKind::File { size, mtime, .. } => filter::Kind::File { size, mtime },
            wire::EntryKind::Symlink => filter::Kind::Link,
        };
        (&e.path[..], kind)
    }))
}

impl Itemize {
    /// Says how file `id` (at `path`) differed from what was in place
    /// (`wire::CHANGE_*` bits), where this says to.
    pub(crate) fn tell(
        self,
        st: &mut session::ReceiverSession,
        progress: &connect::progress::Progress,
        (id, path): (u32, &[u8]),
        change: u8,
    ) {
        match self {
            Itemize::Off => {}
            Itemize::Send => st.changed(id, change),
            Itemize::Keep => progress
                .changed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((String::from_utf8_lossy(path).into_owned(), change)),
        }
    }
}

/// The selection a request carries, checked as a peer's input.
pub fn selection(s: &wire::Selection) -> Result<filter::Select, TransferError> {
    let rules = filter::Rules::from_lines(&s.rules)
        .map_err(|e| TransferError::new(wire::ErrorCode::BadRequest, e.to_string()))?;
    Ok(filter::Select {
        rules,
        min_size: s.min_size,
        max_size: (s.max_size != u64::MAX).then_some(s.max_size),
        not_before: (s.not_before != i64::MIN).then_some(s.not_before),
    })
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
            || ((s.update || s.ignore_existing) && dest_exists)
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
