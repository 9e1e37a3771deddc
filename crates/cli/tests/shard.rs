//! A transfer split into shards (P-42): every shard computes the same plan
//! from the same sources and moves its share, to receiving daemons that
//! share one destination; a file split across shards appears only once
//! every piece of it is verified. Also: shards run by an emitted
//! Kubernetes Indexed Job's commands, a shard run twice or alone again,
//! sources changed between shards, a destination that is not shared.

mod common;

use std::fs;
use std::path::Path;
use std::process::Output;

use common::*;

const SHARDS: u32 = 4;

/// A tree with a file larger than a shard's share (split across shards),
/// small files, a nested directory and a link.
fn tree(local: &Path) -> std::path::PathBuf {
    let src = local.join("run");
    fs::create_dir_all(src.join("sub/deeper")).unwrap();
    write_file(&src.join("big.bin"), &random_bytes(9 << 20, 1));
    write_file(&src.join("mid.bin"), &random_bytes(3 << 20, 2));
    for i in 0..12 {
        write_file(
            &src.join(format!("sub/f{i:02}")),
            &random_bytes(1000 + i * 37, 10 + i as u64),
        );
    }
    write_file(&src.join("sub/deeper/empty"), b"");
    std::os::unix::fs::symlink("../big.bin", src.join("sub/link")).unwrap();
    src
}

/// The destination's entries are the source's, byte for byte, with modes
/// and times, beside the ledger. (A `dir/` copy's destination directory
/// is not an entry: its own time is the time of its last change.)
fn same_but_ledger(src: &Path, dst: &Path) {
    let names = |d: &Path| {
        let mut v: Vec<_> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != ".haul-shards")
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(src), names(dst));
    for n in names(src) {
        assert_same_tree(&src.join(&n), &dst.join(&n));
    }
}

