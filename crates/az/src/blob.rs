//! [`Objects`] for Azure Blob Storage, over the Blob REST API: List Blobs,
//! Get Blob Properties, ranged Get Blob, Put Blob, Put Block, Get Block
//! List, Put Block List, Delete Blob. Each call builds its request here;
//! signing, XML and errors are their own modules.

use std::collections::HashMap;
use std::time::SystemTime;

use base64::Engine;
use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::Full;
use md5::{Digest, Md5};
use object::http::{Answer, Http, ATTEMPTS, QUICK};
use object::{Fut, Limits, ObjectInfo, ObjectUrl, Objects, Page, Part};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use store::{StoreError, StoreErrorKind};

use crate::credentials::{Account, Auth};
use crate::error::{code_and_message, Context};
use crate::{account_and_container, sign, xml};

/// The REST API version every request asks for.
pub const VERSION: &str = "2021-08-06";

/// The metadata name of a file's modification time: Azure's metadata
/// names are C# identifiers, so no '-'.
pub const MTIME_KEY: &str = "haul_mtime";

/// What is left as it is in a path segment or a query value.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

const MIB: u64 = 1 << 20;

/// Azure's limits for block blobs (API version 2019-12-12 and later).
pub const AZURE_LIMITS: Limits = Limits {
    max_parts: 50_000,
    // Azure has no minimum; haul sizes its parts from this.
    min_part: 5 * MIB,
    max_part: 4000 * MIB,
    max_object: 50_000 * 4000 * MIB,
    max_key: crate::MAX_KEY,
};

/// One storage account, as haul's object store.
pub struct Azure {
    acct: Account,
    http: Http,
    /// Blobs per listed page, when not the service's 5000 (tests).
    page_size: Option<u32>,
}

/// One request, before its date and signature.
struct Call {
    method: Method,
    /// After the endpoint, percent-encoded: `/CONTAINER/BLOB`.
    path: String,
    /// Names and values as they are, not encoded.
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    body: Bytes,
}

impl Call {
    fn new(method: Method, path: String) -> Call {
        Call {
            method,
            path,
            query: Vec::new(),
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    fn query(mut self, k: &str, v: impl Into<String>) -> Call {
        self.query.push((k.to_string(), v.into()));
        self
    }

    fn header(mut self, k: &str, v: impl Into<String>) -> Call {
        self.headers.push((k.to_string(), v.into()));
        self
    }

    /// `body`, with its Content-MD5, which the service checks.
    fn body(self, body: Bytes) -> Call {
        let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(&body));
        let mut c = self.header("Content-MD5", md5);
        c.body = body;
        c
    }

    fn metadata(self, metadata: &[(String, String)]) -> Call {
        metadata.iter().fold(self, |c, (k, v)| {
            c.header(&format!("x-ms-meta-{k}"), v.as_str())
        })
    }
}

/// `/CONTAINER/BLOB`, each part of the blob's name percent-encoded.
fn blob_path(url: &ObjectUrl) -> String {
    let (_, container) = account_and_container(url);
    let mut p = format!("/{container}");
    for seg in url.key.split('/') {
        p.push('/');
        p.extend(utf8_percent_encode(seg, UNRESERVED));
    }
    p
}

fn container_path(url: &ObjectUrl) -> String {
    format!("/{}", account_and_container(url).1)
}

/// A block's id: base64 of `ID-NNNNNN`, the same length for every block.
pub fn block_id(upload: &str, number: u32) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{upload}-{number:06}"))
}

/// The part number a block id names within `upload`, if it is one of its.
pub fn part_of(upload: &str, block: &str) -> Option<u32> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(block)
        .ok()?;
    let s = String::from_utf8(raw).ok()?;
    let n = s.strip_prefix(upload)?.strip_prefix('-')?;
    (n.len() == 6 && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
}

