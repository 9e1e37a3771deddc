//! The AWS SDK's S3 client, configured by the conventions people already
//! have (environment variables, `~/.aws/credentials` and `config`
//! profiles, instance metadata, `AWS_ENDPOINT_URL`), with retries and
//! backoff for `SlowDown`.

use std::sync::Arc;
use std::time::Duration;

use aws_config::environment::EnvironmentVariableRegionProvider;
use aws_config::meta::region::RegionProviderChain;
use aws_config::profile::ProfileFileRegionProvider;
use aws_config::retry::RetryConfig;
use aws_config::BehaviorVersion;
use aws_sdk_s3::Client;
use object::{Store, Tuning};
use store::{StoreError, StoreErrorKind};

/// How to reach the store, from the command line.
#[derive(Debug, Clone, Default)]
pub struct S3Options {
    /// A profile of `~/.aws/config` and `credentials` (`--profile`).
    pub profile: Option<String>,
    /// An S3-compatible endpoint (`--s3-endpoint`; `AWS_ENDPOINT_URL`
    /// otherwise). Addressing is then path-style, which such stores need,
    /// unless `addressing` says otherwise.
    pub endpoint: Option<String>,
    /// `--s3-region`, before the environment's and the profile's.
    pub region: Option<String>,
    /// `--s3-force-path-style` (`Some(true)`) or `--s3-virtual-host`
    /// (`Some(false)`); `None`: path-style for a custom endpoint only.
    pub path_style: Option<bool>,
    /// `--ca-bundle`, else `AWS_CA_BUNDLE`: PEM certificates trusted
    /// beside the system's (a store behind a private CA).
    pub ca_bundle: Option<std::path::PathBuf>,
    /// What every object written carries.
    pub write: WriteOptions,
}

/// What every object haul writes to S3 carries: a storage class,
/// server-side encryption, a canned ACL (the store's names, checked by
/// the command line).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// `--s3-storage-class`: STANDARD, STANDARD_IA, GLACIER_IR, ...
    pub storage_class: Option<String>,
    /// `--s3-sse`: `AES256` (SSE-S3) or `aws:kms` (SSE-KMS).
    pub sse: Option<String>,
    /// `--s3-sse-kms-key-id`: the KMS key of SSE-KMS.
    pub kms_key_id: Option<String>,
    /// `--s3-acl`: private, bucket-owner-full-control, ...
    pub acl: Option<String>,
}

/// The SDK's client, and what haul's calls need beside it.
pub struct S3 {
    pub(crate) client: Client,
    /// Where the store is, for messages.
    pub(crate) endpoint: String,
    /// Requests travel over TLS, which protects bodies in transit: an
    /// upload's body is then not hashed again for its signature (SigV4's
    /// SHA-256 of the payload costs both ends about as much as all of
    /// haul's own hashing); its CRC32C still goes with it. Over plain
    /// HTTP the payload stays signed.
    pub(crate) tls: bool,
    /// What every object written carries.
    pub(crate) write: WriteOptions,
}

/// Builds a client from `opts` and the environment. Nothing is asked of
/// the store yet: [`Store::check`] does that.
pub fn connect(opts: &S3Options, tuning: &Tuning) -> Result<Arc<Store>, StoreError> {
    if let Some(p) = &opts.profile {
        check_profile(p)?;
    }
    let rt = object::store::runtime("haul-s3")?;
    let endpoint = opts
        .endpoint
        .clone()
        .or_else(|| std::env::var("AWS_ENDPOINT_URL_S3").ok())
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
        .filter(|e| !e.is_empty());
    // SlowDown and 503s are retried with backoff, as the SDK's standard
    // mode does, but longer: a bulk transfer outlasts a throttling
    // store's bad minute.
    let retry = RetryConfig::standard()
        .with_max_attempts(10)
        .with_initial_backoff(Duration::from_millis(200))
        .with_max_backoff(Duration::from_secs(20));
    // A store of one's own needs no region but one to sign with: its
    // region is asked of the environment and profile, never of an
    // instance's metadata, which only an EC2 host answers.
    let mut profile_region = ProfileFileRegionProvider::builder();
    if let Some(p) = &opts.profile {
        profile_region = profile_region.profile_name(p);
    }
    let named = opts.region.clone().map(aws_config::Region::new);
    let region = match &endpoint {
        Some(_) => RegionProviderChain::first_try(named)
            .or_else(EnvironmentVariableRegionProvider::new())
            .or_else(profile_region.build())
            .or_else("us-east-1"),
        None => RegionProviderChain::first_try(named)
            .or_default_provider()
            .or_else("us-east-1"),
    };
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .region(region)
        .retry_config(retry);
    if let Some(p) = &opts.profile {
        loader = loader.profile_name(p);
    }
    if let Some(e) = &endpoint {
        loader = loader.endpoint_url(e);
    }
    if let Some(http) = trusting(opts)? {
        loader = loader.http_client(http);
    }
    let conf = rt.block_on(loader.load());
    let s3 = aws_sdk_s3::config::Builder::from(&conf)
        .force_path_style(opts.path_style.unwrap_or(endpoint.is_some()))
        .build();
    let tls = endpoint
        .as_deref()
        .is_none_or(|e| e.starts_with("https://"));
    let api = S3 {
        write: opts.write.clone(),
        tls,
        client: Client::from_conf(s3),
        endpoint: endpoint.unwrap_or_else(|| "AWS S3".into()),
    };
    Ok(Store::new(rt, Arc::new(api), tuning))
}

