//! A remote side with no haul of this protocol (issue 29): this program
//! copies itself over the ssh channel to the login's cache
//! (`${XDG_CACHE_HOME:-~/.cache}/haul/bin/haul-RELEASE-pPROTOCOL`), where
//! the remote shell checks its SHA-256 before it is put in place, and the
//! ssh start runs that copy. Only to a host of this one's system and
//! architecture (`uname -sm`); anything else is said plainly. A copy
//! already there with the same hash is used as it is.
//!
//! What runs is checked every time, not only when it is put there (issue
//! 39): before each start the remote shell compares the copy's SHA-256
//! with this program's, and runs it only from a directory the login owns
//! that neither its group nor others may write (nor the copy itself).
//! Another build there is not run (haul on the PATH is, or a new copy is
//! pushed); a copy or directory that is not the login's own, or that
//! others may write, is refused with a line saying so.

use std::io::{IsTerminal, Write};
use std::process::Stdio;

use connect::error::TransferError;
use wire::{ErrorCode, PROTOCOL_VERSION};

use crate::launch::{PushHaul, SshSpec};
use crate::release::RELEASE;

/// The remote cache, for its shell.
const CACHE: &str = "${XDG_CACHE_HOME:-$HOME/.cache}/haul/bin";

/// The copy's name there, for the remote shell.
pub fn remote_path() -> String {
    format!("{CACHE}/haul-{RELEASE}-p{PROTOCOL_VERSION}")
}

/// A shell function for the remote side: whether `ls -ld`'s line says
/// its group or others may write.
const WRITABLE: &str = "w() { case \"$1\" in ?????w*|????????w*) return 0;; *) return 1;; esac; }";

/// With `--push-haul`, how the remote shell runs haul: the copy pushed
/// before, if it is there and is this haul, else `default` (`haul` from
/// the PATH); so a later run needs one ssh start, not three. The copy is
/// checked before every start ([`guarded`]).
pub fn cached_or(default: &str) -> Result<String, TransferError> {
    Ok(guarded(&this_sum()?.1, default))
}

/// The remote shell's words that name the program to run: the cached copy
/// if its SHA-256 is `sum` and it and its directory are the login's own
/// and written by no one else; `otherwise` if it is absent or another
/// build; and if it is unsafe, `false`, with a line on standard error
/// saying why (the start then fails, exit 1).
fn guarded(sum: &str, otherwise: &str) -> String {
    format!(
        "\"$(f=\"{path}\"; d=\"${{f%/*}}\"; {WRITABLE}; \
         if [ ! -e \"$f\" ]; then echo {otherwise}; \
         elif [ ! -O \"$d\" ] || [ ! -O \"$f\" ] || w \"$(ls -ld \"$d\")\" || w \"$(ls -ld \"$f\")\"; then \
           echo \"haul: refusing to run $f: it or its directory is not this login's own, or others may write it; remove it, or make both the login's own and not writable by group or others\" >&2; echo false; \
         else s=$(sha256sum \"$f\" 2>/dev/null); if [ \"${{s%% *}}\" = {sum} ]; then echo \"$f\"; else echo {otherwise}; fi; fi)\"",
        path = remote_path()
    )
}

/// This program, and its SHA-256 in hex.
fn this_sum() -> Result<(Vec<u8>, String), TransferError> {
    let exe = std::env::current_exe()
        .and_then(std::fs::read)
        .map_err(|e| {
            TransferError::new(
                ErrorCode::Ssh,
                format!("cannot read this haul program to copy or check it: {e}"),
            )
        })?;
    let sum = hex(ring::digest::digest(&ring::digest::SHA256, &exe).as_ref());
    Ok((exe, sum))
}

/// Whether a failed start means the remote host has no haul of this
/// protocol: none on its PATH, or one that speaks another protocol.
pub fn missing(e: &TransferError) -> bool {
    (e.code == ErrorCode::Ssh && e.message.contains("(exit 127)"))
        || (e.code == ErrorCode::Protocol && e.message.contains("Install the same release"))
}

/// Whether to offer the copy: with `--push-haul`, or where the remote
/// haul was left to the PATH (not named with `--remote-haul`).
pub fn may_offer(spec: &SshSpec) -> bool {
    spec.push_haul == PushHaul::Always || spec.remote_haul == "haul"
}

