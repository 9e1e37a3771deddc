//! Parse: the command line's locations as a [`Plan`], a push or a pull,
//! which side is remote and where each end is. Object-store locations
//! are whatever `backends`' registry says they are. Two ends on this
//! host (files or objects on either side) are a push to this host: see
//! [`crate::local`].

use std::path::PathBuf;

use connect::TransferError;

use crate::location::Location;
use crate::reach::{usage, Peer};

/// What a push sends: local files, or the objects of an object-store
/// source.
pub(super) enum PushFrom {
    Files(Vec<PathBuf>),
    Bucket(object::ObjectUrl),
}

/// Where a pull lands: a local path, or an object-store destination.
pub(super) enum PullTo {
    Path(String),
    Bucket(object::ObjectUrl),
}

pub(super) enum Plan {
    /// To a remote host, or (`peer` None) to this one.
    Push {
        sources: PushFrom,
        peer: Option<Peer>,
        dest: String,
    },
    Pull {
        sources: Vec<String>,
        peer: Peer,
        dest: PullTo,
    },
    /// From one remote host to another, the data flowing between them
    /// (P-45): see [`crate::managed`].
    Between {
        sources: Vec<String>,
        from: Peer,
        to: Peer,
        dest: String,
    },
}

impl Plan {
    /// The remote host; `None` for a copy on this host.
    pub(super) fn peer(&self) -> Option<&Peer> {
        match self {
            Plan::Push { peer, .. } => peer.as_ref(),
            Plan::Pull { peer, .. } | Plan::Between { from: peer, .. } => Some(peer),
        }
    }
}

fn bucket(s: &str) -> Result<object::ObjectUrl, TransferError> {
    backends::parse(s).map_err(usage)
}

pub(super) fn plan(paths: &[String]) -> Result<Plan, TransferError> {
    let (dst, srcs) = paths
        .split_last()
        .ok_or_else(|| usage("need at least one source and a destination"))?;
    let srcs: Vec<Location> = srcs.iter().map(|s| Location::parse(s)).collect();
    let remote_sources = |srcs: Vec<Location>, dest: &str| {
        let mut sources = Vec::new();
        let mut origin: Option<Peer> = None;
        for s in srcs {
            match s {
                Location::Local(p) | Location::Bucket(p) => {
                    return Err(usage(format!("{p:?} is on this host and other sources are remote; copy them to {dest:?} in two runs")));
                }
                Location::Remote {
                    user,
                    host,
                    port,
                    path,
                } => {
                    let peer = Peer { user, host, port };
                    if origin.as_ref().is_some_and(|o| *o != peer) {
                        return Err(usage("all remote sources must be on the same host"));
                    }
                    origin = Some(peer);
                    sources.push(if path.is_empty() {
                        ".".to_string()
                    } else {
                        path
                    });
                }
            }
        }
        Ok((sources, origin.expect("at least one source")))
    };
    let remote = |s: &Location| matches!(s, Location::Remote { .. });
    if !srcs.iter().any(remote) && !remote(&Location::parse(dst)) {
        let (sources, dest) = here_sources(srcs, dst)?;
        return Ok(Plan::Push {
            sources,
            peer: None,
            dest,
        });
    }
    match Location::parse(dst) {
        Location::Remote {
            user,
            host,
            port,
            path,
        } if srcs.iter().any(remote) => {
            let (sources, from) = remote_sources(srcs, &path)?;
            Ok(Plan::Between {
                sources,
                from,
                to: Peer { user, host, port },
                dest: if path.is_empty() { ".".into() } else { path },
            })
        }
        Location::Remote {
            user,
            host,
            port,
            path,
        } => {
            let (sources, dest) = here_sources(srcs, &path)?;
            Ok(Plan::Push {
                sources,
                peer: Some(Peer { user, host, port }),
                dest,
            })
        }
        Location::Local(dest) => {
            let (sources, peer) = remote_sources(srcs, &dest)?;
            Ok(Plan::Pull {
                sources,
                peer,
                dest: PullTo::Path(dest),
            })
        }
        Location::Bucket(dest) => {
            let url = bucket(&dest)?;
            let (sources, peer) = remote_sources(srcs, &dest)?;
            Ok(Plan::Pull {
                sources,
                peer,
                dest: PullTo::Bucket(url),
            })
        }
    }
}

/// Sources on this host: files, or one object-store location.
fn here_sources(srcs: Vec<Location>, dest: &str) -> Result<(PushFrom, String), TransferError> {
    let mut files = Vec::new();
    let mut objects = Vec::new();
    for s in srcs {
        match s {
            Location::Local(p) => files.push(PathBuf::from(p)),
            Location::Bucket(u) => objects.push(u),
            Location::Remote { .. } => {
                return Err(usage(
                    "copying between two remote hosts is not supported; run haul on one of them",
                ))
            }
        }
    }
    let sources = match (files.is_empty(), objects.len()) {
        (true, 1) => PushFrom::Bucket(bucket(&objects[0])?),
        (_, 0) => PushFrom::Files(files),
        _ => return Err(usage("send one object-store source at a time, without local files beside it; a prefix ending in '/' (with -r) sends many objects")),
    };
    Ok((sources, dest.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans() {
        let p = |v: &[&str]| plan(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(
            matches!(p(&["a", "b", "h:/x/"]), Ok(Plan::Push { sources: PushFrom::Files(sources), .. }) if sources.len() == 2)
        );
        assert!(
            matches!(p(&["h:1:/a", "h:1:b", "."]), Ok(Plan::Pull { sources, peer: Peer { port: Some(1), .. }, .. }) if sources.len() == 2)
        );
        // Both ends here: a push to this host.
        assert!(matches!(p(&["a", "b"]), Ok(Plan::Push { peer: None, .. })));
        assert!(matches!(
            p(&["s3://bkt/a", "/tmp/x"]),
            Ok(Plan::Push {
                sources: PushFrom::Bucket(_),
                peer: None,
                ..
            })
        ));
        assert!(matches!(
            p(&["a", "gs://b/x"]),
            Ok(Plan::Push { peer: None, .. })
        ));
        assert!(p(&["a", "h:b", "."]).is_err());
        assert!(p(&["h:a", "g:b", "."]).is_err());
        assert!(matches!(
            p(&["h:a", "h:b", "g:/c/"]),
            Ok(Plan::Between { sources, .. }) if sources.len() == 2
        ));
        assert!(p(&["h:a", "x:b", "g:/c/"]).is_err());
        assert!(p(&["h:a", "b", "g:/c/"]).is_err());
        assert!(matches!(
            p(&["s3://bkt/a/", "h:/x/"]),
            Ok(Plan::Push {
                sources: PushFrom::Bucket(_),
                ..
            })
        ));
        assert!(matches!(
            p(&["h:/x", "s3://bkt/a/"]),
            Ok(Plan::Pull {
                dest: PullTo::Bucket(_),
                ..
            })
        ));
        assert!(p(&["s3://bkt/a", "b", "h:/x/"]).is_err());
        assert!(p(&["h:/x", "s3://B/x"]).is_err());
    }
}
