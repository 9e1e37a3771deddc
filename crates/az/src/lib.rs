//! Azure Blob Storage as one of haul's object stores: `az://ACCOUNT/CONTAINER[/KEY]`.
//!
//! The store is spoken to over the Blob REST API with [`object::http::Http`]
//! (retries and backoff), signed with Shared Key or carrying a SAS token,
//! from Azure's own environment variables, as the az CLI and rclone read
//! them. Uploads in parts are staged blocks committed by a block list.
//!
//! - [`credentials`]: the connection string and the environment.
//! - [`sign`]: Shared Key authorization.
//! - [`time`]: the RFC 1123 dates of `x-ms-date` and `Last-Modified`.
//! - [`xml`]: listings, block lists and error bodies.
//! - [`error`]: an answer's Azure error code as haul's error kinds.
//! - `blob`: the `impl Objects`.

mod blob;
pub mod credentials;
pub mod error;
pub mod sign;
pub mod time;
pub mod xml;

use std::sync::Arc;

use object::http::Http;
use object::{ObjectUrl, Store, Tuning};
use store::{StoreError, StoreErrorKind};

pub use blob::{Azure, AZURE_LIMITS, MTIME_KEY, VERSION};
pub use credentials::{Account, Auth};

/// The scheme of Azure locations.
pub const SCHEME: &str = "az://";

/// A blob name's length, at most, in characters.
pub const MAX_KEY: usize = 1024;

/// `az://ACCOUNT/CONTAINER[/KEY]`: the "bucket" is `ACCOUNT/CONTAINER`.
pub fn parse(s: &str) -> Result<ObjectUrl, String> {
    ObjectUrl::parse(s, SCHEME, 2, MAX_KEY, bucket_problem)
}

/// Why `ACCOUNT/CONTAINER` cannot name a container; none when it can.
fn bucket_problem(b: &str) -> Option<String> {
    let Some((account, container)) = b.split_once('/') else {
        return Some(format!(
            "an Azure location is az://ACCOUNT/CONTAINER[/PATH]; {b:?} names no container"
        ));
    };
    account_problem(account).or_else(|| container_problem(container))
}

/// Account names: 3-24 lowercase letters and digits.
fn account_problem(a: &str) -> Option<String> {
    let ok = (3..=24).contains(&a.len())
        && a.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (!ok).then(|| {
        format!("{a:?} is not a storage account name: 3 to 24 lowercase letters and digits")
    })
}

/// Container names: 3-63 lowercase letters, digits and '-', starting and
/// ending with a letter or digit, no "--".
fn container_problem(c: &str) -> Option<String> {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let ok = (3..=63).contains(&c.len())
        && c.bytes().all(|b| alnum(b) || b == b'-')
        && c.bytes().next().is_some_and(alnum)
        && c.bytes().last().is_some_and(alnum)
        && !c.contains("--");
    (!ok).then(|| {
        format!(
            "{c:?} is not a container name: 3 to 63 lowercase letters, digits and single '-', \
             starting and ending with a letter or digit"
        )
    })
}

/// The account and container of a location.
pub fn account_and_container(url: &ObjectUrl) -> (&str, &str) {
    url.bucket.split_once('/').unwrap_or((&url.bucket, ""))
}

/// Builds the client for the account `url` names, from the environment;
/// nothing is asked of the store yet.
pub fn connect(url: &ObjectUrl, tuning: &Tuning) -> Result<Arc<Store>, StoreError> {
    let (account, _) = account_and_container(url);
    let acct = credentials::from_env(account, |k| std::env::var(k).ok())?;
    connect_account(acct, tuning, None)
}

/// A client for `account` with Shared Key `key` (base64) at
/// `blob_endpoint`, whatever the environment says: for tests and
/// emulators.
pub fn connect_with(
    account: &str,
    key: &str,
    blob_endpoint: &str,
    tuning: &Tuning,
) -> Result<Arc<Store>, StoreError> {
    let acct = Account::new(
        account,
        blob_endpoint,
        credentials::shared_key(account, key)?,
    )?;
    connect_account(acct, tuning, None)
}

/// A client for `acct`, on a runtime of its own; listings `page_size`
/// blobs a page, where given (tests: many pages from few blobs).
pub fn connect_account(
    acct: Account,
    tuning: &Tuning,
    page_size: Option<u32>,
) -> Result<Arc<Store>, StoreError> {
    let rt = object::store::runtime("haul-az")?;
    let http = rt.block_on(async { Http::new() })?;
    let mut azure = Azure::new(acct, http);
    if let Some(n) = page_size {
        azure = azure.with_page_size(n);
    }
    Ok(Store::new(rt, Arc::new(azure), tuning))
}

/// A StoreError of `kind` saying `m`.
pub(crate) fn fail(kind: StoreErrorKind, m: impl Into<String>) -> StoreError {
    StoreError::new(kind, m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        let u = parse("az://acct1/my-data/a/b.bin").unwrap();
        assert_eq!(
            (u.bucket.as_str(), u.key.as_str()),
            ("acct1/my-data", "a/b.bin")
        );
        assert_eq!(account_and_container(&u), ("acct1", "my-data"));
        let whole = parse("az://acct1/data").unwrap();
        assert!(whole.key.is_empty());
        for bad in [
            "az://acct1",
            "az://ac/data",
            "az://Acct1/data",
            "az://acct1/da",
            "az://acct1/-data",
            "az://acct1/data-",
            "az://acct1/da--ta",
            "az://acct1/Data",
            "az://acct1/data//x",
            "s3://acct1/data",
            "az://abcdefghijklmnopqrstuvwxy/data",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let long = format!("az://acct1/data/{}", "k".repeat(1025));
        assert!(parse(&long).is_err());
        assert!(parse(&format!("az://acct1/{}", "c".repeat(63))).is_ok());
    }
}
