//! A copy between two locations of one object store, made by the store
//! itself (S3's CopyObject, GCS's rewrite): no byte travels through haul. Taken for a
//! plain `cp` whose store offers it; everything else (`sync`'s rules,
//! shards, a store that copies nothing so) moves the bytes instead.

use std::time::{Duration, Instant};

use connect::TransferError;
use endpoint::{Report, Route};

use super::said::Said;
use crate::args::CpArgs;
use crate::reach::usage;

/// Whether a copy from `from` to `to` may be left to the store: one
/// scheme (so one endpoint and one set of credentials), and nothing
/// asked that needs the transfer's own rules.
pub(super) fn may(a: &CpArgs, from: &object::ObjectUrl, to: &str) -> bool {
    let sharded = a.shard.is_some();
    let s = &a.select;
    let plain = !(a.update || a.checksum || a.delete || a.dry_run || sharded)
        && !(s.ignore_existing || s.itemize_changes || a.common.verbose > 0);
    plain && backends::parse(to).is_ok_and(|t| t.scheme == from.scheme)
}

/// The store's own copy of what `from` lists into `to`; `None` when it
/// copies none of it so, and nothing was written.
pub(super) fn copy(
    a: &CpArgs,
    from: &object::ObjectUrl,
    to: &str,
) -> Result<Option<Said>, TransferError> {
    let started = Instant::now();
    let to = backends::parse(to).map_err(usage)?;
    let store = backends::connect(from, &a.s3.settings())?;
    let mut listed = object::list(&store, from, a.recursive)?;
    let select = a.select.wire();
    if let Some(keep) = super::resolve::selected(&select, &listed.entries)? {
        listed.retain(&keep);
    }
    let sink = object::ObjectSink::new(store.clone(), to, false, listed.contents)?;
    let Some(copied) = object::copy_listed(&store, &listed, &sink, &|_| {})? else {
        return Ok(None);
    };
    for s in &listed.skipped {
        eprintln!("haul: {s}");
    }
    let rep = report(copied, started.elapsed());
    let text = (!a.quiet).then(|| crate::report::text(&rep));
    Ok(Some(Said::new(crate::report::json(&rep, "push"), text)))
}

fn report(c: object::Copied, duration: Duration) -> Report {
    Report {
        route: Route::InsideStore,
        tcp_peak: 0,
        udp_failed: false,
        compress_saved: 0,
        dedup_saved: 0,
        resumed: 0,
        skipped_files: 0,
        skipped_bytes: 0,
        dry_run: false,
        listed: Vec::new(),
        listed_bytes: 0,
        deleted: Vec::new(),
        deleted_more: 0,
        changed: Vec::new(),
        notes: Vec::new(),
        zero_bytes: 0,
        duration,
        summary: wire::Summary {
            files: c.files,
            file_bytes: c.bytes,
            bad_blocks: 0,
        },
        wire_bytes: 0,
        streams: 0,
        retransmitted: 0,
        endgame_copies: 0,
        rtt: Duration::ZERO,
        protection: secure::Protection::IntegrityOnly,
        stream_window: 0,
        udp: None,
        advised: false,
        timeline: Vec::new(),
        early_request: false,
    }
}
