//! haul and rclone sync one bucket incrementally (issue 41): an object
//! rclone wrote carries its file's time as `mtime` metadata (float
//! seconds), which haul reads where its own `haul-mtime` is absent, and
//! an object haul writes carries both. Against a real S3 server
//! (versitygw, built by scripts/test.sh), started and stopped here.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bytes::Bytes;
use object::Tuning;

#[test]
fn rclones_mtime_is_read_and_written_beside_hauls() {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/versitygw");
    netem::testing::check_program("versitygw");
    if !bin.exists() {
        let why = "this test needs versitygw: run scripts/test.sh once";
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "{why}, and CI must run it"
        );
        println!("SKIPPED: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("s3/bkt")).unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut gw = netem::testing::program(bin.to_str().unwrap())
        .args([
            "--access",
            "k",
            "--secret",
            "secret-0123456789",
            "--quiet",
            "--port",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .arg("posix")
        .arg(dir.path().join("s3"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "versitygw did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // This test binary is its own process: the SDK reads these.
    std::env::set_var("AWS_ACCESS_KEY_ID", "k");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "secret-0123456789");
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    std::env::set_var("AWS_CONFIG_FILE", dir.path().join("none"));
    std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", dir.path().join("none"));
    let opts = s3::S3Options {
        profile: None,
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        ..Default::default()
    };
    let store = s3::connect(&opts, &Tuning::default()).unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // As rclone writes it: float seconds under `mtime`, nothing else.
        let by_rclone = s3::parse("s3://bkt/by-rclone").unwrap();
        let meta = [("mtime".to_string(), "1700000000.5".to_string())];
        store
            .block_on(store.api.put(&by_rclone, Bytes::from_static(b"x"), &meta))
            .unwrap();
        let info = store.block_on(store.api.head(&by_rclone)).unwrap().unwrap();
        assert_eq!(info.mtime, (1_700_000_000, 500_000_000));
        // As haul writes it: its own name, and rclone's beside it (read
        // back here as rclone would, by name, through the raw store).
        let by_haul = s3::parse("s3://bkt/by-haul").unwrap();
        let meta = [("haul-mtime".to_string(), "1600000000.250000000".to_string())];
        store
            .block_on(store.api.put(&by_haul, Bytes::from_static(b"y"), &meta))
            .unwrap();
        let info = store.block_on(store.api.head(&by_haul)).unwrap().unwrap();
        assert_eq!(info.mtime, (1_600_000_000, 250_000_000));
        let kept = xattr(&dir.path().join("s3/bkt/by-haul"), "user.metadata");
        assert!(
            kept.contains("\"mtime\"") && kept.contains("1600000000.250000000"),
            "no rclone mtime in {kept}"
        );
    }));
    let _ = gw.kill();
    let _ = gw.wait();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

/// The extended attribute `name` of `path`: versitygw keeps an object's
/// metadata in `user.metadata`.
fn xattr(path: &Path, name: &str) -> String {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: getxattr(2) into a buffer of the length given.
    let len = unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(len >= 0, "getxattr {name} of {}", path.display());
    String::from_utf8_lossy(&buf[..len as usize]).into_owned()
}
