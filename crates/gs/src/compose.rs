//! Uploads in parts, which GCS's JSON API has not as S3 has them: each
//! part is a temporary object `.haul-parts/ID/NNNNN` in the destination's
//! bucket (hidden from every listing); completing composes them, in
//! order, into the destination with its metadata (at most 32 sources a
//! compose, so more are composed in groups into intermediate temporary
//! objects first), then deletes the temporary objects. Aborting deletes
//! them.

use std::collections::HashMap;

use bytes::Bytes;
use http::Method;
use object::{ObjectUrl, Part};
use store::{StoreError, StoreErrorKind};

use crate::gcs::{object_path, parse_json, Call, Gcs, Query, LIMITS};
use crate::wire::{hex, metadata_json, Resource, PARTS_DIR};
/// Sources of one compose, at most (GCS's limit).
pub const MAX_SOURCES: usize = 32;

/// The prefix of upload `id`'s temporary objects.
fn upload_dir(id: &str) -> String {
    format!("{PARTS_DIR}{id}/")
}

/// Part `number`'s temporary object: numbers zero-padded, so that they
/// list in order.
fn part_key(id: &str, number: u32) -> String {
    format!("{}{number:05}", upload_dir(id))
}

/// The part number a temporary object's name holds; `None` for an
/// intermediate compose (`cL-NNNNN`) or anything else.
fn part_number(dir: &str, name: &str) -> Option<u32> {
    let n = name.strip_prefix(dir)?;
    if n.is_empty() || !n.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// An intermediate object of a compose: `level`, group `index`.
fn group_key(id: &str, level: u32, index: usize) -> String {
    format!("{}c{level}-{index:05}", upload_dir(id))
}

fn bad_request(m: String) -> StoreError {
    StoreError::new(StoreErrorKind::BadRequest, m)
}

/// An upload id as `begin` makes them: hex, so that it is safe in a key.
fn checked_id(id: &str) -> Result<&str, StoreError> {
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad_request(format!(
            "{id:?} is not an upload id of haul's for GCS (hex digits)"
        )));
    }
    Ok(id)
}

/// The body of a compose request: `sources` (name, generation to
/// match), into an object with `metadata`.
fn compose_body(sources: &[(String, Option<String>)], metadata: &[(String, String)]) -> Bytes {
    let objects: Vec<serde_json::Value> = sources
        .iter()
        .map(|(name, generation)| match generation {
            Some(g) => serde_json::json!({
                "name": name,
                "objectPreconditions": {"ifGenerationMatch": g},
            }),
            None => serde_json::json!({"name": name}),
        })
        .collect();
    let body = serde_json::json!({
        "sourceObjects": objects,
        "destination": {
            "contentType": "application/octet-stream",
            "metadata": metadata_json(metadata),
        },
    });
    Bytes::from(body.to_string())
}

impl Gcs {
    /// A new upload's id: 128 random bits, in hex.
    pub fn begin_parts(&self, url: &ObjectUrl) -> Result<String, StoreError> {
        let mut r = [0u8; 16];
        getrandom::fill(&mut r).map_err(|e| {
            StoreError::new(
                StoreErrorKind::Other,
                format!("cannot make an upload id for {url}: no randomness from the system ({e})"),
            )
        })?;
        Ok(hex(&r))
    }

    /// Uploads part `number` of `id` as its temporary object.
    pub async fn upload_part(
        &self,
        url: &ObjectUrl,
        id: &str,
        number: u32,
        body: Bytes,
    ) -> Result<Part, StoreError> {
        let id = checked_id(id)?;
        if number == 0 || u64::from(number) > LIMITS.max_parts {
            return Err(bad_request(format!(
                "part {number} of an upload to {url}: parts are numbered 1 to {}",
                LIMITS.max_parts
            )));
        }
        let r = self
            .upload("upload a part of", url, &part_key(id, number), body, &[])
            .await?;
        Ok(Part {
            number,
            tag: r.generation.unwrap_or_default(),
            crc: r.crc32c,
        })
    }

