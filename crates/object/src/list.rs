//! Turns an object-store source into a manifest, as `store::walk` does for
//! files: a key maps to a file, the parts of its key before the last `/`
//! to directories (P-8: the first component is the source's own name, or
//! with a prefix ending in `/`, each child's). Modification times come
//! from haul's metadata where a haul wrote the object.

use std::collections::BTreeSet;
use std::sync::Arc;

use store::{StoreError, StoreErrorKind};
use wire::{Entry, EntryKind};

use crate::api::{ObjectInfo, Page};
use crate::store::Store;
use crate::url::ObjectUrl;

/// HEADs in flight while a listing reads objects' metadata.
const HEADS: usize = 32;

/// The manifest of an object-store source.
#[derive(Default)]
pub struct Listed {
    pub entries: Vec<Entry>,
    /// Each file entry's object, by entry id.
    pub objects: Vec<Option<ObjectInfo>>,
    /// Keys that name no path (`a//b`, `..`), for the user to read.
    pub skipped: Vec<String>,
    /// The source named a prefix's contents (`s3://b/p/`, `gs://b/p/`).
    pub contents: bool,
}

impl Listed {
    /// Keeps the entries `keep` says (one verdict an entry, in order),
    /// numbered again from 0.
    pub fn retain(&mut self, keep: &[bool]) {
        let mut objects = Vec::new();
        let old = std::mem::take(&mut self.entries);
        for (mut e, _) in old.into_iter().zip(keep).filter(|(_, k)| **k) {
            objects.push(self.objects.get(e.id as usize).cloned().flatten());
            e.id = self.entries.len() as u32;
            self.entries.push(e);
        }
        self.objects = objects;
    }

    pub fn file_bytes(&self) -> u64 {
        self.objects.iter().flatten().map(|o| o.size).sum()
    }
}

/// Lists `url`: one object, or with `recursive` every object under a
/// prefix.
pub fn list(store: &Arc<Store>, url: &ObjectUrl, recursive: bool) -> Result<Listed, StoreError> {
    // A listing first: its answers name what is wrong (credentials,
    // bucket), where a HEAD's carry only a status.
    store.check(url)?;
    if !url.is_prefix() {
        if let Some(info) = head(store, url)? {
            let mut l = Listed::default();
            push_file(&mut l, url.name().as_bytes().to_vec(), info);
            return Ok(l);
        }
    }
    let prefix = url.as_prefix();
    let keys = list_keys(store, &url.at(prefix.clone()))?;
    if keys.is_empty() {
        return Err(StoreError::new(
            StoreErrorKind::NotFound,
            format!(
                "no object {url} at {}, and nothing under it",
                store.endpoint
            ),
        ));
    }
    if !recursive {
        return Err(StoreError::new(
            StoreErrorKind::BadRequest,
            format!(
                "{url} is a prefix of {} objects; copy it with -r",
                keys.len()
            ),
        ));
    }
    let contents = url.is_prefix();
    // The tree's top: the prefix's own name, unless its contents were asked for.
    let top: Vec<u8> = if contents {
        Vec::new()
    } else {
        url.name().as_bytes().to_vec()
    };
    let mut l = Listed {
        contents,
        ..Default::default()
    };
    let infos = head_all(store, url, keys.iter().map(|(k, _, _)| k.clone()).collect())?;
    if !top.is_empty() {
        push_dir(&mut l, top.clone());
    }
    let mut dirs: BTreeSet<Vec<u8>> = BTreeSet::new();
    for ((key, size, listed_mtime), info) in keys.into_iter().zip(infos) {
        let rel = &key[prefix.len()..];
        // A "folder" marker an S3 console leaves: the directory is made
        // by its children.
        if rel.is_empty() || (rel.ends_with('/') && size == 0) {
            continue;
        }
        let mut path = top.clone();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(rel.as_bytes());
        if session::paths::components(&path).is_err() {
            l.skipped.push(format!(
                "skipped {}: the key names no path ('//', '.' or '..' in it)",
                url.at(key.clone())
            ));
            continue;
        }
        // Its directories, each before what is in it.
        let parts: Vec<usize> = path
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'/')
            .map(|(i, _)| i)
            .collect();
        for &cut in &parts {
            let dir = path[..cut].to_vec();
            if dir != top && dirs.insert(dir.clone()) {
                push_dir(&mut l, dir);
            }
        }
        let info = info.unwrap_or(ObjectInfo {
            url: url.at(key.clone()),
            size,
            version: None,
            mtime: listed_mtime,
        });
        push_file(&mut l, path, info);
    }
    date_dirs(&mut l);
    Ok(l)
}

/// A directory has no time of its own in a bucket: it gets the newest of
/// the objects beneath it.
fn date_dirs(l: &mut Listed) {
    let mut newest: std::collections::HashMap<Vec<u8>, (i64, u32)> = Default::default();
    for e in &l.entries {
        if let EntryKind::File {
            mtime, mtime_nsec, ..
        } = e.kind
        {
            let mut p = e.path.as_slice();
            while let Some(cut) = p.iter().rposition(|&b| b == b'/') {
                p = &p[..cut];
                let t = newest.entry(p.to_vec()).or_insert((mtime, mtime_nsec));
                *t = (*t).max((mtime, mtime_nsec));
            }
        }
    }
    for e in &mut l.entries {
        if let EntryKind::Dir {
            mtime, mtime_nsec, ..
        } = &mut e.kind
        {
            if let Some(&(s, n)) = newest.get(&e.path) {
                (*mtime, *mtime_nsec) = (s, n);
            }
        }
    }
}

