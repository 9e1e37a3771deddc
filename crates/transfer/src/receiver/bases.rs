//! The bases a receiver holds open while their files are sent (P-31): the
//! old version, a partial, or `--basis`, by manifest id. Delta blocks copy
//! from them; a file's basis is closed once the file is placed.

use std::collections::HashMap;

use std::sync::{Arc, Mutex};

use store::Held;

/// The receiver's open bases, by manifest id.
#[derive(Default)]
pub(crate) struct Bases {
    open: Mutex<HashMap<u32, Arc<dyn Held>>>,
}

impl Bases {
    pub(crate) fn get(&self, id: u32) -> Option<Arc<dyn Held>> {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    pub(crate) fn insert(&self, id: u32, f: Arc<dyn Held>) {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, f);
    }

    pub(crate) fn close(&self, id: u32) {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
}
