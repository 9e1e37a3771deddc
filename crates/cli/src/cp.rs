//! `haul cp`: works out the direction from the locations, connects, and
//! prints the result. All the moving is done by the driver.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use connect::TransferError;
use endpoint::{ClientConfig, Report, Transport};
use store::{Destination, Root, Sink};

use crate::args::{CpArgs, TransportArg};
use crate::exit;
use crate::location::Location;
use crate::reach::{usage, Dialer, Peer, Reach};
use crate::report::{self, Bar, Show};

/// What a push sends: local files, or the objects of an object-store
/// source.
enum PushFrom {
    Files(Vec<PathBuf>),
    Bucket(object::ObjectUrl),
}

/// Where a pull lands: a local path, or an object-store destination.
enum PullTo {
    Path(String),
    Bucket(object::ObjectUrl),
}

enum Plan {
    Push {
        sources: PushFrom,
        peer: Peer,
        dest: String,
    },
    Pull {
        sources: Vec<String>,
        peer: Peer,
        dest: PullTo,
    },
}

impl Plan {
    fn peer(&self) -> &Peer {
        match self {
            Plan::Push { peer, .. } | Plan::Pull { peer, .. } => peer,
        }
    }
}

fn bucket(s: &str) -> Result<object::ObjectUrl, TransferError> {
    backends::parse(s).map_err(usage)
}

fn plan(paths: &[String]) -> Result<Plan, TransferError> {
    let (dst, srcs) = paths
        .split_last()
        .ok_or_else(|| usage("need at least one source and a destination"))?;
    let srcs: Vec<Location> = srcs.iter().map(|s| Location::parse(s)).collect();
    let remote_sources = |srcs: Vec<Location>, dest: &str| {
        let mut sources = Vec::new();
        let mut origin: Option<Peer> = None;
        for s in srcs {
            match s {
                Location::Local(p) | Location::Bucket(p) => {
                    return Err(usage(format!("both {p:?} and {dest:?} are on this host; haul copies between hosts: name one as host:path")));
                }
                Location::Remote {
                    user,
                    host,
                    port,
                    path,
                } => {
                    let peer = Peer { user, host, port };
                    if origin.as_ref().is_some_and(|o| *o != peer) {
                        return Err(usage("all remote sources must be on the same host"));
                    }
                    origin = Some(peer);
                    sources.push(if path.is_empty() {
                        ".".to_string()
                    } else {
                        path
                    });
                }
            }
        }
        Ok((sources, origin.expect("at least one source")))
    };
    match Location::parse(dst) {
        Location::Remote {
            user,
            host,
            port,
            path,
        } => {
            let mut files = Vec::new();
            let mut objects = Vec::new();
            for s in srcs {
                match s {
                    Location::Local(p) => files.push(PathBuf::from(p)),
                    Location::Bucket(u) => objects.push(u),
                    Location::Remote { .. } => return Err(usage("copying between two remote hosts is not supported; run haul on one of them")),
                }
            }
            let sources = match (files.is_empty(), objects.len()) {
                (true, 1) => PushFrom::Bucket(bucket(&objects[0])?),
                (_, 0) => PushFrom::Files(files),
                _ => return Err(usage("send one object-store source at a time, without local files beside it; a prefix ending in '/' (with -r) sends many objects")),
            };
            Ok(Plan::Push {
                sources,
                peer: Peer { user, host, port },
                dest: path,
            })
        }
        Location::Local(dest) => {
            let (sources, peer) = remote_sources(srcs, &dest)?;
            Ok(Plan::Pull {
                sources,
                peer,
                dest: PullTo::Path(dest),
            })
        }
        Location::Bucket(dest) => {
            let url = bucket(&dest)?;
            let (sources, peer) = remote_sources(srcs, &dest)?;
            Ok(Plan::Pull {
                sources,
                peer,
                dest: PullTo::Bucket(url),
            })
        }
    }
}

fn local_destination(dest: &str, many: bool, contents: bool) -> Result<Destination, TransferError> {
    if dest == "-" {
        if many {
            return Err(usage(
                "only a single file can be written to standard output",
            ));
        }
        return Ok(Destination::Stdout);
    }
    let path = Path::new(dest);
    // The directory that bounds what the server's manifest may create.
    let bound = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    };
    let root = Root::new(&bound).map_err(TransferError::from)?;
    Destination::for_path(path, dest.ends_with('/'), many, contents, root).map_err(Into::into)
}

