//! No-daemon transfers through a real OpenSSH server on loopback: haul
//! starts `haul serve --stdio` over ssh and copies files and trees both
//! ways, directly or through the ssh channel; ssh's own failures reach the
//! user. Needs root to start sshd (prints SKIPPED otherwise).

mod common;

use std::fs;
use std::path::Path;

use common::sshd::{keygen, sshd_available, Sshd};
use common::*;

/// `haul cp -e RSH --remote-haul HAUL ARGS`.
fn cp_ssh(env: &Env, sshd: &Sshd, args: &[&str]) -> std::process::Output {
    let rsh = sshd.rsh();
    let mut all = vec!["-e", rsh.as_str(), "--remote-haul", HAUL];
    all.extend_from_slice(args);
    env.cp(&all)
}

fn tree(dir: &Path) {
    fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    write_file(&dir.join("big.bin"), &random_bytes(5_000_000, 1));
    write_file(&dir.join("sub/small.txt"), b"hello\n");
    write_file(&dir.join("sub/deeper/empty"), b"");
    write_file(&dir.join("name with spaces"), &random_bytes(70_000, 2));
    std::os::unix::fs::symlink("sub/small.txt", dir.join("link")).unwrap();
}

fn remote(path: &Path) -> String {
    format!("127.0.0.1:{}", path.display())
}

#[test]
fn trees_and_files_both_ways_over_ssh() {
    if !sshd_available("trees_and_files_both_ways_over_ssh") {
        return;
    }
    let env = Env::new();
    let sshd = Sshd::start(env.dir.path());
    let src = env.local.join("tree");
    tree(&src);

    // Push a tree (direct data connections; the summary says how).
    let err = ok(&cp_ssh(
        &env,
        &sshd,
        &["-rp", src.to_str().unwrap(), &remote(&env.root)],
    ));
    assert!(
        err.contains("started over ssh, data on direct connections"),
        "{err}"
    );
    assert_same_tree(&src, &env.root.join("tree"));

    // Pull it back, as JSON.
    let back = env.local.join("back");
    fs::create_dir(&back).unwrap();
    let out = cp_ssh(
        &env,
        &sshd,
        &[
            "-rp",
            "--json",
            &remote(&env.root.join("tree")),
            back.to_str().unwrap(),
        ],
    );
    ok(&out);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains("\"route\":\"ssh\""), "{json}");
    assert_same_tree(&src, &back.join("tree"));

    // Several sources into one directory.
    let many = env.root.join("many");
    fs::create_dir(&many).unwrap();
    ok(&cp_ssh(
        &env,
        &sshd,
        &[
            "-p",
            src.join("big.bin").to_str().unwrap(),
            src.join("sub/small.txt").to_str().unwrap(),
            &format!("{}/", remote(&many)),
        ],
    ));
    assert_same_tree(&src.join("big.bin"), &many.join("big.bin"));
    assert_same_tree(&src.join("sub/small.txt"), &many.join("small.txt"));
    assert!(temporaries(&env.root).is_empty());
}

#[test]
fn data_through_the_ssh_channel() {
    if !sshd_available("data_through_the_ssh_channel") {
        return;
    }
    let env = Env::new();
    let sshd = Sshd::start(env.dir.path());
    let src = env.local.join("tree");
    tree(&src);
    let out = cp_ssh(
        &env,
        &sshd,
        &[
            "-rp",
            "--through-ssh",
            "--json",
            src.to_str().unwrap(),
            &remote(&env.root),
        ],
    );
    ok(&out);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains("\"route\":\"ssh-relay\""), "{json}");
    assert!(json.contains("\"streams\":1"), "{json}");
    assert_same_tree(&src, &env.root.join("tree"));

    let back = env.local.join("back.bin");
    let err = ok(&cp_ssh(
        &env,
        &sshd,
        &[
            "--through-ssh",
            &remote(&env.root.join("tree/big.bin")),
            back.to_str().unwrap(),
        ],
    ));
    assert!(err.contains("data through the ssh channel"), "{err}");
    // UDP asked for by name cannot go through ssh: a clear refusal.
    let err = fails(
        &cp_ssh(
            &env,
            &sshd,
            &[
                "--through-ssh",
                "--transport",
                "udp",
                &remote(&env.root.join("tree/big.bin")),
                back.to_str().unwrap(),
            ],
        ),
        3,
    );
    assert!(err.contains("carries only TCP"), "{err}");
    assert_eq!(
        fs::read(&back).unwrap(),
        fs::read(src.join("big.bin")).unwrap()
    );
}

