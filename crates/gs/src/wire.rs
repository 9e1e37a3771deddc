//! What GCS's JSON API speaks: object resources and listings as serde
//! types, keys encoded into paths and queries, RFC 3339 times, the
//! multipart/related body of an upload with its metadata.

use std::collections::HashMap;

use base64::Engine;
use bytes::{Bytes, BytesMut};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Deserialize;

/// What is left as is in a path segment or a query value: RFC 3986's
/// unreserved characters. Everything else, '/' included, is encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `s` as one path segment or query value.
pub fn enc(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// An object resource, as far as haul reads it.
#[derive(Debug, Deserialize)]
pub struct Resource {
    pub name: String,
    /// int64s are strings in the JSON API.
    #[serde(default)]
    pub size: Option<String>,
    #[serde(default)]
    pub updated: Option<String>,
    #[serde(default)]
    pub generation: Option<String>,
    #[serde(default)]
    pub metadata: Option<HashMap<String, String>>,
    #[serde(default)]
    pub crc32c: Option<String>,
}

impl Resource {
    pub fn size(&self) -> u64 {
        self.size
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    /// haul's own modification time where a haul wrote the object
    /// (`mtime_key`), the store's `updated` otherwise.
    pub fn mtime(&self, mtime_key: &str) -> (i64, u32) {
        self.metadata
            .as_ref()
            .and_then(|m| m.get(mtime_key))
            .and_then(|v| object::list::parse_mtime(v))
            .or_else(|| self.updated.as_deref().and_then(rfc3339))
            .unwrap_or((0, 0))
    }
}

/// One page of a listing.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listing {
    #[serde(default)]
    pub items: Vec<Resource>,
    #[serde(default)]
    pub prefixes: Vec<String>,
    #[serde(default)]
    pub next_page_token: Option<String>,
}

/// The JSON of an object resource to create: its name, metadata, and
/// the CRC32C of its body (the store refuses a body that does not
/// match). CRC32C, not MD5: the checksum Google recommends, kept for
/// composite objects too, and computed by the CPU's own instruction at
/// a fraction of MD5's cost.
pub fn new_object(name: &str, metadata: &[(String, String)], body: &[u8]) -> String {
    let mut o = serde_json::Map::new();
    o.insert("name".into(), name.into());
    if !metadata.is_empty() {
        o.insert("metadata".into(), metadata_json(metadata));
    }
    o.insert("crc32c".into(), crc32c_base64(body).into());
    serde_json::Value::Object(o).to_string()
}

/// Metadata pairs as a JSON object.
pub fn metadata_json(metadata: &[(String, String)]) -> serde_json::Value {
    let m: serde_json::Map<String, serde_json::Value> = metadata
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::Value::Object(m)
}

/// GCS's form of a CRC32C: base64 of its four bytes, big-endian.
fn crc32c_base64(body: &[u8]) -> String {
    let crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, body) as u32;
    base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())
}

/// A multipart/related body: the resource's JSON, then the media. Its
/// content type, with a boundary found in neither part.
pub fn multipart(resource: &str, media: &Bytes) -> (String, Bytes) {
    let boundary = boundary(resource.as_bytes(), media);
    let head = format!(
        "--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{resource}\r\n\
         --{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n"
    );
    let tail = format!("\r\n--{boundary}--\r\n");
    let mut b = BytesMut::with_capacity(head.len() + media.len() + tail.len());
    b.extend_from_slice(head.as_bytes());
    b.extend_from_slice(media);
    b.extend_from_slice(tail.as_bytes());
    let ctype = format!("multipart/related; boundary={boundary}");
    (ctype, b.freeze())
}

/// A boundary that occurs in neither part (random, so it almost never
/// needs a second try).
fn boundary(a: &[u8], b: &[u8]) -> String {
    loop {
        let mut r = [0u8; 12];
        if getrandom::fill(&mut r).is_err() {
            r = [7; 12];
        }
        let s = format!("haul-{}", hex(&r));
        let found = |hay: &[u8]| hay.windows(s.len()).any(|w| w == s.as_bytes());
        if !found(a) && !found(b) {
            return s;
        }
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// An RFC 3339 time (`2024-05-01T10:20:30.123456Z`, or with an offset)
/// as seconds and nanoseconds since the epoch.
pub fn rfc3339(s: &str) -> Option<(i64, u32)> {
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = s.get(19..)?;
    let mut nanos = 0u32;
    if let Some(f) = rest.strip_prefix('.') {
        let digits = f.bytes().take_while(|c| c.is_ascii_digit()).count();
        let frac = &f[..digits];
        let padded = format!("{:0<9}", &frac[..digits.min(9)]);
        nanos = padded.parse().ok()?;
        rest = &f[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) => {
            let oh: i64 = o.get(1..3)?.parse().ok()?;
            let om: i64 = o.get(4..6)?.parse().ok()?;
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (oh * 3600 + om * 60)
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset;
    Some((secs, nanos))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard
/// Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Where the temporary objects of uploads in parts lie, in each bucket.
pub const PARTS_DIR: &str = ".haul-parts/";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(rfc3339("1970-01-01T00:00:00Z"), Some((0, 0)));
        assert_eq!(
            rfc3339("2026-11-28T05:07:15.66183Z"),
            Some((1_795_842_435, 661_830_000))
        );
        assert_eq!(
            rfc3339("2000-03-01T00:00:00.5+01:00"),
            Some((951_865_200, 500_000_000))
        );
        assert_eq!(
            rfc3339("1969-12-31T23:59:59.123456789123Z"),
            Some((-1, 123_456_789))
        );
        for bad in [
            "",
            "2024-01-01",
            "2024-01-01T00:00:00",
            "x024-01-01T00:00:00Z",
        ] {
            assert_eq!(rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn keys_are_one_segment() {
        assert_eq!(enc("a/b c+d%é~_.-"), "a%2Fb%20c%2Bd%25%C3%A9~_.-");
    }

    #[test]
    fn multipart_bodies() {
        let media = Bytes::from_static(b"hello");
        let res = new_object("k", &[("haul-mtime".into(), "1.2".into())], &media);
        let v: serde_json::Value = serde_json::from_str(&res).unwrap();
        assert_eq!(v["metadata"]["haul-mtime"], "1.2");
        // CRC32C("hello") = 0x9a71bb4c.
        assert_eq!(v["crc32c"], "mnG7TA==");
        let (ctype, body) = multipart(&res, &media);
        let b = ctype.strip_prefix("multipart/related; boundary=").unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(text.starts_with(&format!("--{b}\r\n")));
        assert!(text.ends_with(&format!("\r\nhello\r\n--{b}--\r\n")));
    }
}
