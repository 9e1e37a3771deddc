//! Reaching the other side, for every command that does (`cp`, `sync`,
//! `probe`): a `haul serve` daemon or a remote side started over ssh, the
//! keys each needs, and the client configuration common to all.

use std::path::Path;
use std::time::Duration;

use connect::net::Tuning;
use connect::TransferError;
use endpoint::{ClientConfig, Connected, Route, ServerTrust, Transport, DEFAULT_PORT};
use secure::{Keypair, Protection};
use ssh::{SshLink, SshSpec};
use wire::ErrorCode;

use crate::args::ConnectArgs;
use crate::home;

/// The remote end, as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
}

impl Peer {
    /// A host as `probe` and `tunnel --via` take it: HOST, USER@HOST, or
    /// HOST:PORT for a daemon.
    pub fn parse(target: &str) -> Result<Peer, TransferError> {
        match crate::location::Location::parse(&format!("{target}:")) {
            crate::location::Location::Remote {
                user, host, port, ..
            } if !host.is_empty() => Ok(Peer { user, host, port }),
            _ => Err(usage(format!(
                "{target:?} is not a host; write it as HOST, USER@HOST or HOST:PORT (a daemon's port)"
            ))),
        }
    }
}

pub fn usage(msg: impl Into<String>) -> TransferError {
    TransferError::new(ErrorCode::BadRequest, msg)
}

/// Whether to start the remote side over ssh rather than connect to a
/// daemon: `--ssh`, or a host named without a port whose daemon key the
/// user has not pinned (and no `--daemon`).
pub fn use_ssh(a: &ConnectArgs, peer: &Peer, known_hosts: &Path) -> Result<bool, TransferError> {
    let forced = a.ssh || a.through_ssh;
    if forced && peer.port.is_some() {
        return Err(usage(format!(
            "{}: a port in the location names a `haul serve` daemon; to reach ssh on another port, use -e \"ssh -p PORT\"",
            peer.host
        )));
    }
    if forced {
        return Ok(true);
    }
    if a.daemon || peer.port.is_some() {
        return Ok(false);
    }
    let label = format!("{}:{DEFAULT_PORT}", peer.host);
    Ok(!secure::KnownHosts::load(known_hosts).is_ok_and(|k| k.knows(&label)))
}

/// Refuses a congestion control the kernel does not offer.
pub fn check_cc(a: &ConnectArgs) -> Result<(), TransferError> {
    if let Some(cc) = &a.cc {
        let offered = connect::net::available_cc();
        if !offered.iter().any(|c| c == cc) {
            return Err(usage(format!(
                "congestion control {cc:?} is not available here; this kernel offers: {}",
                offered.join(" ")
            )));
        }
    }
    Ok(())
}

fn load_identity(path: &Path, explicit: bool) -> Result<Keypair, TransferError> {
    let auth = |e: secure::KeyError| TransferError::new(ErrorCode::Auth, e.to_string());
    if !explicit && !path.exists() {
        let kp = Keypair::load_or_create(path, &home::comment()).map_err(auth)?;
        eprintln!(
            "haul: created your key {} ({}); the server must list this line in its authorized_keys:\n  {}",
            path.display(),
            kp.public.fingerprint(),
            kp.public
        );
        return Ok(kp);
    }
    Keypair::load(path).map_err(auth)
}

/// How data frames are protected: encrypted with the best cipher here, or
/// (`--no-encrypt`) authenticated only.
pub fn protection(no_encrypt: bool) -> Protection {
    if no_encrypt {
        Protection::IntegrityOnly
    } else {
        Protection::best_encrypting()
    }
}

/// How to reach `peer`: over ssh or to a daemon, decided once.
pub struct Reach {
    pub peer: Peer,
    pub ssh: bool,
}

impl Reach {
    pub fn decide(a: &ConnectArgs, peer: Peer) -> Result<Reach, TransferError> {
        check_cc(a)?;
        let ssh = use_ssh(a, &peer, &known_hosts(a))?;
        Ok(Reach { peer, ssh })
    }

    /// A client configuration with this connection's keys, trust, host
    /// and limits, and defaults for the rest.
    pub fn config(
        &self,
        a: &ConnectArgs,
        protection: Protection,
    ) -> Result<ClientConfig, TransferError> {
        // Over ssh, keys are one-time ones: the user's own is not needed.
        let identity = if self.ssh {
            Keypair::generate()
        } else {
            let identity_path = a.identity.clone().unwrap_or_else(home::identity);
            load_identity(&identity_path, a.identity.is_some())?
        };
        Ok(ClientConfig {
            identity,
            trust: ServerTrust::KnownHosts(known_hosts(a)),
            host: self.peer.host.clone(),
            port: self.peer.port.unwrap_or(DEFAULT_PORT),
            dial: Vec::new(),
            streams: None,
            block_size: 1 << 20,
            protection,
            rate: None,
            transport: Transport::Auto,
            preserve: false,
            compress: codec::Mode::Auto,
            sync: wire::SyncOptions::default(),
            basis: None,
            cache: None,
            tuning: Tuning::auto(a.cc.clone(), Duration::from_secs(a.timeout)),
            connect_timeout: Duration::from_secs(a.connect_timeout.max(1)),
            notice: Some(Box::new(|m| eprintln!("haul: {m}"))),
            advice: None,
            known_path: None,
            udp_blocked: false,
            shard: None,
            select: wire::Selection::default(),
            itemize: false,
            relay: None,
            share: rate::Share::Fair,
        })
    }

