//! Each of `object`'s calls as the S3 request that does it: ListObjectsV2,
//! HeadObject, ranged GetObject bound to the listed ETag (`If-Match`),
//! PutObject, and multipart uploads (Create, UploadPart, ListParts,
//! Complete, Abort) with CRC32C on every body, so that the store itself
//! refuses damage.

use std::collections::HashMap;

use aws_config::retry::RetryConfig;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use object::list::parse_mtime;
use object::{Fut, ObjectInfo, ObjectUrl, Objects, Page, Part};
use store::{StoreError, StoreErrorKind};

use crate::client::S3;

/// A write request (PutObject, CreateMultipartUpload, CopyObject) with
/// what every object written carries: `--s3-storage-class`, `--s3-sse`,
/// `--s3-sse-kms-key-id`, `--s3-acl`. One macro, as each request is a
/// builder of its own type with the same methods.
macro_rules! written {
    ($req:expr, $w:expr) => {{
        use aws_sdk_s3::types::{ObjectCannedAcl, ServerSideEncryption, StorageClass};
        let w: &crate::client::WriteOptions = $w;
        let mut r = $req;
        if let Some(c) = &w.storage_class {
            r = r.storage_class(StorageClass::from(c.as_str()));
        }
        if let Some(e) = &w.sse {
            r = r.server_side_encryption(ServerSideEncryption::from(e.as_str()));
        }
        if let Some(k) = &w.kms_key_id {
            r = r.ssekms_key_id(k);
        }
        if let Some(a) = &w.acl {
            r = r.acl(ObjectCannedAcl::from(a.as_str()));
        }
        r
    }};
}

/// What a copy source's key escapes: all but unreserved characters and '/'.
const COPY_SOURCE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');
use crate::error::from_sdk;

/// The metadata name rclone keeps a file's modification time under on
/// S3, as float seconds: the same form as haul's own.
pub const RCLONE_MTIME: &str = "mtime";

/// `metadata`, and where it holds haul's time (under `key`), the same
/// under rclone's name, so that haul and rclone sync one bucket
/// incrementally.
fn with_rclone_mtime(metadata: &[(String, String)], key: &str) -> Vec<(String, String)> {
    let mut all = metadata.to_vec();
    if let Some((_, v)) = metadata.iter().find(|(k, _)| k == key) {
        all.push((RCLONE_MTIME.to_string(), v.clone()));
    }
    all
}

/// The status of the answer an SDK error came with, if any.
trait RawStatus {
    fn raw_response_status(&self) -> Option<u16>;
}

impl<E> RawStatus for aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse> {
    fn raw_response_status(&self) -> Option<u16> {
        self.raw_response().map(|r| r.status().as_u16())
    }
}

