//! Where an account's credentials and endpoint come from, as Azure's own
//! tools read them: `AZURE_STORAGE_CONNECTION_STRING` first; otherwise
//! `AZURE_STORAGE_KEY` or `AZURE_STORAGE_SAS_TOKEN` for the account the
//! location names, at `AZURE_STORAGE_BLOB_ENDPOINT` or the public cloud.

use base64::Engine;
use store::{StoreError, StoreErrorKind};

use crate::fail;

/// Azurite's well-known account, for `UseDevelopmentStorage=true`.
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
/// Azurite's well-known key (published by Microsoft; not a secret).
pub const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// Azurite's blob endpoint, for `UseDevelopmentStorage=true`.
pub const DEV_ENDPOINT: &str = "http://127.0.0.1:10000/devstoreaccount1";

/// The variables that give credentials, for messages.
pub fn credentials_hint(account: &str) -> String {
    format!(
        "AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_KEY (or AZURE_STORAGE_SAS_TOKEN) for account {account}"
    )
}

/// The variables that give the endpoint, for messages.
pub const ENDPOINT_HINT: &str =
    "the account name, AZURE_STORAGE_BLOB_ENDPOINT, or BlobEndpoint in AZURE_STORAGE_CONNECTION_STRING";

/// How requests prove who they are.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// Shared Key: the account key, decoded.
    Key(Vec<u8>),
    /// A shared access signature: query parameters added to every request.
    Sas(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a secret.
        match self {
            Auth::Key(_) => f.write_str("Key(..)"),
            Auth::Sas(_) => f.write_str("Sas(..)"),
        }
    }
}

/// One storage account as haul reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    /// The blob endpoint, without a trailing '/':
    /// `https://ACCOUNT.blob.core.windows.net`, `http://127.0.0.1:10000/devstoreaccount1`.
    pub endpoint: String,
    /// The endpoint's own path ("" or "/devstoreaccount1"), which the
    /// canonical resource of a Shared Key signature includes.
    pub base_path: String,
    pub auth: Auth,
}

impl Account {
    /// `name` at `endpoint` with `auth`; the endpoint must be an http(s) URL.
    pub fn new(name: &str, endpoint: &str, auth: Auth) -> Result<Account, StoreError> {
        let endpoint = endpoint.trim_end_matches('/').to_string();
        let uri: http::Uri = endpoint.parse().map_err(|e| bad_endpoint(&endpoint, &e))?;
        let scheme_ok = matches!(uri.scheme_str(), Some("http") | Some("https"));
        if !scheme_ok || uri.host().is_none() || uri.query().is_some() {
            return Err(bad_endpoint(
                &endpoint,
                &"expected http(s)://HOST[:PORT][/PATH]",
            ));
        }
        Ok(Account {
            name: name.to_string(),
            base_path: uri.path().trim_end_matches('/').to_string(),
            endpoint,
            auth,
        })
    }
}

fn bad_endpoint(endpoint: &str, why: &dyn std::fmt::Display) -> StoreError {
    fail(
        StoreErrorKind::BadRequest,
        format!("{endpoint:?} is not a blob endpoint ({why}): check {ENDPOINT_HINT}"),
    )
}

/// Shared Key credentials from a base64 account key.
pub fn shared_key(account: &str, key: &str) -> Result<Auth, StoreError> {
    base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .map(Auth::Key)
        .map_err(|e| {
            fail(
                StoreErrorKind::StoreAuth,
                format!(
                    "the account key for {account} is not base64 ({e}): copy it again from the portal \
                     or `az storage account keys list --account-name {account}`"
                ),
            )
        })
}

/// The public cloud's endpoint of `account`.
pub fn default_endpoint(account: &str) -> String {
    format!("https://{account}.blob.core.windows.net")
}