    /// Every temporary object of upload `id`, intermediates included.
    async fn temporaries(&self, url: &ObjectUrl, id: &str) -> Result<Vec<Resource>, StoreError> {
        let dir = upload_dir(checked_id(id)?);
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let q = Query::new(&dir).token(token);
            let l = self
                .list_raw("list the parts of an upload to", url, q)
                .await?;
            out.extend(l.items);
            match l.next_page_token.filter(|t| !t.is_empty()) {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }

    /// The parts held of upload `id`: number to (generation, size);
    /// `None` when there are none.
    pub async fn held_parts(
        &self,
        url: &ObjectUrl,
        id: &str,
    ) -> Result<Option<HashMap<u32, (String, u64)>>, StoreError> {
        let dir = upload_dir(checked_id(id)?);
        let parts: HashMap<u32, (String, u64)> = self
            .temporaries(url, id)
            .await?
            .into_iter()
            .filter_map(|r| {
                let n = part_number(&dir, &r.name)?;
                Some((n, (r.generation.clone().unwrap_or_default(), r.size())))
            })
            .collect();
        Ok((!parts.is_empty()).then_some(parts))
    }

    /// Composes `parts` (in the order given) into `url` with `metadata`,
    /// then deletes the upload's temporary objects.
    pub async fn compose_parts(
        &self,
        url: &ObjectUrl,
        id: &str,
        parts: Vec<Part>,
        metadata: &[(String, String)],
    ) -> Result<(), StoreError> {
        let id = checked_id(id)?;
        if parts.is_empty() {
            self.upload("upload", url, &url.key, Bytes::new(), metadata)
                .await?;
            return self.drop_parts(url, id).await;
        }
        let mut sources: Vec<(String, Option<String>)> = parts
            .iter()
            .map(|p| {
                let generation = p.tag.bytes().all(|c| c.is_ascii_digit()) && !p.tag.is_empty();
                (part_key(id, p.number), generation.then(|| p.tag.clone()))
            })
            .collect();
        let mut level = 0;
        while sources.len() > MAX_SOURCES {
            level += 1;
            sources = self.compose_level(url, id, level, &sources).await?;
        }
        self.compose(url, &url.key, &sources, metadata).await?;
        self.drop_parts(url, id).await
    }

    /// Composes `sources` in groups of [`MAX_SOURCES`] into intermediate
    /// objects of `level`; those, in order.
    async fn compose_level(
        &self,
        url: &ObjectUrl,
        id: &str,
        level: u32,
        sources: &[(String, Option<String>)],
    ) -> Result<Vec<(String, Option<String>)>, StoreError> {
        let mut out = Vec::new();
        for (i, group) in sources.chunks(MAX_SOURCES).enumerate() {
            let key = group_key(id, level, i);
            let r = self.compose(url, &key, group, &[]).await?;
            out.push((key, r.generation));
        }
        Ok(out)
    }

    /// One compose of `sources` into `key` of `url`'s bucket.
    async fn compose(
        &self,
        url: &ObjectUrl,
        key: &str,
        sources: &[(String, Option<String>)],
        metadata: &[(String, String)],
    ) -> Result<Resource, StoreError> {
        let path = format!("{}/compose", object_path(url, key));
        let body = compose_body(sources, metadata);
        let c = Call::new("compose the parts of", url, Method::POST, path)
            .body("application/json", body);
        let a = self.ok(&c).await?;
        parse_json(&a.body, &c, object::Objects::endpoint(self))
    }

    /// Deletes every temporary object of upload `id`.
    pub async fn drop_parts(&self, url: &ObjectUrl, id: &str) -> Result<(), StoreError> {
        for r in self.temporaries(url, id).await? {
            self.remove(url, &r.name).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let id = "00ff";
        assert_eq!(part_key(id, 7), ".haul-parts/00ff/00007");
        let dir = upload_dir(id);
        assert_eq!(part_number(&dir, &part_key(id, 10_000)), Some(10_000));
        assert_eq!(part_number(&dir, &group_key(id, 1, 3)), None);
        assert_eq!(part_number(&dir, ".haul-parts/other/00001"), None);
        assert!(checked_id("0123abcdef").is_ok());
        for bad in ["", "../x", "ab/cd", "zz"] {
            assert!(checked_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn compose_bodies() {
        let b = compose_body(
            &[("a".into(), Some("12".into())), ("b".into(), None)],
            &[("haul-mtime".into(), "3.4".into())],
        );
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            v["sourceObjects"][0]["objectPreconditions"]["ifGenerationMatch"],
            "12"
        );
        assert_eq!(v["sourceObjects"][1], serde_json::json!({"name": "b"}));
        assert_eq!(v["destination"]["metadata"]["haul-mtime"], "3.4");
    }
}
