//! One object being written: a multipart upload whose parts are filled by
//! the blocks that arrive, in any order, and sent as each part is whole,
//! several at once, each with its CRC32C so that the store itself refuses
//! damage. Nothing is visible under the key until [`Upload::complete`]:
//! the multipart upload completes last, after the file is verified. An
//! object of one part is sent with one PUT at that moment.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

use base64::Engine;
use bytes::Bytes;
use store::{StoreError, StoreErrorKind};

use crate::api::{Limits, Part};
use crate::resume::{self, Header, Journal, PartLine};
use crate::store::Store;
use crate::url::ObjectUrl;

/// The smallest part haul uses unless told: fewer requests, and parts big
/// enough to keep a store's connection busy.
pub const PART: u64 = 8 << 20;

/// The part size for an object of `size` bytes written in blocks of
/// `block`: at least `least` ([`PART`] unless told), few enough parts for
/// the store's limit (S3's is 10,000), and a whole number of blocks, so
/// that a block never spans two parts.
pub fn part_size(size: u64, block: u32, least: u64, limits: &Limits) -> Result<u64, String> {
    if size > limits.max_object {
        return Err(format!(
            "an object of this store holds at most {} bytes; this file has {size}",
            limits.max_object
        ));
    }
    let block = u64::from(block.max(1));
    let p = size
        .div_ceil(limits.max_parts)
        .max(least.max(limits.min_part))
        .div_ceil(block)
        * block;
    if p > limits.max_part {
        return Err(format!(
            "blocks of {block} bytes make parts over this store's {} bytes; use a smaller --block-size",
            limits.max_part
        ));
    }
    Ok(p)
}

#[derive(Default)]
struct State {
    /// The multipart upload, once its first part is whole.
    id: Option<String>,
    /// Parts being filled: their bytes, and how many have arrived.
    filling: HashMap<u32, (Vec<u8>, u64)>,
    /// Parts the store has, by part number (from 1).
    sent: BTreeMap<u32, Part>,
    /// Part uploads in flight.
    running: usize,
    failed: Option<StoreError>,
    /// Verified blocks' hashes, by part, until the part is journaled.
    hashes: HashMap<u32, Vec<Option<[u8; 32]>>>,
    /// Parts noted in the journal.
    journaled: HashSet<u32>,
    /// Parts an interrupted upload left, taken over: nothing more may be
    /// written into them.
    resumed: HashSet<u32>,
    /// Their blocks, for the sender to check: `(index, hash)`.
    held: Vec<(u32, [u8; 32])>,
    journal: Option<Arc<Journal>>,
    /// Never to be resumed: the source changed under it.
    spoiled: bool,
}

/// The lines a resume goes by: each part's answered line where there is
/// one, else the line written as it went out.
fn taken_over(lines: Vec<PartLine>) -> Vec<PartLine> {
    let mut by_number: BTreeMap<u32, PartLine> = BTreeMap::new();
    for l in lines {
        let keep_old = by_number.get(&l.number).is_some_and(|o| !o.sending);
        if !keep_old {
            by_number.insert(l.number, l);
        }
    }
    by_number.into_values().collect()
}

/// One object being written.
pub struct Upload {
    store: Arc<Store>,
    pub url: ObjectUrl,
    size: u64,
    part: u64,
    block: u32,
    mtime: (i64, u32),
    metadata: Vec<(String, String)>,
    /// Where its journal goes, if it may resume.
    journal_path: Option<PathBuf>,
    state: Mutex<State>,
    changed: Condvar,
}

impl Upload {
    /// A new upload of `size` bytes in blocks of `block`, from a source
    /// last modified at `mtime`.
    pub fn new(
        store: Arc<Store>,
        url: ObjectUrl,
        (size, block, mtime): (u64, u32, (i64, u32)),
        metadata: Vec<(String, String)>,
    ) -> Result<Arc<Upload>, StoreError> {
        let part = part_size(size, block, store.part.unwrap_or(PART), &store.limits())
            .map_err(|why| StoreError::new(StoreErrorKind::BadRequest, format!("{url}: {why}")))?;
        let journal_path = store
            .journals
            .as_ref()
            .map(|d| resume::path_for(d, &store.endpoint, &url));
        Ok(Arc::new(Upload {
            store,
            url,
            size,
            part,
            block,
            mtime,
            metadata,
            journal_path,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        }))
    }

