//! Fault rounds on loopback: each round pushes or pulls a file, kills the
//! client, the server or both with SIGKILL at a seeded random moment, then
//! runs the same command again, at once or once the receiver has let go of
//! its partial (against a restarted server if it was killed). Every round
//! must end byte-exact, with nothing left but the final file, having
//! re-sent little of what the first run delivered.
//!
//! `HAUL_FAULT_ROUNDS` sets the number of rounds (4 by default, as in CI;
//! `scripts/soak.sh` runs many more) and `HAUL_FAULT_SEED` the first seed.
//!
//! The same rounds run across the emulator (root only), on a link that
//! corrupts, reorders, duplicates and drops packets, and in a third of
//! them the kill lands in an outage of the link: `HAUL_WAN_FAULT_ROUNDS`
//! (2 by default) from `HAUL_WAN_FAULT_SEED`.

mod common;

use std::fs;
use std::process::Command;
use std::time::Duration;

use common::emu::{cp_cmd_in_a, serve_in_b, Remote};
use common::*;
use netem::testing::{require_emulator, unique_name};
use netem::{Emulator, EmulatorConfig, ADDR_B};
use netsim::LinkConfig;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    Client,
    Server,
    /// Both, one right after the other, in an order the seed picks.
    Both,
}

/// What a round does, drawn from its seed.
#[derive(Debug)]
struct Plan {
    push: bool,
    victim: Victim,
    server_first: bool,
    transport: &'static str,
    kill_after: Duration,
    /// Across the emulator: the link is cut this long before the kill and
    /// comes back this long after it.
    outage: Option<(Duration, Duration)>,
    /// The same command again at once, without waiting for the receiver
    /// to notice and let go of its partial (P-41). Always so after an
    /// outage: a server whose client was killed while the link was down
    /// hears nothing until it is poked.
    at_once: bool,
}

impl Plan {
    fn draw(seed: u64, load: &Load, emulated: bool) -> Plan {
        // Deterministic, so a failing round replays from its seed.
        let mut rng = netsim::Rng::new(seed);
        let push = rng.below(2) == 0;
        let victim = match rng.below(5) {
            0 | 1 => Victim::Client,
            2 | 3 => Victim::Server,
            _ => Victim::Both,
        };
        let transport = ["tcp", "udp"][rng.below(2) as usize];
        let kill_after = Duration::from_millis(200 + rng.below(load.kill_within));
        let server_first = rng.below(2) == 0;
        let at_once = rng.below(2) == 0;
        let outage = (emulated && rng.below(3) == 0).then(|| {
            let before = Duration::from_millis(100 + rng.below(500));
            let after = Duration::from_millis(200 + rng.below(1300));
            (before.min(kill_after), after)
        });
        Plan {
            push,
            victim,
            server_first,
            transport,
            kill_after,
            at_once: at_once || outage.is_some(),
            outage,
        }
    }

    fn describe(&self, seed: u64) -> String {
        let victim = match (self.victim, self.server_first) {
            (Victim::Both, true) => "server then client".to_string(),
            (Victim::Both, false) => "client then server".to_string(),
            (v, _) => format!("{v:?}"),
        };
        let outage = match self.outage {
            Some((b, a)) => format!(", in an outage from {b:?} before to {a:?} after"),
            None => String::new(),
        };
        format!(
            "seed {seed}: {} over {}, {victim} killed after {:?}{outage}, re-run {}",
            if self.push { "push" } else { "pull" },
            self.transport,
            self.kill_after,
            if self.at_once {
                "at once"
            } else {
                "once released"
            }
        )
    }
}

/// Where a round runs: on loopback, or across the emulator (server in
/// namespace b, client in a).
enum Place {
    Loopback,
    Emulated(Box<Emulator>),
}

enum Serving {
    Local(Server),
    Remote(Remote),
}

impl Serving {
    fn kill(&mut self) {
        match self {
            Serving::Local(s) => s.kill(),
            Serving::Remote(r) => r.kill(),
        }
    }
}

