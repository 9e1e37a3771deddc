//! The answerer of a gated session (P-31, P-32, P-35): takes each file in
//! manifest order, decides whether it is already in place (`--update`,
//! `--checksum`) or only listed (`--dry-run`), and otherwise opens it and
//! announces the chunks of its basis (the destination's old version, a
//! partial, or `--basis`), or the blocks a partial already holds.

use std::sync::mpsc;
use std::time::Instant;

use store::{Held, HeldReader, StoreError};
use wire::ChunkId;

use connect::error::TransferError;
use connect::progress::Progress;

use super::place::{Question, Receiving};
use crate::digest::file_digest;

/// The chunks of a basis, as the wire names them.
fn chunk_ids(held: &dyn Held) -> std::io::Result<Vec<ChunkId>> {
    let from_start = HeldReader::new(held)?;
    let chunks = chunk::chunks_of(
        std::io::BufReader::with_capacity(1 << 20, from_start),
        |_, _| {},
    )?;
    Ok(chunks
        .iter()
        .map(|c| (chunk::short(&c.hash), c.len))
        .collect())
}

impl Receiving<'_, '_> {
    /// Answers the files of a gated session in manifest order.
    pub(crate) fn answerer(&self, questions: mpsc::Receiver<Option<Question>>) {
        while let Ok(Some(q)) = questions.recv() {
            if self.sh.is_done() || self.sh.stopped() {
                return;
            }
            if let Err(e) = self.answer(q) {
                self.sh.fail(e, true);
                return;
            }
        }
    }

    fn answer(&self, q: Question) -> Result<(), TransferError> {
        // What this sink can do: a store that keeps no partials or cannot
        // read what is in place is not asked.
        let can = self.sink.capabilities();
        // The file in place, opened without following a link (P-38): a
        // link there is neither read nor told about.
        let placed = match can.in_place {
            true => self.sink.open_placed(&q.path)?,
            false => None,
        };
        let existing = placed.and_then(|f| {
            let (size, secs, nsec) = f.stat().ok()?;
            Some((size, (secs, nsec), f))
        });
        let sync = &self.opts.sync;
        if (sync.update || sync.ignore_existing) && q.size > 0 {
            if let Some((size, mtime, held)) = &existing {
                let keep = sync.ignore_existing
                    || (*size == q.size && self.up_to_date(q.id, &**held, *mtime, &q)?);
                if keep {
                    let mut st = self.sh.lock();
                    st.skip(q.id)?;
                    Progress::add(&self.sh.progress.skipped_files, 1);
                    Progress::add(&self.sh.progress.skipped_bytes, q.size);
                    let actions = Self::drain(&mut st);
                    drop(st);
                    return self.execute(actions);
                }
            }
        }
        let change = match &existing {
            None => wire::CHANGE_NEW,
            Some((size, mtime, _)) => {
                let size = if *size != q.size {
                    wire::CHANGE_SIZE
                } else {
                    0
                };
                // To the second, as rsync's letters say it.
                let time = if mtime.0 != q.mtime.0 {
                    wire::CHANGE_TIME
                } else {
                    0
                };
                let sum = if self.opts.sync.checksum {
                    wire::CHANGE_SUM
                } else {
                    0
                };
                size | time | sum
            }
        };
        if self.opts.sync.dry_run {
            let mut st = self.sh.lock();
            self.itemize(&mut st, &q, change);
            st.ready(q.id, Vec::new());
            self.sh
                .progress
                .listed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(String::from_utf8_lossy(&q.path).into_owned());
            Progress::add(&self.sh.progress.listed_bytes, q.size);
            let actions = Self::drain(&mut st);
            drop(st);
            self.sh.cv.notify_all();
            return self.execute(actions);
        }
        // What an interrupted transfer of this file left (P-35) is the
        // likelier match: it is this source, where the file in place may
        // be an older version. The file is written into it in place.
        let partial = match (&self.opts.basis, self.opts.sync.dedup && can.resume) {
            (None, true) => self.sink.partial_of(&q.path)?,
            _ => None,
        };
        // The basis is open before the new file replaces it; the open file
        // stays readable whatever happens to its name.
        let shown = self.sink.final_path(&q.path)?.unwrap_or_default();
        let resuming = partial.is_some();
        let basis = match (&self.opts.basis, partial) {
            (Some((p, f)), _) => Some((p.clone(), f.clone())),
            (None, Some(f)) => Some((store::partial::resumable_path(&shown), f)),
            (None, None) if self.opts.sync.dedup => existing.map(|(.., f)| (shown, f)),
            (None, None) => None,
        };
        let stamp = store::Stamp {
            block_size: self.block_size,
            size: q.size,
            mtime: q.mtime.0,
            mtime_nsec: q.mtime.1,
        };
        self.sink.open_file(q.id, &q.path, &stamp)?;
        // A partial whose journal is of this very source resumes block by
        // block; otherwise it is a basis like any other (P-35).
        let held = match resuming {
            true => self.sink.held_blocks(q.id).unwrap_or_else(|e| {
                tracing::warn!("resuming by content instead: {e}");
                Vec::new()
            }),
            false => Vec::new(),
        };
        self.forward_notes();
        let basis = basis.filter(|_| held.is_empty());
        if !held.is_empty() {
            tracing::debug!("resuming file {} from {} held blocks", q.id, held.len());
        }
        let ids = match basis {
            Some((p, f)) => {
                let t0 = Instant::now();
                let ids = chunk_ids(&*f)
                    .map_err(|e| TransferError::from(StoreError::io("read the basis", &p, &e)))?;
                tracing::debug!(
                    "basis {} cut into {} chunks in {:?}",
                    p.display(),
                    ids.len(),
                    t0.elapsed()
                );
                self.bases.insert(q.id, f);
                ids
            }
            None => Vec::new(),
        };
        let actions = {
            let mut st = self.sh.lock();
            self.itemize(&mut st, &q, change);
            st.opened(q.id)?;
            st.hold(q.id, held);
            st.ready(q.id, ids);
            Self::drain(&mut st)
        };
        self.sh.cv.notify_all();
        self.execute(actions)
    }

    /// `--itemize-changes` (P-44): how the file differs, to where the
    /// options say.
    fn itemize(&self, st: &mut session::ReceiverSession, q: &Question, change: u8) {
        let progress = self.sh.progress;
        self.opts
            .itemize
            .tell(st, progress, (q.id, &q.path), change);
    }

    /// `--update`: the same size and modification time (to the second,
    /// and the nanosecond where both sides keep them), or, with
    /// `--checksum`, the same content.
    fn up_to_date(
        &self,
        id: u32,
        held: &dyn Held,
        (secs, nsec): (i64, u32),
        q: &Question,
    ) -> Result<bool, TransferError> {
        if self.opts.sync.checksum {
            let Some(want) = self.sh.lock().source_digest(id) else {
                return Ok(false);
            };
            let have = file_digest(held, q.size, self.block_size).map_err(|e| {
                let p = self
                    .sink
                    .final_path(&q.path)
                    .ok()
                    .flatten()
                    .unwrap_or_default();
                TransferError::from(StoreError::io("read", &p, &e))
            })?;
            return Ok(have == want);
        }
        Ok(secs == q.mtime.0 && (nsec == q.mtime.1 || nsec == 0 || q.mtime.1 == 0))
    }
}
