//! Objects as the sending side's [`BlockSource`]: blocks are read through
//! one [`ObjectReader`] per object, whose GETs run ahead of the sender.
//! Small objects are many: the next few are fetched while one is sent.

use std::sync::{Arc, Mutex};

use store::{BlockSource, Held, StoreError, StoreErrorKind};

use crate::api::ObjectInfo;
use crate::list::Listed;
use crate::read::{ObjectReader, RANGE};
use crate::store::Store;

/// Objects fetched ahead of the one being read, where they are small.
const NEXT: u32 = 8;

/// The objects of a listing, read by manifest id.
pub struct ObjectSource {
    store: Arc<Store>,
    objects: Vec<Option<ObjectInfo>>,
    readers: Mutex<Vec<Option<Arc<ObjectReader>>>>,
}

impl ObjectSource {
    pub fn new(store: Arc<Store>, listed: &Listed) -> ObjectSource {
        let n = listed.objects.len();
        ObjectSource {
            store,
            objects: listed.objects.clone(),
            readers: Mutex::new(vec![None; n]),
        }
    }

    fn info(&self, id: u32) -> Result<&ObjectInfo, StoreError> {
        self.objects
            .get(id as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                StoreError::new(
                    StoreErrorKind::BadRequest,
                    format!("no object {id} in this transfer"),
                )
            })
    }

    fn reader(&self, id: u32) -> Result<Arc<ObjectReader>, StoreError> {
        let info = self.info(id)?.clone();
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        let r = readers[id as usize]
            .get_or_insert_with(|| Arc::new(ObjectReader::new(self.store.clone(), info)))
            .clone();
        // The objects after a small one are likely next: start them.
        if r.info.size <= RANGE {
            for next in id + 1..(id + 1 + NEXT).min(self.objects.len() as u32) {
                let Some(Some(info)) = self.objects.get(next as usize) else {
                    continue;
                };
                if info.size == 0 || readers[next as usize].is_some() {
                    continue;
                }
                let nr = Arc::new(ObjectReader::new(self.store.clone(), info.clone()));
                nr.prefetch();
                readers[next as usize] = Some(nr);
            }
        }
        Ok(r)
    }

    /// Lets go of object `id`'s reader once all its bytes were read.
    fn done_with(&self, id: u32) {
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = readers.get_mut(id as usize) {
            if slot.as_ref().is_some_and(|r| r.read_through()) {
                *slot = None;
            }
        }
    }
}

impl BlockSource for ObjectSource {
    fn name(&self, id: u32) -> String {
        self.info(id)
            .map_or_else(|_| format!("object {id}"), |i| i.url.to_string())
    }

    fn read_block(&self, id: u32, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        let r = self.reader(id)?;
        r.read_at(buf, offset)?;
        self.done_with(id);
        Ok(())
    }

    fn known_zero(&self, _id: u32, _offset: u64, _len: u32) -> bool {
        false
    }

    /// Every GET names the ETag listed: a replaced object fails its read.
    fn check_unchanged(&self, id: u32) -> Result<(), StoreError> {
        self.info(id).map(|_| ())
    }

    fn open(&self, id: u32) -> Result<Arc<dyn Held>, StoreError> {
        let info = self.info(id)?.clone();
        Ok(Arc::new(ObjectReader::new(self.store.clone(), info)))
    }
}
