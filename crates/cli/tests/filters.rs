//! Selection as rsync does it (issue 41, P-44), checked against rsync
//! itself on the same trees: filter rules (`--exclude`, `--include`,
//! `--filter`, `--exclude-from`, `--include-from`), `--max-size` and
//! `--min-size`, `--ignore-existing`, `--delete` leaving excluded files
//! alone, `--itemize-changes` in rsync's letters, and `--files-from` going
//! on past missing files with exit 23.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime};

use common::*;

fn rsync_available() -> bool {
    if Path::new("/usr/bin/rsync").exists() {
        return true;
    }
    let why =
        "the filter tests compare with rsync: run scripts/test.sh once, or apt-get install rsync";
    assert!(
        !std::env::var("CI").is_ok_and(|v| v == "true"),
        "{why}, and CI must install it"
    );
    println!("SKIPPED: {why}");
    false
}

fn rsync(args: &[&str]) -> Output {
    let out = netem::testing::program("rsync")
        .args(args)
        .output()
        .unwrap();
    out
}

/// Every path under `dir`, relative, directories with a trailing '/'.
fn paths(dir: &Path) -> BTreeSet<String> {
    fn walk(top: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let rel = e
                .path()
                .strip_prefix(top)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if e.file_type().unwrap().is_dir() {
                out.insert(format!("{rel}/"));
                walk(top, &e.path(), out);
            } else {
                out.insert(rel);
            }
        }
    }
    let mut out = BTreeSet::new();
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    out
}

/// `data` at `path`, its directories made.
fn put(path: &Path, data: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    write_file(path, data);
}

fn tree(root: &Path) -> PathBuf {
    let src = root.join("src");
    for (p, len) in [
        ("top.txt", 10),
        ("a.o", 10),
        ("big.bin", 5000),
        ("keep.log", 3),
        ("x.log", 3),
        ("sub/top.txt", 10),
        ("sub/b.o", 2000),
        ("sub/c.txt", 700),
        ("sub/deep/d.txt", 1),
        ("sub/deep/e.log", 2),
        (".git/config", 20),
        ("cache/one", 3000),
        ("cache/two/three", 4),
        ("build/out.bin", 1500),
    ] {
        put(&src.join(p), &random_bytes(len, len as u64));
    }
    src
}

#[test]
fn filter_rules_pick_what_rsync_picks() {
    if !rsync_available() {
        return;
    }
    let env = Env::new();
    let root = env.dir.path();
    let src = tree(root);
    let rules_file = root.join("rules");
    fs::write(
        &rules_file,
        "# build outputs\n*.o\n\n; and caches\ncache/\n+ keep.log\n*.log\n",
    )
    .unwrap();
    let rules = rules_file.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["--exclude", "*.o"],
        vec!["--exclude", ".git/", "--exclude", "/top.txt"],
        vec!["--include", "*/", "--include", "*.txt", "--exclude", "*"],
        vec![
            "--filter",
            "+ keep.log",
            "--filter",
            "- *.log",
            "--filter",
            "- sub/*.o",
        ],
        vec!["--exclude", "cache/***", "--exclude", "build/"],
        vec!["--exclude", "sub/**/*.log", "--exclude", "b*"],
        vec!["--exclude-from", rules],
        vec!["--include-from", rules, "--exclude", "*"],
        vec!["--max-size", "1000"],
        vec!["--min-size", "1000"],
    ];
    for (i, rules) in cases.iter().enumerate() {
        for slash in ["/", ""] {
            let from = format!("{}{slash}", src.display());
            let (theirs, ours) = (
                root.join(format!("r{i}{slash}")),
                root.join(format!("h{i}{slash}")),
            );
            let mut args = vec!["-r"];
            args.extend(rules.iter().copied());
            let (t, o) = (theirs.to_str().unwrap(), ours.to_str().unwrap());
            let r = rsync(&[&args[..], &[&from, t]].concat());
            assert!(
                r.status.success(),
                "rsync {args:?}: {}",
                String::from_utf8_lossy(&r.stderr)
            );
            ok(&env.cp(&[&args[..], &[&from, o]].concat()));
            assert_eq!(paths(&ours), paths(&theirs), "{args:?} from {from}");
        }
    }
    // A rule haul does not take is refused with a message, not ignored.
    let out = env.cp(&[
        "-r",
        "--filter",
        ": .rsync-filter",
        src.to_str().unwrap(),
        "/tmp/x",
    ]);
    let err = fails(&out, 2);
    assert!(err.contains("- PATTERN"), "{err}");
}

/// rsync's `-i` lines for files and deletions, sorted.
fn itemized(stdout: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| l.starts_with(">f") || (l.starts_with("*deleting") && !l.ends_with('/')))
        .map(String::from)
        .collect();
    v.sort();
    v
}