impl Place {
    fn serve(&self, env: &Env) -> Serving {
        match self {
            Place::Loopback => Serving::Local(env.serve()),
            Place::Emulated(emu) => Serving::Remote(serve_in_b(emu, env)),
        }
    }

    fn remote(&self, env: &Env, server: &Serving, path: &str) -> String {
        match server {
            Serving::Local(s) => env.remote(s, path),
            Serving::Remote(_) => format!("{ADDR_B}:7050:{path}"),
        }
    }

    fn cp_cmd(&self, env: &Env, args: &[&str]) -> Command {
        match self {
            Place::Loopback => env.cp_cmd(args),
            Place::Emulated(emu) => cp_cmd_in_a(emu, env, args),
        }
    }
}

/// What a round moves: `size` bytes capped at `rate`, killed within
/// `kill_within` of the start.
struct Load {
    size: usize,
    rate: &'static str,
    kill_within: u64,
}

/// 24 MiB at 60 Mbit/s: about 3.4 s; the kill lands in its first 2.5 s.
const LOOPBACK: Load = Load {
    size: 24 << 20,
    rate: "60M",
    kill_within: 2300,
};

fn round(seed: u64) {
    round_at(&Place::Loopback, &LOOPBACK, seed);
}

fn round_at(place: &Place, load: &Load, seed: u64) {
    let emulated = matches!(place, Place::Emulated(_));
    let plan = Plan::draw(seed, load, emulated);
    let what = plan.describe(seed);
    let (push, transport) = (plan.push, plan.transport);
    let env = Env::new();
    let mut server = place.serve(&env);
    let data = random_bytes(load.size, seed);
    let (src, dst, partial) = if push {
        let src = env.local.join("f");
        write_file(&src, &data);
        (
            src.to_string_lossy().into_owned(),
            place.remote(&env, &server, "f"),
            env.root.join(".f.haul.part"),
        )
    } else {
        write_file(&env.root.join("f"), &data);
        let dst = env.local.join("f");
        (
            place.remote(&env, &server, "f"),
            dst.to_string_lossy().into_owned(),
            env.local.join(".f.haul.part"),
        )
    };
    let final_path = if push {
        env.root.join("f")
    } else {
        env.local.join("f")
    };
    // Both runs: the same block size, so the journal applies (P-35).
    let same = ["--block-size", "256K", "--transport", transport];
    let mut child = place
        .cp_cmd(
            &env,
            &[&["--rate", load.rate][..], &same, &[&src, &dst]].concat(),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let cut = |down: bool| {
        if let Place::Emulated(emu) = place {
            emu.cut(down);
        }
    };
    match plan.outage {
        Some((before, _)) => {
            std::thread::sleep(plan.kill_after - before);
            cut(true);
            std::thread::sleep(before);
        }
        None => std::thread::sleep(plan.kill_after),
    }
    let finished_first = child.try_wait().unwrap().is_some();
    let kill_client = |child: &mut std::process::Child| {
        let _ = child.kill();
    };
    match (plan.victim, plan.server_first) {
        (Victim::Client, _) => kill_client(&mut child),
        (Victim::Server, _) => server.kill(),
        (Victim::Both, true) => {
            server.kill();
            kill_client(&mut child);
        }
        (Victim::Both, false) => {
            kill_client(&mut child);
            server.kill();
        }
    }
    if let Some((_, after)) = plan.outage {
        std::thread::sleep(after);
        cut(false);
    }
    // A client whose server was killed notices by itself, bounded.
    assert!(
        wait_until(Duration::from_secs(90), || child
            .try_wait()
            .unwrap()
            .is_some()),
        "{what}: the client did not notice that its server was gone"
    );
    if plan.victim != Victim::Client {
        server = place.serve(&env);
    }
    if !plan.at_once {
        // Whoever received lets go of its partial once it notices.
        assert!(
            wait_until(Duration::from_secs(20), || !store::partial::in_use(
                &partial
            )),
            "{what}: the partial stays locked"
        );
    }
    assert!(
        finished_first || !final_path.exists() || fs::read(&final_path).unwrap() == data,
        "{what}: a wrong file sits under the final name"
    );
    let had = if partial.exists() {
        delivered(&partial, &data)
    } else {
        0
    };
    let dst = if push {
        place.remote(&env, &server, "f")
    } else {
        dst
    };
    let src = if push {
        src
    } else {
        place.remote(&env, &server, "f")
    };
    // The same command, without the cap.
    let args = [&["--json"][..], &same, &[&src, &dst]].concat();
    let out = output_within(place.cp_cmd(&env, &args), CP_LIMIT);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{what}: the re-run failed: {said}");
    assert!(
        fs::read(&final_path).unwrap() == data,
        "{what}: the resumed copy differs"
    );
    let left: Vec<_> = temporaries(env.dir.path());
    assert!(left.is_empty(), "{what}: left {left:?}");
    // The UDP channel's framing and start-up retransmissions make its
    // wire bytes a poor measure; what it reused is the same measure.
    if had > 0 && transport == "tcp" {
        assert_resumed(&out, data.len() as u64, had);
    } else if had > 0 {
        assert_reused(&out, had);
    }
    eprintln!("{what}: ok ({had} bytes were there)");
}

/// Runs `round` for each seed, going on past a failing one, then fails
/// naming every failing seed: a soak reports all it found.
fn every_round(rounds: u64, first: u64, round: impl Fn(u64)) {
    let mut failed = Vec::new();
    for seed in first..first + rounds {
        if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| round(seed))) {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            eprintln!("seed {seed}: FAILED: {why}");
            failed.push(seed);
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {rounds} rounds failed, seeds {failed:?}",
        failed.len()
    );
}

