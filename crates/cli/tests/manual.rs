//! What a packager ships beside the binary: shell completions and manual
//! pages, made from the same flags the commands parse; and the package is
//! named as people type it (`cargo install haul`).

mod common;

use std::process::Command;

use common::*;

fn haul(args: &[&str]) -> String {
    let out = Command::new(HAUL).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn completions_know_every_command_and_their_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let c = haul(&["completions", shell]);
        for word in [
            "cp",
            "sync",
            "serve",
            "plan",
            "files-from",
            "shard",
            "log-format",
        ] {
            assert!(c.contains(word), "{shell} completions lack {word}");
        }
    }
}

#[test]
fn manual_pages_for_haul_and_each_command() {
    let top = haul(&["man"]);
    assert!(top.contains(".TH haul 1"), "{}", &top[..200.min(top.len())]);
    let dir = tempfile::tempdir().unwrap();
    haul(&["man", "--out", dir.path().to_str().unwrap()]);
    for page in ["haul.1", "haul-cp.1", "haul-serve.1", "haul-plan.1"] {
        assert!(dir.path().join(page).is_file(), "{page}");
    }
    let cp = std::fs::read_to_string(dir.path().join("haul-cp.1")).unwrap();
    assert!(
        cp.contains(".TH haul-cp 1") && cp.contains("files\\-from"),
        "{cp}"
    );
}

#[test]
fn the_package_is_named_as_people_type_it() {
    assert_eq!(env!("CARGO_PKG_NAME"), "haul");
}
