//! `haul cp --shard` and `haul plan` (P-42): which shard this is, the
//! share it moves of the plan every shard computes alike, and the jobs
//! that run the shards under Slurm or Kubernetes.

use std::path::PathBuf;

use connect::TransferError;
use shard::emit::JobOptions;
use shard::{Plan, ShardSource};
use wire::{Entry, ErrorCode, ShardSpec};

use crate::args::{CpArgs, EmitArg, PlanArgs};
use crate::exit;
use crate::location::Location;
use crate::reach::usage;

/// `--shard`: the index and count given, or with `auto` the scheduler's.
pub fn assigned(a: &CpArgs) -> Result<Option<(u32, u32)>, TransferError> {
    let Some(s) = &a.shard else {
        return Ok(None);
    };
    if s != "auto" {
        return shard::engine::parse(s).map(Some).map_err(usage);
    }
    match shard::engine::from_env(|k| std::env::var(k).ok()).map_err(usage)? {
        Some(x) => {
            tracing::info!("shard {} of {} from {}", x.index, x.count, x.from);
            Ok(Some((x.index, x.count)))
        }
        None => Err(usage(
            "--shard auto found no scheduler's shard: neither SLURM_ARRAY_TASK_ID (a Slurm job array) nor JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) is set; give --shard INDEX/COUNT",
        )),
    }
}

/// What the shards of one transfer agree on besides the sources' files:
/// the sources as given, the destination's path (not its host: shards
/// send to different receiving hosts), and how they are copied.
fn context(a: &CpArgs) -> Vec<u8> {
    let mut c = Vec::new();
    let n = a.paths.len();
    for (i, p) in a.paths.iter().enumerate() {
        let p = match Location::parse(p) {
            Location::Remote { path, .. } if i + 1 == n => path,
            _ => p.clone(),
        };
        c.extend_from_slice(&(p.len() as u64).to_le_bytes());
        c.extend_from_slice(p.as_bytes());
    }
    c.push(a.recursive as u8);
    c.push(a.preserve as u8);
    c
}

/// The transfer's name in the destination's ledger: the same for every
/// shard of it, whatever the sources held when each shard walked them.
fn transfer_key(a: &CpArgs, count: u32) -> [u8; 16] {
    let mut h = blake3::Hasher::new_derive_key("haul 2026-11 shard transfer v1");
    h.update(&context(a));
    h.update(&count.to_le_bytes());
    h.finalize().as_bytes()[..16].try_into().expect("16 bytes")
}

/// The plan of a transfer of `entries`, as every shard computes it.
pub fn plan_of(a: &CpArgs, entries: &[Entry], count: u32) -> Result<Plan, TransferError> {
    Plan::new(entries, count, a.block_size, &context(a))
        .map_err(|e| TransferError::new(ErrorCode::BadRequest, e.to_string()))
}

/// A shard's manifest, its sources, and the request's shard part.
pub type Share = (Vec<Entry>, Box<dyn store::BlockSource>, ShardSpec);

/// One shard's push: its manifest, its sources (pieces read at their
/// offsets) and the request's shard part. `--shard-status` sends none
/// of the sources.
/// `entries`: the whole manifest (of files, or of a bucket's objects),
/// whose bytes `source` reads by entry id.
pub fn share(
    a: &CpArgs,
    (index, count): (u32, u32),
    entries: &[Entry],
    source: Box<dyn store::BlockSource>,
) -> Result<Share, TransferError> {
    let plan = plan_of(a, entries, count)?;
    let view = plan
        .view(index, entries)
        .map_err(|e| usage(e.to_string()))?;
    let spec = ShardSpec {
        transfer: transfer_key(a, count),
        plan: plan.id,
        index,
        count,
        pieces: if a.shard_status {
            Vec::new()
        } else {
            view.pieces.iter().map(|(_, p)| p.clone()).collect()
        },
        status: a.shard_status,
    };
    tracing::info!(
        "shard {index} of {count} (plan {}): {} files, {} bytes, {} pieces",
        shard::short_id(&plan.id),
        view.files,
        view.bytes,
        view.pieces.len()
    );
    let pieces: Vec<(u32, u64, u64)> = view
        .pieces
        .iter()
        .map(|(id, p)| {
            let len = view
                .entries
                .iter()
                .find(|e| e.id == *id)
                .map_or(0, |e| match e.kind {
                    wire::EntryKind::File { size, .. } => size,
                    _ => 0,
                });
            (*id, p.offset, len)
        })
        .collect();
    let source = Box::new(ShardSource::new(source, &pieces));
    let entries = if a.shard_status {
        Vec::new()
    } else {
        view.entries
    };
    Ok((entries, source, spec))
}

