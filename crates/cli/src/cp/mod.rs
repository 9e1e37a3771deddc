//! `haul cp` (and `sync`): parse → resolve → run, then print.
//!
//! - [`plan`]: the locations as a push or a pull, and each end.
//! - [`resolve`]: the options checked, how the peer is reached, the
//!   client's configuration; nothing connected yet.
//! - [`run`](mod@run): the transfer itself, one function per kind of end.
//! - [`inside`]: a copy within one object store, left to the store.
//! - [`said`]: what a run says at its end.
//!
//! All the moving is done by the driver (`endpoint`, `transfer`).

mod inside;
mod plan;
mod resolve;
mod run;
mod said;

use connect::TransferError;

use crate::args::CpArgs;
use crate::exit;
use crate::report;

pub fn run(a: CpArgs) -> i32 {
    crate::logging::init(a.common.verbose);
    endpoint::map_large_buffers();
    let json = a.json;
    // A source that changed while it was read fails the transfer before
    // any of its mixed bytes are placed; once more resumes from what
    // arrived and sends what changed. A second change is an error.
    let mut result = transfer(&a);
    if let Err(e) = &result {
        if e.message.contains(store::source::CHANGED) {
            eprintln!("haul: {}; sending it once more", e.message);
            result = transfer(&a);
        }
    }
    match result {
        Ok(said) => {
            let code = match &said.partial {
                Some(_) => exit::code(wire::ErrorCode::Partial),
                None => exit::OK,
            };
            if json {
                match &said.partial {
                    Some(why) => println!("{}", with_partial(&said.json, code, why)),
                    None => println!("{}", said.json),
                }
            } else {
                for l in &said.items {
                    println!("{l}");
                }
                if let Some(t) = &said.text {
                    eprintln!("{t}");
                }
            }
            if let Some(why) = &said.partial {
                eprintln!("haul: partial transfer: {why}");
            }
            code
        }
        Err(e) => report::failed(&e, json),
    }
}

/// One try of the transfer: what the report says.
fn transfer(a: &CpArgs) -> Result<said::Said, TransferError> {
    let plan = plan::plan(&a.paths)?;
    if let plan::Plan::Between {
        sources,
        from,
        to,
        dest,
    } = plan
    {
        let kind = match a.update && a.preserve && a.recursive {
            true => jobs::spec::Kind::Sync,
            false => jobs::spec::Kind::Cp,
        };
        let e = crate::managed::third_party(a, kind, (from, sources), (to, dest))?;
        return Ok(said::Said::new(e.json, e.text));
    }
    if a.managed.detach {
        return Err(crate::reach::usage(
            "--detach hands a transfer between two remote hosts to the source's daemon or agent (haul cp --detach HOST:SRC HOST2:DST); a transfer from or to this host needs this host to stay up",
        ));
    }
    // Two locations of one object store: the store copies, where it can.
    if let plan::Plan::Push {
        sources: plan::PushFrom::Bucket(url),
        peer: None,
        dest,
    } = &plan
    {
        if inside::may(a, url, dest) {
            if let Some(said) = inside::copy(a, url, dest)? {
                return Ok(said);
            }
        }
    }
    let resolved = resolve::resolve(a, &plan)?;
    run::run(a, plan, resolved)
}

/// A report's JSON line for a partial transfer: its figures, `ok` false,
/// the exit code and why.
fn with_partial(json: &str, code: i32, why: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    v["ok"] = false.into();
    v["exit_code"] = code.into();
    v["error"] = format!("partial transfer: {why}").into();
    v.to_string()
}
