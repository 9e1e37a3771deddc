//! Resolve: a [`Plan`] and the options as one [`Resolved`] run: the
//! options checked against each other and against the direction, how the
//! peer is reached (a daemon or ssh), the client's configuration (what
//! `haul probe` saved and the known path included), and how progress
//! is shown. Nothing is connected yet.

use connect::TransferError;
use endpoint::{ClientConfig, Transport};

use super::plan::Plan;
use crate::args::{CpArgs, TransportArg};
use crate::reach::{usage, Dialer, Peer, Reach};
use crate::report::Show;

/// Everything a run needs but its plan's ends.
pub(super) struct Resolved {
    pub cfg: ClientConfig,
    pub dialer: Dialer,
    pub show: Show,
    /// This shard's index and count (`--shard I/N`).
    pub shard: Option<(u32, u32)>,
    /// The remote host; `None` for a copy on this host.
    pub peer: Option<Peer>,
    pub ssh: bool,
}

pub(super) fn resolve(a: &CpArgs, plan: &Plan) -> Result<Resolved, TransferError> {
    let Some(peer) = plan.peer() else {
        return here(a);
    };
    let reach = Reach::decide(&a.conn, peer.clone())?;
    let is_pull = matches!(plan, Plan::Pull { .. });
    let shard = crate::shard::assigned(a)?;
    check(a, is_pull, reach.ssh, shard.is_some())?;
    let cfg = client_config(a, &reach, is_pull, true)?;
    let remote_extra = match (&a.cache.cache, is_pull) {
        (Some(dir), false) => format!(
            " --cache {} --cache-size {}",
            shell_words::quote(&dir.to_string_lossy()),
            a.cache.cache_size
        ),
        _ => String::new(),
    };
    let mut dialer = reach.dialer(&a.conn, remote_extra)?;
    dialer.fast = true;
    Ok(Resolved {
        cfg,
        dialer,
        show: show(a),
        shard,
        peer: Some(reach.peer),
        ssh: reach.ssh,
    })
}

/// A copy on this host: the receiving end started in this process.
fn here(a: &CpArgs) -> Result<Resolved, TransferError> {
    let shard = crate::shard::assigned(a)?;
    check(a, false, true, shard.is_some())?;
    // One-time keys, as over ssh; `local::start` sets the rest.
    let reach = Reach {
        peer: Peer {
            user: None,
            host: "localhost".into(),
            port: None,
        },
        ssh: true,
    };
    let mut cfg = client_config(a, &reach, false, false)?;
    let cache = match &a.cache.cache {
        Some(dir) => {
            store::cache::open_for_transfer(dir, a.cache.cache_size)?.map(std::sync::Arc::new)
        }
        None => None,
    };
    let receiving = crate::local::Receiving {
        settings: a.s3.settings(),
        cache,
    };
    crate::local::start(&mut cfg, receiving)?;
    Ok(Resolved {
        cfg,
        dialer: Dialer::here(),
        show: show(a),
        shard,
        peer: None,
        ssh: false,
    })
}

/// Options that do not go together, or not with this direction.
fn check(a: &CpArgs, is_pull: bool, ssh: bool, sharded: bool) -> Result<(), TransferError> {
    let why = if a.delete && !a.recursive {
        Some("--delete removes files from directories, so it needs -r (or haul sync)")
    } else if a.delete_partials && !a.delete {
        Some("--delete-partials widens --delete; give both (haul sync --delete --delete-partials)")
    } else if a.files_from.is_some() && is_pull {
        Some("--files-from names local files to send; to fetch a list of remote files, run haul on that host")
    } else if sharded && is_pull {
        Some("--shard splits a push of sources that every shard's host sees (a shared or parallel file system, or one bucket); the sources here are remote")
    } else if sharded && a.delete {
        Some("--delete needs the whole manifest, and a shard sends only its share; run the deleting sync as one transfer")
    } else if sharded && a.basis.is_some() {
        Some("--basis is for one file sent whole; a shard may send a piece of it")
    } else if !ssh && !is_pull && a.cache.cache.is_some() {
        Some("--cache on a push names the receiving side's cache; a daemon's is set by `haul serve --cache`")
    } else if !ssh && a.conn.remote_ports.is_some() {
        Some("--remote-ports is for a remote side started over ssh; a daemon's data ports are set by `haul serve --data-ports`")
    } else {
        None
    };
    match why {
        Some(why) => Err(usage(why)),
        None => Ok(()),
    }
}

/// The client's configuration: the options and, where `remembered` (a
/// remote host), what `haul probe` saved for it where the user left the
/// choices to haul (P-36), and the path known from earlier transfers.
fn client_config(
    a: &CpArgs,
    reach: &Reach,
    is_pull: bool,
    remembered: bool,
) -> Result<ClientConfig, TransferError> {
    let cache = match (&a.cache.cache, is_pull) {
        (Some(dir), true) => {
            store::cache::open_for_transfer(dir, a.cache.cache_size)?.map(std::sync::Arc::new)
        }
        _ => None,
    };
    let transport = match a.transport {
        TransportArg::Tcp => Transport::Tcp,
        TransportArg::Udp => Transport::Udp,
        TransportArg::Auto => Transport::Auto,
    };
    let advice = (remembered && transport == Transport::Auto && a.streams.is_none())
        .then(|| crate::probe::saved(&reach.peer, reach.ssh))
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
    let protection = crate::reach::protection(a.no_encrypt);
    Ok(ClientConfig {
        streams: a.streams,
        block_size: a.block_size,
        rate: a.rate,
        share: a.share.share(),
        transport,
        preserve: a.preserve,
        compress: a.compress,
        sync: a.sync_options(),
        select: a.select.wire(),
        itemize: a.select.itemize_changes || a.common.verbose > 0,
        basis: a.basis.clone(),
        cache,
        advice,
        known_path: remembered
            .then(|| crate::known_paths::load(&reach.peer, reach.ssh))
            .flatten(),
        udp_blocked: remembered && crate::known_paths::udp_blocked(&reach.peer, reach.ssh),
        ..reach.config(&a.conn, protection)?
    })
}

/// Whether progress is drawn: `--quiet` never, `--progress` always,
/// `--json` never, otherwise on a terminal.
pub(super) fn show(a: &CpArgs) -> Show {
    Show::of(a.quiet, a.json, a.progress)
}

/// Which entries the selection options keep (P-44); `None` where they
/// leave nothing out.
pub(super) fn selected(
    sel: &wire::Selection,
    entries: &[wire::Entry],
) -> Result<Option<Vec<bool>>, TransferError> {
    let s = transfer::selection(sel)?;
    Ok((!s.is_all()).then(|| transfer::selected(&s, entries)))
}