fn push_dir(l: &mut Listed, path: Vec<u8>) {
    let id = l.entries.len() as u32;
    l.entries.push(Entry {
        id,
        path,
        kind: EntryKind::Dir {
            mode: 0o755,
            mtime: 0,
            mtime_nsec: 0,
        },
        target: Vec::new(),
    });
    l.objects.push(None);
}

fn push_file(l: &mut Listed, path: Vec<u8>, info: ObjectInfo) {
    let id = l.entries.len() as u32;
    l.entries.push(Entry {
        id,
        path,
        kind: EntryKind::File {
            size: info.size,
            mode: 0o644,
            mtime: info.mtime.0,
            mtime_nsec: info.mtime.1,
        },
        target: Vec::new(),
    });
    l.objects.push(Some(info));
}

/// A listed key: its name, size and last-modified time.
type Key = (String, u64, (i64, u32));

/// Every page of a listing under `url`'s prefix, `delimiter` (only what
/// lies directly under it) or not, handed to `each`.
/// At most this many keys, and pages, are listed under one prefix: ten
/// million objects is a transfer to split by prefix (or `--shard`), and a
/// store that pages on for ever is not followed.
pub const MAX_LISTED: usize = 10_000_000;

fn pages(
    store: &Store,
    url: &ObjectUrl,
    delimiter: bool,
    mut each: impl FnMut(&Page),
) -> Result<(), StoreError> {
    let mut token: Option<String> = None;
    let (mut keys, mut pages) = (0usize, 0usize);
    loop {
        let page = store.block_on(store.api.list(url, delimiter, token.take()))?;
        keys += page.objects.len() + page.prefixes.len();
        pages += 1;
        if keys > MAX_LISTED || pages > MAX_LISTED {
            return Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!(
                    "{url} at {} lists more than {MAX_LISTED} objects; copy narrower prefixes, one at a time",
                    store.endpoint
                ),
            ));
        }
        each(&page);
        match page.next {
            Some(t) => token = Some(t),
            None => return Ok(()),
        }
    }
}

/// Every key under `url`'s prefix, with its size and last-modified time,
/// in key order.
fn list_keys(store: &Store, url: &ObjectUrl) -> Result<Vec<Key>, StoreError> {
    let mut keys = Vec::new();
    pages(store, url, false, |page| {
        keys.extend(page.objects.iter().cloned())
    })?;
    keys.sort();
    Ok(keys)
}

/// The keys and prefixes directly under `url`'s prefix: objects as their
/// keys, prefixes ending in '/'.
pub fn list_children(store: &Store, url: &ObjectUrl) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    pages(store, url, true, |page| {
        out.extend(page.objects.iter().map(|(k, ..)| k.clone()));
        out.extend(page.prefixes.iter().cloned());
    })?;
    out.sort();
    Ok(out)
}

/// Every key under `url`'s prefix.
pub fn list_all(store: &Store, url: &ObjectUrl) -> Result<Vec<String>, StoreError> {
    Ok(list_keys(store, url)?
        .into_iter()
        .map(|(k, ..)| k)
        .collect())
}

/// One object's size, version and modification time; `None` when there
/// is no such key.
pub fn head(store: &Store, url: &ObjectUrl) -> Result<Option<ObjectInfo>, StoreError> {
    store.block_on(store.api.head(url))
}

/// HEADs many objects, `HEADS` at once, answers in the order asked.
fn head_all(
    store: &Arc<Store>,
    base: &ObjectUrl,
    keys: Vec<String>,
) -> Result<Vec<Option<ObjectInfo>>, StoreError> {
    let sem = Arc::new(tokio::sync::Semaphore::new(HEADS));
    let store2 = store.clone();
    let base = base.clone();
    store.block_on(async move {
        let mut tasks = Vec::with_capacity(keys.len());
        for k in keys {
            let (sem, store, url) = (sem.clone(), store2.clone(), base.at(k));
            tasks.push(tokio::spawn(async move {
                let _p = sem.acquire().await;
                store.api.head(&url).await
            }));
        }
        let mut out = Vec::with_capacity(tasks.len());
        for t in tasks {
            let r = t.await.map_err(|e| {
                StoreError::new(
                    StoreErrorKind::Other,
                    format!("reading an object's metadata: {e}"),
                )
            })??;
            out.push(r);
        }
        Ok(out)
    })
}

/// `SECONDS.NANOSECONDS`, as [`MTIME`] holds it.
/// Also rclone's `mtime` on S3, the same seconds with a fraction of any
/// length up to nanoseconds (`1700000000.5` is half a second).
pub fn parse_mtime(v: &str) -> Option<(i64, u32)> {
    let (s, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u32 = format!("{frac:0<9}").parse().ok()?;
    Some((s.parse().ok()?, n))
}

pub fn format_mtime(secs: i64, nsec: u32) -> String {
    format!("{secs}.{nsec:09}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtimes_round_trip() {
        for (s, n) in [(0, 0), (1_700_000_000, 123_456_789), (-5, 1)] {
            assert_eq!(parse_mtime(&format_mtime(s, n)), Some((s, n)));
        }
        assert_eq!(parse_mtime("12"), Some((12, 0)));
        assert_eq!(parse_mtime("x"), None);
        assert_eq!(parse_mtime("1.2000000000"), None);
        // rclone's float seconds: a fraction of any length.
        assert_eq!(
            parse_mtime("1700000000.5"),
            Some((1_700_000_000, 500_000_000))
        );
        assert_eq!(parse_mtime("1.-5"), None);
    }
}
