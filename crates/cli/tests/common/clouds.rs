//! Real emulators of the other clouds' object stores, for `gs://` and
//! `az://` tests of the whole tool: fake-gcs-server (built by `scripts/test.sh`
//! through the Go module proxy) and Azurite (Microsoft's own emulator,
//! installed by `scripts/test.sh` from the npm registry). Each is started by the
//! test on a free loopback port, in memory, and stopped by PID when
//! dropped. Where one is missing, the tests that need it say SKIPPED (and
//! fail under CI, which installs both).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The bucket (GCS) or container (Azure) each test starts with.
pub const BUCKET: &str = "bkt";

/// One cloud's emulator, as the tests use it.
pub trait Cloud {
    /// A location in the test's bucket: `gs://bkt/KEY`.
    fn url(&self, key: &str) -> String;
    /// A location in a bucket that does not exist.
    fn missing_bucket(&self, key: &str) -> String;
    /// A location whose bucket name the store's rules refuse.
    fn bad_name(&self) -> String;
    /// Points `cmd` at the emulator with working credentials.
    fn env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command;
    /// Points `cmd` at the emulator with credentials it refuses, or none
    /// where the emulator checks none: either is the credentials' exit code.
    fn bad_credentials<'a>(&self, cmd: &'a mut Command) -> &'a mut Command;
    /// Points `cmd` at a port nothing answers on.
    fn unreachable<'a>(&self, cmd: &'a mut Command) -> &'a mut Command;
}

struct Process {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tools() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether `binary` is there; says why not, and fails under CI.
fn available(binary: &Path, test: &str, how: &str) -> bool {
    if binary.exists() {
        return true;
    }
    let why = format!(
        "{test} needs {}: run scripts/test.sh once, or {how}",
        binary.display()
    );
    assert!(
        !std::env::var("CI").is_ok_and(|v| v == "true"),
        "{why}, and CI must run it"
    );
    println!("SKIPPED: {why}");
    false
}

/// Starts `cmd` and waits (bounded) until `port` answers.
fn start(mut cmd: Command, port: u16, dir: tempfile::TempDir, what: &str) -> Process {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let mut p = Process {
        child,
        port,
        _dir: dir,
    };
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            p.child.try_wait().unwrap().is_none(),
            "{what} exited before answering on {port}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{what} did not answer on {port} within 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    p
}

/// fake-gcs-server with bucket [`BUCKET`].
pub struct Gcs(Process);

impl Gcs {
    pub fn start(test: &str) -> Option<Gcs> {
        let bin = tools().join("fake-gcs-server");
        netem::testing::check_program("fake-gcs-server");
        if !available(
            &bin,
            test,
            "GOBIN=$PWD/target/tools go install github.com/fsouza/fake-gcs-server@v1.56.1",
        ) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(BUCKET)).unwrap();
        let port = free_port();
        let mut c = netem::testing::program(bin.to_str().unwrap());
        c.args([
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-backend",
            "memory",
        ])
        .args(["-log-level", "error", "-port", &port.to_string(), "-data"])
        .arg(dir.path());
        Some(Gcs(start(c, port, dir, "fake-gcs-server")))
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.0.port)
    }
}

/// Clears every variable a store's credentials could come from, so the
/// user's own are never read.
fn clean(cmd: &mut Command) -> &mut Command {
    for v in [
        "STORAGE_EMULATOR_HOST",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_OAUTH_ACCESS_TOKEN",
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT",
        "AZURE_STORAGE_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_BLOB_ENDPOINT",
    ] {
        cmd.env_remove(v);
    }
    cmd.env("CLOUDSDK_CONFIG", "/nonexistent-haul-test")
}

impl Cloud for Gcs {
    fn url(&self, key: &str) -> String {
        format!("gs://{BUCKET}/{key}")
    }
    fn missing_bucket(&self, key: &str) -> String {
        format!("gs://nobucket/{key}")
    }
    fn bad_name(&self) -> String {
        "gs://Bad!Name/f".into()
    }
    fn env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        clean(cmd).env("STORAGE_EMULATOR_HOST", self.endpoint())
    }
    fn bad_credentials<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        // The emulator checks none: the real endpoint, with none found.
        clean(cmd)
    }
    fn unreachable<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        clean(cmd).env("STORAGE_EMULATOR_HOST", "http://127.0.0.1:1")
    }
}