    /// Takes over what an interrupted upload of this same source version
    /// left: the parts its journal names that the store still has
    /// (ListParts). `None` when there is nothing to resume; an upload
    /// left for another version is aborted.
    pub fn resume(
        store: Arc<Store>,
        url: ObjectUrl,
        (size, block, mtime): (u64, u32, (i64, u32)),
        metadata: Vec<(String, String)>,
    ) -> Result<Option<Arc<Upload>>, StoreError> {
        let Some(path) = store
            .journals
            .as_ref()
            .map(|d| resume::path_for(d, &store.endpoint, &url))
        else {
            return Ok(None);
        };
        let Some((h, lines)) = resume::read(&path) else {
            return Ok(None);
        };
        let same = h.url == url.to_string()
            && (h.size, h.block, h.mtime, h.mtime_nsec) == (size, block, mtime.0, mtime.1);
        let listed = if same && !lines.is_empty() {
            list_parts(&store, &url, &h.upload_id)?
        } else {
            HashMap::new()
        };
        let up = Arc::new(Upload {
            store: store.clone(),
            url: url.clone(),
            size,
            part: h.part,
            block,
            mtime,
            metadata,
            journal_path: Some(path.clone()),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let mut st = up.lock();
        st.id = Some(h.upload_id.clone());
        for mut l in taken_over(lines) {
            let index = l.number - 1;
            let whole = up.part_len(u64::from(index));
            let Some((etag, len)) = listed.get(&l.number) else {
                continue;
            };
            // A part sent and journaled: the store's tag is the one it
            // gave. A part journaled as it went out: the store lists only
            // parts it took whole, so one of its length is those bytes.
            if *len != whole || (!l.sending && *etag != l.etag) {
                continue;
            }
            l.etag = etag.clone();
            let first = (u64::from(index) * up.part / u64::from(block)) as u32;
            st.held.extend(
                l.hashes
                    .iter()
                    .enumerate()
                    .map(|(i, h)| (first + i as u32, *h)),
            );
            st.sent.insert(
                l.number,
                Part {
                    number: l.number,
                    tag: l.etag,
                    crc: l.crc,
                },
            );
            st.resumed.insert(index);
            st.journaled.insert(index);
        }
        if st.resumed.is_empty() {
            drop(st);
            // Nothing of it is usable: give the store its parts back.
            up.abort_now();
            return Ok(None);
        }
        st.journal = Journal::reopen(path).ok().map(Arc::new);
        tracing::info!(
            "resuming the upload of {url}: {} of {} parts are in the store",
            st.resumed.len(),
            up.parts()
        );
        drop(st);
        Ok(Some(up))
    }

    /// The blocks a resumed upload holds, verified when they were sent:
    /// `(index, hash)`.
    pub fn held(&self) -> Vec<(u32, [u8; 32])> {
        self.lock().held.clone()
    }

    /// Block `index` was written and verified: its hash goes into the
    /// journal with its part, once the store has that part.
    pub fn record(&self, index: u32, hash: &[u8; 32]) {
        let at = u64::from(index) * u64::from(self.block);
        if at >= self.size.max(1) || self.parts() == 1 || self.journal_path.is_none() {
            return;
        }
        let part = (at / self.part) as u32;
        let within = ((at - u64::from(part) * self.part) / u64::from(self.block)) as usize;
        let blocks = self
            .part_len(u64::from(part))
            .div_ceil(u64::from(self.block)) as usize;
        let mut st = self.lock();
        if st.journal.is_none() && st.id.is_some() {
            return;
        }
        let slots = st.hashes.entry(part).or_insert_with(|| vec![None; blocks]);
        if let Some(s) = slots.get_mut(within) {
            *s = Some(*hash);
        }
        self.note(&mut st, part);
    }

    /// Journals part `index` once the store has it and all its blocks'
    /// hashes are known.
    fn note(&self, st: &mut State, index: u32) {
        let Some(journal) = st.journal.clone() else {
            return;
        };
        if st.journaled.contains(&index) {
            return;
        }
        let number = index + 1;
        let Some(sent) = st.sent.get(&number) else {
            return;
        };
        let Some(hashes) = st.hashes.get(&index) else {
            return;
        };
        if hashes.iter().any(Option::is_none) {
            return;
        }
        journal.append(&PartLine {
            sending: false,
            number,
            etag: sent.tag.clone(),
            crc: sent.crc.clone(),
            hashes: hashes.iter().flatten().copied().collect(),
        });
        st.hashes.remove(&index);
        st.journaled.insert(index);
    }

    fn parts(&self) -> u64 {
        self.size.div_ceil(self.part).max(1)
    }

    fn part_len(&self, i: u64) -> u64 {
        (self.size - i * self.part).min(self.part)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes `data` (or `len` zeros) at `offset`. A part made whole is sent
    /// at once; this waits while the store has as many requests as it
    /// may, which holds the link back to the store's pace.
    pub fn write(
        self: &Arc<Self>,
        offset: u64,
        data: Option<&[u8]>,
        len: u64,
    ) -> Result<(), StoreError> {
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!(
                    "{}: bytes {offset}..+{len} lie past its {} bytes",
                    self.url, self.size
                ),
            ));
        }
        let mut done = 0u64;
        while done < len {
            let at = offset + done;
            let i = at / self.part;
            let within = (at - i * self.part) as usize;
            let part_len = self.part_len(i);
            let n = (len - done).min(part_len - within as u64);
            let whole = {
                let mut st = self.lock();
                if let Some(e) = &st.failed {
                    return Err(e.clone());
                }
                if st.resumed.contains(&(i as u32)) {
                    // The sender found a held block changed: the parts
                    // in the store are of another version after all.
                    st.spoiled = true;
                    let e = StoreError::new(
                        StoreErrorKind::Other,
                        format!("{} {}", self.url, store::source::CHANGED),
                    );
                    st.failed = Some(e.clone());
                    return Err(e);
                }
                let (buf, filled) = st
                    .filling
                    .entry(i as u32)
                    .or_insert_with(|| (self.store.part_buffer(part_len as usize), 0));
                if let Some(d) = data {
                    buf[within..within + n as usize]
                        .copy_from_slice(&d[done as usize..(done + n) as usize]);
                }
                *filled += n;
                if *filled >= part_len && self.parts() > 1 {
                    st.filling.remove(&(i as u32)).map(|(b, _)| b)
                } else {
                    None
                }
            };
            if let Some(buf) = whole {
                self.send_part(i as u32, buf)?;
            }
            done += n;
        }
        Ok(())
    }