#[test]
fn killed_at_random_moments_every_round_ends_byte_exact() {
    let rounds = env_u64("HAUL_FAULT_ROUNDS", 4);
    let first = env_u64("HAUL_FAULT_SEED", 1);
    every_round(rounds, first, round);
}

/// 30 ms of round trip at 100 Mbit/s, and both ways: 0.2% loss, 0.2% of
/// packets corrupted, 0.5% reordered (by up to the jitter), 0.1%
/// duplicated.
fn damaging_link(seed: u64) -> Emulator {
    let link = LinkConfig {
        delay: Duration::from_millis(15),
        jitter: Duration::from_millis(2),
        rate_bps: Some(100_000_000),
        loss: 0.002,
        corrupt: 0.002,
        reorder: 0.005,
        duplicate: 0.001,
        ..Default::default()
    };
    Emulator::start(EmulatorConfig {
        name: unique_name("fault"),
        a2b: link.clone(),
        b2a: link,
        mtu: 1500,
        seed,
        block_udp: false,
        only_tcp_ports: vec![],
        path_mtu: None,
    })
    .expect("emulator starts")
}

#[test]
fn killed_across_a_damaging_link_every_round_ends_byte_exact() {
    if !require_emulator("the fault rounds across the emulator") {
        return;
    }
    // 8 MiB at 30 Mbit/s: about 2.2 s; the kill lands in its first 1.7 s.
    let load = Load {
        size: 8 << 20,
        rate: "30M",
        kill_within: 1500,
    };
    let rounds = env_u64("HAUL_WAN_FAULT_ROUNDS", 2);
    let first = env_u64("HAUL_WAN_FAULT_SEED", 1);
    every_round(rounds, first, |seed| {
        let place = Place::Emulated(Box::new(damaging_link(seed)));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            round_at(&place, &load, seed)
        }));
        if let Place::Emulated(mut emu) = place {
            let report = emu.stop();
            eprintln!("seed {seed}: link {report:?}");
        }
        if let Err(e) = r {
            std::panic::resume_unwind(e);
        }
    });
}
