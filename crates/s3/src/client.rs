//! One connection to an object store: the AWS SDK's S3 client, configured
//! by the conventions people already have (environment variables,
//! `~/.aws/credentials` and `config` profiles, instance metadata,
//! `AWS_ENDPOINT_URL`), and the small runtime its requests run on. The rest
//! of haul is threads; they wait on this runtime with [`Store::block_on`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_config::environment::EnvironmentVariableRegionProvider;
use aws_config::meta::region::RegionProviderChain;
use aws_config::profile::ProfileFileRegionProvider;
use aws_config::retry::RetryConfig;
use aws_config::BehaviorVersion;
use aws_sdk_s3::Client;
use store::{StoreError, StoreErrorKind};

use crate::error::from_sdk;
use crate::url::S3Url;

/// How to reach the store, from the command line.
#[derive(Debug, Clone, Default)]
pub struct S3Options {
    /// A profile of `~/.aws/config` and `credentials` (`--profile`).
    pub profile: Option<String>,
    /// An S3-compatible endpoint (`--s3-endpoint`; `AWS_ENDPOINT_URL`
    /// otherwise). Addressing is then path-style, which such stores need.
    pub endpoint: Option<String>,
    /// The smallest part of an upload (`--s3-part-size`; default
    /// [`crate::upload::PART`]).
    pub part_size: Option<u64>,
    /// Where the journals of uploads that may resume are kept
    /// (`$HAUL_HOME/s3-uploads`); none: an interrupted upload is aborted.
    pub journals: Option<std::path::PathBuf>,
}

/// Requests each transfer keeps in flight to the store: parts uploading,
/// ranges downloading. Enough that a store answering 100 MB/s per
/// connection keeps up with a 10 Gbit/s path.
pub const PARALLEL: usize = 16;

/// An S3 client and the runtime its requests run on.
pub struct Store {
    rt: tokio::runtime::Runtime,
    client: Client,
    /// Where the store is, for messages.
    pub endpoint: String,
    /// At most this many part uploads or range downloads at once.
    pub(crate) slots: Arc<tokio::sync::Semaphore>,
    /// The smallest part of an upload, where told.
    pub(crate) part: Option<u64>,
    pub(crate) journals: Option<std::path::PathBuf>,
    /// Requests travel over TLS, which protects bodies in transit: an
    /// upload's body is then not hashed again for its signature (SigV4's
    /// SHA-256 of the payload costs both ends about as much as all of
    /// haul's own hashing); its CRC32C still goes with it. Over plain
    /// HTTP the payload stays signed.
    pub(crate) tls: bool,
}

impl Store {
    /// Builds a client from `opts` and the environment. Nothing is asked
    /// of the store yet: [`Store::check`] does that.
    pub fn connect(opts: &S3Options) -> Result<Arc<Store>, StoreError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("haul-s3")
            .enable_all()
            .build()
            .map_err(|e| {
                StoreError::new(
                    StoreErrorKind::Other,
                    format!("cannot start the object-store client: {e}"),
                )
            })?;
        let endpoint = opts
            .endpoint
            .clone()
            .or_else(|| std::env::var("AWS_ENDPOINT_URL_S3").ok())
            .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
            .filter(|e| !e.is_empty());
        // SlowDown and 503s are retried with backoff, as the SDK's
        // standard mode does, but longer: a bulk transfer outlasts a
        // throttling store's bad minute.
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
        let region = match &endpoint {
            Some(_) => RegionProviderChain::first_try(EnvironmentVariableRegionProvider::new())
                .or_else(profile_region.build())
                .or_else("us-east-1"),
            None => RegionProviderChain::default_provider().or_else("us-east-1"),
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
        let conf = rt.block_on(loader.load());
        let s3 = aws_sdk_s3::config::Builder::from(&conf)
            .force_path_style(endpoint.is_some())
            .build();
        let tls = endpoint
            .as_deref()
            .is_none_or(|e| e.starts_with("https://"));
        Ok(Arc::new(Store {
            tls,
            rt,
            client: Client::from_conf(s3),
            endpoint: endpoint.unwrap_or_else(|| "AWS S3".into()),
            slots: Arc::new(tokio::sync::Semaphore::new(PARALLEL)),
            part: opts.part_size,
            journals: opts.journals.clone(),
        }))
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Runs `f` on the store's runtime and waits for it; for haul's
    /// threads, never for a task of the runtime itself.
    pub(crate) fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.handle().block_on(f)
    }

    pub(crate) fn spawn<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.rt.spawn(f);
    }

    /// Asks the store for one key under `url`, so that a wrong key, a
    /// missing bucket or an unreachable store is told before a transfer
    /// starts. Says whether anything is there.
    pub fn check(&self, url: &S3Url) -> Result<bool, StoreError> {
        // Few retries here: a wrong endpoint is told in a second, not
        // after the minute a transfer would ride out.
        let quick = aws_sdk_s3::config::Builder::default()
            .retry_config(RetryConfig::standard().with_max_attempts(3));
        let r = self.block_on(
            self.client
                .list_objects_v2()
                .bucket(&url.bucket)
                .prefix(&url.key)
                .max_keys(1)
                .customize()
                .config_override(quick)
                .send(),
        );
        match r {
            Ok(out) => Ok(out.key_count().unwrap_or(0) > 0 || !out.contents().is_empty()),
            Err(e) => Err(from_sdk(e, "list", url, &self.endpoint)),
        }
    }
}
