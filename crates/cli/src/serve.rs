//! `haul serve` and `haul keygen`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use connect::net::{self, Tuning};
use connect::TransferError;
use endpoint::server::bucket::Buckets;
use endpoint::{ClientKeys, ServerConfig};
use secure::{AuthorizedKeys, Keypair};
use store::Root;

use crate::args::{KeygenArgs, ServeArgs};
use crate::logging::init as init_logging;
use crate::{exit, home};
use endpoint::server::log::{say, Level};
use wire::ErrorCode;

fn listen_addr(text: &str) -> Result<SocketAddr, String> {
    text.to_socket_addrs()
        .ok()
        .and_then(|mut it| it.next())
        .ok_or_else(|| {
            format!("cannot listen on {text:?}: write it as ADDR:PORT, e.g. 0.0.0.0:7050")
        })
}

/// `haul serve --stdio`: started by a client over ssh. Standard output is
/// the channel to the client, so only errors are logged (to stderr, which
/// ssh shows the user).
fn stdio(a: ServeArgs) -> i32 {
    init_logging(a.common.verbose);
    let fail = |code: ErrorCode, msg: String| {
        eprintln!("haul serve --stdio: {msg}");
        exit::code(code)
    };
    let (root, buckets) = match served(&a) {
        Ok(Served::Bucket(b, empty)) => (Some(empty), Some(b)),
        Ok(Served::Files) => match a.root.as_deref().map(Root::served).transpose() {
            // Without a root, `s3://` paths reach what this login's
            // credentials do, as its files are the login's own.
            Ok(None) => (None, Some(Arc::new(Buckets::Named(a.s3.settings())))),
            Ok(r) => (r, None),
            Err(e) => return fail(e.code(), e.message),
        },
        Err(e) => return fail(e.code, e.message),
    };
    let listen = match a.listen.as_deref().map(listen_addr).transpose() {
        Ok(l) => l,
        Err(m) => return fail(ErrorCode::BadRequest, m),
    };
    let cache = match open_cache(&a, false) {
        Ok(c) => c,
        Err(e) => return fail(e.code(), e.message),
    };
    let opts = ssh::StdioOptions {
        root,
        listen,
        data_ports: a.data_ports,
        tuning: Tuning::auto(a.cc.clone(), Duration::from_secs(a.timeout)),
        cache,
        tunnel_to: a.tunnel_to.clone(),
        require_encryption: a.require_encryption,
        buckets,
    };
    match ssh::serve_stdio(opts) {
        Ok(()) => exit::OK,
        Err(e) => fail(e.code, e.message),
    }
}

/// `--cache DIR`, opened for every push this server receives: a daemon's
/// keeps one cache per client key (`per_peer`), so that no client learns
/// the chunks of another's files; over ssh there is one login.
fn open_cache(
    a: &ServeArgs,
    per_peer: bool,
) -> Result<Option<std::sync::Arc<store::ChunkCache>>, store::StoreError> {
    let Some(dir) = &a.cache.cache else {
        return Ok(None);
    };
    // Inside the served root, a client could read another key's cache
    // files, or plant its own (issue 23).
    let root = match per_peer {
        true => Some(a.root.as_deref().unwrap_or(std::path::Path::new("."))),
        false => a.root.as_deref(),
    };
    if let Some(root) = root.and_then(|r| r.canonicalize().ok()) {
        let real = dir.canonicalize().ok().or_else(|| {
            let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
            let parent = parent.unwrap_or(std::path::Path::new("."));
            Some(parent.canonicalize().ok()?.join(dir.file_name()?))
        });
        if real.is_some_and(|c| c.starts_with(&root)) {
            return Err(store::StoreError::new(
                store::StoreErrorKind::BadRequest,
                format!(
                    "the chunk cache {} lies inside the served root {}, where clients could read or plant its files; give --cache a directory outside it",
                    dir.display(),
                    root.display()
                ),
            ));
        }
    }
    let open = match per_peer {
        true => store::cache::open_for_daemon,
        false => store::cache::open_for_transfer,
    };
    Ok(open(dir, a.cache.cache_size)?.map(std::sync::Arc::new))
}