/// A header's value parsed.
fn header_as<T: std::str::FromStr>(a: &Answer, name: &str) -> Option<T> {
    a.header(name).and_then(|v| v.trim().parse().ok())
}

/// An ETag without its quotes, as listings write it.
fn bare_etag(e: &str) -> String {
    e.trim().trim_matches('"').to_string()
}

/// A modification time: haul's metadata where there is one, the store's
/// Last-Modified otherwise.
fn mtime(haul: Option<&str>, last_modified: Option<i64>) -> (i64, u32) {
    haul.and_then(object::list::parse_mtime)
        .unwrap_or((last_modified.unwrap_or(0), 0))
}

impl Azure {
    pub fn new(acct: Account, http: Http) -> Azure {
        Azure {
            acct,
            http,
            page_size: None,
        }
    }

    /// Lists at most `n` blobs a page (the service's default is 5000).
    pub fn with_page_size(mut self, n: u32) -> Azure {
        self.page_size = Some(n);
        self
    }

    fn cx<'a>(&'a self, what: &'a str, target: &'a str, url: &'a ObjectUrl) -> Context<'a> {
        let (account, container) = account_and_container(url);
        Context {
            what,
            target,
            endpoint: &self.acct.endpoint,
            account,
            container,
        }
    }

    /// `call` as an HTTP request, dated and signed.
    fn build(&self, call: &Call) -> Result<http::Request<Full<Bytes>>, StoreError> {
        let mut headers = call.headers.clone();
        headers.push(("x-ms-date".into(), crate::time::rfc1123(SystemTime::now())));
        headers.push(("x-ms-version".into(), VERSION.into()));
        if call.method == Method::PUT || !call.body.is_empty() {
            headers.push(("Content-Length".into(), call.body.len().to_string()));
        }
        let mut query: Vec<String> = call
            .query
            .iter()
            .map(|(k, v)| format!("{k}={}", utf8_percent_encode(v, UNRESERVED)))
            .collect();
        match &self.acct.auth {
            Auth::Sas(sas) => query.push(sas.clone()),
            Auth::Key(key) => {
                let path = format!("{}{}", self.acct.base_path, call.path);
                let req = sign::Request {
                    method: call.method.as_str(),
                    headers: &headers,
                    content_length: call.body.len(),
                    path: &path,
                    query: &call.query,
                };
                let sts = sign::string_to_sign(&self.acct.name, &req);
                let auth = sign::authorization(&self.acct.name, key, &sts);
                headers.push(("Authorization".into(), auth));
            }
        }
        let mut url = format!("{}{}", self.acct.endpoint, call.path);
        if !query.is_empty() {
            url.push('?');
            url.push_str(&query.join("&"));
        }
        object::http::request(call.method.clone(), &url, &headers, call.body.clone())
    }

    /// Sends `call` (retried `attempts` times); the answer, whatever its
    /// status, or why none came.
    async fn send(
        &self,
        attempts: u32,
        cx: &Context<'_>,
        call: &Call,
    ) -> Result<Answer, StoreError> {
        tracing::debug!(method = %call.method, path = %call.path, "azure request");
        let got = self.http.send(attempts, || self.build(call)).await?;
        got.map_err(|e| cx.unreachable(&e))
    }

    /// Sends `call`; its answer if it succeeded, its error otherwise.
    async fn ok(&self, attempts: u32, cx: &Context<'_>, call: &Call) -> Result<Answer, StoreError> {
        let a = self.send(attempts, cx, call).await?;
        if a.status.is_success() {
            Ok(a)
        } else {
            Err(cx.answered(&a))
        }
    }

    /// A List Blobs call under `url`'s key.
    fn list_call(
        &self,
        url: &ObjectUrl,
        delimiter: bool,
        token: Option<String>,
        max: Option<u32>,
    ) -> Call {
        let mut c = Call::new(Method::GET, container_path(url))
            .query("restype", "container")
            .query("comp", "list")
            .query("include", "metadata");
        if !url.key.is_empty() {
            c = c.query("prefix", url.key.as_str());
        }
        if delimiter {
            c = c.query("delimiter", "/");
        }
        if let Some(m) = token {
            c = c.query("marker", m);
        }
        match max {
            Some(n) => c.query("maxresults", n.to_string()),
            None => c,
        }
    }

