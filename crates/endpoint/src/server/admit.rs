//! Which keys get in, and the reload that judges the running sessions
//! again (P-39, P-43): the authorized-keys file read for every session,
//! its warnings logged when they change, and SIGHUP.

use secure::{AuthorizedKeys, PublicKey};

use wire::{ErrorCode, TransferError};

use super::{access, keyring, ClientKeys};

fn auth(message: String) -> TransferError {
    TransferError::new(ErrorCode::Auth, message)
}

impl super::Server {
    /// Whether `peer` may open a session; the refusal says what to do
    /// (`Auth`, or `GrantSpent` for a grant's key after its push).
    /// `Ok` holds the comment the file gives the key, naming it in logs,
    /// and what its options allow.
    pub(super) fn admit(
        &self,
        peer: &PublicKey,
    ) -> Result<(Option<String>, access::KeyOptions), TransferError> {
        match &self.cfg.client_keys {
            ClientKeys::File(path) => {
                let authorized = match AuthorizedKeys::load(path) {
                    Ok(loaded) => {
                        let mut warnings = loaded.warnings;
                        warnings.extend(option_warnings(&loaded.keys, path));
                        self.log_key_warnings(warnings);
                        loaded.keys
                    }
                    Err(e) => {
                        self.log_key_warnings(vec![e.to_string()]);
                        AuthorizedKeys::default()
                    }
                };
                if authorized.contains(peer) {
                    let opts = access::KeyOptions::parse(authorized.options(peer).unwrap_or(""))
                        .map_err(|e| {
                            auth(format!(
                                "your key {} has options in {} on the server that haul refuses: {e}; ask its operator",
                                peer.fingerprint(),
                                path.display()
                            ))
                        })?;
                    return Ok((authorized.comment(peer).map(str::to_string), opts));
                }
                if let Some(granted) = self.granted(peer, &authorized)? {
                    return Ok((Some("one-time grant".into()), granted));
                }
                Err(auth(format!(
                    "the server does not know your key {} (client key); add this line to {} on the server: {}",
                    peer.fingerprint(),
                    path.display(),
                    peer
                )))
            }
            // The login's own one-time key: it may run what the login
            // may, a transfer between two hosts included (P-45).
            ClientKeys::Only(key) if key == peer => Ok((
                Some("ssh".into()),
                access::KeyOptions {
                    jobs: true,
                    ..access::KeyOptions::default()
                },
            )),
            ClientKeys::Only(_) => Err(auth(format!(
                "key {} is not the one-time key of the ssh session that started this server",
                peer.fingerprint()
            ))),
        }
    }

    /// The options of a key that holds a one-time grant (P-45 G-4): its
    /// issuer's line as it is now, narrowed to the grant, one session at
    /// a time. A grant whose issuer is no longer authorized is void.
    fn granted(
        &self,
        peer: &PublicKey,
        authorized: &AuthorizedKeys,
    ) -> Result<Option<access::KeyOptions>, TransferError> {
        let Some(grants) = &self.grants else {
            return Ok(None);
        };
        let Some(found) = grants.find(peer)? else {
            return Ok(None);
        };
        if !authorized.contains(&found.issuer) {
            grants.consume(&peer.0);
            return Err(auth(format!(
                "the key {} that issued this one-time grant is no longer authorized on this server; the grant is void",
                found.issuer.fingerprint()
            )));
        }
        let issuer = access::KeyOptions::parse(authorized.options(&found.issuer).unwrap_or(""))
            .map_err(|e| auth(format!("the line of the key that issued this grant: {e}")))?;
        Ok(Some(access::KeyOptions {
            sessions: Some(1),
            tunnel_to: Vec::new(),
            jobs: false,
            jobs_to: Vec::new(),
            operator: false,
            grant: Some(found.push),
            ..issuer
        }))
    }

    /// Reads the authorized keys again (SIGHUP, as sshd), and ends at once
    /// every running session whose key was removed or whose line no
    /// longer allows it as it runs (issue 39); each ended session is
    /// logged, and its client told why.
    pub(super) fn reload(&self) {
        let ClientKeys::File(path) = &self.cfg.client_keys else {
            return;
        };
        let authorized = match AuthorizedKeys::load(path) {
            Ok(l) => {
                let mut warnings = l.warnings;
                warnings.extend(option_warnings(&l.keys, path));
                for w in &warnings {
                    tracing::warn!("{w}");
                }
                *self.key_warnings.lock().unwrap_or_else(|p| p.into_inner()) = warnings;
                l.keys
            }
            Err(e) => {
                super::log::say(
                    super::log::Level::Error,
                    "reload",
                    &format!("SIGHUP: {e}; every new client is refused until it is fixed, and running sessions are ended"),
                );
                AuthorizedKeys::default()
            }
        };
        let verdicts = self.keyring.reload(|key| {
            authorized
                .contains(key)
                .then(|| access::KeyOptions::parse(authorized.options(key).unwrap_or("")))
        });
        let mut ended = 0;
        for (key, verdict) in &verdicts {
            if let keyring::Verdict::Ended(_, why) = verdict {
                ended += 1;
                tracing::warn!(
                    "key {}: a running session is ended: {why}",
                    key.fingerprint()
                );
            }
        }
        super::log::say(
            super::log::Level::Info,
            "reload",
            &format!(
                "SIGHUP: {} authorized client key(s) in {}; {} running session(s) go on, {ended} ended (their key removed, or its options narrowed)",
                authorized.len(),
                path.display(),
                verdicts.len() - ended,
            ),
        );
    }

    /// Logs what is wrong with the authorized-keys file when it changes:
    /// the file is read again for every session.
    pub(super) fn log_key_warnings(&self, warnings: Vec<String>) {
        let mut last = self.key_warnings.lock().unwrap_or_else(|p| p.into_inner());
        if *last != warnings {
            for w in &warnings {
                tracing::warn!("{w}");
            }
            *last = warnings;
        }
    }
}

/// A warning for each key whose options haul refuses: said when the file
/// is read (at the start, on SIGHUP), not only when that client connects
/// and is refused. Sorted, so that the same file warns the same way.
pub fn option_warnings(keys: &AuthorizedKeys, path: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = keys
        .with_options()
        .filter_map(|(key, opts)| {
            let e = access::KeyOptions::parse(opts).err()?;
            let who = keys.comment(key).unwrap_or("no comment");
            Some(format!(
                "{}: the line of key {} ({who}) has options haul refuses: {e}; that client is refused until the line is fixed",
                path.display(),
                key.fingerprint()
            ))
        })
        .collect();
    out.sort();
    out
}