pub fn run(a: CpArgs) -> i32 {
    crate::logging::init(a.common.verbose);
    let json = a.json;
    // A source that changed while it was read fails the transfer before
    // any of its mixed bytes are placed; once more resumes from what
    // arrived and sends what changed. A second change is an error.
    let mut result = transfer(&a);
    if let Err(e) = &result {
        if e.message.contains(store::source::CHANGED) {
            eprintln!("haul: {}; sending it once more", e.message);
            result = transfer(&a);
        }
    }
    match result {
        Ok((line, text)) => {
            if json {
                println!("{line}");
            } else if let Some(t) = text {
                eprintln!("{t}");
            }
            exit::OK
        }
        Err(e) => {
            let code = exit::code(e.code);
            eprintln!("haul: {}", e.message);
            if json {
                println!("{}", report::json_error(code, &e.message));
            }
            code
        }
    }
}

fn transfer(a: &CpArgs) -> Result<(String, Option<String>), TransferError> {
    let plan = plan(&a.paths)?;
    let reach = Reach::decide(&a.conn, plan.peer().clone())?;
    let ssh = reach.ssh;
    if a.delete && !a.recursive {
        return Err(usage(
            "--delete removes files from directories, so it needs -r (or haul sync)",
        ));
    }
    if a.delete_partials && !a.delete {
        return Err(usage(
            "--delete-partials widens --delete; give both (haul sync --delete --delete-partials)",
        ));
    }
    let is_pull = matches!(plan, Plan::Pull { .. });
    if a.files_from.is_some() && is_pull {
        return Err(usage(
            "--files-from names local files to send; to fetch a list of remote files, run haul on that host",
        ));
    }
    let shard = crate::shard::assigned(a)?;
    if shard.is_some() {
        let why = if is_pull {
            Some("--shard splits a push of sources that every shard's host sees (a shared or parallel file system, or one bucket); the sources here are remote")
        } else if a.delete {
            Some("--delete needs the whole manifest, and a shard sends only its share; run the deleting sync as one transfer")
        } else if a.basis.is_some() {
            Some("--basis is for one file sent whole; a shard may send a piece of it")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(usage(why));
        }
    }
    if !ssh && !is_pull && a.cache.cache.is_some() {
        return Err(usage(
            "--cache on a push names the receiving side's cache; a daemon's is set by `haul serve --cache`",
        ));
    }
    let cache = match (&a.cache.cache, is_pull) {
        (Some(dir), true) => {
            store::cache::open_for_transfer(dir, a.cache.cache_size)?.map(std::sync::Arc::new)
        }
        _ => None,
    };
    if !ssh && a.conn.remote_ports.is_some() {
        return Err(usage(
            "--remote-ports is for a remote side started over ssh; a daemon's data ports are set by `haul serve --data-ports`",
        ));
    }
    let protection = crate::reach::protection(a.no_encrypt);
    let transport = match a.transport {
        TransportArg::Tcp => Transport::Tcp,
        TransportArg::Udp => Transport::Udp,
        TransportArg::Auto => Transport::Auto,
    };
    // What `haul probe` found for this host, where the user left the
    // choices to haul (P-36).
    let advice = (transport == Transport::Auto && a.streams.is_none())
        .then(|| crate::probe::saved(&reach.peer, ssh))
        .flatten();
    if let Some(adv) = &advice {
        tracing::info!(
            "using the advice `haul probe` saved for {}: {:?}, {} streams, {} bit/s",
            reach.peer.host,
            adv.transport,
            adv.streams,
            adv.rate * 8
        );
    }
    let mut cfg = ClientConfig {
        streams: a.streams,
        block_size: a.block_size,
        rate: a.rate,
        transport,
        preserve: a.preserve,
        compress: a.compress,
        sync: wire::SyncOptions {
            dedup: !a.no_dedup,
            update: a.update || a.checksum,
            checksum: a.checksum,
            delete: a.delete,
            delete_partials: a.delete_partials,
            dry_run: a.dry_run,
            ..Default::default()
        },
        basis: a.basis.clone(),
        cache,
        advice,
        known_path: crate::known_paths::load(&reach.peer, ssh),
        ..reach.config(&a.conn, protection)?
    };
    let remote_extra = match (&a.cache.cache, is_pull) {
        (Some(dir), false) => format!(
            " --cache {} --cache-size {}",
            shell_words::quote(&dir.to_string_lossy()),
            a.cache.cache_size
        ),
        _ => String::new(),
    };
    let peer = reach.peer.clone();
    let mut dialer = reach.dialer(&a.conn, remote_extra)?;
    dialer.fast = true;
    let show = if a.quiet {
        Show::Never
    } else if a.progress {
        Show::Always
    } else if a.json {
        Show::Never
    } else {
        Show::OnTerminal
    };
    let (direction, report) = match plan {
        Plan::Push {
            sources: PushFrom::Bucket(url),
            dest,
            ..
        } => {
            let store = backends::connect(&url, &a.s3.settings())?;
            let listed = object::list(&store, &url, a.recursive)?;
            for s in &listed.skipped {
                eprintln!("haul: {s}");
            }
            if let Some(sh) = shard {
                let objects = Box::new(object::ObjectSource::new(store, &listed));
                let (entries, source, spec) = crate::shard::share(a, sh, &listed.entries, objects)?;
                cfg.shard = Some(spec);
                let flags = (a.recursive, false, listed.contents);
                return push_shard(
                    a,
                    dialer,
                    cfg,
                    show,
                    (entries, source, &dest),
                    flags,
                    (&peer, ssh),
                );
            }
            let conn = dialer.connect(cfg)?;
            let bar = Bar::start(conn.progress(), show);
            let contents = listed.contents;
            let source = Box::new(object::ObjectSource::new(store, &listed));
            let r = conn.push_from(
                listed.entries,
                source,
                &dest,
                (a.recursive, false, contents),
            );
            bar.finish();
            let r = finish(r, dialer)?;
            crate::known_paths::save(&peer, ssh, &r);
            ("push", r)
        }
        Plan::Push {
            sources: PushFrom::Files(sources),
            dest,
            ..
        } => {
            let walked = match &a.files_from {
                Some(list) => crate::files_from::walk(list, a.from0, &sources, a.recursive)?,
                None => store::walk(&sources, a.recursive)?,
            };
            for s in &walked.skipped {
                eprintln!("haul: {s}");
            }
            // Listed paths go into the destination directory, as a `dir/`
            // source's contents do.
            let contents = a.files_from.is_some()
                || sources
                    .iter()
                    .any(|s| store::names_contents(s.as_os_str().as_bytes()));
            if let Some(sh) = shard {
                let files = store::Sources::new(walked.paths.clone())
                    .stamped(&walked.entries, &walked.inodes);
                let (entries, source, spec) =
                    crate::shard::share(a, sh, &walked.entries, Box::new(files))?;
                cfg.shard = Some(spec);
                let flags = (a.recursive, sources.len() > 1, contents);
                return push_shard(
                    a,
                    dialer,
                    cfg,
                    show,
                    (entries, source, &dest),
                    flags,
                    (&peer, ssh),
                );
            }
            // Zero blocks are looked for while the connection is set up;
            // not for a sync, whose files may all be skipped.
            let scan = if a.update || a.checksum || a.dry_run {
                transfer::ZeroScan::none()
            } else {
                transfer::ZeroScan::start(&walked, cfg.block_size)
            };
            let conn = dialer.connect(cfg)?;
            let bar = Bar::start(conn.progress(), show);
            let r = conn.push(
                walked,
                scan,
                &dest,
                a.recursive,
                sources.len() > 1,
                contents,
            );
            bar.finish();
            let r = finish(r, dialer)?;
            crate::known_paths::save(&peer, ssh, &r);
            ("push", r)
        }
        Plan::Pull {
            sources,
            dest: PullTo::Bucket(url),
            ..
        } => {
            let contents = sources.iter().any(|s| store::names_contents(s.as_bytes()));
            let store = backends::connect(&url, &a.s3.settings())?;
            let sink = object::ObjectSink::new(store, url, sources.len() > 1, contents)?;
            let conn = dialer.connect(cfg)?;
            let bar = Bar::start(conn.progress(), show);
            let r = conn.pull(sources, a.recursive, &sink);
            bar.finish();
            ("pull", finish(r, dialer)?)
        }
        Plan::Pull {
            sources,
            dest: PullTo::Path(dest),
            ..
        } => {
            let contents = sources.iter().any(|s| store::names_contents(s.as_bytes()));
            // A `dir/` pull makes its destination directory up front; a
            // pull that fails takes it away again if it is still empty.
            let made = contents && !Path::new(&dest).exists();
            let unmake = |e: TransferError| {
                if made {
                    let _ = std::fs::remove_dir(&dest);
                }
                e
            };
            let destination = local_destination(&dest, sources.len() > 1, contents)?;
            let sink = Sink::new(destination, a.preserve);
            let conn = dialer.connect(cfg).map_err(unmake)?;
            let bar = Bar::start(
                conn.progress(),
                if sink.is_stdout() && show == Show::OnTerminal {
                    Show::Never
                } else {
                    show
                },
            );
            let r = conn.pull(sources, a.recursive, &sink);
            bar.finish();
            ("pull", finish(r, dialer).map_err(unmake)?)
        }
    };
    let text = (!a.quiet).then(|| report::text(&report));
    Ok((report::json(&report, direction), text))
}

