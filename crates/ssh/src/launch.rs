//! The client's side of an ssh start (P-27): runs the user's ssh to start
//! `haul serve --stdio` on the remote host, swaps greetings (versions and
//! one-time keys) with it, and keeps the ssh channel open as the session's
//! lifeline, or as its relay when the hosts cannot connect directly (P-28).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use secure::PublicKey;
use wire::stdio::{Greeting, HsLine, MAX_GREETING_LEN};
use wire::{ErrorCode, PROTOCOL_VERSION};

use crate::relay::ClientRelay;
use crate::release::RELEASE;
use connect::error::TransferError;

/// What to run, and where.
#[derive(Debug, Clone)]
pub struct SshSpec {
    /// The ssh command and its options, as words (`-e`, default `ssh`).
    pub rsh: Vec<String>,
    /// How the remote shell runs haul (`--remote-haul`, default `haul`),
    /// put verbatim at the start of the remote command line, like rsync's
    /// `--rsync-path`.
    pub remote_haul: String,
    pub user: Option<String>,
    pub host: String,
    /// Ports the remote side must bind its data sockets in
    /// (`--remote-ports`).
    pub remote_ports: Option<connect::ports::PortRange>,
    /// More options for the remote `serve --stdio`, already quoted for
    /// its shell (`--cache DIR`).
    pub remote_extra: String,
    /// Whether to copy this haul to a host that lacks it (`--push-haul`).
    pub push_haul: PushHaul,
}

/// Whether to copy haul to a remote host that lacks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PushHaul {
    /// Ask on the terminal; without one, say how (`--push-haul`).
    #[default]
    Ask,
    /// `--push-haul`: without asking.
    Always,
}

/// Lines of other output (a login banner, a chatty shell profile) skipped
/// before the remote greeting.
const MAX_NOISE_LINES: usize = 100;
/// How long the remote side may take to exit once the channel closes.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// A running ssh with the remote haul behind it.
pub struct SshLink {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<BufReader<ChildStdout>>,
    relay: Option<ClientRelay>,
    /// The remote server's one-time key.
    pub server_key: PublicKey,
    /// Its TCP port for this session.
    pub port: u16,
    /// Addresses to try for direct connections, best first.
    pub direct: Vec<SocketAddr>,
    /// The remote side's release, for the summary.
    pub remote_release: String,
    /// Set once connected: the one-time identity and the address reached
    /// (direct, or the relay's), for further sessions ([`super::reconnect`]).
    pub(crate) identity: Option<secure::Keypair>,
    pub(crate) reached: Option<SocketAddr>,
    /// The session keys the greetings agreed, if the remote side answered
    /// the client's half of the ssh start's handshake (P-27).
    pub(crate) keys: Option<secure::SessionKeys>,
    /// The UDP port the remote greeting named for that session.
    pub(crate) udp_port: Option<u16>,
    /// Whether data went through the ssh channel (the relay may carry
    /// only the control connection of a keyed session).
    pub(crate) data_relayed: Arc<AtomicBool>,
}

impl SshSpec {
    /// The remote command line. Where haul is left to the remote PATH,
    /// a host without it ends with exit 127 and no word of the shell's
    /// own ("bash: haul: command not found"): the exit code is what says
    /// so, and haul may then offer to copy itself there (`--push-haul`).
    pub fn remote_command(&self) -> String {
        let ports = match self.remote_ports {
            Some(p) => format!(" --data-ports {p}"),
            None => String::new(),
        };
        let h = &self.remote_haul;
        // `haul`, or the cached copy's guard (one word that names it, or
        // `haul` where it is not there): checked before it runs. A
        // --remote-haul of the user's own is run as written.
        if h == "haul" || h.starts_with("\"$(") {
            return format!(
                "h={h}; command -v \"$h\" >/dev/null 2>&1 || exit 127; \"$h\" serve --stdio{ports}{}",
                self.remote_extra
            );
        }
        format!("{h} serve --stdio{ports}{}", self.remote_extra)
    }

    fn who(&self) -> String {
        match &self.user {
            Some(u) => format!("{u}@{}", self.host),
            None => self.host.clone(),
        }
    }

    fn command(&self) -> Result<Command, TransferError> {
        let mut c = self.command_for(&self.remote_command())?;
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        Ok(c)
    }

    /// ssh to the host, running `remote` there.
    pub fn command_for(&self, remote: &str) -> Result<Command, TransferError> {
        let (program, opts) = self.rsh.split_first().ok_or_else(|| {
            TransferError::new(ErrorCode::BadRequest, "the ssh command (-e) is empty")
        })?;
        if self.host.starts_with('-') || self.user.as_deref().is_some_and(|u| u.starts_with('-')) {
            return Err(TransferError::new(
                ErrorCode::BadRequest,
                format!(
                    "refusing host {:?}: it would be read as an ssh option",
                    self.who()
                ),
            ));
        }
        let mut c = Command::new(program);
        c.args(opts);
        if let Some(u) = &self.user {
            c.arg("-l").arg(u);
        }
        c.arg(&self.host).arg(remote);
        Ok(c)
    }
}