    async fn listing(
        &self,
        attempts: u32,
        cx: &Context<'_>,
        call: &Call,
    ) -> Result<xml::Listing, StoreError> {
        let a = self.ok(attempts, cx, call).await?;
        xml::listing(&String::from_utf8_lossy(&a.body)).map_err(|e| cx.garbled(&e))
    }

    async fn do_list(
        &self,
        url: &ObjectUrl,
        delimiter: bool,
        token: Option<String>,
    ) -> Result<Page, StoreError> {
        let target = url.to_string();
        let cx = self.cx("list", &target, url);
        let call = self.list_call(url, delimiter, token, self.page_size);
        let l = self.listing(ATTEMPTS, &cx, &call).await?;
        let objects = l
            .blobs
            .into_iter()
            .map(|b| {
                let haul = b.metadata.iter().find(|(k, _)| k == MTIME_KEY);
                let t = mtime(haul.map(|(_, v)| v.as_str()), b.last_modified);
                (b.name, b.size, t)
            })
            .collect();
        Ok(Page {
            objects,
            prefixes: l.prefixes,
            next: l.next,
        })
    }

    async fn do_check(&self, url: &ObjectUrl) -> Result<bool, StoreError> {
        let target = url.to_string();
        let cx = self.cx("list", &target, url);
        let call = self.list_call(url, false, None, Some(1));
        Ok(!self.listing(QUICK, &cx, &call).await?.blobs.is_empty())
    }

    async fn do_head(&self, url: &ObjectUrl) -> Result<Option<ObjectInfo>, StoreError> {
        if url.key.is_empty() {
            return Ok(None);
        }
        let target = url.to_string();
        let cx = self.cx("look up", &target, url);
        let a = self
            .send(ATTEMPTS, &cx, &Call::new(Method::HEAD, blob_path(url)))
            .await?;
        if a.status == StatusCode::NOT_FOUND
            && code_and_message(&a).0.as_deref() != Some("ContainerNotFound")
        {
            return Ok(None);
        }
        if !a.status.is_success() {
            return Err(cx.answered(&a));
        }
        let size =
            header_as(&a, "content-length").ok_or_else(|| cx.garbled("no Content-Length"))?;
        let last_modified = a.header("last-modified").and_then(crate::time::parse);
        let haul = a.header(&format!("x-ms-meta-{MTIME_KEY}"));
        Ok(Some(ObjectInfo {
            url: url.clone(),
            size,
            version: a.header("etag").map(bare_etag),
            mtime: mtime(haul, last_modified),
        }))
    }

