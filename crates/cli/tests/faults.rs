//! Fault rounds on loopback: each round pushes or pulls a file, kills the
//! client or the server with SIGKILL at a seeded random moment, then runs
//! the same command again (against a restarted server if it was the one
//! killed). Every round must end byte-exact, with nothing left but the
//! final file, having re-sent little of what the first run delivered.
//!
//! `HAUL_FAULT_ROUNDS` sets the number of rounds (4 by default, as in CI;
//! `scripts/soak.sh` runs many more) and `HAUL_FAULT_SEED` the first seed.

mod common;

use std::fs;
use std::time::Duration;

use common::*;

/// A small deterministic generator (SplitMix64), so a failing round can be
/// replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Debug, Clone, Copy)]
enum Victim {
    Client,
    Server,
}

fn round(seed: u64) {
    let mut rng = Rng(seed);
    let push = rng.below(2) == 0;
    let victim = if rng.below(2) == 0 {
        Victim::Client
    } else {
        Victim::Server
    };
    let transport = ["tcp", "udp"][rng.below(2) as usize];
    // 24 MiB at 60 Mbit/s: about 3.4 s; the kill lands in its first 2.5 s.
    let kill_after = Duration::from_millis(200 + rng.below(2300));
    let what = format!(
        "seed {seed}: {} over {transport}, {victim:?} killed after {kill_after:?}",
        if push { "push" } else { "pull" }
    );
    let env = Env::new();
    let mut server = env.serve();
    let data = random_bytes(24 << 20, seed);
    let (src, dst, partial) = if push {
        let src = env.local.join("f");
        write_file(&src, &data);
        (
            src.to_string_lossy().into_owned(),
            env.remote(&server, "f"),
            env.root.join(".f.haul.part"),
        )
    } else {
        write_file(&env.root.join("f"), &data);
        let dst = env.local.join("f");
        (
            env.remote(&server, "f"),
            dst.to_string_lossy().into_owned(),
            env.local.join(".f.haul.part"),
        )
    };
    let final_path = if push {
        env.root.join("f")
    } else {
        env.local.join("f")
    };
    let mut child = env
        .cp_cmd(&[
            "--rate",
            "60M",
            "--block-size",
            "256K",
            "--transport",
            transport,
            &src,
            &dst,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(kill_after);
    let finished_first = child.try_wait().unwrap().is_some();
    match victim {
        Victim::Client => {
            let _ = child.kill();
            let _ = child.wait();
        }
        Victim::Server => {
            server.kill();
            let _ = child.wait();
            server = env.serve();
        }
    }
    // Whoever received lets go of its partial once it notices.
    assert!(
        wait_until(Duration::from_secs(20), || !store::partial::in_use(
            &partial
        )),
        "{what}: the partial stays locked"
    );
    assert!(
        finished_first || !final_path.exists() || fs::read(&final_path).unwrap() == data,
        "{what}: a wrong file sits under the final name"
    );
    let had = if partial.exists() {
        delivered(&partial, &data)
    } else {
        0
    };
    let dst = if push { env.remote(&server, "f") } else { dst };
    let src = if push { src } else { env.remote(&server, "f") };
    // The same command, without the cap (the block size stays, so the
    // journal applies, P-35).
    let out = env.cp(&[
        "--json",
        "--block-size",
        "256K",
        "--transport",
        transport,
        &src,
        &dst,
    ]);
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

#[test]
fn killed_at_random_moments_every_round_ends_byte_exact() {
    let rounds = env_u64("HAUL_FAULT_ROUNDS", 4);
    let first = env_u64("HAUL_FAULT_SEED", 1);
    for seed in first..first + rounds {
        round(seed);
    }
}