/// An HTTPS client that trusts the certificates of `--ca-bundle` (else
/// `AWS_CA_BUNDLE`, which the other AWS SDKs and the CLI read) beside the
/// system's; `None` where neither names a file.
fn trusting(opts: &S3Options) -> Result<Option<aws_sdk_s3::config::SharedHttpClient>, StoreError> {
    use aws_smithy_http_client::tls;
    let Some(path) = opts.ca_bundle.clone().or_else(|| {
        std::env::var_os("AWS_CA_BUNDLE")
            .filter(|v| !v.is_empty())
            .map(Into::into)
    }) else {
        return Ok(None);
    };
    let pem = std::fs::read(&path).map_err(|e| StoreError::io("read the CA bundle", &path, &e))?;
    if !pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
        return Err(StoreError::new(
            StoreErrorKind::BadRequest,
            format!("{}: no PEM certificate in it (-----BEGIN CERTIFICATE-----); name a CA bundle in PEM", path.display()),
        ));
    }
    let trust = tls::TrustStore::empty()
        .with_native_roots(true)
        .with_pem_certificate(pem);
    let context = tls::TlsContext::builder()
        .with_trust_store(trust)
        .build()
        .map_err(|e| {
            StoreError::new(
                StoreErrorKind::BadRequest,
                format!("{}: {e}", path.display()),
            )
        })?;
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::AwsLc,
        ))
        .tls_context(context)
        .build_https();
    Ok(Some(http))
}

/// The AWS files, as the SDK finds them: `AWS_CONFIG_FILE` and
/// `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/config` and `credentials`.
fn aws_files() -> [std::path::PathBuf; 2] {
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    let or = |var: &str, name: &str| {
        std::env::var_os(var)
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| home.join(".aws").join(name))
    };
    [
        or("AWS_CONFIG_FILE", "config"),
        or("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
    ]
}

/// The profiles a file names: `[profile NAME]` or `[NAME]` sections.
fn profiles_in(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix('[')?.strip_suffix(']'))
        .map(|s| s.trim().trim_start_matches("profile ").trim().to_string())
        .collect()
}

/// `--profile NAME` names a profile one of the AWS files has; otherwise
/// the user hears that, not "found no credentials".
fn check_profile(name: &str) -> Result<(), StoreError> {
    let files = aws_files();
    let mut known: Vec<String> = files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| profiles_in(&t))
        .collect();
    if known.iter().any(|p| p == name) {
        return Ok(());
    }
    known.sort();
    known.dedup();
    let there = match known.is_empty() {
        true => "no profiles are there".to_string(),
        false => format!("the profiles there are {}", known.join(", ")),
    };
    Err(StoreError::new(
        StoreErrorKind::StoreAuth,
        format!(
            "no profile {name:?} in {} or {}; {there}: name one of them with --profile, or add it",
            files[0].display(),
            files[1].display()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_read_from_either_files_sections() {
        let text = "[default]\nregion = x\n[profile lab]\n[ other ]\nkey = [not]\n";
        assert_eq!(profiles_in(text), ["default", "lab", "other"]);
    }
}