    async fn do_get_range(
        &self,
        info: &ObjectInfo,
        start: u64,
        len: u64,
    ) -> Result<Bytes, StoreError> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        let target = info.url.to_string();
        let cx = self.cx("read", &target, &info.url);
        let mut call = Call::new(Method::GET, blob_path(&info.url))
            .header("x-ms-range", format!("bytes={start}-{}", start + len - 1));
        if let Some(v) = &info.version {
            call = call.header("If-Match", format!("\"{v}\""));
        }
        let a = self.send(ATTEMPTS, &cx, &call).await?;
        match a.status {
            StatusCode::PRECONDITION_FAILED | StatusCode::RANGE_NOT_SATISFIABLE => {
                return Err(object::changed(&info.url))
            }
            s if !s.is_success() => return Err(cx.answered(&a)),
            _ => {}
        }
        // A 200 is the whole blob: the range is cut from it.
        let from = if a.status == StatusCode::OK { start } else { 0 };
        let body = a.body;
        let end = from.saturating_add(len);
        if (body.len() as u64) < end {
            return Err(object::changed(&info.url));
        }
        Ok(body.slice(from as usize..end as usize))
    }

    async fn do_put(
        &self,
        url: &ObjectUrl,
        body: Bytes,
        metadata: &[(String, String)],
    ) -> Result<(), StoreError> {
        let target = url.to_string();
        let cx = self.cx("write", &target, url);
        let call = Call::new(Method::PUT, blob_path(url))
            .header("x-ms-blob-type", "BlockBlob")
            .metadata(metadata)
            .body(body);
        self.ok(ATTEMPTS, &cx, &call).await.map(drop)
    }

    async fn do_put_part(
        &self,
        url: &ObjectUrl,
        id: &str,
        number: u32,
        body: Bytes,
    ) -> Result<Part, StoreError> {
        let target = url.to_string();
        let cx = self.cx("upload a part of", &target, url);
        let block = block_id(id, number);
        let call = Call::new(Method::PUT, blob_path(url))
            .query("comp", "block")
            .query("blockid", block.as_str())
            .body(body);
        self.ok(ATTEMPTS, &cx, &call).await?;
        Ok(Part {
            number,
            tag: block,
            crc: None,
        })
    }

    async fn do_list_parts(
        &self,
        url: &ObjectUrl,
        id: &str,
    ) -> Result<Option<HashMap<u32, (String, u64)>>, StoreError> {
        let target = url.to_string();
        let cx = self.cx("list the parts uploaded of", &target, url);
        let call = Call::new(Method::GET, blob_path(url))
            .query("comp", "blocklist")
            .query("blocklisttype", "uncommitted");
        let a = self.send(ATTEMPTS, &cx, &call).await?;
        if a.status == StatusCode::NOT_FOUND
            && code_and_message(&a).0.as_deref() != Some("ContainerNotFound")
        {
            return Ok(None);
        }
        if !a.status.is_success() {
            return Err(cx.answered(&a));
        }
        let blocks = xml::uncommitted_blocks(&String::from_utf8_lossy(&a.body))
            .map_err(|e| cx.garbled(&e))?;
        let parts: HashMap<u32, (String, u64)> = blocks
            .into_iter()
            .filter_map(|(b, size)| part_of(id, &b).map(|n| (n, (b, size))))
            .collect();
        Ok((!parts.is_empty()).then_some(parts))
    }

    async fn do_complete(
        &self,
        url: &ObjectUrl,
        id: &str,
        parts: Vec<Part>,
        metadata: &[(String, String)],
    ) -> Result<(), StoreError> {
        let target = url.to_string();
        let cx = self.cx("complete the upload of", &target, url);
        let ids: Vec<String> = parts.iter().map(|p| block_id(id, p.number)).collect();
        let call = Call::new(Method::PUT, blob_path(url))
            .query("comp", "blocklist")
            .metadata(metadata)
            .body(Bytes::from(xml::block_list(&ids)));
        self.ok(ATTEMPTS, &cx, &call).await.map(drop)
    }

    async fn do_delete(&self, url: &ObjectUrl) -> Result<(), StoreError> {
        let target = url.to_string();
        let cx = self.cx("delete", &target, url);
        let a = self
            .send(ATTEMPTS, &cx, &Call::new(Method::DELETE, blob_path(url)))
            .await?;
        if a.status.is_success() {
            return Ok(());
        }
        let e = cx.answered(&a);
        match e.kind {
            StoreErrorKind::NotFound => Ok(()),
            _ => Err(e),
        }
    }
}

/// A fresh upload id: 16 random hex digits.
fn new_upload_id() -> Result<String, StoreError> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| {
        StoreError::new(
            StoreErrorKind::Other,
            format!("cannot draw a random upload id: {e}"),
        )
    })?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

impl Objects for Azure {
    fn endpoint(&self) -> &str {
        &self.acct.endpoint
    }