#[test]
fn itemized_changes_ignore_existing_and_delete_as_rsync() {
    if !rsync_available() {
        return;
    }
    let env = Env::new();
    let root = env.dir.path();
    let src = tree(root);
    let from = format!("{}/", src.display());
    let (theirs, ours) = (root.join("r"), root.join("h"));
    let sync = |extra: &[&str]| {
        let mut r_args = vec!["-rt", "-i", "--exclude", ".git/"];
        r_args.extend_from_slice(extra);
        let r = rsync(&[&r_args[..], &[&from, theirs.to_str().unwrap()]].concat());
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let mut c = env.cp_cmd(&[]);
        c.env_remove("HAUL_LOG");
        let mut h_args = vec![
            "-r",
            "-p",
            "--update",
            "--itemize-changes",
            "--exclude",
            ".git/",
        ];
        h_args.extend_from_slice(extra);
        let h = env.cp(&[&h_args[..], &[&from, ours.to_str().unwrap()]].concat());
        ok(&h);
        assert_eq!(itemized(&h.stdout), itemized(&r.stdout), "{extra:?}");
        assert_eq!(paths(&ours), paths(&theirs), "{extra:?}");
    };
    // Everything new, then nothing to do.
    sync(&[]);
    sync(&[]);
    // Changes on the source side, and on each destination alike.
    put(
        &src.join("sub/c.txt"),
        b"longer than it was before, by a lot",
    );
    let old = SystemTime::now() - Duration::from_secs(86400);
    fs::File::options()
        .write(true)
        .open(src.join("top.txt"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    put(&src.join("new.txt"), b"new");
    for d in [&theirs, &ours] {
        put(&d.join("extra.txt"), b"not in the source");
        put(&d.join("kept.tmp"), b"excluded, so kept");
        put(&d.join("big.bin"), b"replaced by hand");
    }
    sync(&["--ignore-existing", "--delete", "--exclude", "*.tmp"]);
    assert_eq!(fs::read(ours.join("big.bin")).unwrap(), b"replaced by hand");
    assert!(ours.join("kept.tmp").exists() && !ours.join("extra.txt").exists());
    sync(&["--delete", "--exclude", "*.tmp"]);
}

#[test]
fn files_from_goes_on_past_missing_files_as_rsync() {
    if !rsync_available() {
        return;
    }
    let env = Env::new();
    let root = env.dir.path();
    let src = tree(root);
    let list = root.join("list");
    fs::write(&list, "top.txt\nnot-there\nsub/c.txt\nsub/missing/x\n").unwrap();
    let l = format!("--files-from={}", list.display());
    let (theirs, ours) = (root.join("r"), root.join("h"));
    let r = rsync(&["-r", &l, src.to_str().unwrap(), theirs.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(23));
    let out = env.cp(&[
        "--json",
        "--files-from",
        list.to_str().unwrap(),
        src.to_str().unwrap(),
        ours.to_str().unwrap(),
    ]);
    let err = fails(&out, 23);
    assert!(
        err.contains("not-there") && err.contains("partial transfer"),
        "{err}"
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            j["ok"].as_bool(),
            j["exit_code"].as_i64(),
            j["files"].as_u64()
        ),
        (Some(false), Some(23), Some(2)),
        "{j}"
    );
    assert_eq!(paths(&ours), paths(&theirs));
}

#[test]
fn a_daemon_selects_a_pull_and_spares_excluded_files_from_delete() {
    if !rsync_available() {
        return;
    }
    let env = Env::new();
    let server = env.serve();
    let root = env.dir.path();
    let src = tree(&env.root);
    let rules = [
        "--exclude",
        "*.o",
        "--exclude",
        "cache/",
        "--max-size",
        "2500",
    ];
    // A pull: the daemon leaves out what the rules do.
    let theirs = root.join("r");
    let r = rsync(
        &[
            &["-r"],
            &rules[..],
            &[&format!("{}/", src.display()), theirs.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(r.status.success());
    let ours = root.join("h");
    ok(&env.cp(&[
        &["-r"],
        &rules[..],
        &[&env.remote(&server, "src/"), ours.to_str().unwrap()],
    ]
    .concat()));
    assert_eq!(paths(&ours), paths(&theirs));
    // A push with --delete: the daemon removes what the source lacks, but
    // not what the rules leave out.
    let dest = env.root.join("dest");
    put(&dest.join("gone.txt"), b"not in the source");
    put(&dest.join("kept.o"), b"excluded");
    put(&dest.join("cache/kept"), b"excluded");
    let out = env.cp(&[
        &["-r", "--delete", "--itemize-changes"],
        &rules[..],
        &[
            &format!("{}/", ours.display()),
            &env.remote(&server, "dest/"),
        ],
    ]
    .concat());
    ok(&out);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("*deleting   gone.txt") && said.contains("<f+++++++++ top.txt"),
        "{said}"
    );
    assert!(!dest.join("gone.txt").exists());
    assert!(dest.join("kept.o").exists() && dest.join("cache/kept").exists());
}
