//! A real OpenSSH server for tests: Debian's sshd on loopback (or inside a
//! namespace), with a host key and a user key made by the test, accepting
//! only that user key. sshd needs root for its privilege separation; without
//! root (or without sshd) the tests that use it print why they skip.

use std::fs;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const SSHD: &str = "/usr/sbin/sshd";

pub struct Sshd {
    child: Child,
    pub port: u16,
    pub addr: String,
    pub dir: PathBuf,
    /// The user's key (private half), accepted by the server.
    pub user_key: PathBuf,
    /// A known_hosts file that pins the server's host key.
    pub known_hosts: PathBuf,
}

impl Sshd {
    /// The login's cache (`XDG_CACHE_HOME` in its sessions, set by the
    /// server's config), in the test's directory: where `--push-haul`
    /// copies haul.
    pub fn login_cache(&self) -> PathBuf {
        self.dir.join("remote-cache")
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether this test can start sshd; prints the reason when it cannot
/// (and fails under CI, which runs as root and must run it).
pub fn sshd_available(test: &str) -> bool {
    if !netem::testing::require_root(&format!("{test} (it starts sshd)")) {
        return false;
    }
    if !Path::new(SSHD).exists() || which("ssh-keygen").is_none() || which("ssh").is_none() {
        let why = format!("{test} needs OpenSSH (apt-get install openssh-server openssh-client)");
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "{why}, and CI must run it"
        );
        println!("SKIPPED: {why}");
        return false;
    }
    true
}

fn which(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(prog))
        .find(|p| p.exists())
}

pub fn keygen(path: &Path) {
    let st = netem::testing::program("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .expect("run ssh-keygen");
    assert!(st.success(), "ssh-keygen failed");
}

fn free_port(ip: &str) -> u16 {
    TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Sshd {
    /// Starts sshd on 127.0.0.1 with fresh keys under `dir`.
    pub fn start(dir: &Path) -> Sshd {
        Sshd::start_with(dir, "127.0.0.1", |p: &str| netem::testing::program(p))
    }

    /// Starts sshd listening on `ip`, its command made by `command` (to
    /// put it in a namespace), and waits until it listens (bounded).
    pub fn start_with(dir: &Path, ip: &str, command: impl FnOnce(&str) -> Command) -> Sshd {
        Sshd::start_on(dir, ip, free_port("127.0.0.1"), command)
    }

    /// Like [`Sshd::start_with`], on a given port.
    pub fn start_on(
        dir: &Path,
        ip: &str,
        port: u16,
        command: impl FnOnce(&str) -> Command,
    ) -> Sshd {
        static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = dir.join(format!("ssh-{port}-{n}"));
        fs::create_dir_all(&dir).unwrap();
        // sshd's privilege-separation directory.
        let _ = fs::create_dir_all("/run/sshd");
        let host_key = dir.join("host_key");
        let user_key = dir.join("user_key");
        keygen(&host_key);
        keygen(&user_key);
        fs::copy(dir.join("user_key.pub"), dir.join("authorized_keys")).unwrap();
        let host_pub = fs::read_to_string(dir.join("host_key.pub")).unwrap();
        let known_hosts = dir.join("known_hosts");
        fs::write(&known_hosts, format!("[{ip}]:{port} {host_pub}")).unwrap();
        let config = dir.join("sshd_config");
        fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress {ip}\nHostKey {}\nAuthorizedKeysFile {}\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                 StrictModes no\nPermitRootLogin prohibit-password\nPidFile none\n\
                 LogLevel INFO\nSetEnv XDG_CACHE_HOME={}\n",
                host_key.display(),
                dir.join("authorized_keys").display(),
                dir.join("remote-cache").display()
            ),
        )
        .unwrap();
        let mut child = command(SSHD)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sshd");
        // sshd says "Server listening on ADDR port N." once it listens;
        // the rest of its log is drained.
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("Server listening on") {
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(Duration::from_secs(10)).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sshd did not start listening on {ip} port {port}");
        }
        Sshd {
            child,
            port,
            addr: ip.to_string(),
            dir,
            user_key,
            known_hosts,
        }
    }

    /// `ssh` with this server's port, the user key and the pinned host key,
    /// never prompting: the value for `haul cp -e`.
    pub fn rsh(&self) -> String {
        self.rsh_with(&self.user_key, &self.known_hosts)
    }

    pub fn rsh_with(&self, key: &Path, known_hosts: &Path) -> String {
        format!(
            "ssh -F /dev/null -p {} -i {} -o IdentitiesOnly=yes -o UserKnownHostsFile={} \
             -o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=10",
            self.port,
            key.display(),
            known_hosts.display()
        )
    }
}
