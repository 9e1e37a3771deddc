//! A real S3 server for tests: versitygw (built by `scripts/test.sh` with `go
//! install` into `target/tools`) on a loopback port, serving buckets
//! that are directories of a temp dir, so a test reads an object's bytes
//! back as a file. Started by the test, stopped by PID when dropped.
//! Where it was not built, the tests that need it print why they skip
//! (and fail under CI, which builds it).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ACCESS: &str = "haul-test-key";
pub const SECRET: &str = "haul-test-secret-0123456789";

pub struct Gateway {
    child: Child,
    /// Where it listens.
    pub host: String,
    pub port: u16,
    /// Where the buckets are: `root/BUCKET/KEY`.
    pub root: PathBuf,
    /// A home without AWS files, so the user's own are never read.
    home: PathBuf,
    /// Served over TLS, by a certificate of this CA (PEM).
    pub ca: Option<PathBuf>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/versitygw")
}

/// Whether this test can start the S3 server; says why when it cannot.
pub fn gateway_available(test: &str) -> bool {
    netem::testing::check_program("versitygw");
    if binary().exists() {
        return true;
    }
    let why = format!(
        "{test} needs versitygw: run scripts/test.sh once, or GOBIN=$PWD/target/tools go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"
    );
    assert!(
        !std::env::var("CI").is_ok_and(|v| v == "true"),
        "{why}, and CI must run it"
    );
    println!("SKIPPED: {why}");
    false
}

impl Gateway {
    /// Starts the server under `dir` with the buckets named, and waits
    /// (bounded) until it answers.
    pub fn start(dir: &Path, buckets: &[&str]) -> Gateway {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Gateway::start_with(
            dir,
            buckets,
            ("127.0.0.1", port),
            netem::testing::program,
            |addr| TcpStream::connect(addr).is_ok(),
            &[],
        )
    }

    /// Starts it over TLS, with a server certificate for 127.0.0.1 signed
    /// by a CA of the test's own (made with openssl): a store behind a
    /// private CA, as `--ca-bundle` and `AWS_CA_BUNDLE` are for.
    pub fn start_tls(dir: &Path, buckets: &[&str]) -> Gateway {
        let tls = dir.join("tls");
        std::fs::create_dir_all(&tls).unwrap();
        let f = |n: &str| tls.join(n).to_str().unwrap().to_string();
        std::fs::write(
            tls.join("ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        let ssl = |args: &[&str]| {
            let out = netem::testing::program("openssl")
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        ssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=haul-test-ca",
            "-keyout",
            &f("ca.key"),
            "-out",
            &f("ca.pem"),
        ]);
        ssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=haul-test-s3",
            "-keyout",
            &f("key.pem"),
            "-out",
            &f("req.pem"),
        ]);
        ssl(&[
            "x509",
            "-req",
            "-in",
            &f("req.pem"),
            "-CA",
            &f("ca.pem"),
            "-CAkey",
            &f("ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &f("ext"),
            "-out",
            &f("cert.pem"),
        ]);
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut gw = Gateway::start_with(
            dir,
            buckets,
            ("127.0.0.1", port),
            netem::testing::program,
            |addr| TcpStream::connect(addr).is_ok(),
            &["--cert", &f("cert.pem"), "--key", &f("key.pem")],
        );
        gw.ca = Some(tls.join("ca.pem"));
        gw
    }

    /// Starts it inside the emulator's namespace b, beside a daemon there.
    pub fn start_in_b(emu: &netem::Emulator, dir: &Path, buckets: &[&str]) -> Gateway {
        Gateway::start_with(
            dir,
            buckets,
            (netem::ADDR_B, 7070),
            |bin| emu.command_b(bin),
            |addr| {
                let addr = addr.to_string();
                emu.in_b(move || TcpStream::connect(addr.as_str())).is_ok()
            },
            &[],
        )
    }

    fn start_with(
        dir: &Path,
        buckets: &[&str],
        (host, port): (&str, u16),
        launch: impl FnOnce(&str) -> Command,
        answers: impl Fn(&str) -> bool,
        extra: &[&str],
    ) -> Gateway {
        let root = dir.join("s3");
        let home = dir.join("s3-home");
        std::fs::create_dir_all(&home).unwrap();
        for b in buckets {
            std::fs::create_dir_all(root.join(b)).unwrap();
        }
        let child = launch(binary().to_str().unwrap())
            .args(["--access", ACCESS, "--secret", SECRET, "--quiet"])
            .args(extra)
            .arg("--port")
            .arg(format!("{host}:{port}"))
            .arg("posix")
            .arg(&root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start versitygw");
        let gw = Gateway {
            child,
            host: host.to_string(),
            port,
            root,
            home,
            ca: None,
        };
        let t0 = Instant::now();
        while !answers(&format!("{host}:{port}")) {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "versitygw did not start listening on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        gw
    }

    pub fn endpoint(&self) -> String {
        let scheme = if self.ca.is_some() { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.host, self.port)
    }

    /// Points `cmd` at this server with its credentials, and at no AWS
    /// files of the user's.
    pub fn env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        cmd.env("AWS_ACCESS_KEY_ID", ACCESS)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env("AWS_ENDPOINT_URL", self.endpoint())
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONFIG_FILE", self.home.join("config"))
            .env("AWS_SHARED_CREDENTIALS_FILE", self.home.join("credentials"))
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_CA_BUNDLE")
            .env_remove("AWS_SESSION_TOKEN")
    }

    /// Where the server keeps `bucket/key`'s bytes.
    pub fn object(&self, bucket: &str, key: &str) -> PathBuf {
        self.root.join(bucket).join(key)
    }
}
