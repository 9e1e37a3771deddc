//! The Azure backend against Azurite, Microsoft's emulator of the Blob
//! service (installed by `scripts/test.sh` under `target/tools/azurite`): one
//! emulator per test, on a free loopback port, in memory, killed when the
//! test ends.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use object::{ObjectUrl, Store, Tuning};
use store::StoreErrorKind;

use az::credentials::{shared_key, Account, DEV_ACCOUNT, DEV_KEY};

const CONTAINER: &str = "data";

/// Azurite's blob service, running until dropped.
struct Azurite {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Azurite {
    fn drop(&mut self) {
        // The child is node itself: the script's `#!/usr/bin/env node`
        // has env exec node in its place, so no shell is left between.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn azurite_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/tools/azurite/node_modules/.bin/azurite-blob")
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Azurite {
    /// A fresh emulator with container `data`; none (the test skips)
    /// where Azurite is not installed, but under CI.
    fn start() -> Option<Azurite> {
        let path = azurite_path();
        if !path.exists() {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "Azurite is missing at {}; CI must run these tests",
                    path.display()
                );
            }
            eprintln!(
                "SKIPPED: Azurite is not at {}: run scripts/test.sh",
                path.display()
            );
            return None;
        }
        for _ in 0..3 {
            if let Some(a) = Azurite::try_start(&path) {
                a.request("PUT", &format!("/{CONTAINER}"), "restype=container", 201);
                return Some(a);
            }
        }
        panic!("Azurite did not start on three ports in a row");
    }

    fn try_start(path: &Path) -> Option<Azurite> {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = netem::testing::program(path.to_str().unwrap())
            .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            // In memory, so no --location (Azurite refuses both); the
            // folder is its working directory, for anything it writes.
            .current_dir(dir.path())
            .args([
                "--silent",
                "--skipApiVersionCheck",
                "--inMemoryPersistence",
                "--disableTelemetry",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start azurite-blob");
        let mut a = Azurite {
            child,
            port,
            _dir: dir,
        };
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(a);
            }
            if a.child.try_wait().unwrap().is_some() {
                return None; // the port was taken meanwhile
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("Azurite did not answer on port {port} within 20 s");
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{DEV_ACCOUNT}", self.port)
    }

    fn store(&self, page_size: Option<u32>) -> Arc<Store> {
        store_at(&self.endpoint(), DEV_KEY, page_size)
    }

    /// A signed request without a body, over a plain socket, that must
    /// answer `want`: what the crate's API has no call for.
    fn request(&self, method: &str, path: &str, query: &str, want: u16) {
        let path = format!("/{DEV_ACCOUNT}{path}");
        let headers: Vec<(String, String)> = vec![
            ("x-ms-date".into(), az::time::rfc1123(SystemTime::now())),
            ("x-ms-version".into(), az::VERSION.into()),
            ("Content-Length".into(), "0".into()),
        ];
        let q: Vec<(String, String)> = query
            .split('&')
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let sts = az::sign::string_to_sign(
            DEV_ACCOUNT,
            &az::sign::Request {
                method,
                headers: &headers,
                content_length: 0,
                path: &path,
                query: &q,
            },
        );
        let key = match shared_key(DEV_ACCOUNT, DEV_KEY).unwrap() {
            az::Auth::Key(k) => k,
            az::Auth::Sas(_) => unreachable!(),
        };
        let auth = az::sign::authorization(DEV_ACCOUNT, &key, &sts);
        let mut req = format!(
            "{method} {path}?{query} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n",
            self.port
        );
        for (k, v) in headers
            .iter()
            .chain([("Authorization".to_string(), auth)].iter())
        {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("Connection: close\r\n\r\n");
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {want}")),
            "{method} {path}?{query}: {answer}"
        );
    }
}

fn store_at(endpoint: &str, key: &str, page_size: Option<u32>) -> Arc<Store> {
    let acct = Account::new(DEV_ACCOUNT, endpoint, shared_key(DEV_ACCOUNT, key).unwrap()).unwrap();
    az::connect_account(acct, &Tuning::default(), page_size).unwrap()
}

fn url(key: &str) -> ObjectUrl {
    az::parse(&format!("az://{DEV_ACCOUNT}/{CONTAINER}/{key}")).unwrap()
}

/// Bytes that differ from place to place.
fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) as u8
        })
        .collect()
}

