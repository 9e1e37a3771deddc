//! The layout keeps its shape (issue 25): no two files of a crate import
//! each other, directly or around a circle. Cargo already refuses circles
//! between crates; this test does the same for the files inside each.
//!
//! A file imports another when it names it by path: `crate::a::b`,
//! `super::…`, `self::…`, or a child module it declares (`mod lanes;` then
//! `lanes::run`). Code after a file's `#[cfg(test)]` is left out: tests
//! may reach into their neighbours' test helpers.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Module path of a source file under `src`: `lib.rs` is "", `a/mod.rs`
/// and `a.rs` are "a", `a/b.rs` is "a::b".
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "lib" | "main" | "mod") {
        parts.push(stem.to_string());
    }
    parts.join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code a file's imports are read from: without comments, and
/// without its tests.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Every `a::b::c` path that starts at byte `i` of `code` after `prefix`.
fn paths_after<'a>(code: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find(prefix) {
        let start = from + at;
        from = start + prefix.len();
        let before = start.checked_sub(1).map(|b| bytes[b]);
        if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':') {
            continue;
        }
        let rest = &code[from..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        let segs: Vec<&str> = rest[..end].split("::").filter(|s| !s.is_empty()).collect();
        found.push(segs);
    }
    found
}

/// The longest known module that `segs` (from module `base`) names.
fn resolve(modules: &BTreeSet<String>, base: &[String], segs: &[&str]) -> Option<String> {
    let mut best = None;
    let mut path: Vec<String> = base.to_vec();
    for s in segs {
        path.push(s.to_string());
        let m = path.join("::");
        if modules.contains(&m) {
            best = Some(m);
        } else if s.starts_with(|c: char| c.is_ascii_uppercase()) {
            break;
        }
    }
    best
}

fn declared_children(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|l| {
            let t = l.trim_start();
            let t = t
                .strip_prefix("pub(crate) ")
                .or_else(|| t.strip_prefix("pub "))
                .unwrap_or(t);
            let name = t.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect()
}

/// Imports between the files of one crate: module → modules it names.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(src, f)).collect();
    let mut graph = BTreeMap::new();
    for f in &files {
        let me = module_of(src, f);
        let code = code_of(&fs::read_to_string(f).unwrap());
        let mine: Vec<String> = if me.is_empty() {
            vec![]
        } else {
            me.split("::").map(str::to_string).collect()
        };
        let mut to = BTreeSet::new();
        for segs in paths_after(&code, "crate::") {
            to.extend(resolve(&modules, &[], &segs));
        }
        for segs in paths_after(&code, "self::") {
            to.extend(resolve(&modules, &mine, &segs));
        }
        for segs in paths_after(&code, "super::") {
            let mut base = mine.clone();
            base.pop();
            let mut segs = segs.as_slice();
            while segs.first() == Some(&"super") {
                base.pop();
                segs = &segs[1..];
            }
            to.extend(resolve(&modules, &base, segs).or_else(|| Some(base.join("::"))));
        }
        for child in declared_children(&code) {
            let prefix = format!("{child}::");
            if !paths_after(&code, &prefix).is_empty() {
                let mut p = mine.clone();
                p.push(child);
                to.insert(p.join("::"));
            }
        }
        to.remove(&me);
        graph.insert(me, to);
    }
    graph
}

