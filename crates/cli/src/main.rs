//! `haul`: a fast, verified, encrypted bulk data mover for long fat networks.
//! This file only dispatches; each subcommand lives in its own module.

mod args;
mod cp;
mod doctor;
mod exit;
mod files_from;
mod home;
mod known_paths;
mod location;
mod logging;
mod manual;
mod out;
mod probe;
mod reach;
mod report;
mod serve;
mod shard;
mod taste;
mod tunnel;

use clap::Parser;

fn main() {
    let cli = args::Cli::parse();
    let code = match cli.command {
        args::Command::Cp(a) => cp::run(a),
        args::Command::Sync(mut a) => {
            (a.recursive, a.preserve, a.update) = (true, true, true);
            cp::run(a)
        }
        args::Command::Serve(a) => serve::run(a),
        args::Command::Keygen(a) => serve::keygen(a),
        args::Command::Doctor(a) => doctor::run(a),
        args::Command::Taste(a) => taste::run(a),
        args::Command::Probe(a) => probe::run(a),
        args::Command::Tunnel(a) => tunnel::run(a),
        args::Command::Completions(a) => manual::completions(a),
        args::Command::Man(a) => manual::man(a),
        args::Command::Plan(a) => {
            let raw: Vec<String> = std::env::args()
                .skip_while(|w| w != "plan")
                .skip(1)
                .collect();
            shard::run_plan(a, &raw)
        }
    };
    std::process::exit(code);
}