#[test]
fn remote_paths_are_the_logins_own_and_ssh_config_applies() {
    if !sshd_available("remote_paths_are_the_logins_own_and_ssh_config_applies") {
        return;
    }
    let env = Env::new();
    let sshd = Sshd::start(env.dir.path());
    write_file(&env.local.join("f.bin"), &random_bytes(300_000, 3));
    // A host alias, port, user and key from an ssh config file, as in
    // ~/.ssh/config; the alias resolves nowhere else.
    let config = sshd.dir.join("config");
    fs::write(
        &config,
        format!(
            "Host dtn-alias\n  HostName 127.0.0.1\n  Port {port}\n\
             Host via-jump\n  HostName 127.0.0.1\n  Port {port}\n  ProxyJump dtn-alias\n\
             Host *\n  User root\n  IdentityFile {}\n  \
             IdentitiesOnly yes\n  UserKnownHostsFile {}\n  StrictHostKeyChecking yes\n  BatchMode yes\n",
            sshd.user_key.display(),
            sshd.known_hosts.display(),
            port = sshd.port,
        ),
    )
    .unwrap();
    // --remote-haul is put verbatim at the head of the remote command line
    // (like rsync's --rsync-path), so it can change the login directory.
    let remote_haul = format!("cd {} && {HAUL}", env.root.display());
    let rsh = format!("ssh -F {}", config.display());
    let via_config = |args: &[&str]| {
        let mut all = vec!["-e", rsh.as_str(), "--remote-haul", remote_haul.as_str()];
        all.extend_from_slice(args);
        env.cp(&all)
    };
    let original = fs::read(env.local.join("f.bin")).unwrap();
    ok(&via_config(&[
        env.local.join("f.bin").to_str().unwrap(),
        "dtn-alias:relative.bin",
    ]));
    assert_eq!(fs::read(env.root.join("relative.bin")).unwrap(), original);
    // And pulled back, relative to the login directory too.
    ok(&via_config(&[
        "root@dtn-alias:relative.bin",
        env.local.join("g.bin").to_str().unwrap(),
    ]));
    assert_eq!(fs::read(env.local.join("g.bin")).unwrap(), original);
    // Through a jump host (ProxyJump in the config): ssh reaches the
    // remote side through it, and the data still goes direct.
    let out = via_config(&[
        "--json",
        "via-jump:relative.bin",
        env.local.join("h.bin").to_str().unwrap(),
    ]);
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"route\":\"ssh\""));
    assert_eq!(fs::read(env.local.join("h.bin")).unwrap(), original);
}

/// One small file to copy into the served root over ssh, with the ssh
/// command and the remote haul chosen per run, for the failure tests.
struct OneFile {
    env: Env,
    sshd: Sshd,
}

impl OneFile {
    fn new() -> OneFile {
        let env = Env::new();
        let sshd = Sshd::start(env.dir.path());
        write_file(&env.local.join("f"), b"x");
        OneFile { env, sshd }
    }

    fn cp(&self, rsh: &str, remote_haul: &str) -> std::process::Output {
        let src = self.env.local.join("f");
        let dest = remote(&self.env.root.join("f"));
        self.env.cp(&[
            "-e",
            rsh,
            "--remote-haul",
            remote_haul,
            src.to_str().unwrap(),
            &dest,
        ])
    }
}

