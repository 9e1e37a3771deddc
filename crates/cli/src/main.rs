//! `haul`: a fast, verified, encrypted bulk data mover for long fat networks.
//! This file only dispatches; each subcommand lives in its own module.

mod agent;
mod args;
mod cp;
mod doctor;
mod exit;
mod fairness;
mod files_from;
mod home;
mod known_paths;
mod local;
mod location;
mod logging;
mod managed;
mod manual;
mod out;
mod probe;
mod reach;
mod report;
mod serve;
mod shard;
mod taste;
mod tunnel;
mod units;

use clap::{CommandFactory, FromArgMatches};

fn main() {
    let matches = args::Cli::command().get_matches();
    let cli = args::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let code = match cli.command {
        args::Command::Cp(mut a) => match with_rules(&mut a, &matches) {
            Ok(()) => cp::run(a),
            Err(code) => code,
        },
        args::Command::Sync(mut a) => {
            (a.recursive, a.preserve, a.update) = (true, true, true);
            match with_rules(&mut a, &matches) {
                Ok(()) => cp::run(a),
                Err(code) => code,
            }
        }
        args::Command::Serve(a) => serve::run(a),
        args::Command::Jobs(a) => managed::jobs_command(a),
        args::Command::Agent(a) => agent::run(a),
        args::Command::Keygen(a) => serve::keygen(a),
        args::Command::Doctor(a) => doctor::run(a),
        args::Command::Taste(a) => taste::run(a),
        args::Command::Probe(a) => probe::run(a),
        args::Command::Tunnel(a) => tunnel::run(a),
        args::Command::Completions(a) => manual::completions(a),
        args::Command::Man(a) => manual::man(a),
        args::Command::Plan(mut a) => {
            let raw: Vec<String> = std::env::args()
                .skip_while(|w| w != "plan")
                .skip(1)
                .collect();
            match with_rules(&mut a.cp, &matches) {
                Ok(()) => shard::run_plan(a, &raw),
                Err(code) => code,
            }
        }
    };
    std::process::exit(code);
}

/// The selection rules of `cp` or `sync`, in the order given.
fn with_rules(a: &mut args::CpArgs, m: &clap::ArgMatches) -> Result<(), i32> {
    let Some((_, sub)) = m.subcommand() else {
        return Ok(());
    };
    a.select.rules = args::ordered_rules(sub).map_err(|e| {
        eprintln!("haul: {e}");
        exit::code(wire::ErrorCode::BadRequest)
    })?;
    Ok(())
}