    /// The multipart upload's id, started by the first part made whole.
    fn upload_id(&self) -> Result<String, StoreError> {
        if let Some(id) = &self.lock().id {
            return Ok(id.clone());
        }
        // Started under no lock but the state's: two parts made whole at
        // once must share one upload.
        let mut st = self.lock();
        if let Some(id) = &st.id {
            return Ok(id.clone());
        }
        let id = self
            .store
            .block_on(self.store.api.begin(&self.url, &self.metadata))?;
        if id.is_empty() {
            return Err(StoreError::new(
                StoreErrorKind::Other,
                format!(
                    "{} at {} started an upload without an id",
                    self.url, self.store.endpoint
                ),
            ));
        }
        st.id = Some(id.clone());
        if let Some(path) = &self.journal_path {
            let header = Header {
                upload_id: id.clone(),
                url: self.url.to_string(),
                size: self.size,
                mtime: self.mtime.0,
                mtime_nsec: self.mtime.1,
                block: self.block,
                part: self.part,
            };
            match Journal::create(path.clone(), &header) {
                Ok(j) => st.journal = Some(Arc::new(j)),
                Err(e) => tracing::warn!(
                    "cannot write {}: {e}; the upload of {} will not resume",
                    path.display(),
                    self.url
                ),
            }
        }
        Ok(id)
    }