/// `uname -sm` as this program was built for.
fn local_system() -> String {
    let os = match std::env::consts::OS {
        "linux" => "Linux",
        other => other,
    };
    format!("{os} {}", std::env::consts::ARCH)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Copies this program to the remote cache if it is not there already,
/// asking first unless `how` is `Always`; returns the `--remote-haul`
/// that runs it.
pub fn push(spec: &SshSpec, how: PushHaul, why: &TransferError) -> Result<String, TransferError> {
    let (exe, sum) = this_sum()?;
    let path = remote_path();
    // What the remote host is, and what its cache holds.
    let probe =
        format!("uname -sm; f=\"{path}\"; if [ -x \"$f\" ]; then sha256sum \"$f\" 2>/dev/null; fi");
    let out = spec.run(&probe, &[])?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let system = lines.next().unwrap_or("").trim().to_string();
    if system != local_system() {
        return Err(TransferError::new(
            why.code,
            format!(
                "{}; this haul cannot be copied there: it is built for {} and {} is {system:?}. Install haul there, or name it with --remote-haul PATH",
                why.message,
                local_system(),
                spec.host
            ),
        ));
    }
    if lines.next().and_then(|l| l.split_whitespace().next()) == Some(sum.as_str()) {
        tracing::info!("{} has this haul in its cache already", spec.host);
        return Ok(guarded(&sum, "false"));
    }
    if how == PushHaul::Ask && !ask(spec, exe.len(), why)? {
        return Err(TransferError::new(
            why.code,
            format!(
                "{}; or let haul copy itself there: --push-haul (to {path})",
                why.message
            ),
        ));
    }
    // Only into a directory the login owns and no one else may write;
    // written under a temporary name, checked, then moved into place.
    let install = format!(
        "umask 077; d=\"{CACHE}\"; {WRITABLE}; mkdir -p \"$d\" || exit 3; \
         if [ ! -O \"$d\" ] || w \"$(ls -ld \"$d\")\"; then echo \"$d is not this login's own, or others may write it\" >&2; exit 4; fi; \
         t=$(mktemp \"$d/.haul.XXXXXX\") && cat > \"$t\" && s=$(sha256sum \"$t\") && [ \"${{s%% *}}\" = {sum} ] && chmod 700 \"$t\" && mv -f \"$t\" \"{path}\" || {{ rm -f \"$t\"; exit 3; }}"
    );
    let t0 = std::time::Instant::now();
    let out = spec.run(&install, &exe)?;
    if out.status.code() == Some(4) {
        return Err(TransferError::new(
            ErrorCode::Ssh,
            format!(
                "refusing to copy haul to {}: {}; haul runs a copy only from a directory the login owns that no one else may write (set XDG_CACHE_HOME there, or fix the directory's owner and mode)",
                spec.host,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    if !out.status.success() {
        return Err(TransferError::new(
            ErrorCode::Ssh,
            format!(
                "copying haul to {} failed (exit {:?}): {}",
                spec.host,
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    eprintln!(
        "haul: copied this haul ({} MiB, sha256 {}) to {}:{path} in {:.1} s",
        exe.len() >> 20,
        &sum[..16],
        spec.host,
        t0.elapsed().as_secs_f64()
    );
    // Run through the same check, in case it was swapped meanwhile.
    Ok(guarded(&sum, "false"))
}

/// Asks on the terminal; no terminal is a no.
fn ask(spec: &SshSpec, bytes: usize, why: &TransferError) -> Result<bool, TransferError> {
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Ok(false);
    }
    eprint!(
        "haul: {}.\nCopy this haul ({} MiB) to {}:{} and run it? [y/N] ",
        why.message,
        bytes >> 20,
        spec.host,
        remote_path()
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| TransferError::new(ErrorCode::Ssh, format!("reading the answer: {e}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

impl SshSpec {
    /// Runs `cmd` in the remote shell with `input` on its standard input,
    /// bounded to what ssh itself takes.
    pub(crate) fn run(
        &self,
        cmd: &str,
        input: &[u8],
    ) -> Result<std::process::Output, TransferError> {
        let mut c = self.command_for(cmd)?;
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().map_err(|e| {
            TransferError::new(ErrorCode::Ssh, format!("cannot run the ssh command: {e}"))
        })?;
        let mut stdin = child.stdin.take().expect("piped");
        let input = input.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().map_err(|e| {
            TransferError::new(ErrorCode::Ssh, format!("ssh to {}: {e}", self.host))
        })?;
        let _ = writer.join();
        if out.status.code() == Some(255) {
            return Err(TransferError::new(
                ErrorCode::Ssh,
                format!(
                    "ssh to {} failed (exit 255): {}",
                    self.host,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            ));
        }
        Ok(out)
    }
}
