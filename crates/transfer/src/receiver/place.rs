//! Placing a block (P-15, P-35): the session decides whether it is wanted,
//! its hash is checked, it is written through the sink and recorded in
//! the journal, and what the session asks next is carried out. This is
//! the receiver's context ([`Receiving`]) that its other stages are
//! handed: the session, the sink, the options and the finalizer's queue.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use session::{block_hash, Action, BlockVerdict, ReceiverSession};
use store::{BlockSink, DirTimes, Verified};
use wire::{BlockHeader, ErrorCode};

use connect::error::TransferError;
use connect::progress::Progress;

use super::bases::Bases;
use crate::options::ReceiveOptions;
use crate::shared::Shared;

/// How long a block may wait for its file's manifest entry.
const ENTRY_WAIT: Duration = Duration::from_secs(60);

/// One file for the answerer (`answer`), in a gated session.
pub(crate) struct Question {
    pub id: u32,
    pub path: Vec<u8>,
    pub size: u64,
    pub mtime: (i64, u32),
}

/// What placing a block came to: its verdict, `None` once the session
/// stopped (someone else's error, or the end), or the error that ends it,
/// for the loop that placed it to report once.
pub(crate) type Placed = Result<Option<BlockVerdict>, TransferError>;

pub(crate) struct Receiving<'a, 'p> {
    pub(crate) block_size: u32,
    pub(crate) sh: &'a Shared<'p, ReceiverSession>,
    pub(crate) sink: &'a dyn BlockSink,
    /// Files verified, for the finalizer. On each of these channels
    /// `None` says the run ended ([`Receiving::end_queues`]): their
    /// threads sleep in `recv` until then, not on a timer.
    pub(crate) fin_tx: mpsc::Sender<Option<Verified>>,
    pub(crate) opts: &'a ReceiveOptions,
    pub(crate) bases: Bases,
    /// Files for the answerer, in a gated session (P-31).
    pub(crate) questions: Option<mpsc::Sender<Option<Question>>>,
    /// Files placed, for the chunk cache, and how many it has yet to take.
    pub(crate) placed: Option<mpsc::Sender<Option<Vec<u8>>>>,
    pub(crate) caching: std::sync::atomic::AtomicU64,
}

impl Receiving<'_, '_> {
    pub(crate) fn drain(st: &mut ReceiverSession) -> Vec<Action> {
        std::iter::from_fn(|| st.poll_action()).collect()
    }

    /// Hands what the sink noted about files (P-41) to the session, which
    /// tells the sender, and to this side's progress, for a client that
    /// receives.
    /// The run ended (done, or stopped): the finalizer, the answerer and
    /// the cache's feeder are told, and return once they took what was
    /// sent before.
    pub(crate) fn end_queues(&self) {
        let _ = self.fin_tx.send(None);
        if let Some(q) = &self.questions {
            let _ = q.send(None);
        }
        if let Some(p) = &self.placed {
            let _ = p.send(None);
        }
    }

    pub(crate) fn forward_notes(&self) {
        let notes = self.sink.take_notes();
        if notes.is_empty() {
            return;
        }
        let mut st = self.sh.lock();
        for (kind, text) in notes {
            st.note(kind, text);
        }
        *self
            .sh
            .progress
            .notes
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = st.notes.clone();
        drop(st);
        self.sh.cv.notify_all();
    }

    pub(crate) fn report(&self, st: &ReceiverSession) {
        let p = self.sh.progress;
        Progress::set(&p.done_bytes, st.bytes_stored);
        if let Some(total) = st.bytes_expected {
            Progress::set(&p.total_bytes, total);
        }
        Progress::set(&p.total_files, st.files_expected());
        Progress::set(&p.done_files, st.summary().files);
    }