    fn send_part(self: &Arc<Self>, index: u32, buf: Vec<u8>) -> Result<(), StoreError> {
        let id = self.upload_id()?;
        self.journal_sending(index, &buf);
        // Its MiB of the bytes in flight (crate::store::UPLOAD_MIB).
        let mib = (buf.len().div_ceil(1 << 20) as u32).clamp(1, crate::store::UPLOAD_MIB);
        let permit = self
            .store
            .block_on(self.store.upload_mib.clone().acquire_many_owned(mib))
            .map_err(|_| {
                StoreError::new(StoreErrorKind::Other, "the object-store client stopped")
            })?;
        self.lock().running += 1;
        let me = self.clone();
        let number = index + 1;
        self.store.spawn(async move {
            let body = Bytes::from(buf);
            let r = me
                .store
                .api
                .put_part(&me.url, &id, number, body.clone())
                .await;
            drop(permit);
            // The store's client is done with it: the buffer fills the
            // next part.
            if let Ok(b) = body.try_into_mut() {
                me.store.give_back(b.into());
            }
            let mut st = me.lock();
            st.running -= 1;
            match r {
                Ok(part) => {
                    st.sent.insert(number, part);
                    me.note(&mut st, index);
                }
                Err(e) => {
                    st.failed.get_or_insert(e);
                }
            }
            drop(st);
            me.changed.notify_all();
        });
        Ok(())
    }

