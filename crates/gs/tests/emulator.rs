//! The GCS backend against a real emulator: fake-gcs-server (built by
//! `scripts/test.sh` into `target/tools`), started per test on a free loopback
//! port with its memory backend and the test's buckets, stopped by PID
//! when dropped. Where it was not built, each test prints why it skips
//! (and fails under CI, which builds it).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use object::{ObjectInfo, ObjectUrl, Part, Store, Tuning};
use store::StoreErrorKind;

const BUCKET: &str = "haul-test";

struct Emulator {
    child: Child,
    port: u16,
    _data: tempfile::TempDir,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/fake-gcs-server")
}

impl Emulator {
    /// The emulator with the bucket [`BUCKET`], answering; `None` (after
    /// saying why) where it was not built.
    fn start(test: &str) -> Option<Emulator> {
        netem::testing::check_program("fake-gcs-server");
        if !binary().exists() {
            let why = format!(
                "{test} needs fake-gcs-server: run scripts/test.sh once, or GOBIN=$PWD/target/tools go install github.com/fsouza/fake-gcs-server@v1.56.1"
            );
            assert!(
                !std::env::var("CI").is_ok_and(|v| v == "true"),
                "{why}, and CI must run it"
            );
            println!("SKIPPED: {why}");
            return None;
        }
        let data = tempfile::tempdir().unwrap();
        std::fs::create_dir(data.path().join(BUCKET)).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = netem::testing::program(binary().to_str().unwrap())
            .args([
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-backend",
                "memory",
            ])
            .args(["-log-level", "error", "-port", &port.to_string(), "-data"])
            .arg(data.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fake-gcs-server");
        let emu = Emulator {
            child,
            port,
            _data: data,
        };
        emu.wait_ready();
        Some(emu)
    }

    fn wait_ready(&self) {
        let t0 = Instant::now();
        while raw_get(self.port, &format!("/storage/v1/b/{BUCKET}")).is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "fake-gcs-server did not answer on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn store(&self) -> Arc<Store> {
        gs::connect_to(&self.endpoint(), &Tuning::default()).unwrap()
    }

    /// The names of every object under `prefix`, as the emulator holds
    /// them: what the store hides included.
    fn raw_names(&self, prefix: &str) -> Vec<String> {
        let body = raw_get(
            self.port,
            &format!("/storage/v1/b/{BUCKET}/o?prefix={prefix}"),
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|o| o["name"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A plain HTTP GET's body, when a 200 came back.
fn raw_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    (head.split(' ').nth(1) == Some("200")).then(|| body.to_string())
}

fn url(key: &str) -> ObjectUrl {
    gs::parse(&format!("gs://{BUCKET}/{key}")).unwrap()
}

/// `n` bytes that differ from those of another `seed`.
fn bytes(n: usize, seed: u8) -> Bytes {
    (0..n)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed ^ (i >> 8) as u8)
        })
        .collect()
}

fn mtime_meta(v: &str) -> Vec<(String, String)> {
    vec![("haul-mtime".to_string(), v.to_string())]
}

fn head(store: &Store, u: &ObjectUrl) -> Option<ObjectInfo> {
    store.block_on(store.api.head(u)).unwrap()
}

fn read_all(store: &Store, info: &ObjectInfo) -> Bytes {
    store
        .block_on(store.api.get_range(info, 0, info.size))
        .unwrap()
}

#[test]
fn put_head_and_ranges() {
    let Some(emu) = Emulator::start("put_head_and_ranges") else {
        return;
    };
    let store = emu.store();
    let u = url("dir/a file+é.bin");
    let body = bytes(100_000, 1);
    store
        .block_on(
            store
                .api
                .put(&u, body.clone(), &mtime_meta("1700000000.123456789")),
        )
        .unwrap();
    let info = head(&store, &u).expect("the object is there");
    assert_eq!(info.size, 100_000);
    assert_eq!(info.mtime, (1_700_000_000, 123_456_789));
    let generation = info.version.clone().expect("a generation");
    assert!(
        generation.bytes().all(|c| c.is_ascii_digit()),
        "{generation}"
    );
    for (start, len) in [(0u64, 10u64), (50_000, 1000), (99_995, 5), (0, 100_000)] {
        let got = store
            .block_on(store.api.get_range(&info, start, len))
            .unwrap();
        assert_eq!(&got[..], &body[start as usize..(start + len) as usize]);
    }
    assert_eq!(head(&store, &url("dir/none")), None);
    let plain = url("plain");
    store
        .block_on(store.api.put(&plain, Bytes::from_static(b"x"), &[]))
        .unwrap();
    let info = head(&store, &plain).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (info.mtime.0 - now).abs() < 600,
        "mtime from `updated`: {:?}",
        info.mtime
    );
}

