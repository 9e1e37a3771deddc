//! `haul jobs`: the jobs a daemon runs for this key (P-45), listed,
//! shown with their events, followed, cancelled, paused, resumed or
//! retried; text for people or `--json`.

use jobs::call::{Answer, Call, View};
use jobs::Id;

use connect::TransferError;
use endpoint::Connected;

use super::submit::{answer, call, ended, first};
use crate::args::JobsArgs;
use crate::exit;
use crate::reach::{usage, Peer, Reach};

const ACTIONS: [&str; 7] = [
    "list", "show", "follow", "cancel", "pause", "resume", "retry",
];

pub fn run(a: JobsArgs) -> i32 {
    crate::logging::init(a.common.verbose);
    match jobs(&a) {
        Ok(code) => code,
        Err(e) => crate::report::failed(&e, a.json),
    }
}

fn jobs(a: &JobsArgs) -> Result<i32, TransferError> {
    let words: Vec<&str> = a.words.iter().map(String::as_str).collect();
    let (action, rest) = match words.first() {
        Some(w) if ACTIONS.contains(w) => (*w, &words[1..]),
        _ => ("list", &words[..]),
    };
    if action == "list" {
        let hosts = match (rest, &a.on) {
            ([], None) => super::registry::hosts(),
            ([], Some(h)) => vec![h.clone()],
            ([h], None) => vec![h.to_string()],
            _ => return Err(usage("haul jobs [list] [HOST]")),
        };
        if hosts.is_empty() {
            return Err(usage(
                "no jobs were submitted from here; name the daemon: haul jobs HOST",
            ));
        }
        return list(a, &hosts);
    }
    let [id] = rest else {
        return Err(usage(format!("haul jobs {action} ID [--on HOST]")));
    };
    let id =
        Id::parse(id).ok_or_else(|| usage(format!("{id:?} is not a job id (32 hex digits)")))?;
    let host = match &a.on {
        Some(h) => h.clone(),
        None => super::registry::host_of(&id).ok_or_else(|| {
            usage(format!(
                "job {id} was not submitted from here; say where it runs: --on HOST"
            ))
        })?,
    };
    let mut s = session(a, &host)?;
    let c = match action {
        "show" => Call::Show { id },
        "follow" => Call::Follow { id },
        "cancel" => Call::Cancel { id },
        "pause" => Call::Pause { id },
        "resume" => Call::Resume { id },
        _ => Call::Retry { id },
    };
    let mut v = first(call(&mut s, &c)?)?;
    if action == "follow" {
        while !v.state.is_final() {
            if !a.json {
                eprintln!("{}", line(&v));
            }
            v = first(answer(&mut s)?)?;
        }
        let e = ended(&v, false);
        print(a, &v, true);
        return Ok(e.code);
    }
    print(a, &v, action == "show");
    Ok(0)
}

fn session(a: &JobsArgs, host: &str) -> Result<endpoint::JobSession, TransferError> {
    let peer = Peer::parse(host)?;
    let cfg = Reach { peer, ssh: false }.config(&a.conn, secure::Protection::best_encrypting())?;
    Connected::connect(cfg)?.jobs()
}

fn list(a: &JobsArgs, hosts: &[String]) -> Result<i32, TransferError> {
    let mut all: Vec<(String, View)> = Vec::new();
    let mut failed = None;
    for h in hosts {
        match session(a, h).and_then(|mut s| call(&mut s, &Call::List {})) {
            Ok(Answer { jobs, .. }) => all.extend(jobs.into_iter().map(|v| (h.clone(), v))),
            Err(e) => {
                eprintln!("haul: {h}: {}", e.message);
                failed = Some(e);
            }
        }
    }
    if a.json {
        let list: Vec<serde_json::Value> = all
            .iter()
            .map(|(h, v)| {
                let mut j = serde_json::to_value(v).unwrap_or_default();
                j["host"] = h.clone().into();
                j
            })
            .collect();
        println!("{}", serde_json::json!({ "jobs": list }));
    } else if all.is_empty() {
        println!("no jobs");
    } else {
        println!(
            "{:<32}  {:<9}  {:>19}  {:>11}  {:<16}  WHAT",
            "ID", "STATE", "DONE", "RATE", "ON"
        );
        for (h, v) in &all {
            println!(
                "{:<32}  {:<9}  {:>19}  {:>11}  {:<16}  {}",
                v.id,
                v.state.name(),
                format!(
                    "{}/{}",
                    crate::report::bytes(v.bytes_done),
                    crate::report::bytes(v.bytes_total)
                ),
                crate::report::bits_per_sec(v.rate_bps as f64),
                h,
                v.label
            );
        }
    }
    Ok(match failed {
        Some(e) if all.is_empty() => exit::code(e.code),
        _ => 0,
    })
}

fn line(v: &View) -> String {
    format!(
        "job {}: {}, {} of {}, {}, attempt {}{}",
        v.id,
        v.state.name(),
        crate::report::bytes(v.bytes_done),
        crate::report::bytes(v.bytes_total),
        crate::report::bits_per_sec(v.rate_bps as f64),
        v.attempts,
        v.reason
            .as_ref()
            .map_or(String::new(), |r| format!(" ({r})"))
    )
}

fn print(a: &JobsArgs, v: &View, events: bool) {
    if a.json {
        println!("{}", serde_json::to_string(v).unwrap_or_default());
        return;
    }
    println!("{}", line(v));
    println!("  what:    {}", v.label);
    println!("  to:      {}", v.dest);
    println!("  owner:   {}", v.owner);
    if let Some(e) = v.every_secs {
        println!("  every:   {e}s");
    }
    if let Some(p) = v.parent {
        println!("  repeats: {p}");
    }
    if events {
        for e in &v.events {
            println!("  {}", serde_json::to_string(e).unwrap_or_default());
        }
    }
}