/// Circles: each strongly connected set of more than one module (Tarjan).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.graph.contains_key(w) {
                    continue;
                }
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut set = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    set.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if set.len() > 1 {
                    set.sort();
                    self.found.push(set);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    let crates = workspace().join("crates");
    let mut report = Vec::new();
    let mut checked = 0;
    for e in fs::read_dir(&crates).unwrap().flatten() {
        let src = e.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let graph = imports(&src);
        checked += graph.len();
        for set in circles(&graph) {
            let name = e.file_name().to_string_lossy().into_owned();
            let shown: Vec<String> = set
                .iter()
                .map(|m| {
                    if m.is_empty() {
                        "(lib)".into()
                    } else {
                        m.clone()
                    }
                })
                .collect();
            let edges: Vec<String> = set
                .iter()
                .flat_map(|a| {
                    graph[a]
                        .iter()
                        .filter(|b| set.contains(b))
                        .map(move |b| format!("{a} → {b}"))
                })
                .collect();
            report.push(format!(
                "crates/{name}: {} import each other ({})",
                shown.join(", "),
                edges.join("; ")
            ));
        }
    }
    assert!(
        checked > 100,
        "read only {checked} files under {}",
        crates.display()
    );
    assert!(
        report.is_empty(),
        "files import each other in a circle; move what both need into a \
         file below them, or pass it in:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_checker_sees_a_circle() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    g.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(circles(&g), vec![vec!["a", "b", "c"]]);
    assert_eq!(
        paths_after("use crate::x::Y; crate::z(); mycrate::w", "crate::"),
        vec![vec!["x", "Y"], vec!["z"]]
    );
}

/// The workspace crates each crate's `Cargo.toml` depends on (not its
/// dev-dependencies), by package name.
fn crate_graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut manifests = Vec::new();
    for e in fs::read_dir(root.join("crates")).unwrap() {
        let m = e.unwrap().path().join("Cargo.toml");
        if m.is_file() {
            manifests.push(fs::read_to_string(m).unwrap());
        }
    }
    let name_of = |t: &str| -> String {
        t.lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|r| r.strip_suffix('"'))
            .expect("a package name")
            .to_string()
    };
    let names: BTreeSet<String> = manifests.iter().map(|t| name_of(t)).collect();
    let mut graph = BTreeMap::new();
    for t in &manifests {
        let deps: BTreeSet<String> = t
            .split("\n[dependencies]\n")
            .nth(1)
            .map(|d| d.split("\n[").next().unwrap_or(""))
            .unwrap_or("")
            .lines()
            .filter_map(|l| {
                let n = l.split(['.', ' ', '=']).next()?.trim();
                names.contains(n).then(|| n.to_string())
            })
            .collect();
        graph.insert(name_of(t), deps);
    }
    graph
}

/// The table of ARCHITECTURE.md's "Crates": each crate and what it uses.
fn written_graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let doc = fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let table = doc
        .split("against every `Cargo.toml`")
        .nth(1)
        .and_then(|r| r.split("```\n").nth(1))
        .expect("ARCHITECTURE.md has the table of what each crate uses");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current = String::new();
    for line in table.lines() {
        let (name, rest) = match line.starts_with(' ') {
            true => (current.clone(), line.trim()),
            false => {
                let (n, r) = line.split_once(' ').unwrap_or((line, ""));
                (n.to_string(), r.trim())
            }
        };
        current = name.clone();
        let deps = graph.entry(name).or_default();
        deps.extend(
            rest.split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty() && *d != "-")
                .map(str::to_string),
        );
    }
    graph
}

/// Issue 40: the crate graph is the one ARCHITECTURE.md writes down, so a
/// dependency that skips the layering fails here, not in review.
#[test]
fn the_crate_graph_is_the_one_architecture_md_writes_down() {
    let root = workspace();
    let (built, written) = (crate_graph(&root), written_graph(&root));
    let mut report = Vec::new();
    for name in built.keys().chain(written.keys()).collect::<BTreeSet<_>>() {
        let (b, w) = (built.get(name), written.get(name));
        match (b, w) {
            (Some(b), Some(w)) if b == w => {}
            (Some(b), Some(w)) => {
                let extra: Vec<_> = b.difference(w).collect();
                let gone: Vec<_> = w.difference(b).collect();
                report.push(format!(
                    "{name}: Cargo.toml also has {extra:?}; ARCHITECTURE.md also has {gone:?}"
                ));
            }
            (Some(_), None) => report.push(format!("{name}: not in ARCHITECTURE.md's table")),
            (None, _) => report.push(format!("{name}: in ARCHITECTURE.md's table, not a crate")),
        }
    }
    assert!(built.len() > 15, "read only {} crates", built.len());
    assert!(
        report.is_empty(),
        "the crate graph and docs/ARCHITECTURE.md disagree:\n{}",
        report.join("\n")
    );
}