    fn limits(&self) -> Limits {
        AZURE_LIMITS
    }

    fn mtime_key(&self) -> &'static str {
        MTIME_KEY
    }

    fn list<'a>(
        &'a self,
        url: &'a ObjectUrl,
        delimiter: bool,
        token: Option<String>,
    ) -> Fut<'a, Page> {
        Box::pin(self.do_list(url, delimiter, token))
    }

    fn check<'a>(&'a self, url: &'a ObjectUrl) -> Fut<'a, bool> {
        Box::pin(self.do_check(url))
    }

    fn head<'a>(&'a self, url: &'a ObjectUrl) -> Fut<'a, Option<ObjectInfo>> {
        Box::pin(self.do_head(url))
    }

    fn get_range<'a>(&'a self, info: &'a ObjectInfo, start: u64, len: u64) -> Fut<'a, Bytes> {
        Box::pin(self.do_get_range(info, start, len))
    }

    fn put<'a>(
        &'a self,
        url: &'a ObjectUrl,
        body: Bytes,
        metadata: &'a [(String, String)],
    ) -> Fut<'a, ()> {
        Box::pin(self.do_put(url, body, metadata))
    }

    /// Nothing is asked of the store: blocks are staged under the blob's
    /// name with ids that carry this upload's id.
    fn begin<'a>(
        &'a self,
        _url: &'a ObjectUrl,
        _metadata: &'a [(String, String)],
    ) -> Fut<'a, String> {
        Box::pin(async move { new_upload_id() })
    }

    fn put_part<'a>(
        &'a self,
        url: &'a ObjectUrl,
        id: &'a str,
        number: u32,
        body: Bytes,
    ) -> Fut<'a, Part> {
        Box::pin(self.do_put_part(url, id, number, body))
    }

    fn list_parts<'a>(
        &'a self,
        url: &'a ObjectUrl,
        id: &'a str,
    ) -> Fut<'a, Option<HashMap<u32, (String, u64)>>> {
        Box::pin(self.do_list_parts(url, id))
    }

    fn complete<'a>(
        &'a self,
        url: &'a ObjectUrl,
        id: &'a str,
        parts: Vec<Part>,
        metadata: &'a [(String, String)],
    ) -> Fut<'a, ()> {
        Box::pin(self.do_complete(url, id, parts, metadata))
    }

    /// Azure has no call that drops uncommitted blocks: the service
    /// discards them a week after they were staged, or when another
    /// block list is committed to the blob. Nothing to do.
    fn abort<'a>(&'a self, _url: &'a ObjectUrl, _id: &'a str) -> Fut<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn delete<'a>(&'a self, url: &'a ObjectUrl) -> Fut<'a, ()> {
        Box::pin(self.do_delete(url))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_ids() {
        let b = block_id("0123456789abcdef", 7);
        assert_eq!(b.len(), block_id("0123456789abcdef", 50_000).len());
        assert_eq!(part_of("0123456789abcdef", &b), Some(7));
        assert_eq!(part_of("fedcba9876543210", &b), None);
        assert_eq!(part_of("0123456789abcdef", "!!"), None);
        let id = new_upload_id().unwrap();
        assert!(id.len() == 16 && id.bytes().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn paths_keep_slashes_and_encode_the_rest() {
        let u = crate::parse("az://acct1/data/a b/c&d/é+%.bin").unwrap();
        assert_eq!(blob_path(&u), "/data/a%20b/c%26d/%C3%A9%2B%25.bin");
        assert_eq!(container_path(&u), "/data");
    }

    #[test]
    fn limits_multiply_out() {
        assert_eq!(
            AZURE_LIMITS.max_object,
            AZURE_LIMITS.max_parts * AZURE_LIMITS.max_part
        );
        assert_eq!(mtime(Some("5.000000001"), Some(9)), (5, 1));
        assert_eq!(mtime(Some("junk"), Some(9)), (9, 0));
    }
}
