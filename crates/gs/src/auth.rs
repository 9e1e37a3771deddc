//! Where GCS credentials come from, as Google's client libraries find
//! them: `GOOGLE_OAUTH_ACCESS_TOKEN` (a bearer token as is), then
//! `GOOGLE_APPLICATION_CREDENTIALS` (a service account's JSON key, or an
//! `authorized_user` file), then gcloud's application default
//! credentials; none for an emulator unless some are set. A service
//! account signs a JWT (RS256, with ring) that Google's token endpoint
//! exchanges for an access token; a user's refresh token is exchanged
//! likewise. Tokens are cached and refreshed a few minutes before they
//! expire.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use bytes::Bytes;
use http::Method;
use object::http::{request, Failure, Http, ATTEMPTS};
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use serde::Deserialize;
use store::{StoreError, StoreErrorKind};

use crate::error::{said, CREDENTIALS_HINT};
use crate::wire::enc;

/// What a token lets its holder do: read and write objects.
pub const SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_write";
/// Where user credentials and, by default, service accounts get tokens.
pub const TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// A token is refreshed this long before it expires.
const MARGIN: Duration = Duration::from_secs(300);
/// What a signed assertion asks for: an hour, Google's maximum.
const LIFETIME: u64 = 3600;

/// Credentials, and the token they last gave.
pub struct Auth {
    source: Source,
    cache: tokio::sync::Mutex<Option<Token>>,
}

enum Source {
    /// An emulator: nothing is sent.
    Nothing,
    /// None found: every request fails, saying what to set.
    Missing,
    Bearer(String),
    Service(Box<ServiceKey>),
    User(UserKey),
}

/// A service account's key.
pub struct ServiceKey {
    pub email: String,
    pub token_uri: String,
    key: RsaKeyPair,
    /// The file it came from, for messages.
    file: String,
}

/// A user's refresh token (gcloud's application default credentials).
pub struct UserKey {
    client_id: String,
    client_secret: String,
    refresh_token: String,
    file: String,
}

struct Token {
    value: String,
    until: Instant,
}

impl Auth {
    /// No credentials, for an emulator.
    pub fn none() -> Auth {
        Auth::with(Source::Nothing)
    }

    fn with(source: Source) -> Auth {
        Auth {
            source,
            cache: tokio::sync::Mutex::new(None),
        }
    }

    /// The credentials the environment (read through `var`) names; for
    /// an `emulator`, none unless some are set explicitly.
    pub fn from_env(
        var: &dyn Fn(&str) -> Option<String>,
        emulator: bool,
    ) -> Result<Auth, StoreError> {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if let Some(t) = set("GOOGLE_OAUTH_ACCESS_TOKEN") {
            return Ok(Auth::with(Source::Bearer(t.trim().to_string())));
        }
        if let Some(p) = set("GOOGLE_APPLICATION_CREDENTIALS") {
            return Ok(Auth::with(read_key_file(Path::new(&p))?));
        }
        if emulator {
            return Ok(Auth::none());
        }
        match adc_file(var).filter(|p| p.is_file()) {
            Some(p) => Ok(Auth::with(read_key_file(&p)?)),
            None => Ok(Auth::with(Source::Missing)),
        }
    }

    /// The `Authorization` header's value for a request, a token fetched
    /// or refreshed as needed; `None` where nothing is sent. `f` frames
    /// the messages (the request the token is for).
    pub async fn header(&self, http: &Http, f: &Failure<'_>) -> Result<Option<String>, StoreError> {
        let fetch = match &self.source {
            Source::Nothing => return Ok(None),
            Source::Missing => return Err(f.no_credentials()),
            Source::Bearer(t) => return Ok(Some(format!("Bearer {t}"))),
            Source::Service(k) => Exchange::Service(k),
            Source::User(k) => Exchange::User(k),
        };
        let mut cache = self.cache.lock().await;
        if let Some(t) = cache.as_ref().filter(|t| Instant::now() + MARGIN < t.until) {
            return Ok(Some(format!("Bearer {}", t.value)));
        }
        let t = fetch.run(http).await?;
        let h = format!("Bearer {}", t.value);
        *cache = Some(t);
        Ok(Some(h))
    }
}