/// Azurite's blob service with container [`BUCKET`], for account
/// devstoreaccount1.
pub struct Azurite(Process);

impl Azurite {
    pub fn start(test: &str) -> Option<Azurite> {
        let bin = tools().join("azurite/node_modules/.bin/azurite-blob");
        netem::testing::check_program("azurite-blob");
        if !available(
            &bin,
            test,
            "(cd target/tools/azurite && npm install azurite@3.35.0)",
        ) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut c = netem::testing::program(bin.to_str().unwrap());
        // In memory; the folder is its working directory, for anything it
        // writes. The child is node itself (`#!/usr/bin/env node`).
        c.args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            .args(["--silent", "--skipApiVersionCheck", "--inMemoryPersistence"])
            .arg("--disableTelemetry")
            .current_dir(dir.path());
        let a = Azurite(start(c, port, dir, "azurite-blob"));
        a.create_container(BUCKET);
        Some(a)
    }

    pub fn endpoint(&self) -> String {
        format!(
            "http://127.0.0.1:{}/{}",
            self.0.port,
            az::credentials::DEV_ACCOUNT
        )
    }

    fn connection_string(&self, key: &str) -> String {
        format!(
            "DefaultEndpointsProtocol=http;AccountName={};AccountKey={key};BlobEndpoint={};",
            az::credentials::DEV_ACCOUNT,
            self.endpoint()
        )
    }

    /// `PUT /CONTAINER?restype=container`, signed with the account's key:
    /// what haul itself never asks.
    fn create_container(&self, name: &str) {
        let account = az::credentials::DEV_ACCOUNT;
        let path = format!("/{account}/{name}");
        let headers: Vec<(String, String)> = vec![
            ("x-ms-date".into(), az::time::rfc1123(SystemTime::now())),
            ("x-ms-version".into(), az::VERSION.into()),
            ("Content-Length".into(), "0".into()),
        ];
        let query = vec![("restype".to_string(), "container".to_string())];
        let sts = az::sign::string_to_sign(
            account,
            &az::sign::Request {
                method: "PUT",
                headers: &headers,
                content_length: 0,
                path: &path,
                query: &query,
            },
        );
        let az::Auth::Key(key) =
            az::credentials::shared_key(account, az::credentials::DEV_KEY).unwrap()
        else {
            unreachable!("a shared key")
        };
        let auth = az::sign::authorization(account, &key, &sts);
        let mut req = format!(
            "PUT {path}?restype=container HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n",
            self.0.port
        );
        for (k, v) in headers
            .iter()
            .chain([("Authorization".to_string(), auth)].iter())
        {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("Connection: close\r\n\r\n");
        let mut s = TcpStream::connect(("127.0.0.1", self.0.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(
            answer.starts_with("HTTP/1.1 201"),
            "create {name}: {answer}"
        );
    }
}

impl Cloud for Azurite {
    fn url(&self, key: &str) -> String {
        format!("az://{}/{BUCKET}/{key}", az::credentials::DEV_ACCOUNT)
    }
    fn missing_bucket(&self, key: &str) -> String {
        format!("az://{}/nobucket/{key}", az::credentials::DEV_ACCOUNT)
    }
    fn bad_name(&self) -> String {
        format!("az://{}/Bad_Name/f", az::credentials::DEV_ACCOUNT)
    }
    fn env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        let cs = self.connection_string(az::credentials::DEV_KEY);
        clean(cmd).env("AZURE_STORAGE_CONNECTION_STRING", cs)
    }
    fn bad_credentials<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        // A well-formed key of the right length, not the account's.
        let wrong = "d3Jvbmcgd3Jvbmcgd3Jvbmcgd3Jvbmcgd3Jvbmcgd3Jvbmcgd3Jvbmcgd3Jvbmcgd3Jvbmc=";
        clean(cmd).env(
            "AZURE_STORAGE_CONNECTION_STRING",
            self.connection_string(wrong),
        )
    }
    fn unreachable<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        let cs = format!(
            "DefaultEndpointsProtocol=http;AccountName={};AccountKey={};BlobEndpoint=http://127.0.0.1:1/{};",
            az::credentials::DEV_ACCOUNT,
            az::credentials::DEV_KEY,
            az::credentials::DEV_ACCOUNT
        );
        clean(cmd).env("AZURE_STORAGE_CONNECTION_STRING", cs)
    }
}
