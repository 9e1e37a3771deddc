//! Replays every input kept under `fuzz/regressions/TARGET/` (crashes the
//! fuzzer once found, and seeds that reach deep) through its target, and
//! a few thousand seeded random and mutated inputs through every target,
//! on the stable toolchain. `scripts/fuzz.sh` runs the real fuzzer.

use std::fs;
use std::path::PathBuf;

fn regressions() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions")
}

#[test]
fn every_kept_input_decodes_or_is_refused_without_a_panic() {
    let root = regressions();
    let mut replayed = 0;
    for (name, target) in fuzzing::TARGETS {
        let dir = root.join(name);
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let input = fs::read(e.path()).unwrap();
            eprintln!("{name}: {}", e.path().display());
            target(&input);
            replayed += 1;
        }
    }
    // Every folder names a target: a typo would silently replay nothing.
    for e in fs::read_dir(&root).unwrap().flatten() {
        let n = e.file_name().into_string().unwrap();
        assert!(
            fuzzing::TARGETS.iter().any(|(t, _)| *t == n),
            "fuzz/regressions/{n} is not a fuzz target"
        );
    }
    assert!(
        replayed > 0,
        "no regression inputs under {}",
        root.display()
    );
}

#[test]
fn seeded_random_and_mutated_inputs_never_panic() {
    // Seeded: the inputs are the same every run.
    let mut rng = netsim::Rng::new(0x9E37_79B9_7F4A_7C15);
    // Sorted by path: directory order differs between file systems.
    let mut paths: Vec<PathBuf> = fs::read_dir(regressions())
        .unwrap()
        .flatten()
        .flat_map(|d| fs::read_dir(d.path()).unwrap().flatten())
        .map(|e| e.path())
        .collect();
    paths.sort();
    let seeds: Vec<Vec<u8>> = paths.iter().map(|p| fs::read(p).unwrap()).collect();
    for (name, target) in fuzzing::TARGETS {
        for round in 0..2000 {
            let mut input = if round % 2 == 0 || seeds.is_empty() {
                let len = (rng.next_u64() % 200) as usize;
                (0..len).map(|_| rng.next_u64() as u8).collect::<Vec<u8>>()
            } else {
                seeds[(rng.next_u64() % seeds.len() as u64) as usize].clone()
            };
            // Flip a few bytes, and sometimes cut the end.
            for _ in 0..(rng.next_u64() % 4) {
                if !input.is_empty() {
                    let i = (rng.next_u64() % input.len() as u64) as usize;
                    input[i] = rng.next_u64() as u8;
                }
            }
            if rng.next_u64().is_multiple_of(4) {
                let keep = (rng.next_u64() % (input.len() as u64 + 1)) as usize;
                input.truncate(keep);
            }
            let _ = name;
            target(&input);
        }
    }
}
