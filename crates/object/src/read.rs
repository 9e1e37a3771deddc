//! One object read at offsets: ranged GETs, several ahead of the reader
//! and in parallel, so that a reader going through the object in order
//! (the sender's blocks, a chunker) never waits on one request at a time.
//! Each GET names the ETag the object was listed with: an object
//! replaced while it is read fails as a changed source does (P-14).

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use bytes::Bytes;
use store::{Held, StoreError, StoreErrorKind};

use crate::api::ObjectInfo;
use crate::store::Store;

/// Bytes fetched by one GET of a reader going in order.
pub const RANGE: u64 = 8 << 20;
/// GETs kept in flight ahead of the reader.
const AHEAD: u64 = 4;

type Fetched = Option<Result<Bytes, StoreError>>;

struct Slot {
    data: Mutex<Fetched>,
    ready: Condvar,
    /// Bytes of it handed out; at its length it is let go.
    used: Mutex<u64>,
}

/// An object read at offsets, with GETs ahead of the reader.
pub struct ObjectReader {
    store: Arc<Store>,
    pub info: ObjectInfo,
    slots: Mutex<BTreeMap<u64, Arc<Slot>>>,
    /// Ranges read to their end and let go: read again, if ever, by a GET
    /// of just the bytes asked for.
    gone: Mutex<HashSet<u64>>,
    /// Bytes handed out in all.
    handed: AtomicU64,
}

impl ObjectReader {
    pub fn new(store: Arc<Store>, info: ObjectInfo) -> ObjectReader {
        ObjectReader {
            store,
            info,
            slots: Mutex::new(BTreeMap::new()),
            gone: Mutex::new(HashSet::new()),
            handed: AtomicU64::new(0),
        }
    }

    fn range_len(&self, idx: u64) -> u64 {
        (self.info.size - idx * RANGE).min(RANGE)
    }

    /// Starts GETs of ranges `from..from+AHEAD` not started yet.
    fn start_from(&self, from: u64) {
        let last = self.info.size.div_ceil(RANGE);
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let gone = self.gone.lock().unwrap_or_else(|p| p.into_inner());
        for idx in from..(from + AHEAD).min(last) {
            if slots.contains_key(&idx) || gone.contains(&idx) {
                continue;
            }
            let slot = Arc::new(Slot {
                data: Mutex::new(None),
                ready: Condvar::new(),
                used: Mutex::new(0),
            });
            slots.insert(idx, slot.clone());
            let (store, info) = (self.store.clone(), self.info.clone());
            let (start, len) = (idx * RANGE, self.range_len(idx));
            self.store.spawn(async move {
                let got = get_range(&store, &info, start, len).await;
                *slot.data.lock().unwrap_or_else(|p| p.into_inner()) = Some(got);
                slot.ready.notify_all();
            });
        }
    }

    /// Starts the first GETs before anything is read.
    pub fn prefetch(&self) {
        self.start_from(0);
    }

    /// Fills `buf` with the object's bytes at `offset`.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), StoreError> {
        if offset + buf.len() as u64 > self.info.size {
            return Err(StoreError::new(
                StoreErrorKind::Other,
                format!(
                    "{}: asked for bytes {}..{} of an object of {}",
                    self.info.url,
                    offset,
                    offset + buf.len() as u64,
                    self.info.size
                ),
            ));
        }
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let idx = at / RANGE;
            let within = (at - idx * RANGE) as usize;
            let n = (buf.len() - done).min((self.range_len(idx) as usize) - within);
            let was_gone = self
                .gone
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&idx);
            if was_gone {
                let got = self
                    .store
                    .block_on(get_range(&self.store, &self.info, at, n as u64))?;
                buf[done..done + n].copy_from_slice(&got);
                done += n;
                continue;
            }
            self.start_from(idx);
            let slot = self
                .slots
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&idx)
                .cloned();
            let Some(slot) = slot else {
                continue; // let go meanwhile: read again as gone
            };
            {
                let mut data = slot.data.lock().unwrap_or_else(|p| p.into_inner());
                while data.is_none() {
                    data = slot.ready.wait(data).unwrap_or_else(|p| p.into_inner());
                }
                match data.as_ref() {
                    Some(Ok(bytes)) => {
                        buf[done..done + n].copy_from_slice(&bytes[within..within + n])
                    }
                    Some(Err(e)) => {
                        let e = e.clone();
                        drop(data);
                        self.slots
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&idx);
                        return Err(e);
                    }
                    None => unreachable!("waited until filled"),
                }
            }
            let mut used = slot.used.lock().unwrap_or_else(|p| p.into_inner());
            *used += n as u64;
            if *used >= self.range_len(idx) {
                self.slots
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&idx);
                self.gone
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(idx);
            }
            done += n;
        }
        self.handed.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Whether as many bytes as the object holds were handed out.
    pub fn read_through(&self) -> bool {
        self.handed.load(Ordering::Relaxed) >= self.info.size
    }
}

/// One ranged GET, bound to the version the object was listed with,
/// within the store's limit of requests in flight.
async fn get_range(
    store: &Store,
    info: &ObjectInfo,
    start: u64,
    len: u64,
) -> Result<Bytes, StoreError> {
    let _slot = store.slots.acquire().await;
    let bytes = store.api.get_range(info, start, len).await?;
    if bytes.len() as u64 != len {
        return Err(crate::changed(&info.url));
    }
    Ok(bytes)
}

impl Held for ObjectReader {
    fn size(&self) -> io::Result<u64> {
        Ok(self.info.size)
    }

    fn stat(&self) -> io::Result<(u64, i64, u32)> {
        Ok((self.info.size, self.info.mtime.0, self.info.mtime.1))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_at(buf, offset).map_err(io::Error::other)
    }
}