impl Objects for S3 {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn list<'a>(
        &'a self,
        url: &'a ObjectUrl,
        delimiter: bool,
        token: Option<String>,
    ) -> Fut<'a, Page> {
        Box::pin(async move {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&url.bucket)
                .prefix(&url.key)
                .set_delimiter(delimiter.then(|| "/".to_string()))
                .set_continuation_token(token)
                .send()
                .await
                .map_err(|e| from_sdk(e, "list", url, &self.endpoint))?;
            let objects = page
                .contents()
                .iter()
                .filter_map(|o| {
                    let t = o
                        .last_modified()
                        .map_or((0, 0), |t| (t.secs(), t.subsec_nanos()));
                    Some((o.key()?.to_string(), o.size().unwrap_or(0).max(0) as u64, t))
                })
                .collect();
            let prefixes = page
                .common_prefixes()
                .iter()
                .filter_map(|p| p.prefix().map(str::to_string))
                .collect();
            let next = match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => Some(t.to_string()),
                _ => None,
            };
            Ok(Page {
                objects,
                prefixes,
                next,
            })
        })
    }

    fn check<'a>(&'a self, url: &'a ObjectUrl) -> Fut<'a, bool> {
        Box::pin(async move {
            // Few retries here: a wrong endpoint is told in a second, not
            // after the minute a transfer would ride out.
            let quick = aws_sdk_s3::config::Builder::default()
                .retry_config(RetryConfig::standard().with_max_attempts(3));
            let out = self
                .client
                .list_objects_v2()
                .bucket(&url.bucket)
                .prefix(&url.key)
                .max_keys(1)
                .customize()
                .config_override(quick)
                .send()
                .await
                .map_err(|e| from_sdk(e, "list", url, &self.endpoint))?;
            Ok(out.key_count().unwrap_or(0) > 0 || !out.contents().is_empty())
        })
    }

    fn head<'a>(&'a self, url: &'a ObjectUrl) -> Fut<'a, Option<ObjectInfo>> {
        Box::pin(async move {
            let r = self
                .client
                .head_object()
                .bucket(&url.bucket)
                .key(&url.key)
                .send()
                .await;
            let out = match r {
                Ok(o) => o,
                Err(e) if e.raw_response_status() == Some(404) => return Ok(None),
                Err(e) => return Err(from_sdk(e, "read", url, &self.endpoint)),
            };
            let listed = out
                .last_modified()
                .map_or((0, 0), |t| (t.secs(), t.subsec_nanos()));
            // haul's own time, else rclone's: the two sync one bucket.
            let mtime = out
                .metadata()
                .and_then(|m| m.get(self.mtime_key()).or_else(|| m.get(RCLONE_MTIME)))
                .and_then(|v| parse_mtime(v))
                .unwrap_or(listed);
            Ok(Some(ObjectInfo {
                url: url.clone(),
                size: out.content_length().unwrap_or(0).max(0) as u64,
                version: out.e_tag().map(str::to_string),
                mtime,
            }))
        })
    }

    fn get_range<'a>(&'a self, info: &'a ObjectInfo, start: u64, len: u64) -> Fut<'a, Bytes> {
        Box::pin(async move {
            let mut req = self
                .client
                .get_object()
                .bucket(&info.url.bucket)
                .key(&info.url.key)
                .range(format!("bytes={}-{}", start, start + len - 1));
            if let Some(tag) = &info.version {
                req = req.if_match(tag);
            }
            let out = match req.send().await {
                Ok(o) => o,
                Err(e) if e.raw_response_status() == Some(412) => {
                    return Err(object::changed(&info.url))
                }
                Err(e) => return Err(from_sdk(e, "read", &info.url, &self.endpoint)),
            };
            let body = out.body.collect().await.map_err(|e| {
                StoreError::new(
                    StoreErrorKind::Other,
                    format!("reading {} from {}: {e}", info.url, self.endpoint),
                )
            })?;
            Ok(body.into_bytes())
        })
    }

    fn put<'a>(
        &'a self,
        url: &'a ObjectUrl,
        body: Bytes,
        metadata: &'a [(String, String)],
    ) -> Fut<'a, ()> {
        Box::pin(async move {
            let mut req = written!(self.client.put_object(), &self.write)
                .bucket(&url.bucket)
                .key(&url.key)
                .checksum_algorithm(ChecksumAlgorithm::Crc32C)
                .body(ByteStream::from(body));
            for (k, v) in with_rclone_mtime(metadata, self.mtime_key()) {
                req = req.metadata(k, v);
            }
            let r = match self.tls {
                true => req.customize().disable_payload_signing().send().await,
                false => req.send().await,
            };
            r.map_err(|e| from_sdk(e, "write", url, &self.endpoint))?;
            Ok(())
        })
    }

    fn begin<'a>(
        &'a self,
        url: &'a ObjectUrl,
        metadata: &'a [(String, String)],
    ) -> Fut<'a, String> {
        Box::pin(async move {
            let mut req = written!(self.client.create_multipart_upload(), &self.write)
                .bucket(&url.bucket)
                .key(&url.key)
                .checksum_algorithm(ChecksumAlgorithm::Crc32C);
            for (k, v) in with_rclone_mtime(metadata, self.mtime_key()) {
                req = req.metadata(k, v);
            }
            let out = req
                .send()
                .await
                .map_err(|e| from_sdk(e, "start an upload of", url, &self.endpoint))?;
            match out.upload_id() {
                Some(id) if !id.is_empty() => Ok(id.to_string()),
                _ => Err(StoreError::new(
                    StoreErrorKind::Other,
                    format!("{url} at {} started an upload without an id", self.endpoint),
                )),
            }
        })
    }

    fn put_part<'a>(
        &'a self,
        url: &'a ObjectUrl,
        id: &'a str,
        number: u32,
        body: Bytes,
    ) -> Fut<'a, Part> {
        Box::pin(async move {
            let r = self
                .client
                .upload_part()
                .bucket(&url.bucket)
                .key(&url.key)
                .upload_id(id)
                .part_number(number as i32)
                .checksum_algorithm(ChecksumAlgorithm::Crc32C)
                .body(ByteStream::from(body));
            let r = match self.tls {
                true => r.customize().disable_payload_signing().send().await,
                false => r.send().await,
            };
            let out = r.map_err(|e| {
                from_sdk(e, &format!("upload part {number} of"), url, &self.endpoint)
            })?;
            Ok(Part {
                number,
                tag: out.e_tag().unwrap_or_default().to_string(),
                crc: out.checksum_crc32_c().map(str::to_string),
            })
        })
    }

    fn list_parts<'a>(
        &'a self,
        url: &'a ObjectUrl,
        id: &'a str,
    ) -> Fut<'a, Option<HashMap<u32, (String, u64)>>> {
        Box::pin(async move {
            let mut parts = HashMap::new();
            let mut marker: Option<String> = None;
            for _ in 0..=self.limits().max_parts / 1000 {
                let r = self
                    .client
                    .list_parts()
                    .bucket(&url.bucket)
                    .key(&url.key)
                    .upload_id(id)
                    .set_part_number_marker(marker.take())
                    .send()
                    .await;
                let out = match r {
                    Ok(o) => o,
                    // Aborted, or completed, meanwhile: nothing to take over.
                    Err(e)
                        if e.code() == Some("NoSuchUpload")
                            || e.raw_response_status() == Some(404) =>
                    {
                        return Ok(None)
                    }
                    Err(e) => return Err(from_sdk(e, "list the parts of", url, &self.endpoint)),
                };
                for p in out.parts() {
                    if let (Some(n), Some(tag)) = (p.part_number(), p.e_tag()) {
                        let len = p.size().unwrap_or(0).max(0) as u64;
                        parts.insert(n.max(0) as u32, (tag.to_string(), len));
                    }
                }
                match out.next_part_number_marker() {
                    Some(m) if out.is_truncated() == Some(true) => marker = Some(m.to_string()),
                    _ => break,
                }
            }
            Ok(Some(parts))
        })
    }

    fn complete<'a>(
        &'a self,
        url: &'a ObjectUrl,
        id: &'a str,
        parts: Vec<Part>,
        _metadata: &'a [(String, String)],
    ) -> Fut<'a, ()> {
        Box::pin(async move {
            let parts = parts
                .into_iter()
                .map(|p| {
                    CompletedPart::builder()
                        .part_number(p.number as i32)
                        .e_tag(p.tag)
                        .set_checksum_crc32_c(p.crc)
                        .build()
                })
                .collect();
            self.client
                .complete_multipart_upload()
                .bucket(&url.bucket)
                .key(&url.key)
                .upload_id(id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map_err(|e| from_sdk(e, "complete the upload of", url, &self.endpoint))?;
            Ok(())
        })
    }

    fn abort<'a>(&'a self, url: &'a ObjectUrl, id: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            self.client
                .abort_multipart_upload()
                .bucket(&url.bucket)
                .key(&url.key)
                .upload_id(id)
                .send()
                .await
                .map_err(|e| from_sdk(e, "abort the upload of", url, &self.endpoint))?;
            Ok(())
        })
    }

    /// CopyObject, bound to the listed version by its ETag; up to 5 GiB,
    /// S3's limit for one copy.
    fn copy<'a>(&'a self, from: &'a ObjectInfo, to: &'a ObjectUrl) -> Fut<'a, bool> {
        Box::pin(async move {
            if from.size > object::S3_LIMITS.max_part {
                return Ok(false);
            }
            let source = format!(
                "{}/{}",
                from.url.bucket,
                percent_encoding::utf8_percent_encode(&from.url.key, COPY_SOURCE)
            );
            let mut req = written!(self.client.copy_object(), &self.write)
                .bucket(&to.bucket)
                .key(&to.key)
                .copy_source(source)
                .metadata_directive(aws_sdk_s3::types::MetadataDirective::Copy);
            if let Some(tag) = &from.version {
                req = req.copy_source_if_match(tag);
            }
            match req.send().await {
                Ok(_) => Ok(true),
                Err(e) if e.raw_response_status() == Some(412) => Err(object::changed(&from.url)),
                Err(e) => Err(from_sdk(e, "copy", to, &self.endpoint)),
            }
        })
    }

    fn delete<'a>(&'a self, url: &'a ObjectUrl) -> Fut<'a, ()> {
        Box::pin(async move {
            self.client
                .delete_object()
                .bucket(&url.bucket)
                .key(&url.key)
                .send()
                .await
                .map_err(|e| from_sdk(e, "delete", url, &self.endpoint))?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod write_tests {
    use aws_sdk_s3::types::{ObjectCannedAcl, ServerSideEncryption, StorageClass};

    /// Each write option reaches the requests that write an object.
    #[test]
    fn write_options_reach_every_writing_request() {
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .build();
        let client = aws_sdk_s3::Client::from_conf(conf);
        let w = crate::client::WriteOptions {
            storage_class: Some("GLACIER_IR".into()),
            sse: Some("aws:kms".into()),
            kms_key_id: Some("alias/data".into()),
            acl: Some("bucket-owner-full-control".into()),
        };
        let put = written!(client.put_object(), &w);
        assert_eq!(put.get_storage_class(), &Some(StorageClass::GlacierIr));
        assert_eq!(
            put.get_server_side_encryption(),
            &Some(ServerSideEncryption::AwsKms)
        );
        assert_eq!(put.get_ssekms_key_id().as_deref(), Some("alias/data"));
        assert_eq!(
            put.get_acl(),
            &Some(ObjectCannedAcl::BucketOwnerFullControl)
        );
        let begin = written!(client.create_multipart_upload(), &w);
        assert_eq!(begin.get_storage_class(), &Some(StorageClass::GlacierIr));
        assert_eq!(
            begin.get_acl(),
            &Some(ObjectCannedAcl::BucketOwnerFullControl)
        );
        let copy = written!(client.copy_object(), &w);
        assert_eq!(
            copy.get_server_side_encryption(),
            &Some(ServerSideEncryption::AwsKms)
        );
        let none = written!(client.put_object(), &crate::client::WriteOptions::default());
        assert_eq!(none.get_storage_class(), &None);
    }
}