    /// Carries out the session's actions; some produce further actions.
    pub(crate) fn execute(&self, mut actions: Vec<Action>) -> Result<(), TransferError> {
        while !actions.is_empty() {
            let mut more = Vec::new();
            for a in actions {
                match a {
                    Action::MakeDir { .. } | Action::MakeSymlink { .. }
                        if self.opts.sync.dry_run => {}
                    Action::MakeDir { path, mode, .. } => self.sink.make_dir(&path, mode)?,
                    Action::MakeSymlink { path, target, .. } => {
                        self.sink.make_symlink(&path, &target)?
                    }
                    Action::OpenFile {
                        id,
                        path,
                        size,
                        mtime,
                        mtime_nsec,
                    } => {
                        if let (Some(q), true) =
                            (&self.questions, size > 0 || self.opts.sync.dry_run)
                        {
                            let _ = q.send(Some(Question {
                                id,
                                path,
                                size,
                                mtime: (mtime, mtime_nsec),
                            }));
                            continue;
                        }
                        let stamp = store::Stamp {
                            block_size: self.block_size,
                            size,
                            mtime,
                            mtime_nsec,
                        };
                        self.sink.open_file(id, &path, &stamp)?;
                        self.forward_notes();
                        let mut st = self.sh.lock();
                        // Not asked about: nothing was in place to compare.
                        let progress = self.sh.progress;
                        self.opts
                            .itemize
                            .tell(&mut st, progress, (id, &path), wire::CHANGE_NEW);
                        st.opened(id)?;
                        more.extend(Self::drain(&mut st));
                    }
                    Action::Finalize {
                        id,
                        mode,
                        mtime,
                        mtime_nsec,
                    } => {
                        let _ = self.fin_tx.send(Some(Verified {
                            id,
                            mode,
                            mtime,
                            mtime_nsec,
                        }));
                    }
                    Action::Finish { dirs } => {
                        let dirs: Vec<DirTimes> = dirs
                            .into_iter()
                            .map(|(rel, mtime, mtime_nsec)| DirTimes {
                                rel,
                                mtime,
                                mtime_nsec,
                            })
                            .collect();
                        if self.opts.sync.delete {
                            super::delete::delete_extraneous(self.sh, self.sink, self.opts, &dirs)?;
                        }
                        if !self.opts.sync.dry_run {
                            self.sink.finish(&dirs)?;
                            // What finishing found (where a split
                            // transfer's shards stand, P-42) reaches the
                            // sender before `Done`.
                            self.forward_notes();
                        }
                        // The chunk cache has every file and its index is
                        // saved before the sender hears `Done` (and a
                        // remote side started over ssh may be ended).
                        if let Some(c) = &self.opts.cache {
                            while self.caching.load(Ordering::SeqCst) > 0 && !self.sh.stopped() {
                                std::thread::sleep(Duration::from_millis(5));
                            }
                            if let Err(e) = c.save() {
                                tracing::warn!("could not save the chunk cache's index: {e}");
                            }
                        }
                        self.sh.lock().complete();
                    }
                }
            }
            actions = more;
        }
        self.sh.cv.notify_all();
        Ok(())
    }

    /// A block whose bytes did not decode (`why`): it fails its hash, and
    /// is asked for again, as any damaged block (P-15).
    pub(crate) fn refuse(&self, h: &BlockHeader, why: &str) -> Placed {
        tracing::warn!(
            "block {} of file {} was refused ({why}); asking for it again",
            h.index,
            h.file
        );
        let mut other = h.hash;
        other[0] ^= 1;
        self.place_with(h, &other, || Ok(()))
    }

    /// Checks a block against its hash and writes it if it is wanted.
    pub(crate) fn place(&self, h: &BlockHeader, data: &[u8]) -> Placed {
        self.place_with(h, &block_hash(data), || {
            self.sink.write_block(h.file, h.offset, data)
        })
    }

    /// Places a block whose bytes are known to hash to `h.hash` (a bundle's
    /// member, P-33), without hashing them again.
    pub(crate) fn place_hashed(&self, h: &BlockHeader, data: &[u8]) -> Placed {
        self.place_with(h, &h.hash, || self.sink.write_block(h.file, h.offset, data))
    }

    /// The blocks a `Zeros` message announced (P-29): each is placed as a
    /// hole, with the hash of zeros. `Ok(false)`: the session stopped.
    pub(crate) fn place_zeros(&self, list: &[(u32, u32)]) -> Result<bool, TransferError> {
        for &(file, index) in list {
            let header = self.sh.lock().zero_header(file, index);
            let h = header.ok_or_else(|| {
                TransferError::new(
                    ErrorCode::Protocol,
                    format!("zeros announced for block {index} of unknown file {file}"),
                )
            })?;
            let placed = self.place_with(&h, &h.hash, || {
                self.sink.write_zero(h.file, h.offset, h.len)
            })?;
            match placed {
                None => return Ok(false),
                Some(BlockVerdict::Write) => {
                    Progress::add(&self.sh.progress.zero_bytes, h.len as u64)
                }
                Some(_) => {}
            }
        }
        Ok(true)
    }

    fn place_with(
        &self,
        h: &BlockHeader,
        hash: &[u8; 32],
        write: impl FnOnce() -> Result<(), store::StoreError>,
    ) -> Placed {
        let hash = *hash;
        let started = Instant::now();
        let verdict = loop {
            let mut st = self.sh.lock();
            match st.block_arrived(h, &hash)? {
                BlockVerdict::NotReady => {
                    if self.sh.stopped() || self.sh.is_done() {
                        return Ok(None);
                    }
                    if started.elapsed() > ENTRY_WAIT {
                        return Err(TransferError::new(
                            ErrorCode::Protocol,
                            format!("block for file {} arrived but its entry never did", h.file),
                        ));
                    }
                    drop(self.sh.wait(st, Some(started + ENTRY_WAIT)));
                }
                v => break v,
            }
        };
        if verdict == BlockVerdict::Rejected {
            tracing::warn!(
                "block {} of file {} failed its hash; asked for it again",
                h.index,
                h.file
            );
            self.sh.cv.notify_all();
        }
        if verdict != BlockVerdict::Write {
            return Ok(Some(verdict));
        }
        write()?;
        self.sink.record(h.file, h.index, &hash);
        let actions = {
            let mut st = self.sh.lock();
            st.block_written(h.file, h.index)?;
            self.report(&st);
            Self::drain(&mut st)
        };
        self.execute(actions)?;
        Ok(Some(verdict))
    }
}