/// Whether a shard's report says the whole transfer is complete.
pub fn complete(notes: &[(wire::NoteKind, String)]) -> bool {
    notes
        .iter()
        .any(|(k, n)| *k == wire::NoteKind::Shards && n.contains(shard::sink::COMPLETE))
}

/// `haul plan`.
pub fn run_plan(a: PlanArgs, raw: &[String]) -> i32 {
    crate::logging::init(a.cp.common.verbose);
    match plan(&a, raw) {
        Ok(text) => match crate::out::write(text.as_bytes()) {
            Ok(()) => exit::OK,
            Err(e) => {
                eprintln!("haul: cannot write the plan: {e}");
                exit::code(wire::ErrorCode::Other)
            }
        },
        Err(e) => {
            eprintln!("haul: {}", e.message);
            exit::code(e.code)
        }
    }
}

/// The arguments of `haul plan` that are `haul cp`'s, for the shards'
/// command: everything but the plan's own flags and their values.
fn cp_args(raw: &[String]) -> Vec<String> {
    const OWN: [&str; 9] = [
        "--shards",
        "--emit",
        "--haul",
        "--image",
        "--cpus",
        "--time",
        "--memory",
        "--pvc",
        "--key-secret",
    ];
    let mut out = Vec::new();
    let mut it = raw.iter();
    while let Some(w) = it.next() {
        if w == "--" {
            out.push(w.clone());
            out.extend(it.cloned());
            break;
        }
        if OWN.contains(&w.as_str()) {
            it.next();
        } else if !OWN.iter().any(|o| w.starts_with(&format!("{o}="))) {
            out.push(w.clone());
        }
    }
    out
}

fn plan(a: &PlanArgs, raw: &[String]) -> Result<String, TransferError> {
    if a.cp.shard.is_some() {
        return Err(usage(
            "haul plan writes the shards' commands, each with --shard auto; leave --shard out",
        ));
    }
    let (_, srcs) =
        a.cp.paths
            .split_last()
            .ok_or_else(|| usage("need at least one source and a destination"))?;
    let sources: Vec<PathBuf> = srcs.iter().map(PathBuf::from).collect();
    // The plan is the shards' own: the same walk, the same selection.
    let walked = match &a.cp.files_from {
        Some(list) => crate::files_from::walk(list, a.cp.from0, &sources, a.cp.recursive),
        None => store::walk(&sources, a.cp.recursive).map_err(TransferError::from),
    };
    let mut walked = walked.map_err(|e| match e.code {
        wire::ErrorCode::NotFound => TransferError::new(
            e.code,
            format!(
                "{}; haul plan reads the sources to split them, so run it on a host that sees them as the shards will (the shared or parallel file system)",
                e.message
            ),
        ),
        _ => e,
    })?;
    let select = transfer::selection(&a.cp.select.wire())?;
    if !select.is_all() {
        walked.retain(&transfer::selected(&select, &walked.entries));
    }
    let t0 = std::time::Instant::now();
    let plan = plan_of(&a.cp, &walked.entries, a.shards)?;
    tracing::info!(
        "planned {} entries in {} shards in {:?}",
        walked.entries.len(),
        a.shards,
        t0.elapsed()
    );
    let claims = a
        .claims
        .iter()
        .map(|c| {
            c.split_once(':')
                .filter(|(n, p)| !n.is_empty() && p.starts_with('/'))
                .map(|(n, p)| (n.to_string(), p.to_string()))
                .ok_or_else(|| usage(format!("--pvc takes CLAIM:/MOUNT/PATH, not {c:?}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let haul = match &a.haul {
        Some(h) => h.clone(),
        None => std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "haul".into()),
    };
    let opts = JobOptions {
        haul,
        image: a.image.clone(),
        cpus: a.cpus,
        time: a.time.clone(),
        memory: a.memory.clone(),
        claims,
        key_secret: a.key_secret.clone(),
    };
    let cp = cp_args(raw);
    Ok(match a.emit {
        EmitArg::Json => {
            let v = shard::emit::plan_json(&plan, &walked.entries);
            serde_json::to_string_pretty(&v).expect("JSON") + "\n"
        }
        EmitArg::Slurm => shard::emit::slurm(&plan, &cp, &opts),
        EmitArg::Kubernetes => {
            let v = shard::emit::kubernetes(&plan, &cp, &opts);
            serde_json::to_string_pretty(&v).expect("JSON") + "\n"
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shards_command_keeps_cp_arguments_only() {
        let raw: Vec<String> = [
            "--shards",
            "4",
            "-r",
            "--emit=slurm",
            "--pvc",
            "c:/d",
            "src/",
            "h:dst/",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(cp_args(&raw), ["-r", "src/", "h:dst/"]);
    }
}