    /// A dialer for sessions; `remote_extra` is appended to the remote
    /// `haul serve --stdio` command when it is started over ssh.
    pub fn dialer(&self, a: &ConnectArgs, remote_extra: String) -> Result<Dialer, TransferError> {
        let spec = if self.ssh {
            Some(SshSpec {
                rsh: shell_words::split(&a.rsh).map_err(|e| {
                    usage(format!(
                        "cannot split the ssh command {:?} into words: {e}",
                        a.rsh
                    ))
                })?,
                remote_haul: match (a.push_haul, a.remote_haul.as_str()) {
                    (true, "haul") => ssh::install::cached_or("haul")?,
                    _ => a.remote_haul.clone(),
                },
                push_haul: if a.push_haul {
                    ssh::PushHaul::Always
                } else {
                    ssh::PushHaul::Ask
                },
                user: self.peer.user.clone(),
                host: self.peer.host.clone(),
                remote_ports: a.remote_ports,
                remote_extra: remote_extra
                    + &match a.timeout {
                        // Only when asked, so that the usual command line
                        // stays what every release accepts.
                        60 => String::new(),
                        t => format!(" --timeout {t}"),
                    },
            })
        } else {
            None
        };
        Ok(Dialer {
            spec,
            through_ssh: a.through_ssh,
            fast: false,
            link: None,
            here: false,
        })
    }
}

pub fn known_hosts(a: &ConnectArgs) -> std::path::PathBuf {
    a.known_hosts.clone().unwrap_or_else(home::known_hosts)
}

/// Opens sessions: to the daemon, or to the remote side it starts over
/// ssh on the first and reuses for the others.
pub struct Dialer {
    spec: Option<SshSpec>,
    through_ssh: bool,
    /// Key an ssh-started session in the greetings and send its request
    /// through the ssh channel at once (P-27): for one session, whose
    /// round trip the answer measures (`cp`, `sync`); `probe` and `tunnel`
    /// time their handshakes.
    pub fast: bool,
    link: Option<SshLink>,
    /// The receiving end is in this process (a copy on one host).
    here: bool,
}

impl Dialer {
    /// Sessions with the receiving end that `local::start` put in this
    /// process.
    pub fn here() -> Dialer {
        Dialer {
            spec: None,
            through_ssh: false,
            fast: false,
            link: None,
            here: true,
        }
    }

    /// How ssh starts the remote side, for a route over ssh.
    pub fn ssh_spec(&self) -> Option<&SshSpec> {
        self.spec.as_ref()
    }

    /// Whether the receiving end is in this process.
    pub fn is_here(&self) -> bool {
        self.here
    }

    pub fn connect(&mut self, cfg: ClientConfig) -> Result<Connected, TransferError> {
        match (&self.spec, &self.link) {
            (None, _) => Connected::connect(cfg),
            (Some(_), Some(link)) => ssh::reconnect(cfg, link),
            (Some(spec), None) => {
                let (conn, link) = ssh::connect(cfg, spec, self.through_ssh, self.fast)?;
                self.link = Some(link);
                Ok(conn)
            }
        }
    }

    /// Ends the ssh link, if any; the route the sessions took. After a
    /// transfer that `completed`, ssh is left to end on its own instead of
    /// waited for (its exit is a round trip away and says nothing more).
    pub fn finish(self, completed: bool) -> Route {
        match self.link {
            None if self.here => Route::Local,
            None if self.spec.is_none() => Route::Daemon,
            None => Route::Ssh,
            Some(l) => {
                let route = if l.relayed() {
                    Route::SshRelay
                } else {
                    Route::Ssh
                };
                if completed {
                    l.release();
                } else {
                    l.finish();
                }
                route
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_or_daemon() {
        use clap::Parser;
        let dir = tempfile::tempdir().unwrap();
        let known = dir.path().join("known_hosts");
        let key = secure::Keypair::generate().public;
        std::fs::write(&known, format!("pinned:7050 {key}\n")).unwrap();
        let decide = |extra: &[&str], host: &str, port: Option<u16>| {
            let mut argv = vec!["haul", "cp"];
            argv.extend_from_slice(extra);
            argv.extend_from_slice(&["a", "h:b"]);
            let crate::args::Command::Cp(a) = crate::args::Cli::parse_from(argv).command else {
                unreachable!()
            };
            let peer = Peer {
                user: None,
                host: host.into(),
                port,
            };
            use_ssh(&a.conn, &peer, &known)
        };
        // A host with no pinned daemon key goes through ssh; a pinned one,
        // an explicit port or --daemon reach the daemon.
        assert!(decide(&[], "fresh", None).unwrap());
        assert!(!decide(&[], "pinned", None).unwrap());
        assert!(!decide(&[], "fresh", Some(7050)).unwrap());
        assert!(!decide(&["--daemon"], "fresh", None).unwrap());
        // --ssh and --through-ssh force ssh, and refuse a daemon's port.
        assert!(decide(&["--ssh"], "pinned", None).unwrap());
        assert!(decide(&["--through-ssh"], "pinned", None).unwrap());
        assert!(decide(&["--ssh"], "fresh", Some(7050)).is_err());
    }
}