#[test]
fn a_replaced_object_reads_as_changed() {
    let Some(emu) = Emulator::start("a_replaced_object_reads_as_changed") else {
        return;
    };
    let store = emu.store();
    let u = url("k");
    store
        .block_on(store.api.put(&u, bytes(1000, 1), &[]))
        .unwrap();
    let info = head(&store, &u).unwrap();
    store
        .block_on(store.api.put(&u, bytes(1000, 2), &[]))
        .unwrap();
    let e = store
        .block_on(store.api.get_range(&info, 0, 10))
        .unwrap_err();
    assert_eq!(e.message, object::changed(&u).message);
    let mut longer = head(&store, &u).unwrap();
    longer.size += 10;
    let e = store
        .block_on(store.api.get_range(&longer, 995, 10))
        .unwrap_err();
    assert_eq!(e.message, object::changed(&u).message, "a short read");
}

/// Uploads `parts` parts of `size` bytes each (out of order); the
/// whole body and the parts.
fn upload_parts(
    store: &Store,
    u: &ObjectUrl,
    id: &str,
    parts: u32,
    size: usize,
) -> (Vec<u8>, Vec<Part>) {
    let mut whole = Vec::new();
    let bodies: Vec<Bytes> = (1..=parts).map(|n| bytes(size, n as u8)).collect();
    for b in &bodies {
        whole.extend_from_slice(b);
    }
    let mut order: Vec<u32> = (1..=parts).collect();
    order.reverse();
    let mut got: Vec<Part> = order
        .into_iter()
        .map(|n| {
            let body = bodies[n as usize - 1].clone();
            store.block_on(store.api.put_part(u, id, n, body)).unwrap()
        })
        .collect();
    got.sort_by_key(|p| p.number);
    (whole, got)
}

#[test]
fn forty_parts_compose_into_the_object() {
    let Some(emu) = Emulator::start("forty_parts_compose_into_the_object") else {
        return;
    };
    let store = emu.store();
    let u = url("big/object.bin");
    let meta = mtime_meta("1600000000.500000000");
    let id = store.block_on(store.api.begin(&u, &meta)).unwrap();
    assert_eq!(store.block_on(store.api.list_parts(&u, &id)).unwrap(), None);
    let (whole, parts) = upload_parts(&store, &u, &id, 40, 1000);
    let held = store
        .block_on(store.api.list_parts(&u, &id))
        .unwrap()
        .unwrap();
    assert_eq!(held.len(), 40);
    for p in &parts {
        assert_eq!(held[&p.number], (p.tag.clone(), 1000));
    }
    assert_eq!(
        head(&store, &u),
        None,
        "nothing under the key before complete"
    );
    for delimiter in [false, true] {
        let page = store
            .block_on(store.api.list(&url(""), delimiter, None))
            .unwrap();
        assert!(
            page.objects.is_empty() && page.prefixes.is_empty(),
            "{page:?}"
        );
    }
    store
        .block_on(store.api.complete(&u, &id, parts, &meta))
        .unwrap();
    let info = head(&store, &u).unwrap();
    assert_eq!(
        (info.size, info.mtime),
        (40_000, (1_600_000_000, 500_000_000))
    );
    assert!(
        read_all(&store, &info) == whole,
        "the composed bytes differ"
    );
    assert_eq!(emu.raw_names(".haul-parts/"), Vec::<String>::new());
    assert_eq!(store.block_on(store.api.list_parts(&u, &id)).unwrap(), None);
}

#[test]
fn abort_leaves_nothing() {
    let Some(emu) = Emulator::start("abort_leaves_nothing") else {
        return;
    };
    let store = emu.store();
    let u = url("aborted");
    let id = store.block_on(store.api.begin(&u, &[])).unwrap();
    upload_parts(&store, &u, &id, 3, 10);
    assert_eq!(emu.raw_names(".haul-parts/").len(), 3);
    store.block_on(store.api.abort(&u, &id)).unwrap();
    assert_eq!(emu.raw_names(""), Vec::<String>::new());
    assert_eq!(store.block_on(store.api.list_parts(&u, &id)).unwrap(), None);
    assert_eq!(head(&store, &u), None);
}