/// `haul plan ARGS` printed as JSON, parsed.
fn plan_json(args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(HAUL)
        .arg("plan")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn shard(env: &Env, server: &common::Server, i: u32, src: &Path, extra: &[&str]) -> Output {
    let spec = format!("{i}/{SHARDS}");
    let mut args = vec!["-r", "-p", "--shard", &spec, "--block-size", "1M"];
    args.extend_from_slice(extra);
    let dst = env.remote(server, "dst/");
    let s = format!("{}/", src.display());
    args.push(&s);
    args.push(&dst);
    env.cp(&args)
}

#[test]
fn shards_to_two_daemons_sharing_a_destination_place_a_byte_exact_tree() {
    let env = Env::new();
    let src = tree(&env.local);
    // Two receiving hosts, one shared destination.
    let (a, b) = (env.serve(), env.serve());
    let outs: Vec<Output> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..SHARDS)
            .map(|i| {
                let (env, src, srv) = (&env, &src, if i % 2 == 0 { &a } else { &b });
                s.spawn(move || shard(env, srv, i, src, &[]))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let said: Vec<String> = outs.iter().map(ok).collect();
    eprintln!("{said:#?}");
    same_but_ledger(&src, &env.root.join("dst"));
    // Whichever shard finished last says the whole transfer is complete.
    let status = env.cp(&[
        "-r",
        "-p",
        "--shard",
        "0/4",
        "--block-size",
        "1M",
        "--shard-status",
        &format!("{}/", src.display()),
        &env.remote(&a, "dst/"),
    ]);
    let text = ok(&status);
    assert!(
        text.contains("is complete and verified"),
        "{text}\n{said:?}"
    );
    assert!(
        said.iter().any(|t| t.contains("is complete and verified")),
        "{said:?}"
    );
}

#[test]
fn a_failed_shard_reruns_alone_and_a_shard_run_twice_is_harmless() {
    let env = Env::new();
    let src = tree(&env.local);
    let server = env.serve();
    let dst = env.root.join("dst");
    for i in [0, 2, 3] {
        ok(&shard(&env, &server, i, &src, &[]));
    }
    // Shard 1 has not run: the big file is split across shards 0 to 2
    // and has a piece missing, so nothing is under its name yet.
    let (s, d) = (format!("{}/", src.display()), env.remote(&server, "dst/"));
    let json = plan_json(&["--shards", "4", "-r", "-p", "--block-size", "1M", &s, &d]);
    let split: Vec<&str> = json["split"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["items"].as_array().unwrap())
        .filter(|i| i.get("offset").is_some())
        .map(|i| i["path"].as_str().unwrap())
        .collect();
    assert!(split.contains(&"big.bin"), "{json}");
    assert!(
        !dst.join("big.bin").exists(),
        "a file with a piece missing was placed"
    );
    let status = env.cp(&[
        "-r",
        "-p",
        "--shard",
        "3/4",
        "--block-size",
        "1M",
        "--shard-status",
        &format!("{}/", src.display()),
        &env.remote(&server, "dst/"),
    ]);
    let text = fails(&status, 1);
    assert!(text.contains("waiting for 1"), "{text}");
    // Said as progress, not as a misconfiguration (issue 41).
    assert!(!text.contains("wrote elsewhere"), "{text}");
    let last = ok(&shard(&env, &server, 1, &src, &[]));
    assert!(last.contains("is complete and verified"), "{last}");
    same_but_ledger(&src, &dst);
    // Again: nothing changes, and the transfer is still complete.
    let again = ok(&shard(&env, &server, 1, &src, &["--json"]));
    same_but_ledger(&src, &dst);
    let _ = again;
}

#[test]
fn shards_of_changed_sources_are_refused() {
    let env = Env::new();
    let src = tree(&env.local);
    let server = env.serve();
    ok(&shard(&env, &server, 0, &src, &[]));
    write_file(&src.join("mid.bin"), &random_bytes(3 << 20, 99));
    let out = shard(&env, &server, 1, &src, &[]);
    let text = fails(&out, 19);
    assert!(text.contains("changed between shards"), "{text}");
}

#[test]
fn shards_whose_receivers_do_not_share_the_destination_leave_no_holes() {
    let env = Env::new();
    let src = tree(&env.local);
    let a = env.serve();
    // A second "host" with a root of its own.
    let other = Env::new();
    fs::copy(
        env.server_home.join("authorized_keys"),
        other.server_home.join("authorized_keys"),
    )
    .unwrap();
    let b = other.serve();
    let mut said = Vec::new();
    for i in 0..SHARDS {
        let srv = if i < 2 { &a } else { &b };
        said.push(ok(&shard(&env, srv, i, &src, &[])));
    }
    assert!(!env.root.join("dst/big.bin").exists());
    assert!(!other.root.join("dst/big.bin").exists());
    let last = said.last().unwrap();
    assert!(last.contains("every receiving host must share"), "{last}");
    assert!(!last.contains("is complete"), "{last}");
}

#[test]
fn bad_shard_arguments_are_usage_errors() {
    let env = Env::new();
    let src = tree(&env.local);
    let server = env.serve();
    let s = format!("{}/", src.display());
    let d = env.remote(&server, "dst/");
    let t = fails(&env.cp(&["-r", "--shard", "4/4", &s, &d]), 2);
    assert!(t.contains("out of range"), "{t}");
    let t = fails(&env.cp(&["-r", "--shard", "auto", &s, &d]), 2);
    assert!(t.contains("SLURM_ARRAY_TASK_ID"), "{t}");
    let t = fails(&env.cp(&["-r", "--delete", "--shard", "0/2", &s, &d]), 2);
    assert!(t.contains("--delete"), "{t}");
}

#[test]
fn an_emitted_kubernetes_job_is_a_typed_indexed_job_whose_pods_move_the_tree() {
    use k8s_openapi::api::batch::v1::Job;
    let env = Env::new();
    let src = tree(&env.local);
    let server = env.serve();
    let s = format!("{}/", src.display());
    let d = env.remote(&server, "dst/");
    let out = std::process::Command::new(HAUL)
        .args([
            "plan",
            "--shards",
            "3",
            "--emit",
            "kubernetes",
            "--image",
            "example/haul:1",
        ])
        .args([
            "--pvc",
            "data:/data",
            "--key-secret",
            "haul-key",
            "-r",
            "-p",
            "--block-size",
            "1M",
        ])
        .args([&s, &d])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job: Job = serde_json::from_slice(&out.stdout).expect("a batch/v1 Job");
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    assert_eq!(spec.completions, Some(3));
    assert_eq!(spec.parallelism, Some(3));
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("example/haul:1"));
    let volumes = pod.volumes.as_ref().unwrap();
    let claim = volumes
        .iter()
        .find_map(|v| v.persistent_volume_claim.as_ref());
    assert_eq!(claim.unwrap().claim_name, "data");
    // Requests and limits, one shard per node where there are several,
    // not as root, nothing written outside the volumes.
    let res = c.resources.as_ref().unwrap();
    for r in [res.requests.as_ref().unwrap(), res.limits.as_ref().unwrap()] {
        assert_eq!(r["cpu"].0, "1");
        assert_eq!(r["memory"].0, "1Gi");
    }
    let spread = &pod.topology_spread_constraints.as_ref().unwrap()[0];
    assert_eq!(spread.topology_key, "kubernetes.io/hostname");
    let sec = pod.security_context.as_ref().unwrap();
    assert_eq!(
        (sec.run_as_non_root, sec.run_as_user, sec.fs_group),
        (Some(true), Some(65532), Some(65532))
    );
    assert_eq!(
        c.security_context
            .as_ref()
            .unwrap()
            .read_only_root_filesystem,
        Some(true)
    );
    // HAUL_HOME is writable (an emptyDir); the Secret's key is copied in
    // with haul's modes by an init container before the shard starts.
    assert!(volumes
        .iter()
        .any(|v| v.name == "haul-home" && v.empty_dir.is_some()));
    let secret = volumes.iter().find_map(|v| v.secret.as_ref()).unwrap();
    assert_eq!(secret.default_mode, Some(0o440));
    let init = &pod.init_containers.as_ref().unwrap()[0];
    let import = init.command.clone().unwrap();
    assert_eq!(import, ["haul", "keygen", "--import", "/haul-keys"]);
    let cmd = c.command.as_ref().unwrap();
    assert_eq!(&cmd[..4], ["haul", "cp", "--shard", "auto"]);
    let env_vars: Vec<(String, String)> = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .filter(|e| e.name != "HAUL_HOME")
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    // The Secret as the pods see it: the key and the destination's pinned
    // key, readable by the pods' group only (0440).
    ok(&env.cp(&[
        src.join("sub/f00").to_str().unwrap(),
        &env.remote(&server, "pin"),
    ]));
    let keys = env.dir.path().join("secret");
    fs::create_dir(&keys).unwrap();
    for f in ["id_x25519", "id_x25519.pub", "known_hosts"] {
        fs::copy(env.home.join(f), keys.join(f)).unwrap();
    }
    let pods = Pods::new(&env, &keys);
    ok(&pods.run(&import[1..], None));
    // Each index as Kubernetes would run it: the container's command with
    // JOB_COMPLETION_INDEX set, here as local processes (as the pods'
    // non-root user where the test runs as root).
    for i in 0..3 {
        let out = pods.run(&cmd[1..], Some((&env_vars, i)));
        ok(&out);
    }
    same_but_ledger(&src, &env.root.join("dst"));
}

/// Local stand-ins for a Job's pods: `HAUL_HOME` an empty directory of
/// their user, the Secret's files readable through their group, and, run
/// as root, that user (65532) rather than root.
struct Pods {
    home: std::path::PathBuf,
    keys: std::path::PathBuf,
    bin: std::path::PathBuf,
    as_user: bool,
}

impl Pods {
    fn new(env: &Env, keys: &Path) -> Pods {
        use std::os::unix::fs::PermissionsExt;
        let home = env.dir.path().join("pod-home");
        fs::create_dir(&home).unwrap();
        let as_user = unsafe { libc::geteuid() } == 0;
        let mut bin = std::path::PathBuf::from(HAUL);
        for f in fs::read_dir(keys).unwrap() {
            fs::set_permissions(f.unwrap().path(), fs::Permissions::from_mode(0o440)).unwrap();
        }
        if as_user {
            let chown = |spec: &str, p: &Path| {
                let st = netem::testing::program("chown")
                    .arg(spec)
                    .arg(p)
                    .status()
                    .unwrap();
                assert!(st.success());
            };
            for f in fs::read_dir(keys).unwrap() {
                chown("0:65532", &f.unwrap().path());
            }
            chown("65532:65532", &home);
            // The checkout may sit where that user cannot reach (/root).
            bin = env.dir.path().join("haul");
            fs::copy(HAUL, &bin).unwrap();
            fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
            for d in [env.dir.path(), &env.local, keys] {
                fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        Pods {
            home,
            keys: keys.to_path_buf(),
            bin,
            as_user,
        }
    }

    /// `args` as the pod runs them, the Secret's path ours; with an index
    /// for a shard.
    fn run(&self, args: &[String], shard: Option<(&Vec<(String, String)>, u32)>) -> Output {
        let args: Vec<String> = args
            .iter()
            .map(|a| a.replace("/haul-keys", self.keys.to_str().unwrap()))
            .collect();
        let mut c = match self.as_user {
            true => {
                let mut c = netem::testing::program("setpriv");
                c.args(["--reuid=65532", "--regid=65532", "--clear-groups"])
                    .arg(&self.bin);
                c
            }
            false => netem::testing::program(self.bin.to_str().unwrap()),
        };
        c.args(&args).env("HAUL_HOME", &self.home);
        if let Some((vars, i)) = shard {
            c.envs(vars.iter().map(|(k, v)| (k, v)))
                .env("JOB_COMPLETION_INDEX", i.to_string());
        }
        c.output().unwrap()
    }
}

#[test]
fn a_slurm_job_array_from_haul_plan_moves_the_tree() {
    const TEST: &str = "a_slurm_job_array_from_haul_plan_moves_the_tree";
    if !common::slurm::available(TEST) {
        return;
    }
    let env = Env::new();
    let src = tree(&env.local);
    let server = env.serve();
    let cluster = common::slurm::Cluster::start(&env.dir.path().join("slurm"), 2);
    let s = format!("{}/", src.display());
    let d = env.remote(&server, "dst/");
    let out = std::process::Command::new(HAUL)
        // No --cpus: each task takes the node (here one of 2 CPUs) whole.
        .args([
            "plan", "--shards", "4", "--emit", "slurm", "--time", "10:00",
        ])
        .args(["-r", "-p", "--block-size", "1M", &s, &d])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("#SBATCH --exclusive") && text.contains("#SBATCH --time=10:00"),
        "{text}"
    );
    assert!(!text.contains("--cpus-per-task"), "{text}");
    let script = env.dir.path().join("run.sbatch");
    fs::write(&script, &out.stdout).unwrap();
    let jobs = env.dir.path().join("jobs");
    fs::create_dir_all(&jobs).unwrap();
    let mut sbatch = cluster.command("sbatch");
    sbatch
        .arg("--wait")
        .arg(&script)
        .current_dir(&jobs)
        .env("HAUL_HOME", &env.home);
    let run = output_within(sbatch, std::time::Duration::from_secs(240));
    let logs: Vec<String> = fs::read_dir(&jobs)
        .unwrap()
        .map(|e| fs::read_to_string(e.unwrap().path()).unwrap_or_default())
        .collect();
    assert!(
        run.status.success(),
        "sbatch --wait: {}\n{}\ntask logs: {logs:#?}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
        cluster.logs()
    );
    assert_eq!(logs.len(), 4, "one log per task: {logs:#?}");
    same_but_ledger(&src, &env.root.join("dst"));
    assert!(
        logs.iter().any(|l| l.contains("is complete and verified")),
        "{logs:#?}"
    );
}

/// The ledger's journal of the piece at `offset`, once it lists a block.
fn piece_journaled(dst: &Path, offset: u64) -> bool {
    let suffix = format!("-{offset}");
    let Ok(ledgers) = fs::read_dir(dst.join(".haul-shards")) else {
        return false;
    };
    ledgers.flatten().any(|l| {
        fs::read_dir(l.path()).is_ok_and(|rd| {
            rd.flatten().any(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with("piece-")
                    && n.ends_with(&suffix)
                    && e.metadata().is_ok_and(|m| m.len() >= 36)
            })
        })
    })
}

#[test]
fn shards_over_three_emulated_links_with_one_killed_and_run_again() {
    use common::emu::{cp_cmd_in_a, serve_in_b};
    use netem::testing::{require_emulator, unique_name};
    use netem::{Emulator, EmulatorConfig, ADDR_B};
    use std::time::Duration;
    if !require_emulator("the shards-over-emulated-links test") {
        return;
    }
    let env = Env::new();
    let src = tree(&env.local);
    // One namespace pair per shard, each with a daemon on the shared
    // destination; shard 1's link is slow enough to be cut mid-piece.
    let emus: Vec<Emulator> = [200_000_000u64, 20_000_000, 200_000_000]
        .iter()
        .enumerate()
        .map(|(i, &rate)| {
            let link = netsim::LinkConfig {
                delay: Duration::from_millis(20),
                rate_bps: Some(rate),
                ..Default::default()
            };
            Emulator::start(EmulatorConfig {
                name: unique_name("sh"),
                a2b: link.clone(),
                b2a: link,
                mtu: 1500,
                seed: 5 + i as u64,
                block_udp: false,
                only_tcp_ports: vec![],
                path_mtu: None,
            })
            .expect("emulator starts")
        })
        .collect();
    let _servers: Vec<_> = emus.iter().map(|e| serve_in_b(e, &env)).collect();
    let s = format!("{}/", src.display());
    let d = format!("{ADDR_B}:7050:dst/");
    let dst = env.root.join("dst");
    let shard_cmd = |i: usize, json: bool| {
        let spec = format!("{i}/3");
        let mut args = vec!["-r", "-p", "--shard", &spec, "--block-size", "256K"];
        if json {
            args.push("--json");
        }
        args.extend([s.as_str(), d.as_str()]);
        cp_cmd_in_a(&emus[i], &env, &args)
    };
    // Where shard 1's piece starts, from the plan every shard computes.
    let plan = plan_json(&["--shards", "3", "-r", "-p", "--block-size", "256K", &s, &d]);
    let offset = plan["split"][1]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|i| i["offset"].as_u64())
        .expect("shard 1 moves a piece");
    let mut cut = shard_cmd(1, false)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let others: Vec<Output> = std::thread::scope(|sc| {
        let hs: Vec<_> = [0usize, 2]
            .iter()
            .map(|&i| sc.spawn(move || output_within(shard_cmd(i, false), CP_LIMIT)))
            .collect();
        assert!(
            wait_until(Duration::from_secs(30), || piece_journaled(&dst, offset)),
            "shard 1 journaled no block"
        );
        let _ = cut.kill();
        let _ = cut.wait();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for o in &others {
        ok(o);
    }
    assert!(
        !dst.join("big.bin").exists(),
        "big.bin was placed with shard 1's piece cut off"
    );
    let again = output_within(shard_cmd(1, true), CP_LIMIT);
    ok(&again);
    let report: serde_json::Value = serde_json::from_slice(&again.stdout).expect("a JSON report");
    let notes = report["notes"].to_string();
    assert!(notes.contains("is complete and verified"), "{report}");
    assert!(
        report["resumed_bytes"].as_u64().unwrap_or(0) > 0,
        "the cut shard resumed from what its piece held: {report}"
    );
    same_but_ledger(&src, &dst);
}

#[test]
fn a_sharded_sync_of_an_unchanged_tree_sends_next_to_nothing() {
    let env = Env::new();
    let src = tree(&env.local);
    let server = env.serve();
    for i in 0..SHARDS {
        ok(&shard(&env, &server, i, &src, &[]));
    }
    let s = format!("{}/", src.display());
    let d = env.remote(&server, "dst/");
    let mut wire = 0;
    for i in 0..SHARDS {
        let spec = format!("{i}/{SHARDS}");
        // `haul sync` is `cp -r -p --update`.
        let out = output_within(
            {
                let mut sync = std::process::Command::new(HAUL);
                sync.arg("sync")
                    .args(["--block-size", "1M", "--shard", &spec, "--json", &s, &d])
                    .env("HAUL_HOME", &env.home)
                    .stdin(std::process::Stdio::null());
                sync
            },
            CP_LIMIT,
        );
        ok(&out);
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        wire += r["wire_bytes"].as_u64().unwrap();
    }
    assert!(wire < 256 << 10, "an unchanged tree resent {wire} bytes");
    same_but_ledger(&src, &env.root.join("dst"));
}
