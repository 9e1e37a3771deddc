//! A server whose files are objects: `haul serve --root s3://BUCKET/PREFIX`
//! (or any scheme of `backends`' registry: a bucket served to clients;
//! pushes land as objects, pulls read them), and a remote side started
//! over ssh asked for an object-store path, which the remote host's own
//! credentials reach. Request paths map to keys
//! under the root's prefix; nothing outside it is named.

use std::sync::Arc;

use backends::Settings;
use connect::error::TransferError;
use object::{ObjectSink, ObjectSource, ObjectUrl, Store};
use store::{BlockSink, BlockSource, StoreError, StoreErrorKind};
use wire::{Entry, ErrorCode};

/// Where a server's objects are.
pub enum Buckets {
    /// Every request path is a key under this root (a daemon's `--root
    /// s3://...`).
    Root { store: Arc<Store>, root: ObjectUrl },
    /// Paths written `s3://...` (`gs://`, `az://`) reach the store as this
    /// login's credentials allow (`--stdio` without `--root`); others are
    /// files.
    Named(Settings),
}

/// The objects a pull sends: the manifest, their reader, and their bytes.
pub type Objects = (Vec<Entry>, Box<dyn BlockSource>, u64);

impl Buckets {
    /// Whether `path` is served from a bucket.
    pub fn serves(&self, path: &str) -> bool {
        match self {
            Buckets::Root { .. } => true,
            Buckets::Named(_) => backends::is_object(path),
        }
    }

    /// The store and location `path` names.
    fn locate(&self, path: &str) -> Result<(Arc<Store>, ObjectUrl), TransferError> {
        match self {
            Buckets::Root { store, root } => Ok((store.clone(), under(root, path)?)),
            Buckets::Named(settings) => {
                let url = backends::parse(path)
                    .map_err(|m| TransferError::new(ErrorCode::BadRequest, m))?;
                Ok((backends::connect(&url, settings)?, url))
            }
        }
    }

    /// What a pull of `paths` sends.
    pub fn sources(
        &self,
        paths: &[String],
        recursive: bool,
        select: &filter::Select,
    ) -> Result<Objects, TransferError> {
        let mut entries: Vec<Entry> = Vec::new();
        let mut objects = Vec::new();
        let mut store_of: Option<(Arc<Store>, ObjectUrl)> = None;
        for p in paths {
            let (store, url) = self.locate(p)?;
            if let Some((_, first)) = &store_of {
                if (first.scheme, &first.bucket) != (url.scheme, &url.bucket) {
                    return Err(TransferError::new(
                        ErrorCode::BadRequest,
                        format!("pull from one bucket at a time: {first} and {url} are in two"),
                    ));
                }
            }
            let mut listed = object::list(&store, &url, recursive)?;
            if !select.is_all() {
                listed.retain(&transfer::selected(select, &listed.entries));
            }
            for s in &listed.skipped {
                tracing::warn!("{s}");
            }
            let offset = entries.len() as u32;
            entries.extend(listed.entries.into_iter().map(|mut e| {
                e.id += offset;
                e
            }));
            objects.extend(listed.objects);
            store_of.get_or_insert((store, url));
        }
        let (store, _) = store_of
            .ok_or_else(|| TransferError::new(ErrorCode::BadRequest, "nothing asked for"))?;
        let listed = object::Listed {
            entries: Vec::new(),
            objects,
            skipped: Vec::new(),
            contents: false,
        };
        let bytes = listed.file_bytes();
        Ok((entries, Box::new(ObjectSource::new(store, &listed)), bytes))
    }

    /// Where a push to `dest` lands.
    pub fn sink(
        &self,
        dest: &str,
        many_sources: bool,
        contents: bool,
        adding_only: bool,
    ) -> Result<Box<dyn BlockSink>, TransferError> {
        let (store, url) = self.locate(dest)?;
        let sink = ObjectSink::new(store, url, many_sources, contents)?;
        Ok(Box::new(match adding_only {
            true => sink.adding_only(),
            false => sink,
        }))
    }
}

/// The key `path` names under `root`: '/'-separated, '.' and empty parts
/// dropped, '..' refused; a final '/' kept (a prefix, or a directory's
/// contents).
fn under(root: &ObjectUrl, path: &str) -> Result<ObjectUrl, TransferError> {
    let mut parts = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                return Err(StoreError::new(
                    StoreErrorKind::OutsideRoot,
                    format!("{path:?} leads outside the served root {root}"),
                )
                .into())
            }
            c => parts.push(c),
        }
    }
    let mut key = root.as_prefix();
    if root.key.is_empty() {
        key.clear();
    }
    key.push_str(&parts.join("/"));
    if (path.ends_with('/') || parts.is_empty()) && !key.is_empty() && !key.ends_with('/') {
        key.push('/');
    }
    Ok(root.at(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_keys_under_the_root() {
        let root = backends::parse("s3://bkt/served").unwrap();
        let k = |p: &str| under(&root, p).map(|u| u.key);
        assert_eq!(k("a/b").unwrap(), "served/a/b");
        assert_eq!(k("/a//./b").unwrap(), "served/a/b");
        assert_eq!(k("dir/").unwrap(), "served/dir/");
        assert_eq!(k("").unwrap(), "served/");
        assert_eq!(k("/").unwrap(), "served/");
        assert!(k("a/../../x").is_err());
        let whole = backends::parse("s3://bkt").unwrap();
        assert_eq!(under(&whole, "x/y").unwrap().key, "x/y");
        assert_eq!(under(&whole, ".").unwrap().key, "");
    }
}
