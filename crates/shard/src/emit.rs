//! What `haul plan` writes (P-42): the plan itself as JSON, a Slurm batch
//! script that runs one shard per array task, or a Kubernetes Indexed
//! Job that runs one per completion index. Each shard runs `haul cp
//! --shard auto` with the arguments the plan was made from, so it
//! computes the same plan and takes its share.

use serde_json::{json, Value};
use wire::{Entry, EntryKind};

use crate::plan::{short_id, Plan, Share};

/// How the emitted jobs run haul.
#[derive(Debug, Clone)]
pub struct JobOptions {
    /// The haul program on the compute hosts (Slurm).
    pub haul: String,
    /// The container image with haul in it (Kubernetes).
    pub image: String,
    /// CPUs each shard asks for; `None`: a whole node each (Slurm's
    /// `--exclusive`: all its cores, one shard per node), one CPU's
    /// request in Kubernetes.
    pub cpus: Option<u32>,
    /// The longest a shard may run (Slurm's `--time`, `[D-]HH:MM:SS`).
    pub time: Option<String>,
    /// Memory each pod asks for and may use (Kubernetes quantity).
    pub memory: String,
    /// Volumes for the Kubernetes pods: `(claim, mount path)` of a
    /// PersistentVolumeClaim each.
    pub claims: Vec<(String, String)>,
    /// A Secret holding the client's key and `known_hosts`, mounted as
    /// `HAUL_HOME` (Kubernetes).
    pub key_secret: Option<String>,
}

/// The plan as JSON: its id, and for every shard its files and pieces.
pub fn plan_json(plan: &Plan, entries: &[Entry]) -> Value {
    let mut shards = Vec::new();
    for i in 0..plan.count {
        let shares = plan.shares(i).expect("in range");
        let (mut files, mut bytes) = (0u64, 0u64);
        let mut items = Vec::new();
        for &(k, share) in shares {
            let e = &entries[k];
            let path = String::from_utf8_lossy(&e.path);
            let size = match e.kind {
                EntryKind::File { size, .. } => size,
                _ => 0,
            };
            match share {
                Share::Whole => {
                    files += 1;
                    bytes += size;
                    items.push(json!({ "path": path, "bytes": size }));
                }
                Share::Piece { offset, len } => {
                    files += 1;
                    bytes += len;
                    items.push(json!({ "path": path, "offset": offset, "bytes": len, "of": size }));
                }
            }
        }
        shards.push(json!({ "index": i, "files": files, "bytes": bytes, "items": items }));
    }
    let (files, bytes) = entries.iter().fold((0u64, 0u64), |(f, b), e| match e.kind {
        EntryKind::File { size, .. } => (f + 1, b + size),
        _ => (f, b),
    });
    json!({
        "plan": short_id(&plan.id),
        "id": plan.id.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        "shards": plan.count,
        "block_size": plan.block_size,
        "files": files,
        "bytes": bytes,
        "split": shards,
    })
}

fn quote(args: &[String]) -> String {
    args.iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One word for a POSIX shell, quoted only where it needs to be.
fn shell_quote(a: &str) -> String {
    let plain = !a.is_empty()
        && a.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+%".contains(&b));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

/// The command every shard runs.
fn shard_command(haul: &str, cp_args: &[String]) -> Vec<String> {
    let mut v = vec![
        haul.to_string(),
        "cp".into(),
        "--shard".into(),
        "auto".into(),
    ];
    v.extend(cp_args.iter().cloned());
    v
}

/// A Slurm batch script: an array of one task per shard, each running
/// one haul with its share, logs per task, for `sbatch` (and `sbatch
/// --wait`, whose exit status is then the worst task's). Without
/// `--cpus` each task takes a node of its own (`--exclusive`): whatever
/// cores it has, and one shard per node where the cluster has several.
pub fn slurm(plan: &Plan, cp_args: &[String], opts: &JobOptions) -> String {
    let id = short_id(&plan.id);
    let cmd = quote(&shard_command(&opts.haul, cp_args));
    let cpus = match opts.cpus {
        Some(n) => format!("#SBATCH --cpus-per-task={n}\n"),
        None => "#SBATCH --exclusive\n".to_string(),
    };
    let time = match &opts.time {
        Some(t) => format!("#SBATCH --time={t}\n"),
        None => String::new(),
    };
    format!(
        "#!/bin/bash\n\
         # haul plan {id}: one transfer in {n} shards, one per array task.\n\
         # Every task walks the same sources, computes the same plan and moves\n\
         # its share; the destination places a file split across tasks once\n\
         # every piece of it is verified. A task that fails can be run again\n\
         # alone (sbatch --array=K this-script); the last one to finish says\n\
         # whether the whole transfer is complete.\n\
         #SBATCH --job-name=haul-{id}\n\
         #SBATCH --array=0-{last}\n\
         #SBATCH --ntasks=1\n\
         #SBATCH --nodes=1\n\
         {cpus}{time}\
         #SBATCH --output=haul-{id}-%a.log\n\
         #SBATCH --error=haul-{id}-%a.log\n\
         set -euo pipefail\n\
         exec {cmd}\n",
        n = plan.count,
        last = plan.count - 1,
    )
}

/// Where a pod's `HAUL_HOME` is (an emptyDir), and the Secret's keys.
const HOME: &str = "/haul-home";
const KEYS: &str = "/haul-keys";
/// The pods' user and group (distroless images' `nonroot`).
const POD_USER: u32 = 65532;

/// What each container may do: nothing it does not need.
fn container_security() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": { "drop": ["ALL"] },
    })
}