/// One shard's push (P-42): its share, then, for `--shard-status`, an
/// error unless the whole transfer is complete.
fn push_shard(
    a: &CpArgs,
    mut dialer: Dialer,
    cfg: ClientConfig,
    show: Show,
    (entries, source, dest): (Vec<wire::Entry>, Box<dyn store::BlockSource>, &str),
    flags: (bool, bool, bool),
    (peer, ssh): (&Peer, bool),
) -> Result<(String, Option<String>), TransferError> {
    let conn = dialer.connect(cfg)?;
    let bar = Bar::start(conn.progress(), show);
    let r = conn.push_from(entries, source, dest, flags);
    bar.finish();
    let r = finish(r, dialer)?;
    if a.shard_status && !crate::shard::complete(&r.notes) {
        let said: Vec<&str> = r.notes.iter().map(|(_, n)| n.as_str()).collect();
        return Err(TransferError::new(
            wire::ErrorCode::Other,
            format!("the transfer is not complete yet: {}", said.join("; ")),
        ));
    }
    crate::known_paths::save(peer, ssh, &r);
    let text = (!a.quiet).then(|| report::text(&r));
    Ok((report::json(&r, "push"), text))
}

/// Ends the ssh link once the transfer is over, and notes the route taken.
fn finish(r: Result<Report, TransferError>, dialer: Dialer) -> Result<Report, TransferError> {
    let route = dialer.finish(r.is_ok());
    r.map(|mut r| {
        r.route = route;
        r
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans() {
        let p = |v: &[&str]| plan(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(
            matches!(p(&["a", "b", "h:/x/"]), Ok(Plan::Push { sources: PushFrom::Files(sources), .. }) if sources.len() == 2)
        );
        assert!(
            matches!(p(&["h:1:/a", "h:1:b", "."]), Ok(Plan::Pull { sources, peer: Peer { port: Some(1), .. }, .. }) if sources.len() == 2)
        );
        assert!(p(&["a", "b"]).is_err());
        assert!(p(&["h:a", "g:b", "."]).is_err());
        assert!(p(&["h:a", "g:b"]).is_err());
        assert!(matches!(
            p(&["s3://bkt/a/", "h:/x/"]),
            Ok(Plan::Push {
                sources: PushFrom::Bucket(_),
                ..
            })
        ));
        assert!(matches!(
            p(&["h:/x", "s3://bkt/a/"]),
            Ok(Plan::Pull {
                dest: PullTo::Bucket(_),
                ..
            })
        ));
        assert!(p(&["s3://bkt/a", "b", "h:/x/"]).is_err());
        assert!(p(&["s3://bkt/a", "/tmp/x"]).is_err());
        assert!(p(&["h:/x", "s3://B/x"]).is_err());
    }
}