pub fn run(a: ServeArgs) -> i32 {
    if a.stdio {
        return stdio(a);
    }
    let json = matches!(a.log_format, crate::args::LogFormat::Json);
    crate::logging::init_daemon(a.common.verbose.max(1), json);
    let fail = |code: i32, msg: String| {
        say(Level::Error, "failed", &msg);
        code
    };
    let (root, buckets) = match served(&a) {
        Ok(Served::Bucket(b, empty)) => (empty, Some(b)),
        Ok(Served::Files) => {
            match Root::served(a.root.as_deref().unwrap_or(std::path::Path::new("."))) {
                Ok(r) => (r, None),
                Err(e) => return fail(exit::code(e.code()), e.message),
            }
        }
        Err(e) => return fail(exit::code(e.code), e.message),
    };
    let shown_root = match buckets.as_deref() {
        Some(Buckets::Root { root, .. }) => root.to_string(),
        _ => root.path().display().to_string(),
    };
    let listen = match listen_addr(a.listen.as_deref().unwrap_or("0.0.0.0:7050")) {
        Ok(l) => l,
        Err(m) => return fail(exit::code(ErrorCode::BadRequest), m),
    };
    let key_path = a.key.clone().unwrap_or_else(home::server_key);
    let key = match Keypair::load_or_create(&key_path, &format!("server {}", home::comment())) {
        Ok(k) => k,
        Err(e) => return fail(exit::code(ErrorCode::Auth), e.to_string()),
    };
    let authorized_keys = a
        .authorized_keys
        .clone()
        .unwrap_or_else(home::authorized_keys);
    // Like sshd, a line that is not a key is skipped with a warning naming
    // it, and a file others may write is warned about (P-39).
    let loaded = AuthorizedKeys::load(&authorized_keys);
    if let Ok(l) = &loaded {
        let refused = endpoint::server::admit::option_warnings(&l.keys, &authorized_keys);
        for w in l.warnings.iter().chain(&refused) {
            say(Level::Warn, "authorized_keys", w);
        }
    }
    match loaded {
        Ok(l) if !l.keys.is_empty() => say(
            Level::Info,
            "authorized_keys",
            &format!("{} authorized client key(s) in {}", l.keys.len(), authorized_keys.display()),
        ),
        Ok(_) | Err(_) => say(
            Level::Warn,
            "authorized_keys",
            &format!("no client keys in {}: every client will be refused until you add their public keys (`haul keygen` prints one)", authorized_keys.display()),
        ),
    }
    let cache = match open_cache(&a, true) {
        Ok(c) => c,
        Err(e) => return fail(exit::code(e.code()), e.message),
    };
    if let (Some(c), Some(dir)) = (&cache, &a.cache.cache) {
        say(
            Level::Info,
            "cache",
            &format!(
                "chunk cache {}: one per client key, {} MiB in all (at most {} MiB each)",
                dir.display(),
                c.bytes() >> 20,
                a.cache.cache_size >> 20
            ),
        );
    }
    let tuning = Tuning::auto(a.cc.clone(), Duration::from_secs(a.timeout));
    let limits = net::BufferLimits::read();
    if tuning.force_buffer.is_none() {
        say(
            Level::Info,
            "buffers",
            &format!(
                "TCP buffers capped by the OS (wmem_max {} B, tcp_wmem max {} B): about {} MB per stream in flight; clients open more streams to fill long paths",
                limits.wmem_max,
                limits.tcp_wmem_max,
                limits.stream_window(false) >> 20
            ),
        );
    }
    let cfg = ServerConfig {
        metrics: a.metrics,
        transfer_log: match a.log_format {
            crate::args::LogFormat::Text => endpoint::TransferLog::Text,
            crate::args::LogFormat::Json => endpoint::TransferLog::Json,
        },
        root: root.clone(),
        base: None,
        key,
        client_keys: ClientKeys::File(authorized_keys),
        listen,
        tuning: tuning.clone(),
        max_sessions: a.max_sessions.max(1),
        metrics_hosts: a.metrics_host.clone(),
        max_startups_per_source: a.max_startups_per_source,
        data_ports: a.data_ports,
        cache,
        tunnel_to: tunnel_driver::TunnelTargets::listed(a.tunnel_to.clone()),
        require_encryption: a.require_encryption,
        max_tunnels: a.max_tunnels.max(1),
        memory: a.memory,
        prekeyed: None,
        buckets,
        reload: Some(std::sync::Mutex::new(reload_on_hangup())),
        state: (!a.jobs.no_jobs).then(|| {
            a.jobs
                .state
                .clone()
                .unwrap_or_else(|| crate::home::dir().join("state"))
        }),
        notify: jobs::spec::Notify {
            exec: a.jobs.notify_exec.clone(),
            url: a.jobs.notify_url.clone(),
        },
        max_jobs: a.jobs.max_jobs.max(1),
        idle_exit: None,
    };
    let fingerprint = cfg.key.public.fingerprint();
    let require_encryption = cfg.require_encryption;
    let res = endpoint::serve(cfg, |addr, page| {
        say(
            Level::Info,
            "listening",
            &format!(
                "listening on {addr}, root {shown_root}, server key {fingerprint}, congestion control {}{}",
                tuning.cc.as_deref().unwrap_or("system default"),
                if require_encryption { ", encryption required" } else { "" }
            ),
        );
        if let Some(p) = page {
            say(
                Level::Info,
                "metrics",
                &format!("metrics on http://{p}/metrics, status page on http://{p}/"),
            );
        }
    });
    match res {
        Ok(()) => 0,
        Err(e) => fail(
            exit::code(ErrorCode::Connect),
            format!("cannot listen on {listen}: {e}"),
        ),
    }
}