/// A Kubernetes `batch/v1` Job with indexed completions, one per shard,
/// as JSON (which is YAML too: `kubectl apply -f` takes either).
pub fn kubernetes(plan: &Plan, cp_args: &[String], opts: &JobOptions) -> Value {
    let id = short_id(&plan.id);
    let env = vec![
        json!({ "name": "HAUL_SHARDS", "value": plan.count.to_string() }),
        // Writable: what haul learns of the path is kept there.
        json!({ "name": "HAUL_HOME", "value": HOME }),
    ];
    let home = json!({ "name": "haul-home", "mountPath": HOME });
    let mut mounts = vec![home.clone()];
    let mut volumes = vec![json!({ "name": "haul-home", "emptyDir": {} })];
    for (i, (claim, path)) in opts.claims.iter().enumerate() {
        let name = format!("data-{i}");
        mounts.push(json!({ "name": name, "mountPath": path }));
        volumes.push(json!({ "name": name, "persistentVolumeClaim": { "claimName": claim } }));
    }
    // The Secret's key and known_hosts, readable by the pods' group, are
    // copied into HAUL_HOME with the modes haul asks of them (its own
    // user's, 0600) before the shard starts.
    let mut init = Vec::new();
    if let Some(secret) = &opts.key_secret {
        volumes.push(json!({ "name": "haul-keys", "secret": { "secretName": secret, "defaultMode": 0o440 } }));
        init.push(json!({
            "name": "keys",
            "image": opts.image,
            "command": ["haul", "keygen", "--import", KEYS],
            "env": [{ "name": "HAUL_HOME", "value": HOME }],
            "volumeMounts": [home, { "name": "haul-keys", "mountPath": KEYS, "readOnly": true }],
            "securityContext": container_security(),
        }));
    }
    let cpu = opts.cpus.unwrap_or(1).to_string();
    let resources = json!({
        "requests": { "cpu": cpu, "memory": opts.memory },
        "limits": { "cpu": cpu, "memory": opts.memory },
    });
    let labels = json!({ "app.kubernetes.io/name": "haul", "haul/plan": id });
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": format!("haul-{id}"),
            "labels": { "app.kubernetes.io/name": "haul", "haul/plan": id },
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": plan.count,
            "parallelism": plan.count,
            "backoffLimitPerIndex": 2,
            "template": {
                "metadata": { "labels": labels },
                "spec": {
                    "restartPolicy": "Never",
                    // Not as root: a user of its own, whose group reads
                    // the Secret and writes the volumes.
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": POD_USER,
                        "runAsGroup": POD_USER,
                        "fsGroup": POD_USER,
                    },
                    // One shard per node where there are enough.
                    "topologySpreadConstraints": [{
                        "maxSkew": 1,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": { "matchLabels": { "haul/plan": id } },
                    }],
                    "initContainers": init,
                    "containers": [{
                        "name": "haul",
                        "image": opts.image,
                        "command": shard_command("haul", cp_args),
                        "env": env,
                        "resources": resources,
                        "volumeMounts": mounts,
                        "securityContext": container_security(),
                    }],
                    "volumes": volumes,
                },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("a/b-c.d"), "a/b-c.d");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("two words"), "'two words'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
    }
}
