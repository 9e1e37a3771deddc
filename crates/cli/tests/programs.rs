//! The tests run only haul and the programs `scripts/test.sh` lists and installs
//! (issue 24): a test source that names another program fails here, on
//! any machine, before a fresh one fails to run it.
//!
//! Tests start programs through `netem::testing::program` (which refuses
//! one not listed when it runs); this reads the sources of the tests and
//! of the test tools for every program they name, and for any process
//! started another way.

use std::fs;
use std::path::{Path, PathBuf};

fn sources() -> Vec<PathBuf> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs: Vec<PathBuf> = fs::read_dir(&crates)
        .unwrap()
        .map(|e| e.unwrap().path().join("tests"))
        .filter(|d| d.is_dir())
        .collect();
    // The test tools: the emulator and the hostile peer.
    dirs.push(crates.join("netem/src"));
    dirs.push(crates.join("hostile/src"));
    let mut out = Vec::new();
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("programs.rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The string literal right after `at` in `text`, if the text there is
/// one (spaces allowed before it).
fn literal_at(text: &str, at: usize) -> Option<&str> {
    let rest = text[at..].trim_start().strip_prefix('"')?;
    Some(&rest[..rest.find('"')?])
}

/// Every program name `text` starts, by the forms the tests use:
/// `program("x")`, `check_program("x")`, `command_a("x")`,
/// `command_b("x")`, and `"exec", NS, "x"` (`ip netns exec`).
fn named(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for call in ["program(", "command_a(", "command_b("] {
        for (at, _) in text.match_indices(call) {
            if let Some(l) = literal_at(text, at + call.len()) {
                out.push(l.to_string());
            }
        }
    }
    for (at, _) in text.match_indices("\"exec\",") {
        let after = &text[at + "\"exec\",".len()..];
        if let Some(comma) = after.find(',') {
            if let Some(l) = literal_at(after, comma + 1) {
                out.push(l.to_string());
            }
        }
    }
    out
}

/// What `Command::new(…)` is given in `text`, where it is not haul.
fn started_directly(text: &str) -> Vec<String> {
    const HAUL: &[&str] = &["HAUL", "env!(\"CARGO_BIN_EXE_haul\")", "haul"];
    text.match_indices("Command::new(")
        .map(|(at, _)| {
            // Up to the parenthesis that closes the call.
            let rest = &text[at + "Command::new(".len()..];
            let mut depth = 0;
            let end = rest
                .find(|c| {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    depth < 0
                })
                .unwrap_or(rest.len());
            rest[..end].trim().to_string()
        })
        .filter(|arg| !HAUL.contains(&arg.as_str()))
        .collect()
}

#[test]
fn every_program_the_tests_name_is_on_the_list_in_ci_run() {
    let files = sources();
    assert!(files.len() > 20, "found the test sources: {files:?}");
    let mut seen = Vec::new();
    let mut bad = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).unwrap();
        for name in named(&text) {
            if !netem::programs::allowed(&name) {
                bad.push(format!("{}: runs `{name}`", f.display()));
            }
            seen.push(name);
        }
        for arg in started_directly(&text) {
            bad.push(format!(
                "{}: starts Command::new({arg}) instead of netem::testing::program",
                f.display()
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "tests may run only haul and the programs listed in scripts/test.sh (PROGRAMS), \
         which scripts/test.sh installs:\n{}",
        bad.join("\n")
    );
    // The scan sees what the suite is known to run.
    for known in ["ip", "sysctl", "ssh-keygen", "runuser", "mount"] {
        assert!(
            seen.iter().any(|s| s == known),
            "{known} not found: {seen:?}"
        );
    }
}

#[test]
fn the_scan_catches_a_program_off_the_list() {
    let text = r#"
        let mut c = program("nc");
        emu.command_b("socat");
        Command::new( "python3" ).arg("x");
        ip(&["netns", "exec", name, "tcpdump"]);
        Command::new(HAUL);
    "#;
    assert_eq!(named(text), ["nc", "socat", "tcpdump"]);
    assert_eq!(started_directly(text), ["\"python3\""]);
    assert!(named(text).iter().all(|n| !netem::programs::allowed(n)));
}
