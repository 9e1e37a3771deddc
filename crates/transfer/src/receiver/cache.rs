//! The chunk cache's feeder (`--cache`, P-31): adds each file placed to
//! the receiver's cache, opened through the sink, and saves the index
//! when the run ends.

use std::sync::mpsc;

use store::ChunkCache;

use super::place::Receiving;

impl Receiving<'_, '_> {
    /// Feeds each placed file to the chunk cache, until the transfer ends
    /// and every file placed is in; then saves the cache's index.
    /// Each is named by its manifest path and opened through the sink,
    /// never by a path name that a link could have taken over (P-38).
    pub(crate) fn cacher(&self, cache: &ChunkCache, placed: mpsc::Receiver<Option<Vec<u8>>>) {
        let add = |rel: Vec<u8>| {
            let p = self
                .sink
                .final_path(&rel)
                .ok()
                .flatten()
                .unwrap_or_default();
            let r = match self.sink.open_placed(&rel) {
                Ok(Some(f)) => cache.insert_open(&*f).map(|_| ()),
                Ok(None) => Err(std::io::Error::other("it is no longer a regular file")),
                Err(e) => Err(std::io::Error::other(e.to_string())),
            };
            if let Err(e) = r {
                tracing::warn!("could not add {} to the chunk cache: {e}", p.display());
            }
            self.caching
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        };
        // Every file placed is sent before the end (`None`).
        while let Ok(Some(p)) = placed.recv() {
            if self.sh.stopped() {
                break;
            }
            add(p);
        }
        if let Err(e) = cache.save() {
            tracing::warn!("could not save the chunk cache's index: {e}");
        }
    }
}
