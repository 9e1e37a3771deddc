//! The programs tests may run besides haul (issue 24).
//!
//! One list, in `scripts/test.sh`, names each program and the Debian package
//! that has it; `scripts/test.sh` installs the packages of those missing, so a
//! fresh machine runs the whole suite. Tests start external programs only
//! through [`program`] (or check a name with [`check_program`] before
//! handing it to a launcher such as `ip netns exec`), which refuses any
//! program not on the list; `crates/cli/tests/programs.rs` reads the
//! tests' sources for the names they start and fails on one not listed.

use std::path::Path;
use std::process::Command;

/// `scripts/test.sh`, whose `PROGRAMS` block is the list.
const LIST: &str = include_str!("../../../scripts/test.sh");

/// One line of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub program: String,
    /// The Debian package that has it.
    pub package: String,
    /// Where it lives when not on the `PATH` (a glob, as `scripts/test.sh` reads
    /// it), or `None`.
    pub place: Option<String>,
}

/// The list in `scripts/test.sh`: the lines between `PROGRAMS='` and the closing
/// `'`, each `program package [place]`; `#` starts a comment.
pub fn listed() -> Vec<Listed> {
    parse(LIST)
}

fn parse(text: &str) -> Vec<Listed> {
    let Some(start) = text.find("PROGRAMS='") else {
        return Vec::new();
    };
    let body = &text[start + "PROGRAMS='".len()..];
    let body = &body[..body.find('\'').unwrap_or(body.len())];
    body.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some(Listed {
                program: w.next()?.to_string(),
                package: w.next()?.to_string(),
                place: w.next().map(String::from),
            })
        })
        .collect()
}

/// Whether a test may run `name` (a bare name, or a path whose file name
/// is checked): haul itself, or a program on the list.
pub fn allowed(name: &str) -> bool {
    let base = Path::new(name)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(name);
    base == "haul" || base == "haul-netem" || listed().iter().any(|l| l.program == base)
}

/// Panics, naming the list, unless a test may run `name`.
pub fn check_program(name: &str) {
    assert!(
        allowed(name),
        "tests may run only haul and the programs listed in scripts/test.sh (PROGRAMS), which it installs; \
         `{name}` is not there: add it with the Debian package that has it, or do the work in Rust"
    );
}

/// `Command::new(name)`, for a program on the list (see [`check_program`]).
pub fn program(name: &str) -> Command {
    check_program(name);
    Command::new(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_in_ci_run_parses_and_names_a_package_for_each_program() {
        let l = listed();
        assert!(l
            .iter()
            .any(|p| p.program == "ip" && p.package == "iproute2"));
        assert!(l
            .iter()
            .any(|p| p.program == "initdb" && p.place.as_deref().is_some()));
        assert!(allowed("/usr/sbin/sshd") && allowed("ip") && allowed("/x/target/debug/haul"));
        assert!(!allowed("nc") && !allowed("/usr/bin/python3"));
        let text =
            "x\nPROGRAMS='\n# comment\nfoo  pkg-foo   # trailing\nbar pkg /opt/*/bin\n'\nrest";
        assert_eq!(
            parse(text),
            vec![
                Listed {
                    program: "foo".into(),
                    package: "pkg-foo".into(),
                    place: None
                },
                Listed {
                    program: "bar".into(),
                    package: "pkg".into(),
                    place: Some("/opt/*/bin".into())
                },
            ]
        );
    }

    #[test]
    #[should_panic(expected = "`nc` is not there")]
    fn a_program_not_on_the_list_is_refused() {
        let _ = program("nc");
    }
}
