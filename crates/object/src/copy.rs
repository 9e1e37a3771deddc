//! Copies inside one store (`haul cp -r s3://a/x/ s3://b/y/` on one
//! endpoint): each listed object copied by the store itself to the key
//! the scp rule gives it, bound to the listed version, its metadata (and
//! so its modification time) with it. No byte leaves the store.

use std::sync::Arc;

use store::{StoreError, StoreErrorKind};

use crate::list::Listed;
use crate::sink::ObjectSink;
use crate::store::Store;
use crate::url::ObjectUrl;

/// What a copy inside the store did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    pub files: u64,
    pub bytes: u64,
}

/// Copies every listed object into `to`, up to the store's parallel
/// requests at once; `done` hears each object's bytes as it lands.
/// `Ok(None)`: the store copies none of these so, and nothing was
/// written; the bytes must travel.
pub fn copy_listed(
    store: &Arc<Store>,
    listed: &Listed,
    to: &ObjectSink,
    done: &(dyn Fn(u64) + Sync),
) -> Result<Option<Copied>, StoreError> {
    let mut pairs = Vec::new();
    for e in &listed.entries {
        let Some(Some(info)) = listed.objects.get(e.id as usize) else {
            continue;
        };
        if let Some(url) = to.url_of(&e.path)? {
            pairs.push((info.clone(), url));
        }
    }
    let Some(((first, first_to), rest)) = pairs.split_first() else {
        return Ok(Some(Copied::default()));
    };
    if !store.block_on(store.api.copy(first, first_to))? {
        return Ok(None);
    }
    done(first.size);
    let copied = store.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for (from, url) in rest.iter().cloned() {
            let (api, slots) = (store.api.clone(), store.slots.clone());
            tasks.spawn(async move {
                let _slot = slots.acquire_owned().await;
                let copied = api.copy(&from, &url).await?;
                Ok::<_, StoreError>((copied, from.size, url))
            });
        }
        let mut n = Copied {
            files: 1,
            bytes: first.size,
        };
        while let Some(joined) = tasks.join_next().await {
            let (copied, size, url) = joined.map_err(|e| {
                StoreError::new(StoreErrorKind::Other, format!("a copy stopped: {e}"))
            })??;
            if !copied {
                return Err(not_copied(&url, &store.endpoint));
            }
            done(size);
            n.files += 1;
            n.bytes += size;
        }
        Ok(n)
    })?;
    Ok(Some(copied))
}

fn not_copied(url: &ObjectUrl, endpoint: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Other,
        format!("{endpoint} would not copy {url} inside the store, though it copied others; copy it on its own"),
    )
}
