//! `--files-from`: a push moves exactly the listed paths (and the
//! directories they lie in), read from a file or standard input, lines or
//! NUL-separated.

mod common;

use std::fs;
use std::io::Write;
use std::process::Stdio;

use common::*;

fn tree(env: &Env) -> std::path::PathBuf {
    let src = env.local.join("data");
    for rel in [
        "keep/a.bin",
        "keep/deep/b.bin",
        "skip/c.bin",
        "top.txt",
        "other.txt",
        "dir/x",
        "dir/y",
    ] {
        let p = src.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        write_file(&p, &random_bytes(2000 + rel.len() * 100, rel.len() as u64));
    }
    src
}

fn listed_under(root: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(root).unwrap().display().to_string());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_list_of_files_moves_exactly_those() {
    let env = Env::new();
    let server = env.serve();
    let src = tree(&env);
    let list = env.local.join("list.txt");
    fs::write(
        &list,
        "keep/deep/b.bin\n# a comment\ntop.txt\n./keep/a.bin\ndir\n",
    )
    .unwrap();
    ok(&env.cp(&[
        "-r",
        "--files-from",
        list.to_str().unwrap(),
        src.to_str().unwrap(),
        &env.remote(&server, "out/"),
    ]));
    let out = env.root.join("out");
    assert_eq!(
        listed_under(&out),
        [
            "dir",
            "dir/x",
            "dir/y",
            "keep",
            "keep/a.bin",
            "keep/deep",
            "keep/deep/b.bin",
            "top.txt"
        ]
    );
    for rel in ["keep/a.bin", "keep/deep/b.bin", "top.txt", "dir/x"] {
        assert_eq!(
            fs::read(out.join(rel)).unwrap(),
            fs::read(src.join(rel)).unwrap(),
            "{rel}"
        );
    }
}

#[test]
fn a_nul_separated_list_on_standard_input() {
    let env = Env::new();
    let server = env.serve();
    let src = tree(&env);
    let mut c = env.cp_cmd(&[
        "--files-from",
        "-",
        "--from0",
        src.to_str().unwrap(),
        &env.remote(&server, "out/"),
    ]);
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"other.txt\0skip/c.bin\0")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    ok(&out);
    assert_eq!(
        listed_under(&env.root.join("out")),
        ["other.txt", "skip", "skip/c.bin"]
    );
}

#[test]
fn a_list_that_leaves_its_directory_is_refused() {
    let env = Env::new();
    let server = env.serve();
    let src = tree(&env);
    let list = env.local.join("list.txt");
    fs::write(&list, "keep/../../etc/passwd\n").unwrap();
    let d = env.remote(&server, "out/");
    let t = fails(
        &env.cp(&[
            "--files-from",
            list.to_str().unwrap(),
            src.to_str().unwrap(),
            &d,
        ]),
        2,
    );
    assert!(t.contains("leaves the source directory"), "{t}");
    let t = fails(
        &env.cp(&[
            "--files-from",
            list.to_str().unwrap(),
            src.to_str().unwrap(),
            src.to_str().unwrap(),
            &d,
        ]),
        2,
    );
    assert!(t.contains("exactly one"), "{t}");
}