/// What `--root` serves.
enum Served {
    Files,
    /// A bucket's prefix, and an empty directory as the file root, which
    /// no request reaches.
    Bucket(Arc<Buckets>, Root),
}

/// `--root s3://BUCKET/PREFIX` (any store's scheme): the store is asked
/// once now, so that wrong
/// credentials or a missing bucket stop the server at its start.
fn served(a: &ServeArgs) -> Result<Served, TransferError> {
    let Some(r) = a
        .root
        .as_deref()
        .and_then(|p| p.to_str())
        .filter(|p| backends::is_object(p))
    else {
        return Ok(Served::Files);
    };
    let url = backends::parse(r).map_err(|m| TransferError::new(ErrorCode::BadRequest, m))?;
    let store = backends::connect(&url, &a.s3.settings())?;
    store.check(&url)?;
    let empty = home::dir().join("s3-root");
    std::fs::create_dir_all(&empty)
        .map_err(|e| TransferError::from(store::StoreError::io("create", &empty, &e)))?;
    let empty = Root::served(&empty)?;
    Ok(Served::Bucket(
        Arc::new(Buckets::Root { store, root: url }),
        empty,
    ))
}

pub fn keygen(a: KeygenArgs) -> i32 {
    if let Some(dir) = &a.import {
        return match import_keys(dir) {
            Ok(done) => {
                eprintln!("haul keygen: {done}");
                0
            }
            Err(e) => {
                eprintln!("haul keygen: {e}");
                exit::code(ErrorCode::Auth)
            }
        };
    }
    let path = a.file.unwrap_or_else(home::identity);
    let kp = Keypair::generate();
    match kp.save(&path, &a.comment.unwrap_or_else(home::comment)) {
        Ok(()) => {
            eprintln!(
                "haul keygen: wrote {} and {}",
                path.display(),
                Keypair::public_path(&path).display()
            );
            println!("{}", kp.public);
            0
        }
        Err(e) => {
            eprintln!("haul keygen: {e}");
            1
        }
    }
}

/// `haul keygen --import DIR`: the key and `known_hosts` of DIR (a
/// mounted Secret, readable through the group) copied into HAUL_HOME as
/// this user's own, the key 0600, and the key checked.
fn import_keys(dir: &std::path::Path) -> Result<String, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let home = home::dir();
    std::fs::create_dir_all(&home).map_err(|e| format!("cannot make {}: {e}", home.display()))?;
    let mut copied = Vec::new();
    for (name, mode, needed) in [
        ("id_x25519", 0o600, true),
        ("id_x25519.pub", 0o644, false),
        ("known_hosts", 0o644, false),
    ] {
        let from = dir.join(name);
        let bytes = match std::fs::read(&from) {
            Ok(b) => b,
            Err(e) if !needed && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot read {}: {e}", from.display())),
        };
        let to = home.join(name);
        let _ = std::fs::remove_file(&to);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&to)
            .map_err(|e| format!("cannot write {}: {e}", to.display()))?;
        std::io::Write::write_all(&mut f, &bytes)
            .map_err(|e| format!("cannot write {}: {e}", to.display()))?;
        copied.push(name);
    }
    let key = Keypair::load(&home.join("id_x25519")).map_err(|e| e.to_string())?;
    Ok(format!(
        "imported {} from {} into {} (key {})",
        copied.join(", "),
        dir.display(),
        home.display(),
        key.public.fingerprint()
    ))
}

static HANGUP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_hangup(_: libc::c_int) {
    HANGUP.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// SIGHUP, as sshd takes it (a service manager's `reload`): each one asks
/// the server to read the authorized keys again, log what they hold, and
/// end at once the running sessions of keys that were removed or whose
/// options narrowed (issue 39). Every new session reads the file as it
/// starts anyway, so a key added applies to the next session.
fn reload_on_hangup() -> std::sync::mpsc::Receiver<()> {
    // SAFETY: installing an async-signal-safe handler (one atomic store).
    unsafe {
        libc::signal(libc::SIGHUP, on_hangup as *const () as libc::sighandler_t);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(200));
        if HANGUP.swap(false, std::sync::atomic::Ordering::Relaxed) && tx.send(()).is_err() {
            return;
        }
    });
    rx
}
