//! A bucket as the receiving side's [`BlockSink`]: each file becomes an
//! [`Upload`] under the key the scp rule gives it (a prefix is a
//! directory), and appears only when verified (`finalize`). Directories
//! are implied by keys; links cannot be stored and are skipped with a
//! warning.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use session::paths::Placement;
use store::{
    BlockSink, Capabilities, DirTimes, Extraneous, Held, Stamp, StoreError, StoreErrorKind,
    Verified,
};

use crate::list::{format_mtime, head};
use crate::list::{list_all, list_children};
use crate::read::ObjectReader;
use crate::resume;
use crate::store::Store;
use crate::upload::Upload;
use crate::url::ObjectUrl;

/// Where received files go in a bucket.
pub struct ObjectSink {
    store: Arc<Store>,
    base: ObjectUrl,
    placement: Placement,
    uploads: Mutex<HashMap<u32, Arc<Upload>>>,
    /// Only new keys (a write-only key's drop box): one that exists is
    /// refused, before its upload starts and again before it completes.
    adding_only: bool,
}

impl ObjectSink {
    /// The destination `base` as named, by the scp rule: a prefix (a key
    /// ending in '/', the whole bucket, or a key with objects under
    /// `key/`) takes what arrives under it; a plain key is the one file's
    /// new name. Asks the store, so a wrong key or missing bucket is told
    /// now.
    pub fn new(
        store: Arc<Store>,
        base: ObjectUrl,
        many_sources: bool,
        contents: bool,
    ) -> Result<ObjectSink, StoreError> {
        let is_dir = base.is_prefix() || store.check(&base.at(base.as_prefix()))?;
        if base.is_prefix() {
            store.check(&base)?;
        }
        let placement = Placement::decide(is_dir, base.is_prefix(), many_sources, contents)
            .map_err(|why| StoreError::new(StoreErrorKind::BadRequest, format!("{base}: {why}")))?;
        Ok(ObjectSink {
            store,
            base,
            placement,
            uploads: Mutex::new(HashMap::new()),
            adding_only: false,
        })
    }

    /// Takes only keys that do not exist yet (`write-only` keys).
    pub fn adding_only(mut self) -> ObjectSink {
        self.adding_only = true;
        self
    }

    /// Refuses `url` where only new keys are taken and it exists.
    fn check_new(&self, url: &ObjectUrl) -> Result<(), StoreError> {
        if self.adding_only && head(&self.store, url)?.is_some() {
            return Err(StoreError::new(
                StoreErrorKind::Permission,
                format!("{url} is there already, and this destination only takes new objects (a drop box): push it under another name"),
            ));
        }
        Ok(())
    }

    /// The key manifest path `rel` is written to; `None` for the
    /// destination itself (the top directory of an `As` placement).
    fn key_of(&self, rel: &[u8]) -> Result<Option<String>, StoreError> {
        let parts = session::paths::components(rel)
            .map_err(|e| StoreError::new(StoreErrorKind::OutsideRoot, e.to_string()))?;
        let below = self.placement.relative(&parts);
        let mut names = Vec::with_capacity(below.len());
        for p in &below {
            names.push(std::str::from_utf8(p).map_err(|_| {
                StoreError::new(
                    StoreErrorKind::BadRequest,
                    format!(
                        "{:?} is not UTF-8, and object keys must be",
                        String::from_utf8_lossy(rel)
                    ),
                )
            })?);
        }
        let joined = names.join("/");
        let key = match (self.placement, joined.is_empty()) {
            (Placement::As, true) if self.base.key.is_empty() => return Ok(None),
            (Placement::As, true) => self.base.key.clone(),
            (Placement::As, false) => format!("{}/{joined}", self.base.key),
            (Placement::Into, _) => format!("{}{joined}", self.base.as_prefix()),
        };
        let max = self.store.limits().max_key;
        if key.len() > max {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!(
                    "{}: an object key is at most {max} bytes",
                    self.base.at(key)
                ),
            ));
        }
        Ok(Some(key))
    }

    pub(crate) fn url_of(&self, rel: &[u8]) -> Result<Option<ObjectUrl>, StoreError> {
        Ok(self.key_of(rel)?.map(|k| self.base.at(k)))
    }

    fn upload(&self, id: u32) -> Result<Arc<Upload>, StoreError> {
        self.uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
            .ok_or_else(|| {
                StoreError::new(
                    StoreErrorKind::BadRequest,
                    format!("file {id} was not opened"),
                )
            })
    }
}