/// gcloud's application default credentials file: under
/// `$CLOUDSDK_CONFIG`, or `~/.config/gcloud`.
fn adc_file(var: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let dir = match var("CLOUDSDK_CONFIG") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(var("HOME")?).join(".config/gcloud"),
    };
    Some(dir.join("application_default_credentials.json"))
}

fn read_key_file(path: &Path) -> Result<Source, StoreError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        auth_error(format!(
            "cannot read the Google credentials file {shown}: {e}; set {CREDENTIALS_HINT}"
        ))
    })?;
    parse_key(&text, &shown).map_err(auth_error)
}

fn auth_error(m: String) -> StoreError {
    StoreError::new(StoreErrorKind::StoreAuth, m)
}

#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    client_email: Option<String>,
    private_key: Option<String>,
    token_uri: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    refresh_token: Option<String>,
}

/// A credentials file's JSON (`file` names it in messages): a service
/// account's key, or an `authorized_user`'s refresh token.
fn parse_key(text: &str, file: &str) -> Result<Source, String> {
    let k: KeyFile = serde_json::from_str(text)
        .map_err(|e| format!("the Google credentials file {file} is not JSON as expected: {e}"))?;
    let kind = match (&k.kind, &k.private_key) {
        (Some(t), _) => t.clone(),
        (None, Some(_)) => "service_account".to_string(),
        (None, None) => "authorized_user".to_string(),
    };
    match kind.as_str() {
        "service_account" => service_key(k, file).map(|k| Source::Service(Box::new(k))),
        "authorized_user" => user_key(k, file).map(Source::User),
        other => Err(format!(
            "the Google credentials file {file} is of type \"{other}\", which haul does not read: \
             use a service account's JSON key (\"service_account\") or \
             `gcloud auth application-default login` (\"authorized_user\")"
        )),
    }
}

fn missing(file: &str, field: &str) -> String {
    format!("the Google credentials file {file} has no \"{field}\"")
}

fn service_key(k: KeyFile, file: &str) -> Result<ServiceKey, String> {
    let email = k
        .client_email
        .ok_or_else(|| missing(file, "client_email"))?;
    let pem = k.private_key.ok_or_else(|| missing(file, "private_key"))?;
    let key = rsa_key(&pem)
        .map_err(|e| format!("the private key of {email} in {file} is not usable: {e}"))?;
    Ok(ServiceKey {
        email,
        token_uri: k.token_uri.unwrap_or_else(|| TOKEN_URI.to_string()),
        key,
        file: file.to_string(),
    })
}

fn user_key(k: KeyFile, file: &str) -> Result<UserKey, String> {
    Ok(UserKey {
        client_id: k.client_id.ok_or_else(|| missing(file, "client_id"))?,
        client_secret: k
            .client_secret
            .ok_or_else(|| missing(file, "client_secret"))?,
        refresh_token: k
            .refresh_token
            .ok_or_else(|| missing(file, "refresh_token"))?,
        file: file.to_string(),
    })
}

/// An RSA key from a PEM `PRIVATE KEY` (PKCS#8), as Google's key files
/// hold it.
fn rsa_key(pem: &str) -> Result<RsaKeyPair, String> {
    if pem.contains("BEGIN RSA PRIVATE KEY") {
        return Err("it is PKCS#1 (BEGIN RSA PRIVATE KEY), not PKCS#8 (BEGIN PRIVATE KEY)".into());
    }
    let der = pem_der(pem)?;
    RsaKeyPair::from_pkcs8(&der).map_err(|e| format!("not an RSA PKCS#8 key ({e})"))
}

/// The DER inside a PEM block: the lines between BEGIN and END,
/// base64-decoded.
fn pem_der(pem: &str) -> Result<Vec<u8>, String> {
    if !pem.contains("-----BEGIN") {
        return Err("no PEM \"-----BEGIN\" line".into());
    }
    let b64: String = pem
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("-----"))
        .collect();
    STANDARD
        .decode(b64)
        .map_err(|e| format!("its PEM is not base64 ({e})"))
}

