//! Run: a [`Resolved`] plan carried out, one function per direction and
//! kind of end (objects or files pushed, into a store or a path pulled),
//! each connecting, drawing progress, and ending the link; the report
//! is the caller's to print.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use connect::TransferError;
use endpoint::Report;
use store::{Destination, Root, Sink};

use super::plan::{Plan, PullTo, PushFrom};
use super::resolve::Resolved;
use super::said::Said;
use crate::args::CpArgs;
use crate::reach::{usage, Dialer};
use crate::report::{self, Bar, Show};

pub(super) fn run(a: &CpArgs, plan: Plan, r: Resolved) -> Result<Said, TransferError> {
    match plan {
        Plan::Push {
            sources: PushFrom::Bucket(url),
            dest,
            ..
        } => push_objects(a, r, &url, &dest),
        Plan::Push {
            sources: PushFrom::Files(sources),
            dest,
            ..
        } => push_files(a, r, &sources, &dest),
        Plan::Pull {
            sources,
            dest: PullTo::Bucket(url),
            ..
        } => Ok(said(a, &pull_into_objects(a, r, sources, url)?, "pull")),
        Plan::Pull {
            sources,
            dest: PullTo::Path(dest),
            ..
        } => Ok(said(a, &pull_into_path(a, r, sources, &dest)?, "pull")),
        Plan::Between { .. } => Err(usage(
            "a transfer between two remote hosts runs as a job on the source's daemon",
        )),
    }
}

/// What a transfer's report says: its JSON line and, unless `--quiet`,
/// its text.
fn said(a: &CpArgs, report: &Report, direction: &str) -> Said {
    let mut json = report::json(report, direction);
    let letters = a.select.itemize_changes;
    if !letters && a.common.verbose == 0 {
        return Said::new(json, (!a.quiet).then(|| report::text(report)));
    }
    // The paths deleted are in the list; the summary need not say them.
    let listed = Report {
        deleted: Vec::new(),
        ..report.clone()
    };
    let text = (!a.quiet).then(|| report::text(&listed));
    // Sent to another host: rsync's '<'; received here: '>'.
    let away = direction == "push" && report.route != endpoint::Route::Local;
    let lines = report::itemized(report, away, a.preserve, letters);
    if letters {
        if let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&json) {
            v["itemized"] = serde_json::json!(lines);
            json = v.to_string();
        }
    }
    Said {
        items: lines,
        ..Said::new(json, text)
    }
}

/// Objects of a store pushed to the peer, whole or this shard's share.
fn push_objects(
    a: &CpArgs,
    mut r: Resolved,
    url: &object::ObjectUrl,
    dest: &str,
) -> Result<Said, TransferError> {
    let store = backends::connect(url, &a.s3.settings())?;
    let mut listed = object::list(&store, url, a.recursive)?;
    if let Some(keep) = super::resolve::selected(&r.cfg.select, &listed.entries)? {
        listed.retain(&keep);
    }
    for s in &listed.skipped {
        eprintln!("haul: {s}");
    }
    let source = Box::new(object::ObjectSource::new(store, &listed));
    let flags = (a.recursive, false, listed.contents);
    if let Some(sh) = r.shard {
        let (entries, source, spec) = crate::shard::share(a, sh, &listed.entries, source)?;
        r.cfg.shard = Some(spec);
        return push_shard(a, r, (entries, source, dest), flags);
    }
    let conn = r.dialer.connect(r.cfg)?;
    let bar = Bar::start(conn.progress(), r.show);
    let got = conn.push_from(listed.entries, source, dest, flags);
    bar.finish();
    let rep = finish(got, r.dialer, (r.peer.as_ref(), r.ssh))?;
    remember(r.peer.as_ref(), r.ssh, &rep);
    Ok(said(a, &rep, "push"))
}

/// Local files pushed to the peer, whole or this shard's share.
fn push_files(
    a: &CpArgs,
    mut r: Resolved,
    sources: &[std::path::PathBuf],
    dest: &str,
) -> Result<Said, TransferError> {
    let mut walked = match &a.files_from {
        Some(list) => crate::files_from::walk(list, a.from0, sources, a.recursive)?,
        None => store::walk(sources, a.recursive)?,
    };
    if let Some(keep) = super::resolve::selected(&r.cfg.select, &walked.entries)? {
        walked.retain(&keep);
    }
    for s in walked.skipped.iter().chain(&walked.missing) {
        eprintln!("haul: {s}");
    }
    let partial = match walked.missing.len() {
        0 => None,
        n => Some(format!(
            "{n} listed path{} could not be read (said above) and {} not sent; everything else is verified and in place",
            if n == 1 { "" } else { "s" },
            if n == 1 { "was" } else { "were" },
        )),
    };
    // Listed paths go into the destination directory, as a `dir/`
    // source's contents do.
    let contents = a.files_from.is_some()
        || sources
            .iter()
            .any(|s| store::names_contents(s.as_os_str().as_bytes()));
    if let Some(sh) = r.shard {
        let files =
            store::Sources::new(walked.paths.clone()).stamped(&walked.entries, &walked.inodes);
        let (entries, source, spec) = crate::shard::share(a, sh, &walked.entries, Box::new(files))?;
        r.cfg.shard = Some(spec);
        let flags = (a.recursive, sources.len() > 1, contents);
        let said = push_shard(a, r, (entries, source, dest), flags)?;
        return Ok(Said { partial, ..said });
    }
    // Zero blocks are looked for while the connection is set up; not for
    // a sync, whose files may all be skipped.
    let scan = if a.update || a.checksum || a.dry_run {
        transfer::ZeroScan::none()
    } else {
        transfer::ZeroScan::start(&walked, r.cfg.block_size)
    };
    let conn = r.dialer.connect(r.cfg)?;
    let bar = Bar::start(conn.progress(), r.show);
    let many = sources.len() > 1;
    let got = conn.push(walked, scan, dest, a.recursive, many, contents);
    bar.finish();
    let rep = finish(got, r.dialer, (r.peer.as_ref(), r.ssh))?;
    remember(r.peer.as_ref(), r.ssh, &rep);
    Ok(Said {
        partial,
        ..said(a, &rep, "push")
    })
}