/// The account `account` (from the location) as the environment, read by
/// `get`, sets it up.
pub fn from_env(
    account: &str,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Account, StoreError> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    if let Some(cs) = get("AZURE_STORAGE_CONNECTION_STRING") {
        return from_connection_string(account, &cs);
    }
    if let Some(named) = get("AZURE_STORAGE_ACCOUNT") {
        if named != account {
            return Err(fail(
                StoreErrorKind::BadRequest,
                format!(
                    "AZURE_STORAGE_ACCOUNT is {named:?}, but the location names account {account:?}: \
                     unset it, or name the same account"
                ),
            ));
        }
    }
    let endpoint = get("AZURE_STORAGE_BLOB_ENDPOINT").unwrap_or_else(|| default_endpoint(account));
    let auth = if let Some(key) = get("AZURE_STORAGE_KEY") {
        shared_key(account, &key)?
    } else if let Some(sas) = get("AZURE_STORAGE_SAS_TOKEN") {
        Auth::Sas(sas.trim().trim_start_matches('?').to_string())
    } else {
        return Err(no_credentials(account, &endpoint));
    };
    Account::new(account, &endpoint, auth)
}

fn no_credentials(account: &str, endpoint: &str) -> StoreError {
    let hint = credentials_hint(account);
    let target = format!("{}{account}/", crate::SCHEME);
    object::http::Failure {
        what: "reach",
        target: &target,
        endpoint,
        credentials_hint: &hint,
        endpoint_hint: ENDPOINT_HINT,
    }
    .no_credentials()
}

/// The `NAME=VALUE` pairs of a connection string, names as written.
pub fn connection_string_pairs(cs: &str) -> Result<Vec<(String, String)>, String> {
    cs.split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                Ok((k.trim().to_string(), v.trim().to_string()))
            }
            _ => Err(format!("{} is not NAME=VALUE", redact(p))),
        })
        .collect()
}

/// A part of a connection string fit to print: its name only, since
/// values are secrets.
fn redact(p: &str) -> String {
    match p.split_once('=') {
        Some((k, _)) => format!("{k}=..."),
        None => "a part without '='".to_string(),
    }
}

/// The account `account` as connection string `cs` sets it up.
pub fn from_connection_string(account: &str, cs: &str) -> Result<Account, StoreError> {
    let bad = |why: String| {
        fail(
            StoreErrorKind::BadRequest,
            format!("AZURE_STORAGE_CONNECTION_STRING: {why}"),
        )
    };
    let pairs = connection_string_pairs(cs).map_err(bad)?;
    let field = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    };
    if field("UseDevelopmentStorage").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        same_account(account, DEV_ACCOUNT)?;
        return Account::new(DEV_ACCOUNT, DEV_ENDPOINT, shared_key(DEV_ACCOUNT, DEV_KEY)?);
    }
    if let Some(named) = field("AccountName") {
        same_account(account, named)?;
    }
    let endpoint = match field("BlobEndpoint") {
        Some(e) => e.to_string(),
        None => format!(
            "{}://{account}.blob.{}",
            field("DefaultEndpointsProtocol").unwrap_or("https"),
            field("EndpointSuffix").unwrap_or("core.windows.net")
        ),
    };
    let auth = if let Some(key) = field("AccountKey") {
        shared_key(account, key)?
    } else if let Some(sas) = field("SharedAccessSignature") {
        Auth::Sas(sas.trim_start_matches('?').to_string())
    } else {
        return Err(fail(
            StoreErrorKind::StoreAuth,
            "AZURE_STORAGE_CONNECTION_STRING has neither AccountKey nor SharedAccessSignature: \
             copy the whole string from the portal (Access keys, or Shared access signature)",
        ));
    };
    Account::new(account, &endpoint, auth)
}