/// A JWT asking `key.token_uri` for a token of [`SCOPE`] as `key.email`,
/// issued at `now` (seconds since the epoch), signed RS256.
pub fn jwt(key: &ServiceKey, now: u64) -> Result<String, String> {
    let header = serde_json::json!({"alg": "RS256", "typ": "JWT"});
    let claims = serde_json::json!({
        "iss": key.email,
        "scope": SCOPE,
        "aud": key.token_uri,
        "iat": now,
        "exp": now + LIFETIME,
    });
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut sig = vec![0u8; key.key.public().modulus_len()];
    key.key
        .sign(
            &RSA_PKCS1_SHA256,
            &ring::rand::SystemRandom::new(),
            signed.as_bytes(),
            &mut sig,
        )
        .map_err(|_| format!("cannot sign a token request with the key of {}", key.email))?;
    Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig)))
}

/// A token request about to be made.
enum Exchange<'a> {
    Service(&'a ServiceKey),
    User(&'a UserKey),
}

#[derive(Deserialize)]
struct Granted {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

impl Exchange<'_> {
    /// Who asks, for messages.
    fn who(&self) -> String {
        match self {
            Exchange::Service(k) => format!("the service account {} (from {})", k.email, k.file),
            Exchange::User(k) => format!("the user credentials in {}", k.file),
        }
    }

    fn uri(&self) -> &str {
        match self {
            Exchange::Service(k) => &k.token_uri,
            Exchange::User(_) => TOKEN_URI,
        }
    }

    /// The form posted to the token endpoint.
    fn form(&self) -> Result<String, StoreError> {
        Ok(match self {
            Exchange::Service(k) => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                let assertion = jwt(k, now).map_err(auth_error)?;
                format!(
                    "grant_type={}&assertion={}",
                    enc("urn:ietf:params:oauth:grant-type:jwt-bearer"),
                    enc(&assertion)
                )
            }
            Exchange::User(k) => format!(
                "grant_type=refresh_token&client_id={}&client_secret={}&refresh_token={}",
                enc(&k.client_id),
                enc(&k.client_secret),
                enc(&k.refresh_token)
            ),
        })
    }

    /// Asks the token endpoint for an access token.
    async fn run(&self, http: &Http) -> Result<Token, StoreError> {
        let (uri, form) = (self.uri(), Bytes::from(self.form()?));
        let headers = [(
            "content-type".to_string(),
            "application/x-www-form-urlencoded".to_string(),
        )];
        let got = http
            .send(ATTEMPTS, || {
                request(Method::POST, uri, &headers, form.clone())
            })
            .await?;
        let a = got.map_err(|why| {
            StoreError::new(
                StoreErrorKind::Unreachable,
                format!(
                    "cannot reach Google's token endpoint {uri} to get an access token for {}: {}; check the network",
                    self.who(),
                    why.0
                ),
            )
        })?;
        if !a.status.is_success() {
            return Err(auth_error(format!(
                "Google's token endpoint {uri} refused {} ({}: {}): check {CREDENTIALS_HINT}",
                self.who(),
                a.status.as_u16(),
                said(&a.body)
            )));
        }
        let g: Granted = serde_json::from_slice(&a.body).map_err(|e| {
            auth_error(format!(
                "Google's token endpoint {uri} answered {} without an access token ({e})",
                self.who()
            ))
        })?;
        let life = Duration::from_secs(g.expires_in.unwrap_or(LIFETIME));
        Ok(Token {
            value: g.access_token,
            until: Instant::now() + life,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TEST KEY ONLY, made for these tests with `openssl genpkey
    /// -algorithm RSA -pkeyopt rsa_keygen_bits:2048`; it guards nothing.
    const TEST_KEY: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MIIEvwIBADANBgkqhkiG9w0BAQEFAASCBKkwggSlAgEAAoIBAQDf4jJTOannkiVj\n\
rOwu8Bjt4+IGTDxElerWmCNI8sSLlJRGZCghY3EmKj0N69MoHrGzjefoY2aeGAoW\n\
b/TfllOx42ZjWFEywnocxXd2sSVg0wDh//GLOcL+hIRdnK96KpgqtLPWakXzZgjM\n\
DqaxRLCbO/ZmGTIoBqBNwIo2lwBBK/ziRQy7f8WnY0V7A75aWEuh++zrtFUYzrJK\n\
0pFFz7Kjtit+VwUhtReA+DK4iF7oCpnFvGkOoVZcNzk0PqGxr7z/o/S1K9BbU3vW\n\
3+SjsuK1D0oV5qQ2kf5HydJdARQrOH/rHqErStJ+k2wc4BQdEJFJ/WUE74OPrU83\n\
ndMX/oQzAgMBAAECggEAEY6oGq29fMsRwpDXjtDGa7WAzrSgz1IgcgbJUZm0Pyv+\n\
Osz09rVZNMCAPDy/uPg7QFUDGE7fR8uj0uGhxvz/gEZQi77r0zq8H9B+j2DSCRdT\n\
DOYo952mhJY42SyF+GMpvsOgDNMVvEJGs1X8zY8Q+IOJzbTxIYFvhdlxHVnXK8UV\n\
SNylDLz02G6mM98K6FRgRE84Ry6PbQJc1pn5oQu+cW8LUP18oUoNoC/sFQqYsY05\n\
5fmMl4hQfrrxxKIH42U8WnldXaCNmYlkAyUhehaKxgskvtDkLeQ3JxREPwNC3qxi\n\
8I2XxTKTRsLdg1VpJqXSLd6ueTuAhadcBUCZPo48jQKBgQDypWxbWznDLI5tmLnG\n\
wisqMZAh6b73zl0PfS27nzffivzezsCnNGoeGBOkgo+uA/XWvE0CwjhMuFGGYHWq\n\
xxyxCbDHeUVnY5dje2lBg0ULwyNf9PMRyd6TchmKd0cW7r+uXswjIIbspJn9serP\n\
V/CeEkpRjRXGlaMmrvg19aZPrQKBgQDsNG6Z8jeioB1cQPdRaKSlRxqlzePNCWb1\n\
kJxUl1uBP9m2rjPWDju2LcP9toXd1lzD36WdYnS94GUWpKyr1Ln2CKSPIvL5z8Mw\n\
z/ZrYMhzkbeTD/WW6xmGtrxLOILHxKP5OZxR66qYdFRSSjyMRRBeOblJBL17quwD\n\
sYkF2kUfXwKBgQDuClUb5onrK/nqEKsoDvJTqV3Rt0NOTdfDyzUjXBZvKiXa2w/q\n\
uKPmNA6JFECqIV56tC4Ep86djTEFV/n3ePBvyabwecsZm3037ikbSRFicaRxjZcr\n\
+1NsaMIfsdY+7CeFg6BWUaGr4+riFDncAVSfbigUiwky0TfGSl5caUon3QKBgQCy\n\
l7JIk+uc+pM4faaB1y0mCm0LkHD9Rm6inYSWMRruzug+R9jJsFlVlaTq4Ga3JK1f\n\
LGp8ZUT/i/ri8//arC0u6boCv9oXKA/diGA5MCRfvX2fpCF8yqWyRdh4x3GaugOB\n\
HR4kkpuaSdq3nYnKRS3rEJoXq43ZQ5LP+BwyYKaC4QKBgQDCGcJ6Bfz1CFnQkPJs\n\
m3AlJHYRlKc5HU6NvvPmTBXWjBc6Ay3Y7N7bFhSbfU/NPrzGu95FwXlJ5GSb99Md\n\
tzlLs64a8lO+KehtbRgV9Tcq1QNU81AjoRJgGwAYVO29O6CpmJw7vcht+Qdw+8a+\n\
TuFK7t5TfPVs5TEavXu9x3lu4g==\n\
-----END PRIVATE KEY-----\n\
";

    fn key_json(private_key: &str) -> String {
        serde_json::json!({
            "type": "service_account",
            "client_email": "haul-test@example.iam.gserviceaccount.com",
            "private_key": private_key,
            "token_uri": "https://oauth2.example.com/token",
        })
        .to_string()
    }

    fn service(text: &str) -> ServiceKey {
        match parse_key(text, "key.json") {
            Ok(Source::Service(k)) => *k,
            Ok(_) => panic!("not a service account"),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn jwt_has_three_parts_claims_and_a_valid_signature() {
        let k = service(&key_json(TEST_KEY));
        let t = jwt(&k, 1_700_000_000).unwrap();
        let parts: Vec<&str> = t.split('.').collect();
        assert_eq!(parts.len(), 3);
        let part = |i: usize| -> serde_json::Value {
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[i]).unwrap()).unwrap()
        };
        assert_eq!(part(0), serde_json::json!({"alg": "RS256", "typ": "JWT"}));
        let c = part(1);
        assert_eq!(c["iss"], "haul-test@example.iam.gserviceaccount.com");
        assert_eq!(c["scope"], SCOPE);
        assert_eq!(c["aud"], "https://oauth2.example.com/token");
        assert_eq!(c["iat"], 1_700_000_000u64);
        assert_eq!(c["exp"], 1_700_003_600u64);
        let sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            k.key.public().as_ref(),
        );
        let signed = format!("{}.{}", parts[0], parts[1]);
        public.verify(signed.as_bytes(), &sig).unwrap();
    }

    #[test]
    fn key_file_errors_say_what_is_wrong() {
        let err = |text: &str| match parse_key(text, "key.json") {
            Err(e) => e,
            Ok(_) => panic!("{text} parsed"),
        };
        assert!(err("not json").contains("not JSON"));
        let no_email = r#"{"type":"service_account","private_key":"x"}"#;
        assert!(err(no_email).contains("\"client_email\""));
        assert!(err(&key_json("garbage")).contains("no PEM"));
        let bad_b64 = "-----BEGIN PRIVATE KEY-----\n!!!\n-----END PRIVATE KEY-----\n";
        assert!(err(&key_json(bad_b64)).contains("base64"));
        let not_rsa = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        assert!(err(&key_json(not_rsa)).contains("not an RSA PKCS#8 key"));
        let pkcs1 = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n";
        assert!(err(&key_json(pkcs1)).contains("PKCS#1"));
        assert!(err(r#"{"type":"external_account"}"#).contains("external_account"));
        assert!(err(r#"{"type":"authorized_user","client_id":"a"}"#).contains("client_secret"));
    }

    #[test]
    fn user_and_default_token_uri() {
        let u =
            r#"{"type":"authorized_user","client_id":"a","client_secret":"b","refresh_token":"c"}"#;
        assert!(matches!(parse_key(u, "adc.json"), Ok(Source::User(_))));
        let mut v: serde_json::Value = serde_json::from_str(&key_json(TEST_KEY)).unwrap();
        v.as_object_mut().unwrap().remove("token_uri");
        assert_eq!(service(&v.to_string()).token_uri, TOKEN_URI);
    }

    #[test]
    fn environment_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key.json");
        std::fs::write(&file, key_json(TEST_KEY)).unwrap();
        let file = file.to_str().unwrap().to_string();
        let home = dir.path().to_str().unwrap().to_string();
        let env = |pairs: Vec<(&'static str, String)>| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        };
        let src =
            |e: &dyn Fn(&str) -> Option<String>, emu| Auth::from_env(e, emu).map(|a| a.source);
        let e = env(vec![
            ("GOOGLE_OAUTH_ACCESS_TOKEN", "tok".into()),
            ("GOOGLE_APPLICATION_CREDENTIALS", file.clone()),
        ]);
        assert!(matches!(src(&e, false), Ok(Source::Bearer(t)) if t == "tok"));
        let e = env(vec![("GOOGLE_APPLICATION_CREDENTIALS", file.clone())]);
        assert!(matches!(src(&e, true), Ok(Source::Service(_))));
        let e = env(vec![("HOME", home.clone())]);
        assert!(matches!(src(&e, false), Ok(Source::Missing)));
        assert!(matches!(src(&e, true), Ok(Source::Nothing)));
        let gcloud = dir.path().join(".config/gcloud");
        std::fs::create_dir_all(&gcloud).unwrap();
        let adc =
            r#"{"type":"authorized_user","client_id":"a","client_secret":"b","refresh_token":"c"}"#;
        std::fs::write(gcloud.join("application_default_credentials.json"), adc).unwrap();
        assert!(matches!(src(&e, false), Ok(Source::User(_))));
        assert!(matches!(src(&e, true), Ok(Source::Nothing)));
        let e = env(vec![(
            "GOOGLE_APPLICATION_CREDENTIALS",
            "/no/such/file".into(),
        )]);
        let m = src(&e, false).err().unwrap();
        assert_eq!(m.kind, StoreErrorKind::StoreAuth);
        assert!(m.message.contains("/no/such/file"), "{}", m.message);
    }
}