    /// Journals part `index` as it goes out (a `sending` line): its
    /// CRC32C and its blocks' hashes, those not verified yet hashed from
    /// `buf`. Should the client stop before the store answers, a part the
    /// store lists whole under this number is these very bytes, and a
    /// resume keeps it as it keeps a part journaled after the answer.
    fn journal_sending(&self, index: u32, buf: &[u8]) {
        let (journal, known) = {
            let st = self.lock();
            let Some(j) = st.journal.clone() else {
                return;
            };
            (j, st.hashes.get(&index).cloned().unwrap_or_default())
        };
        let block = self.block as usize;
        let hashes = buf
            .chunks(block.max(1))
            .enumerate()
            .map(|(i, b)| {
                known
                    .get(i)
                    .copied()
                    .flatten()
                    .unwrap_or_else(|| session::block_hash(b))
            })
            .collect();
        let crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, buf) as u32;
        journal.append(&PartLine {
            sending: true,
            number: index + 1,
            etag: String::new(),
            crc: Some(base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())),
            hashes,
        });
    }

    /// Waits for the parts in flight; says what failed, if anything.
    pub fn settle(&self) -> Result<(), StoreError> {
        let mut st = self.lock();
        while st.running > 0 {
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        match &st.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Makes the object appear under its key: every part is sent (after
    /// [`Upload::settle`]), and the file is verified. One PUT for an
    /// object of one part.
    pub async fn complete(self: Arc<Self>) -> Result<(), StoreError> {
        let (id, single, parts) = {
            let mut st = self.lock();
            let single = st.id.is_none() && self.parts() == 1;
            let body = if single {
                Some(st.filling.remove(&0).map(|(b, _)| b).unwrap_or_default())
            } else {
                None
            };
            (
                st.id.clone(),
                body,
                st.sent.values().cloned().collect::<Vec<_>>(),
            )
        };
        if let Some(body) = single {
            if body.len() as u64 != self.size {
                return Err(self.incomplete(0));
            }
            let _slot = self.store.slots.acquire().await;
            self.store
                .api
                .put(&self.url, Bytes::from(body), &self.metadata)
                .await?;
            return Ok(());
        }
        let id = id.ok_or_else(|| self.incomplete(0))?;
        if parts.len() as u64 != self.parts() {
            return Err(self.incomplete(parts.len()));
        }
        self.store
            .api
            .complete(&self.url, &id, parts, &self.metadata)
            .await?;
        let mut st = self.lock();
        st.id = None;
        if let Some(j) = st.journal.take() {
            j.remove();
        }
        Ok(())
    }

    fn incomplete(&self, sent: usize) -> StoreError {
        StoreError::new(
            StoreErrorKind::Other,
            format!(
                "{}: asked to complete with {sent} of {} parts sent; nothing was placed",
                self.url,
                self.parts()
            ),
        )
    }

    /// The transfer failed: an upload with parts in the store and a
    /// journal is kept to resume; any other is aborted, so that the store
    /// drops its parts. Nothing appears under the key either way.
    pub fn abort(&self) {
        let keep = {
            let st = self.lock();
            !st.spoiled && st.journal.is_some() && !st.journaled.is_empty()
        };
        if keep {
            tracing::info!("kept the upload of {} to resume from", self.url);
            return;
        }
        self.abort_now();
    }

    /// Ends the multipart upload now, and its journal.
    fn abort_now(&self) {
        let (id, journal) = {
            let mut st = self.lock();
            (st.id.take(), st.journal.take())
        };
        match (&journal, &self.journal_path) {
            (Some(j), _) => j.remove(),
            (None, Some(p)) => {
                let _ = std::fs::remove_file(p);
            }
            _ => {}
        }
        let Some(id) = id else { return };
        if let Err(e) = self.store.block_on(self.store.api.abort(&self.url, &id)) {
            tracing::warn!("could not abort the upload of {}: {e}", self.url);
        }
    }
}

/// The parts the store has of upload `id`: number to (tag, length);
/// none when the upload is gone (aborted, or completed meanwhile).
fn list_parts(
    store: &Store,
    url: &ObjectUrl,
    id: &str,
) -> Result<HashMap<u32, (String, u64)>, StoreError> {
    Ok(store
        .block_on(store.api.list_parts(url, id))?
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_respect_the_stores_limits() {
        let mib = 1u64 << 20;
        let l = &crate::api::S3_LIMITS;
        let (max_object, max_parts) = (l.max_object, l.max_parts);
        let ps = |size, block, least| part_size(size, block, least, l);
        assert_eq!(ps(0, 1 << 20, PART), Ok(PART));
        assert_eq!(ps(100 * mib, 1 << 20, PART), Ok(PART));
        // 1 TiB: over 10,000 parts of 8 MiB, so bigger parts.
        let p = ps(1 << 40, 1 << 20, PART).unwrap();
        assert!((1u64 << 40).div_ceil(p) <= max_parts && p.is_multiple_of(mib));
        // 5 TiB fits; more does not.
        let p = ps(max_object, 4 << 20, PART).unwrap();
        assert!(max_object.div_ceil(p) <= max_parts && (l.min_part..=l.max_part).contains(&p));
        assert!(ps(max_object + 1, 1 << 20, PART).is_err());
        assert_eq!(ps(100 * mib, 1 << 20, l.min_part), Ok(5 * mib));
        // Odd block sizes still make whole blocks per part.
        assert!(ps(mib, 3 << 20, PART).unwrap().is_multiple_of(3 << 20));
    }
}

#[cfg(test)]
mod resume_tests {
    use super::*;

    fn line(number: u32, sending: bool) -> PartLine {
        PartLine {
            sending,
            number,
            etag: if sending {
                String::new()
            } else {
                format!("e{number}")
            },
            crc: None,
            hashes: vec![[number as u8; 32]],
        }
    }

    /// A part's answered line wins over the line written as it went out,
    /// whichever came first; a part only sent is still taken over.
    #[test]
    fn answered_lines_win_and_sent_ones_count() {
        let got = taken_over(vec![
            line(1, true),
            line(1, false),
            line(2, true),
            line(3, false),
            line(3, true),
        ]);
        let shown: Vec<(u32, bool)> = got.iter().map(|l| (l.number, l.sending)).collect();
        assert_eq!(shown, [(1, false), (2, true), (3, false)]);
    }
}