fn read_all(store: &Store, u: &ObjectUrl) -> Vec<u8> {
    let info = store
        .block_on(store.api.head(u))
        .unwrap()
        .expect("the blob is there");
    store
        .block_on(store.api.get_range(&info, 0, info.size))
        .unwrap()
        .to_vec()
}

#[test]
fn put_head_and_ranges_and_a_changed_blob() {
    let Some(emu) = Azurite::start() else { return };
    let store = emu.store(None);
    let api = &store.api;
    let u = url("dir/a b&c+é (1).bin");
    let body = data(10_000, 1);
    let meta = vec![(
        api.mtime_key().to_string(),
        "1700000000.123456789".to_string(),
    )];
    store
        .block_on(api.put(&u, Bytes::from(body.clone()), &meta))
        .unwrap();
    let info = store.block_on(api.head(&u)).unwrap().unwrap();
    assert_eq!(info.size, 10_000);
    assert_eq!(info.mtime, (1_700_000_000, 123_456_789));
    assert!(info.version.as_deref().is_some_and(|v| !v.is_empty()));
    for (start, len) in [(0, 1), (0, 10_000), (4_321, 1_000), (9_999, 1), (5, 0)] {
        let got = store.block_on(api.get_range(&info, start, len)).unwrap();
        assert_eq!(
            &got[..],
            &body[start as usize..(start + len) as usize],
            "{start}+{len}"
        );
    }
    assert_eq!(store.block_on(api.head(&url("dir/none"))).unwrap(), None);

    store
        .block_on(api.put(&u, Bytes::from(data(10_000, 2)), &[]))
        .unwrap();
    let e = store.block_on(api.get_range(&info, 0, 100)).unwrap_err();
    assert_eq!(e.message, object::changed(&u).message);
    let now = store.block_on(api.head(&u)).unwrap().unwrap();
    assert_ne!(now.version, info.version);
    assert_ne!(
        now.mtime, info.mtime,
        "no haul_mtime now: the store's own time"
    );
}

#[test]
fn an_upload_in_shuffled_parts_and_its_listing() {
    let Some(emu) = Azurite::start() else { return };
    let store = emu.store(None);
    let api = &store.api;
    let u = url("big/object.bin");
    let part = 3_000;
    let body = data(40 * part - 123, 3);
    let id = store.block_on(api.begin(&u, &[])).unwrap();
    let mut order: Vec<u32> = (1..=40).collect();
    let mut x = 7u32;
    for i in (1..order.len()).rev() {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        order.swap(i, (x >> 8) as usize % (i + 1));
    }
    let piece = |n: u32| {
        let s = (n as usize - 1) * part;
        Bytes::copy_from_slice(&body[s..(s + part).min(body.len())])
    };
    let mut sent = Vec::new();
    for (i, &n) in order.iter().enumerate() {
        let p = store.block_on(api.put_part(&u, &id, n, piece(n))).unwrap();
        assert_eq!(p.number, n);
        sent.push(p);
        if i == 9 {
            let listed = store.block_on(api.list_parts(&u, &id)).unwrap().unwrap();
            let mut got: Vec<u32> = listed.keys().copied().collect();
            let mut want = order[..10].to_vec();
            got.sort();
            want.sort();
            assert_eq!(got, want);
            let n0 = order[0];
            assert_eq!(listed[&n0], (sent[0].tag.clone(), piece(n0).len() as u64));
        }
    }
    // Another upload to the same blob: its parts are not the first's.
    let other = store.block_on(api.begin(&u, &[])).unwrap();
    assert_ne!(other, id);
    store
        .block_on(api.put_part(&u, &other, 1, Bytes::from_static(b"x")))
        .unwrap();
    store
        .block_on(api.put_part(&u, &other, 41, Bytes::from_static(b"y")))
        .unwrap();
    let first = store.block_on(api.list_parts(&u, &id)).unwrap().unwrap();
    assert_eq!(first.len(), 40);
    assert_eq!(first[&1].1, part as u64);
    let second = store.block_on(api.list_parts(&u, &other)).unwrap().unwrap();
    assert_eq!(second.len(), 2);
    assert_eq!(second[&41].1, 1);
    assert_eq!(
        store
            .block_on(api.list_parts(&u, "0000000000000000"))
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .block_on(api.list_parts(&url("big/never"), &id))
            .unwrap(),
        None
    );
    assert_eq!(
        store.block_on(api.head(&u)).unwrap(),
        None,
        "nothing visible before complete"
    );

    sent.sort_by_key(|p| p.number);
    let meta = vec![(api.mtime_key().to_string(), "42.000000007".to_string())];
    store.block_on(api.complete(&u, &id, sent, &meta)).unwrap();
    assert_eq!(read_all(&store, &u), body);
    let info = store.block_on(api.head(&u)).unwrap().unwrap();
    assert_eq!((info.size, info.mtime), (body.len() as u64, (42, 7)));
    assert_eq!(
        store.block_on(api.list_parts(&u, &id)).unwrap(),
        None,
        "the upload is gone"
    );
    store.block_on(api.abort(&u, &id)).unwrap();
}