#[test]
fn ssh_failures_show_sshs_own_message() {
    if !sshd_available("ssh_failures_show_sshs_own_message") {
        return;
    }
    let one = OneFile::new();
    let (env, sshd) = (&one.env, &one.sshd);
    let run = |rsh: String| one.cp(&rsh, HAUL);

    // Unknown host key, under strict checking.
    let empty = sshd.dir.join("empty_known_hosts");
    fs::write(&empty, "").unwrap();
    let err = fails(&run(sshd.rsh_with(&sshd.user_key, &empty)), 13);
    assert!(err.contains("Host key verification failed"), "{err}");
    assert!(err.contains("ssh to 127.0.0.1 failed"), "{err}");

    // A changed host key.
    let other = sshd.dir.join("other_host_key");
    keygen(&other);
    let changed = sshd.dir.join("changed_known_hosts");
    let other_pub = fs::read_to_string(other.with_extension("pub")).unwrap();
    fs::write(&changed, format!("[127.0.0.1]:{} {other_pub}", sshd.port)).unwrap();
    let err = fails(&run(sshd.rsh_with(&sshd.user_key, &changed)), 13);
    assert!(
        err.contains("REMOTE HOST IDENTIFICATION HAS CHANGED"),
        "{err}"
    );

    // A user key the server does not accept.
    let stranger = sshd.dir.join("stranger");
    keygen(&stranger);
    let err = fails(&run(sshd.rsh_with(&stranger, &sshd.known_hosts)), 13);
    assert!(err.contains("Permission denied"), "{err}");

    // Nobody listening.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let err = fails(
        &run(format!("ssh -F /dev/null -p {port} -o BatchMode=yes")),
        13,
    );
    assert!(err.contains("Connection refused"), "{err}");

    // No ssh program at all.
    let err = fails(&run("/nonexistent/ssh".into()), 13);
    assert!(err.contains("cannot run the ssh command"), "{err}");
    assert!(!env.root.join("f").exists());
}

#[test]
fn remote_without_haul_or_with_another_version() {
    if !sshd_available("remote_without_haul_or_with_another_version") {
        return;
    }
    let one = OneFile::new();
    let env = &one.env;
    let rsh = one.sshd.rsh();
    let run = |remote_haul: &str| one.cp(&rsh, remote_haul);

    let err = fails(&run("/opt/nowhere/haul"), 13);
    assert!(err.contains("haul is not installed on 127.0.0.1"), "{err}");
    assert!(err.contains("\"/opt/nowhere/haul\""), "{err}");
    assert!(err.contains("--remote-haul"), "{err}");

    // A haul of another protocol version, behind a chatty login.
    let fake = env.dir.path().join("old-haul");
    fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho 'Welcome to the DTN'\necho 'haul-ssh 1 0.0.9 key={} port=7'\nsleep 1\n",
            "0".repeat(64)
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let err = fails(&run(fake.to_str().unwrap()), 5);
    assert!(err.contains("release 0.0.9 speaking protocol 1"), "{err}");
    assert!(err.contains(fake.to_str().unwrap()), "{err}");

    // A program that does not know `serve --stdio` at all.
    let err = fails(&run("/bin/false"), 13);
    assert!(err.contains("exited with status 1"), "{err}");
    assert!(!env.root.join("f").exists());
}

/// `serve --stdio --data-ports` listens inside the range (what
/// `cp --remote-ports` asks for), which the greeting tells the client; it
/// needs no sshd to check.
#[test]
fn stdio_server_listens_in_the_data_port_range() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let mut child = Command::new(HAUL)
        .args(["serve", "--stdio", "--data-ports", &port.to_string()])
        .env("SSH_CONNECTION", "127.0.0.1 50000 127.0.0.1 22")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    drop(child.stdin.take());
    let _ = child.wait();
    let head = format!("haul-ssh {} ", wire::PROTOCOL_VERSION);
    assert!(line.starts_with(&head), "{line}");
    assert!(line.contains(&format!(" port={port}")), "{line}");
    assert!(line.contains(" addr=127.0.0.1"), "{line}");
}