/// Every page of a listing of `u`: keys, prefixes, how many pages.
fn list_pages(store: &Store, u: &ObjectUrl, delimiter: bool) -> (Vec<String>, Vec<String>, usize) {
    let (mut keys, mut prefixes, mut pages) = (Vec::new(), Vec::new(), 0);
    let mut token = None;
    loop {
        let p = store
            .block_on(store.api.list(u, delimiter, token.take()))
            .unwrap();
        pages += 1;
        keys.extend(p.objects.into_iter().map(|(k, ..)| k));
        prefixes.extend(p.prefixes);
        match p.next {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    keys.sort();
    prefixes.sort();
    (keys, prefixes, pages)
}

#[test]
fn listings_page_and_hide_parts() {
    let Some(emu) = Emulator::start("listings_page_and_hide_parts") else {
        return;
    };
    let store = gs::connect_paged(&emu.endpoint(), 3, &Tuning::default()).unwrap();
    let mut names: Vec<String> = (0..7).map(|i| format!("d/a{i}")).collect();
    names.extend(["d/sub1/x", "d/sub2/y", "top"].map(String::from));
    for n in &names {
        store
            .block_on(store.api.put(&url(n), Bytes::from(n.clone()), &[]))
            .unwrap();
    }
    let pending = url("d/pending");
    let id = store.block_on(store.api.begin(&pending, &[])).unwrap();
    upload_parts(&store, &pending, &id, 5, 10);
    let (keys, prefixes, pages) = list_pages(&store, &url(""), false);
    assert_eq!(keys, names);
    assert!(prefixes.is_empty());
    assert!(pages >= 4, "{pages} pages of 3");
    let (keys, _, _) = list_pages(&store, &url("d/"), false);
    assert_eq!(keys, names[..9].to_vec());
    let (keys, prefixes, _) = list_pages(&store, &url("d/"), true);
    assert_eq!(keys, names[..7].to_vec());
    assert_eq!(prefixes, vec!["d/sub1/".to_string(), "d/sub2/".to_string()]);
    let (keys, prefixes, _) = list_pages(&store, &url(""), true);
    assert_eq!(
        (keys, prefixes),
        (vec!["top".to_string()], vec!["d/".to_string()])
    );
    assert!(store.check(&url("d/sub1/")).unwrap());
    assert!(!store.check(&url("nothing/")).unwrap());
    assert!(!store.check(&url(".haul-parts/")).unwrap());
}

#[test]
fn delete_removes_and_tolerates_missing() {
    let Some(emu) = Emulator::start("delete_removes_and_tolerates_missing") else {
        return;
    };
    let store = emu.store();
    let u = url("gone/soon");
    store
        .block_on(store.api.put(&u, Bytes::from_static(b"bye"), &[]))
        .unwrap();
    store.block_on(store.api.delete(&u)).unwrap();
    assert_eq!(head(&store, &u), None);
    store.block_on(store.api.delete(&u)).unwrap();
}

#[test]
fn a_missing_bucket_is_no_bucket() {
    let Some(emu) = Emulator::start("a_missing_bucket_is_no_bucket") else {
        return;
    };
    let store = emu.store();
    let u = gs::parse("gs://no-such-bucket/k").unwrap();
    let kind = |r: Result<(), store::StoreError>| r.unwrap_err();
    let errors = [
        kind(store.check(&u).map(drop)),
        kind(store.block_on(store.api.head(&u)).map(drop)),
        kind(store.block_on(store.api.list(&u, true, None)).map(drop)),
        kind(
            store
                .block_on(store.api.put(&u, Bytes::from_static(b"x"), &[]))
                .map(drop),
        ),
    ];
    for e in errors {
        assert_eq!(e.kind, StoreErrorKind::NoBucket, "{}", e.message);
        assert!(e.message.contains("no-such-bucket"), "{}", e.message);
    }
}

#[test]
fn an_unreachable_endpoint_is_told_quickly() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store = gs::connect_to(&format!("127.0.0.1:{port}"), &Tuning::default()).unwrap();
    let t0 = Instant::now();
    let e = store.check(&url("k")).unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::Unreachable, "{}", e.message);
    assert!(
        e.message.contains(&format!("127.0.0.1:{port}")),
        "{}",
        e.message
    );
    assert!(e.message.contains("STORAGE_EMULATOR_HOST"), "{}", e.message);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}