/// The peer's files pulled into a store.
fn pull_into_objects(
    a: &CpArgs,
    mut r: Resolved,
    sources: Vec<String>,
    url: object::ObjectUrl,
) -> Result<Report, TransferError> {
    let contents = sources.iter().any(|s| store::names_contents(s.as_bytes()));
    let store = backends::connect(&url, &a.s3.settings())?;
    let sink = object::ObjectSink::new(store, url, sources.len() > 1, contents)?;
    let conn = r.dialer.connect(r.cfg)?;
    let bar = Bar::start(conn.progress(), r.show);
    let got = conn.pull(sources, a.recursive, &sink);
    bar.finish();
    let rep = finish(got, r.dialer, (r.peer.as_ref(), r.ssh))?;
    remember(r.peer.as_ref(), r.ssh, &rep);
    Ok(rep)
}

/// The peer's files pulled into a local path (or standard output).
fn pull_into_path(
    a: &CpArgs,
    mut r: Resolved,
    sources: Vec<String>,
    dest: &str,
) -> Result<Report, TransferError> {
    let contents = sources.iter().any(|s| store::names_contents(s.as_bytes()));
    // A `dir/` pull makes its destination directory up front; a pull
    // that fails takes it away again if it is still empty.
    let made = contents && !Path::new(dest).exists();
    let unmake = |e: TransferError| {
        if made {
            let _ = std::fs::remove_dir(dest);
        }
        e
    };
    let destination = local_destination(dest, sources.len() > 1, contents)?;
    let sink = Sink::new(destination, a.preserve);
    let conn = r.dialer.connect(r.cfg).map_err(unmake)?;
    let show = match sink.is_stdout() && r.show == Show::OnTerminal {
        true => Show::Never,
        false => r.show,
    };
    let bar = Bar::start(conn.progress(), show);
    let got = conn.pull(sources, a.recursive, &sink);
    bar.finish();
    let rep = finish(got, r.dialer, (r.peer.as_ref(), r.ssh)).map_err(unmake)?;
    remember(r.peer.as_ref(), r.ssh, &rep);
    Ok(rep)
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

/// One shard's push (P-42): its share, then, for `--shard-status`, an
/// error unless the whole transfer is complete.
fn push_shard(
    a: &CpArgs,
    mut r: Resolved,
    (entries, source, dest): (Vec<wire::Entry>, Box<dyn store::BlockSource>, &str),
    flags: (bool, bool, bool),
) -> Result<Said, TransferError> {
    let conn = r.dialer.connect(r.cfg)?;
    let bar = Bar::start(conn.progress(), r.show);
    let got = conn.push_from(entries, source, dest, flags);
    bar.finish();
    let rep = finish(got, r.dialer, (r.peer.as_ref(), r.ssh))?;
    if a.shard_status && !crate::shard::complete(&rep.notes) {
        let said: Vec<&str> = rep.notes.iter().map(|(_, n)| n.as_str()).collect();
        return Err(TransferError::new(
            wire::ErrorCode::Other,
            format!("the transfer is not complete yet: {}", said.join("; ")),
        ));
    }
    remember(r.peer.as_ref(), r.ssh, &rep);
    Ok(said(a, &rep, "push"))
}

/// What this transfer measured of its path, for the next one to the
/// same host (none for a copy on this host).
fn remember(peer: Option<&crate::reach::Peer>, ssh: bool, rep: &Report) {
    if let Some(peer) = peer {
        crate::known_paths::save(peer, ssh, rep);
    }
}

/// Ends the ssh link once the transfer is over, and notes the route taken.
/// A transfer whose path went silent forgets the datagram size its known
/// path named, so the next one sets its UDP channel up afresh (P-48).
fn finish(
    r: Result<Report, TransferError>,
    dialer: Dialer,
    (peer, ssh): (Option<&crate::reach::Peer>, bool),
) -> Result<Report, TransferError> {
    if let (Err(e), Some(peer)) = (&r, peer) {
        if e.code == wire::ErrorCode::ConnectionLost {
            crate::known_paths::forget_payload(peer, ssh);
        }
    }
    // Both ends are this haul's: the receiving end's errors are not a
    // server's.
    let here = dialer.is_here();
    let r = r.map_err(|mut e| {
        if let Some(m) = e.message.strip_prefix("server: ").filter(|_| here) {
            e.message = m.to_string();
        }
        e
    });
    let route = dialer.finish(r.is_ok());
    r.map(|mut r| {
        r.route = route;
        r
    })
}
