//! A real one-node Slurm cluster for tests: munged, slurmctld and slurmd
//! from Debian's packages (installed by `scripts/test.sh`), on loopback ports of
//! their own, with every file under a temp dir. Started by the test,
//! stopped by PID when dropped. Slurm's daemons run as root, so the tests
//! that need one say why they skip elsewhere.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const DAEMONS: [&str; 3] = ["munged", "slurmctld", "slurmd"];

pub struct Cluster {
    children: Vec<Child>,
    pub conf: PathBuf,
    dir: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn sbin(name: &str) -> String {
    format!("/usr/sbin/{name}")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether this test can start a cluster; says why when it cannot.
pub fn available(test: &str) -> bool {
    if !netem::testing::require_root(test) {
        return false;
    }
    let missing: Vec<&str> = DAEMONS
        .iter()
        .chain(&["mungekey"])
        .copied()
        .filter(|d| !Path::new(&sbin(d)).exists())
        .chain(["sbatch"].into_iter().filter(|_| {
            netem::testing::check_program("sbatch");
            !Path::new("/usr/bin/sbatch").exists()
        }))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let why = format!(
        "{test} needs Slurm and munge ({} missing): run scripts/test.sh once, or apt-get install slurm-wlm munge",
        missing.join(", ")
    );
    assert!(
        !std::env::var("CI").is_ok_and(|v| v == "true"),
        "{why}, and CI must install them"
    );
    println!("SKIPPED: {why}");
    false
}

impl Cluster {
    /// Starts munged, slurmctld and slurmd under `dir`, one node of
    /// `cpus` CPUs, and waits (bounded) until the node is idle.
    pub fn start(dir: &Path, cpus: u32) -> Cluster {
        let dir = dir.to_path_buf();
        for d in ["state", "spool", "log"] {
            fs::create_dir_all(dir.join(d)).unwrap();
        }
        let key = dir.join("munge.key");
        let out = netem::testing::program(&sbin("mungekey"))
            .args(["-c", "-f", "-k"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(out.status.success(), "mungekey: {out:?}");
        let socket = dir.join("munge.sock");
        let mut cluster = Cluster {
            children: Vec::new(),
            conf: dir.join("slurm.conf"),
            dir: dir.clone(),
        };
        let log = |name: &str| fs::File::create(dir.join("log").join(name)).unwrap();
        cluster.children.push(
            netem::testing::program(&sbin("munged"))
                .args(["-F", "-f", "-S"])
                .arg(&socket)
                .arg(format!("--key-file={}", key.display()))
                .arg(format!("--pid-file={}", dir.join("munged.pid").display()))
                .arg(format!(
                    "--log-file={}",
                    dir.join("log/munged.log").display()
                ))
                .arg(format!("--seed-file={}", dir.join("munged.seed").display()))
                .stdout(log("munged.out"))
                .stderr(log("munged.err"))
                .stdin(Stdio::null())
                .spawn()
                .expect("start munged"),
        );
        let host = fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap()
            .trim()
            .to_string();
        let d = dir.display();
        let conf = format!(
            "ClusterName=haultest\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={}\n\
             SlurmdPort={}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={}\n\
             CredType=cred/munge\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_CPU\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             SchedulerType=sched/builtin\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
             PartitionName=haul Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
            free_port(),
            free_port(),
            socket.display(),
        );
        fs::write(&cluster.conf, conf).unwrap();
        for (name, extra) in [("slurmctld", vec!["-D", "-i"]), ("slurmd", vec!["-D"])] {
            cluster.children.push(
                netem::testing::program(&sbin(name))
                    .args(&extra)
                    .arg("-f")
                    .arg(&cluster.conf)
                    .stdout(log(&format!("{name}.out")))
                    .stderr(log(&format!("{name}.err")))
                    .stdin(Stdio::null())
                    .spawn()
                    .unwrap_or_else(|e| panic!("start {name}: {e}")),
            );
        }
        let t0 = Instant::now();
        loop {
            let out = cluster
                .command("sinfo")
                .args(["-h", "-o", "%t"])
                .output()
                .unwrap();
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if state == "idle" {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the Slurm node did not come up (state {state:?}): {}",
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        cluster
    }

    /// A Slurm client command (`sbatch`, `sinfo`) of this cluster.
    pub fn command(&self, name: &str) -> Command {
        let mut c = netem::testing::program(name);
        c.env("SLURM_CONF", &self.conf).stdin(Stdio::null());
        c
    }

    /// `sbatch --wait SCRIPT` in `cwd`, bounded.
    pub fn run_and_wait(&self, script: &Path, cwd: &Path, limit: Duration) -> Output {
        let mut c = self.command("sbatch");
        c.arg("--wait").arg(script).current_dir(cwd);
        super::output_within(c, limit)
    }

    /// The daemons' logs, for a failure's message.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for name in [
            "slurmctld.log",
            "slurmd.log",
            "slurmctld.err",
            "slurmd.err",
            "munged.err",
        ] {
            let t = fs::read_to_string(self.dir.join("log").join(name)).unwrap_or_default();
            let tail: Vec<&str> = t.lines().rev().take(15).collect();
            s += &format!(
                "--- {name}\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        s
    }
}