impl BlockSink for ObjectSink {
    /// Objects have no links, modes or directory times; what an upload
    /// left is resumed, what is in place read, and `--delete` kept.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            resume: true,
            in_place: true,
            delete: true,
            ..Capabilities::default()
        }
    }

    /// Objects under the destination, or uploads into it left to resume.
    fn destination_exists(&self) -> bool {
        let left = self.store.journals.as_deref().is_some_and(|d| {
            let under = self.base.to_string();
            let under = under.trim_end_matches('/');
            resume::headers(d).iter().any(|h| h.url.starts_with(under))
        });
        left || self.store.check(&self.base).unwrap_or(false)
    }

    fn final_path(&self, rel: &[u8]) -> Result<Option<PathBuf>, StoreError> {
        Ok(self.url_of(rel)?.map(|u| PathBuf::from(u.to_string())))
    }

    fn open_placed(&self, rel: &[u8]) -> Result<Option<Arc<dyn Held>>, StoreError> {
        let Some(url) = self.url_of(rel)? else {
            return Ok(None);
        };
        Ok(head(&self.store, &url)?
            .map(|info| Arc::new(ObjectReader::new(self.store.clone(), info)) as Arc<dyn Held>))
    }

    /// An upload left to resume, told by its journal: nothing to read at
    /// offsets (its parts cannot be read back), but `open_file` takes it
    /// over and `held_blocks` names what it holds.
    fn partial_of(&self, rel: &[u8]) -> Result<Option<Arc<dyn Held>>, StoreError> {
        let (Some(dir), Some(url)) = (self.store.journals.as_deref(), self.url_of(rel)?) else {
            return Ok(None);
        };
        let path = resume::path_for(dir, &self.store.endpoint, &url);
        Ok(resume::read(&path).map(|_| Arc::new(Nothing) as Arc<dyn Held>))
    }

    fn make_dir(&self, rel: &[u8], _mode: u32) -> Result<(), StoreError> {
        self.key_of(rel).map(|_| ())
    }

    fn make_symlink(&self, rel: &[u8], _target: &[u8]) -> Result<(), StoreError> {
        if let Some(u) = self.url_of(rel)? {
            tracing::warn!("skipped the symbolic link {u}: an object store holds no links");
        }
        Ok(())
    }

    fn open_file(&self, id: u32, rel: &[u8], stamp: &Stamp) -> Result<(), StoreError> {
        let url = self.url_of(rel)?.ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::BadRequest,
                format!("{}: a file needs a key, not the whole bucket", self.base),
            )
        })?;
        self.check_new(&url)?;
        // The source's modification time always travels: a store sets
        // its own last-modified time, and `sync` compares with this.
        let metadata = vec![(
            self.store.api.mtime_key().to_string(),
            format_mtime(stamp.mtime, stamp.mtime_nsec),
        )];
        let shape = (
            stamp.size,
            stamp.block_size,
            (stamp.mtime, stamp.mtime_nsec),
        );
        let up = match Upload::resume(self.store.clone(), url.clone(), shape, metadata.clone())? {
            Some(up) => up,
            None => Upload::new(self.store.clone(), url, shape, metadata)?,
        };
        let old = self
            .uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, up);
        if let Some(old) = old {
            old.abort();
        }
        Ok(())
    }

    fn held_blocks(&self, id: u32) -> Result<Vec<(u32, [u8; 32])>, StoreError> {
        Ok(self.upload(id)?.held())
    }

    fn write_block(&self, id: u32, offset: u64, data: &[u8]) -> Result<(), StoreError> {
        self.upload(id)?
            .write(offset, Some(data), data.len() as u64)
    }

    fn write_zero(&self, id: u32, offset: u64, len: u32) -> Result<(), StoreError> {
        self.upload(id)?.write(offset, None, u64::from(len))
    }

    fn record(&self, id: u32, index: u32, hash: &[u8; 32]) {
        if let Ok(up) = self.upload(id) {
            up.record(index, hash);
        }
    }

    fn finalize(&self, batch: &[Verified]) -> Result<(), StoreError> {
        let mut ups = Vec::with_capacity(batch.len());
        for v in batch {
            let up = self.upload(v.id)?;
            up.settle()?;
            // Another client's object may have come meanwhile.
            self.check_new(&up.url)?;
            ups.push(up);
        }
        // All of the batch at once: small files are many PUTs.
        let results = self.store.block_on(async {
            let tasks: Vec<_> = ups
                .iter()
                .map(|u| tokio::spawn(u.clone().complete()))
                .collect();
            let mut out = Vec::with_capacity(tasks.len());
            for t in tasks {
                out.push(t.await);
            }
            out
        });
        for (v, r) in batch.iter().zip(results) {
            match r {
                Ok(Ok(())) => {
                    self.uploads
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&v.id);
                }
                Ok(Err(e)) => return Err(e),
                Err(e) => {
                    return Err(StoreError::new(
                        StoreErrorKind::Other,
                        format!("completing an upload: {e}"),
                    ))
                }
            }
        }
        Ok(())
    }

    fn finish(&self, _dirs: &[DirTimes]) -> Result<(), StoreError> {
        Ok(())
    }

    /// What `--delete` removes (P-32): under each directory of the
    /// manifest (and with `contents` under the destination itself), the
    /// objects and the prefixes ("directories") that no entry names.
    /// Each is returned as its key (a prefix ends in '/') and its path
    /// relative to the destination. Uploads in progress are not objects,
    /// so never listed.
    fn extraneous(
        &self,
        dirs: &[Vec<u8>],
        keep: &[Vec<u8>],
        contents: bool,
        _partials: bool,
    ) -> Result<Vec<Extraneous>, StoreError> {
        let mut kept = HashSet::new();
        for rel in keep {
            if let Some(k) = self.key_of(rel)? {
                kept.insert(k);
            }
        }
        let mut scopes = Vec::new();
        if contents && self.placement == Placement::Into {
            scopes.push(self.base.as_prefix());
        }
        for rel in dirs {
            match self.key_of(rel)? {
                Some(k) => scopes.push(format!("{k}/")),
                None => scopes.push(self.base.as_prefix()),
            }
        }
        scopes.sort();
        scopes.dedup();
        let top = match self.placement {
            Placement::Into => self.base.as_prefix(),
            Placement::As => format!("{}/", self.base.key),
        };
        let top = if self.base.key.is_empty() {
            String::new()
        } else {
            top
        };
        let mut out = Vec::new();
        for scope in scopes {
            let scope = if scope == "/" { String::new() } else { scope };
            for child in list_children(&self.store, &self.base.at(scope.clone()))? {
                let name = child.trim_end_matches('/');
                if child == scope || kept.contains(name) {
                    continue;
                }
                let shown = child
                    .strip_prefix(&top)
                    .unwrap_or(&child)
                    .trim_end_matches('/');
                out.push(Extraneous {
                    place: child.as_bytes().to_vec(),
                    shown: shown.as_bytes().to_vec(),
                    dir: child.ends_with('/'),
                    file: None,
                });
            }
        }
        Ok(out)
    }

    /// Deletes what `extraneous` found: an object, or every object under a
    /// prefix.
    fn remove(&self, places: &[Vec<u8>], _partials: bool) -> Result<Vec<bool>, StoreError> {
        let mut gone = Vec::with_capacity(places.len());
        for place in places {
            let key = String::from_utf8_lossy(place).into_owned();
            let keys = match key.ends_with('/') {
                true => list_all(&self.store, &self.base.at(key.clone()))?,
                false => vec![key.clone()],
            };
            for k in keys {
                let url = self.base.at(k);
                self.store.block_on(self.store.api.delete(&url))?;
            }
            gone.push(true);
        }
        Ok(gone)
    }

    fn abort(&self) {
        let ups: Vec<_> = self
            .uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, u)| u)
            .collect();
        for u in ups {
            let _ = u.settle();
            u.abort();
        }
    }
}

/// What `partial_of` hands back for an upload left to resume: it has no
/// bytes to read (a multipart upload's parts cannot be read back).
struct Nothing;

impl Held for Nothing {
    fn size(&self) -> std::io::Result<u64> {
        Ok(0)
    }

    fn stat(&self) -> std::io::Result<(u64, i64, u32)> {
        Ok((0, 0, 0))
    }

    fn read_exact_at(&self, buf: &mut [u8], _offset: u64) -> std::io::Result<()> {
        match buf.is_empty() {
            true => Ok(()),
            false => Err(std::io::Error::other(
                "an upload left to resume has no bytes to read",
            )),
        }
    }
}