#[test]
fn listings_over_many_pages() {
    let Some(emu) = Azurite::start() else { return };
    let store = emu.store(Some(2));
    let api = &store.api;
    let keys = ["l/a", "l/b", "l/c/d", "l/c/e", "l/f/g", "l/h", "m"];
    for (i, k) in keys.iter().enumerate() {
        let meta = vec![(api.mtime_key().to_string(), format!("{i}.500000000"))];
        store
            .block_on(api.put(&url(k), Bytes::from(vec![b'z'; i]), &meta))
            .unwrap();
    }
    let pages = |delimiter: bool| {
        let (mut objects, mut prefixes, mut n, mut token) = (Vec::new(), Vec::new(), 0, None);
        loop {
            let p = store
                .block_on(api.list(&url("l/"), delimiter, token.take()))
                .unwrap();
            n += 1;
            objects.extend(p.objects);
            prefixes.extend(p.prefixes);
            match p.next {
                Some(t) => token = Some(t),
                None => return (objects, prefixes, n),
            }
        }
    };
    let (objects, prefixes, n) = pages(false);
    assert!(n >= 3, "{n} pages");
    assert!(prefixes.is_empty());
    let want: Vec<(String, u64, (i64, u32))> = keys[..6]
        .iter()
        .enumerate()
        .map(|(i, k)| (k.to_string(), i as u64, (i as i64, 500_000_000)))
        .collect();
    assert_eq!(objects, want);
    let (objects, prefixes, n) = pages(true);
    assert!(n >= 2, "{n} pages");
    let names: Vec<&str> = objects.iter().map(|o| o.0.as_str()).collect();
    assert_eq!(names, ["l/a", "l/b", "l/h"]);
    assert_eq!(prefixes, ["l/c/", "l/f/"]);
    assert!(store.check(&url("l/c")).unwrap());
    assert!(!store.check(&url("nothing/")).unwrap());

    store.block_on(api.delete(&url("l/a"))).unwrap();
    assert_eq!(store.block_on(api.head(&url("l/a"))).unwrap(), None);
    store.block_on(api.delete(&url("l/a"))).unwrap();
    assert_eq!(pages(false).0.len(), 5);
}

#[test]
fn a_missing_container_and_a_wrong_key() {
    let Some(emu) = Azurite::start() else { return };
    let store = emu.store(None);
    let u = az::parse(&format!("az://{DEV_ACCOUNT}/nosuch/k")).unwrap();
    let e = store.check(&u).unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::NoBucket, "{}", e.message);
    assert!(e.message.contains("\"nosuch\""), "{}", e.message);
    let e = store.block_on(store.api.head(&u)).unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::NoBucket, "{}", e.message);
    let e = store.block_on(store.api.delete(&u)).unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::NoBucket, "{}", e.message);
    let e = store
        .block_on(store.api.put(&u, Bytes::from_static(b"x"), &[]))
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::NoBucket, "{}", e.message);

    let wrong = store_at(&emu.endpoint(), "d3Jvbmcga2V5IHdyb25nIGtleQ==", None);
    let e = wrong.check(&url("")).unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::StoreAuth, "{}", e.message);
    assert!(e.message.contains("AZURE_STORAGE_KEY"), "{}", e.message);
}

#[test]
fn an_unreachable_endpoint_is_told_quickly() {
    let port = free_port(); // nothing listens there now
    let store = store_at(
        &format!("http://127.0.0.1:{port}/{DEV_ACCOUNT}"),
        DEV_KEY,
        None,
    );
    let t = Instant::now();
    let e = store.check(&url("")).unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::Unreachable, "{}", e.message);
    assert!(e.message.contains(&port.to_string()), "{}", e.message);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}
