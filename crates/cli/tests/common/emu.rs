//! haul across the emulator: a server in namespace b, the client in a.

use std::process::{Command, Stdio};
use std::time::Duration;

use netem::{Emulator, ADDR_B};

use super::{output_within, Env, CP_LIMIT, HAUL};

pub struct Remote {
    child: std::process::Child,
}

impl Remote {
    /// SIGKILL, and wait for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn serve_in_b(emu: &Emulator, env: &Env) -> Remote {
    serve_in_b_with(emu, env, &[])
}

/// `haul serve` in namespace b with more options.
pub fn serve_in_b_with(emu: &Emulator, env: &Env, extra: &[&str]) -> Remote {
    let mut c = emu.command_b(HAUL);
    c.args(["serve", "--listen", &format!("{ADDR_B}:7050"), "--root"])
        .arg(&env.root)
        .args(extra)
        .env("HAUL_HOME", &env.server_home);
    start_listening(c)
}

/// Starts a `haul serve` command made for namespace b, and waits (bounded)
/// until it says it listens.
pub fn start_listening(mut serve: Command) -> Remote {
    let mut child = serve
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("listening on") {
                let _ = tx.send(());
            }
        }
    });
    let remote = Remote { child };
    rx.recv_timeout(Duration::from_secs(20))
        .expect("haul serve listens inside the namespace");
    remote
}

/// `haul cp ARGS` in namespace a, as the client, not yet started.
pub fn cp_cmd_in_a(emu: &Emulator, env: &Env, args: &[&str]) -> Command {
    let mut c: Command = emu.command_a(HAUL);
    c.arg("cp")
        .args(args)
        .env("HAUL_HOME", &env.home)
        .stdin(Stdio::null());
    c
}

pub fn cp_in_a(emu: &Emulator, env: &Env, args: &[&str]) -> std::process::Output {
    output_within(cp_cmd_in_a(emu, env, args), CP_LIMIT)
}