impl SshLink {
    /// Starts the remote side and swaps greetings with it; `key` is this
    /// client's one-time public key.
    pub fn start(spec: &SshSpec, key: &PublicKey) -> Result<SshLink, TransferError> {
        let mut child = spec.command()?.spawn().map_err(|e| {
            TransferError::new(
                ErrorCode::Ssh,
                format!(
                    "cannot run the ssh command {:?}: {e}; name another with -e",
                    spec.rsh.join(" ")
                ),
            )
        })?;
        let mut stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let ours = Greeting {
            protocol: PROTOCOL_VERSION,
            release: RELEASE.to_string(),
            key: key.0,
            port: None,
            addr: None,
            udp: None,
            hs: None,
            // We answer a keyed start on the next line (P-27).
            keyed: true,
        };
        // If ssh is already gone, its exit status says why, below.
        let _ = stdin
            .write_all(ours.encode().as_bytes())
            .and_then(|()| stdin.flush());
        let (greeting, noise) = read_greeting(&mut stdout);
        let Some(theirs) = greeting else {
            drop(stdin);
            let status = wait_bounded(&mut child, EXIT_GRACE);
            return Err(no_greeting(spec, status, &noise));
        };
        // Whatever is wrong with the greeting ends ssh.
        let (theirs, keys) = match answer_greeting(spec, theirs, &mut stdin) {
            Ok(g) => g,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        let port = theirs.port.unwrap_or_default();
        Ok(SshLink {
            child,
            stdin: Some(stdin),
            stdout: Some(stdout),
            relay: None,
            server_key: PublicKey(theirs.key),
            port,
            direct: direct_candidates(theirs.addr.as_deref(), &spec.host, port),
            remote_release: theirs.release,
            identity: None,
            reached: None,
            keys,
            udp_port: theirs.udp,
            data_relayed: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Switches the ssh channel to relaying (P-28) and returns the loopback
    /// address that reaches the remote server through it.
    pub fn relay(&mut self) -> Result<SocketAddr, TransferError> {
        if let Some(r) = &self.relay {
            return Ok(r.addr());
        }
        let (Some(stdin), Some(stdout)) = (self.stdin.take(), self.stdout.take()) else {
            return Err(TransferError::new(
                ErrorCode::Other,
                "the ssh channel is closed",
            ));
        };
        let relay = ClientRelay::start(Box::new(stdin), Box::new(stdout)).map_err(|e| {
            TransferError::new(ErrorCode::Other, format!("cannot start the ssh relay: {e}"))
        })?;
        let addr = relay.addr();
        self.relay = Some(relay);
        Ok(addr)
    }

    /// The relay's loopback address, once relaying.
    pub(crate) fn relay_addr(&self) -> Option<SocketAddr> {
        self.relay.as_ref().map(|r| r.addr())
    }

    /// Whether data travels through the ssh channel.
    pub fn relayed(&self) -> bool {
        self.data_relayed.load(Ordering::Relaxed)
    }

    /// Closes the channel; the remote side exits. Waits for it a little,
    /// then kills ssh.
    pub fn finish(mut self) {
        self.close(true);
    }

    /// The transfer is complete and verified: closes the channel and lets
    /// ssh end on its own, a round trip later, without waiting for the
    /// remote side's exit status (which says nothing more). ssh is not
    /// killed: the remote side still sees its standard input end.
    pub fn release(mut self) {
        self.close(false);
    }

    fn close(&mut self, wait: bool) {
        if let Some(r) = self.relay.take() {
            r.close();
        }
        self.stdin.take();
        self.stdout.take();
        if !wait {
            let _ = self.child.try_wait();
            return;
        }
        if wait_bounded(&mut self.child, EXIT_GRACE).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for SshLink {
    fn drop(&mut self) {
        if self.stdin.is_some() || self.relay.is_some() {
            self.close(true);
        }
    }
}

/// Checks the remote greeting (it decodes, speaks our protocol, names a
/// port) and answers its keyed start on `stdin`, right behind our own
/// greeting: then both sides hold the session's keys (P-27).
fn answer_greeting(
    spec: &SshSpec,
    theirs: Result<Greeting, wire::DecodeError>,
    stdin: &mut ChildStdin,
) -> Result<(Greeting, Option<secure::SessionKeys>), TransferError> {
    let protocol = |m: String| TransferError::new(ErrorCode::Protocol, m);
    let theirs = theirs.map_err(|e| {
        protocol(format!(
            "the remote haul ({:?} on {}) sent a greeting this haul cannot read ({e}); install the same haul release on both hosts (this one is {RELEASE})",
            spec.remote_haul, spec.host
        ))
    })?;
    if theirs.protocol == PROTOCOL_VERSION && theirs.port.is_none() {
        return Err(protocol(format!(
            "the remote haul ({:?} on {}) greeted without a port to connect to; is it a client rather than `haul serve --stdio`?",
            spec.remote_haul, spec.host
        )));
    }
    if theirs.protocol != PROTOCOL_VERSION {
        return Err(protocol(format!(
            "the remote haul ({:?} on {}) is release {} speaking protocol {}; this haul is release {RELEASE} speaking protocol {PROTOCOL_VERSION}. Install the same release on both hosts, or point --remote-haul at a matching one",
            spec.remote_haul, spec.host, theirs.release, theirs.protocol
        )));
    }
    let Some(m1) = theirs.hs.as_deref() else {
        return Ok((theirs, None));
    };
    let (m2, keys) = secure::ssh_start_answer(PROTOCOL_VERSION, &theirs.key, m1).map_err(|e| {
        TransferError::new(
            ErrorCode::Auth,
            format!(
                "the remote haul on {} sent a keyed start this haul cannot answer ({e})",
                spec.host
            ),
        )
    })?;
    // If ssh is gone, the session's first connection says so.
    let _ = stdin
        .write_all(HsLine(m2).encode().as_bytes())
        .and_then(|()| stdin.flush());
    Ok((theirs, Some(keys)))
}

/// Reads up to the greeting line, keeping what came before it (at most
/// [`MAX_NOISE_LINES`]). `None`: the output ended first.
#[allow(clippy::type_complexity)]
fn read_greeting(
    out: &mut BufReader<ChildStdout>,
) -> (Option<Result<Greeting, wire::DecodeError>>, Vec<String>) {
    let mut noise = Vec::new();
    let mut line = Vec::new();
    for _ in 0..MAX_NOISE_LINES {
        line.clear();
        match out
            .take(MAX_GREETING_LEN as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line).into_owned();
        if Greeting::is_greeting(&text) {
            return (Some(Greeting::decode(&text)), noise);
        }
        tracing::debug!("remote output before the greeting: {}", text.trim_end());
        noise.push(text.trim_end().to_string());
    }
    (None, noise)
}

/// Why the remote side never greeted, from ssh's exit status.
fn no_greeting(spec: &SshSpec, status: Option<ExitStatus>, noise: &[String]) -> TransferError {
    let host = &spec.host;
    let cmd = spec.remote_command();
    let said = noise
        .iter()
        .find(|l| !l.trim().is_empty())
        .map(|l| format!("; it printed {:?}", l.chars().take(120).collect::<String>()))
        .unwrap_or_default();
    let ssh = |m: String| TransferError::new(ErrorCode::Ssh, m);
    match status.and_then(|s| s.code()) {
        Some(255) => ssh(format!(
            "ssh to {} failed (exit 255; ssh's message is above)",
            spec.who()
        )),
        Some(127) => ssh(format!(
            "haul is not installed on {host}, or not on the PATH of a non-interactive login: the remote shell could not run {:?} (exit 127). Install haul there, or name it with --remote-haul PATH",
            spec.remote_haul
        )),
        Some(126) => ssh(format!(
            "{:?} on {host} cannot be executed (exit 126); check --remote-haul",
            spec.remote_haul
        )),
        Some(2) => TransferError::new(
            ErrorCode::Protocol,
            format!(
                "the remote haul ({:?} on {host}) refused `serve --stdio` (exit 2): it is older than this haul {RELEASE} (protocol {PROTOCOL_VERSION}) or not haul at all{said}. Install the same release on both hosts",
                spec.remote_haul
            ),
        ),
        Some(code) => ssh(format!(
            "the remote command `{cmd}` on {host} exited with status {code} before haul answered{said}"
        )),
        None => ssh(format!(
            "the remote command `{cmd}` on {host} ended without answering{said}"
        )),
    }
}

fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => return None,
        }
    }
}

/// Where to try direct connections: the address the remote side saw the
/// ssh connection arrive at, then the host name as the user wrote it
/// (which fails quietly for an ssh-config alias).
fn direct_candidates(addr: Option<&str>, host: &str, port: u16) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = Vec::new();
    if let Some(ip) = addr.and_then(|a| a.parse::<IpAddr>().ok()) {
        if !ip.is_unspecified() {
            out.push(SocketAddr::new(ip, port));
        }
    }
    if let Ok(resolved) = (host, port).to_socket_addrs() {
        for a in resolved {
            if !out.contains(&a) {
                out.push(a);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_put_the_ssh_address_first_and_skip_duplicates() {
        let c = direct_candidates(Some("127.0.0.1"), "127.0.0.1", 9);
        assert_eq!(c, vec!["127.0.0.1:9".parse().unwrap()]);
        let c = direct_candidates(Some("0.0.0.0"), "no-such-host.invalid", 9);
        assert!(c.is_empty());
        let c = direct_candidates(Some("192.0.2.1"), "127.0.0.1", 9);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0], "192.0.2.1:9".parse().unwrap());
    }

    #[test]
    fn hosts_that_look_like_options_are_refused() {
        let spec = SshSpec {
            push_haul: PushHaul::Ask,
            rsh: vec!["ssh".into()],
            remote_haul: "haul".into(),
            user: None,
            host: "-oProxyCommand=x".into(),
            remote_ports: None,
            remote_extra: String::new(),
        };
        assert_eq!(spec.command().err().unwrap().code, ErrorCode::BadRequest);
    }
}
