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
    // A folder that is not there yet is made (issue 41).
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("share/man/man1");
    haul(&["man", "--out", dir.to_str().unwrap()]);
    for page in ["haul.1", "haul-cp.1", "haul-serve.1", "haul-plan.1"] {
        assert!(dir.join(page).is_file(), "{page}");
    }
    let cp = std::fs::read_to_string(dir.join("haul-cp.1")).unwrap();
    assert!(
        cp.contains(".TH haul-cp 1") && cp.contains("files\\-from"),
        "{cp}"
    );
    // Its NAME is the page's: haul-cp, not cp.
    let name = cp.split(".SH NAME").nth(1).unwrap_or("");
    assert!(name.trim_start().starts_with("haul\\-cp "), "{name}");
}

/// A reader that stops early (`haul completions zsh | head`) ends the
/// command quietly, never with a panic (issue 41).
#[test]
fn output_into_a_closed_pipe_is_not_a_panic() {
    for args in [
        &["completions", "zsh"][..],
        &["completions", "bash"],
        &["man"],
    ] {
        let mut child = Command::new(HAUL)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Closed before the command writes a byte.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.status.success(), "{args:?}: {err}");
    }
}

#[test]
fn the_package_is_named_as_people_type_it() {
    assert_eq!(env!("CARGO_PKG_NAME"), "haul");
}
