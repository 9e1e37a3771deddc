//! `haul cp` (and `sync`): parse → resolve → run, then print.
//!
//! - [`plan`]: the locations as a push or a pull, and each end.
//! - [`resolve`]: the options checked, how the peer is reached, the
//!   client's configuration; nothing connected yet.
//! - [`run`](mod@run): the transfer itself, one function per kind of end.
//!
//! All the moving is done by the driver (`endpoint`, `transfer`).

mod plan;
mod resolve;
mod run;

use connect::TransferError;

use crate::args::CpArgs;
use crate::exit;
use crate::report;

pub fn run(a: CpArgs) -> i32 {
    crate::logging::init(a.common.verbose);
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
        Ok((line, text)) => {
            if json {
                println!("{line}");
            } else if let Some(t) = text {
                eprintln!("{t}");
            }
            exit::OK
        }
        Err(e) => {
            let code = exit::code(e.code);
            eprintln!("haul: {}", e.message);
            if json {
                println!("{}", report::json_error(code, &e.message));
            }
            code
        }
    }
}

/// One try of the transfer: what the report says.
fn transfer(a: &CpArgs) -> Result<run::Said, TransferError> {
    let plan = plan::plan(&a.paths)?;
    let resolved = resolve::resolve(a, &plan)?;
    run::run(a, plan, resolved)
}
