//! Which daemon holds each job submitted from here, so that `haul jobs
//! show ID` needs no host: one line a job, `ID HOST:PORT`, in
//! `$HAUL_HOME/jobs.submitted`. Nothing secret is in it.

use std::io::Write;

use endpoint::DEFAULT_PORT;

use crate::reach::Peer;

fn path() -> std::path::PathBuf {
    crate::home::dir().join("jobs.submitted")
}

fn target(p: &Peer) -> String {
    format!("{}:{}", p.host, p.port.unwrap_or(DEFAULT_PORT))
}

/// Notes that `id` went to `peer` (a failure to note it is only logged).
pub fn add(id: &jobs::Id, peer: &Peer) {
    let line = format!("{id} {}\n", target(peer));
    let r = std::fs::create_dir_all(crate::home::dir()).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path())?
            .write_all(line.as_bytes())
    });
    if let Err(e) = r {
        tracing::warn!("cannot note job {id} in {}: {e}", path().display());
    }
}

fn lines() -> Vec<(String, String)> {
    std::fs::read_to_string(path())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(i, h)| (i.to_string(), h.to_string()))
        .collect()
}

/// Where `id` was submitted, if from here.
pub fn host_of(id: &jobs::Id) -> Option<String> {
    let id = id.hex();
    lines()
        .into_iter()
        .rev()
        .find(|(i, _)| *i == id)
        .map(|(_, h)| h)
}

/// Every daemon jobs were submitted to from here, each once.
pub fn hosts() -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, h) in lines() {
        if !out.contains(&h) {
            out.push(h);
        }
    }
    out
}