/// Fails unless the connection string's account is the location's.
fn same_account(location: &str, named: &str) -> Result<(), StoreError> {
    if location == named {
        return Ok(());
    }
    Err(fail(
        StoreErrorKind::BadRequest,
        format!(
            "AZURE_STORAGE_CONNECTION_STRING is for account {named:?}, but the location names account \
             {location:?}: use az://{named}/CONTAINER, or the connection string of {location:?}"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    const KEY: &str = "a2V5"; // "key"

    #[test]
    fn connection_string_with_suffix_and_any_order() {
        let cs = format!(
            "AccountKey={KEY};EndpointSuffix=core.chinacloudapi.cn;AccountName=acct1;DefaultEndpointsProtocol=https"
        );
        let a = from_connection_string("acct1", &cs).unwrap();
        assert_eq!(a.endpoint, "https://acct1.blob.core.chinacloudapi.cn");
        assert_eq!(a.base_path, "");
        assert_eq!(a.auth, Auth::Key(b"key".to_vec()));
    }

    #[test]
    fn connection_string_defaults_and_blob_endpoint() {
        let a = from_connection_string("acct1", &format!("AccountName=acct1;AccountKey={KEY}"))
            .unwrap();
        assert_eq!(a.endpoint, "https://acct1.blob.core.windows.net");
        let cs = format!(
            "BlobEndpoint=http://10.0.0.1:10000/acct1/;AccountName=acct1;AccountKey={KEY};"
        );
        let a = from_connection_string("acct1", &cs).unwrap();
        assert_eq!(
            (a.endpoint.as_str(), a.base_path.as_str()),
            ("http://10.0.0.1:10000/acct1", "/acct1")
        );
    }

    #[test]
    fn connection_string_with_sas_and_no_account_name() {
        let cs = "BlobEndpoint=https://acct1.blob.core.windows.net/;SharedAccessSignature=sv=2021-08-06&sig=a%2Bb=";
        let a = from_connection_string("acct1", cs).unwrap();
        assert_eq!(a.auth, Auth::Sas("sv=2021-08-06&sig=a%2Bb=".into()));
    }

    #[test]
    fn development_storage() {
        let a = from_connection_string(DEV_ACCOUNT, "UseDevelopmentStorage=true").unwrap();
        assert_eq!(a.endpoint, DEV_ENDPOINT);
        assert_eq!(a.base_path, "/devstoreaccount1");
        assert!(matches!(a.auth, Auth::Key(ref k) if k.len() == 64));
        let e = from_connection_string("other1", "UseDevelopmentStorage=true").unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
    }

    #[test]
    fn connection_string_errors() {
        let e = from_connection_string("acct1", &format!("AccountName=acct2;AccountKey={KEY}"))
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        assert!(
            e.message.contains("acct2") && e.message.contains("acct1"),
            "{}",
            e.message
        );
        let e = from_connection_string("acct1", "AccountName=acct1").unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::StoreAuth);
        let e = from_connection_string("acct1", "AccountName=acct1;garbage-secret").unwrap_err();
        assert!(!e.message.contains("secret"), "{}", e.message);
        let e = from_connection_string("acct1", "AccountName=acct1;AccountKey=@@@").unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::StoreAuth);
    }

    #[test]
    fn variables() {
        let a = from_env("acct1", env(&[("AZURE_STORAGE_KEY", KEY)])).unwrap();
        assert_eq!(a.endpoint, "https://acct1.blob.core.windows.net");
        let a = from_env(
            "acct1",
            env(&[
                ("AZURE_STORAGE_SAS_TOKEN", "?sv=1&sig=x"),
                ("AZURE_STORAGE_BLOB_ENDPOINT", "http://127.0.0.1:1/acct1"),
            ]),
        )
        .unwrap();
        assert_eq!(
            (a.auth, a.base_path.as_str()),
            (Auth::Sas("sv=1&sig=x".into()), "/acct1")
        );
        let e = from_env(
            "acct1",
            env(&[
                ("AZURE_STORAGE_KEY", KEY),
                ("AZURE_STORAGE_ACCOUNT", "acct2"),
            ]),
        )
        .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        let e = from_env("acct1", env(&[])).unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::StoreAuth);
        assert!(
            e.message.contains("AZURE_STORAGE_CONNECTION_STRING"),
            "{}",
            e.message
        );
        assert!(e.message.contains("for account acct1"), "{}", e.message);
        let cs = format!("AccountName=acct1;AccountKey={KEY}");
        let a = from_env(
            "acct1",
            env(&[
                ("AZURE_STORAGE_CONNECTION_STRING", &cs),
                ("AZURE_STORAGE_KEY", ""),
            ]),
        )
        .unwrap();
        assert_eq!(a.auth, Auth::Key(b"key".to_vec()));
        let e = from_env(
            "acct1",
            env(&[
                ("AZURE_STORAGE_KEY", KEY),
                ("AZURE_STORAGE_BLOB_ENDPOINT", "ftp://x"),
            ]),
        )
        .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
    }
}