/// `haul probe` through ssh: one remote side started for all of its
/// sessions, directly and through the ssh channel (where only TCP goes).
#[test]
fn probe_over_ssh_directly_and_through_the_channel() {
    if !sshd_available("probe_over_ssh_directly_and_through_the_channel") {
        return;
    }
    let env = Env::new();
    let sshd = Sshd::start(env.dir.path());
    let rsh = sshd.rsh();
    let probe = |extra: &[&str]| {
        let mut c = std::process::Command::new(HAUL);
        c.args(["probe", "--json", "--seconds", "0.5", "-e", &rsh])
            .args(["--remote-haul", HAUL])
            .args(extra)
            .arg("127.0.0.1")
            .env("HAUL_HOME", &env.home)
            .stdin(std::process::Stdio::null());
        let out = output_within(c, CP_LIMIT);
        ok(&out);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        serde_json::from_str::<serde_json::Value>(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    let direct = probe(&[]);
    assert_eq!(direct["route"], "ssh", "{direct}");
    assert_eq!(direct["rtt_source"], "udp-echo", "{direct}");
    let transports: Vec<&str> = direct["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["transport"].as_str().unwrap())
        .collect();
    assert!(
        transports.contains(&"udp") && transports.contains(&"tcp"),
        "{direct}"
    );
    assert!(env.home.join("probes/ssh_127.0.0.1.json").exists());

    let relayed = probe(&["--through-ssh", "--no-save"]);
    assert_eq!(relayed["route"], "ssh-relay", "{relayed}");
    assert!(
        relayed["udp_error"]
            .as_str()
            .unwrap()
            .contains("ssh channel"),
        "{relayed}"
    );
    assert_eq!(relayed["rtt_source"], "handshake", "{relayed}");
    assert_eq!(relayed["recommendation"]["transport"], "tcp", "{relayed}");
    assert_eq!(relayed["recommendation"]["streams"], 1, "{relayed}");
    assert!(relayed["saved"].is_null());
}

#[test]
fn tunnel_over_ssh_directly_and_through_the_channel() {
    if !sshd_available("tunnel_over_ssh_directly_and_through_the_channel") {
        return;
    }
    let env = Env::new();
    let sshd = Sshd::start(env.dir.path());
    let rsh = sshd.rsh();
    // No daemon and no --tunnel-to: a side started over ssh forwards
    // anywhere its host reaches, as `ssh -L` would.
    let target = format!("127.0.0.1:{}", common::tunnel::service());
    for extra in [&[][..], &["--through-ssh"][..]] {
        let mut args = vec!["--to", &target, "--via", "127.0.0.1", "-e", &rsh];
        args.extend_from_slice(&["--remote-haul", HAUL]);
        args.extend_from_slice(extra);
        let t = common::tunnel::tunnel(&env, &args)
            .unwrap_or_else(|log| panic!("tunnel {extra:?} did not start: {log}"));
        let data = random_bytes(2_000_000, 9);
        let got = common::tunnel::echo_through(t.port, data.clone());
        assert!(got == data, "the echo through the tunnel {extra:?} differs");
    }
}

#[test]
fn a_host_without_haul_gets_this_one_copied_over_ssh() {
    if !sshd_available("the remote-install test") {
        return;
    }
    let env = Env::new();
    let sshd = Sshd::start(env.dir.path());
    let src = env.local.join("f.bin");
    write_file(&src, &random_bytes(400_000, 8));
    let rsh = sshd.rsh();
    // The login runs `haul`, which is on no PATH there.
    let dest = remote(&env.root.join("f.bin"));
    let args = |more: &[&'static str]| {
        let mut a = vec!["-e", rsh.as_str()];
        a.extend_from_slice(more);
        a.extend([src.to_str().unwrap(), dest.as_str()]);
        a
    };
    // No terminal to ask on: refused, saying how.
    let t = fails(&env.cp(&args(&[])), 13);
    assert!(t.contains("--push-haul"), "{t}");
    assert!(!env.root.join("f.bin").exists());
    // With --push-haul: copied, checked, run.
    let t0 = std::time::Instant::now();
    let said = ok(&env.cp(&args(&["--push-haul"])));
    let first = t0.elapsed();
    assert!(said.contains("copied this haul"), "{said}");
    // The remote shell's own "command not found" is not shown: exit 127
    // is what says so (issue 41).
    assert!(!said.contains("not found"), "{said}");
    assert!(fs::read(env.root.join("f.bin")).unwrap() == fs::read(&src).unwrap());
    let cached: Vec<_> = fs::read_dir(sshd.login_cache().join("haul/bin"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    assert!(cached[0].starts_with("haul-"), "{cached:?}");
    // Again: the copy there is used as it is.
    fs::remove_file(env.root.join("f.bin")).unwrap();
    let t1 = std::time::Instant::now();
    let said = ok(&env.cp(&args(&["--push-haul"])));
    println!(
        "remote install: first run {first:?}, with the copy cached {:?}",
        t1.elapsed()
    );
    assert!(!said.contains("copied this haul"), "{said}");
    assert!(env.root.join("f.bin").is_file());
}
