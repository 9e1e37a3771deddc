use super::*;

fn rules(list: &[&str]) -> Rules {
    Rules::new(list.iter().map(|r| Rule::parse(r).unwrap()).collect()).unwrap()
}

fn out(r: &Rules, path: &str) -> bool {
    r.excludes(path.as_bytes(), false)
}

fn out_dir(r: &Rules, path: &str) -> bool {
    r.excludes(path.as_bytes(), true)
}

#[test]
fn a_pattern_without_a_slash_matches_the_last_component() {
    let r = rules(&["- *.o"]);
    assert!(out(&r, "a.o"));
    assert!(out(&r, "src/deep/a.o"));
    assert!(!out(&r, "a.c"));
    assert!(!out(&r, "a.o/b"), "only the last component");
}

#[test]
fn a_slash_anchors_at_the_top_and_inner_slashes_match_suffixes() {
    let r = rules(&["- /top.txt"]);
    assert!(out(&r, "top.txt"));
    assert!(!out(&r, "sub/top.txt"));
    let r = rules(&["- sub/*.o"]);
    assert!(out(&r, "sub/a.o"));
    assert!(out(&r, "x/sub/a.o"));
    assert!(!out(&r, "sub/deeper/a.o"), "* stays in one component");
    let r = rules(&["- sub/**/a.o"]);
    assert!(out(&r, "sub/deeper/still/a.o"));
}

#[test]
fn a_trailing_slash_matches_directories_only() {
    let r = rules(&["- build/"]);
    assert!(out_dir(&r, "build"));
    assert!(out_dir(&r, "x/build"));
    assert!(!out(&r, "build"), "a file named build is sent");
    let r = rules(&["- cache/***"]);
    assert!(out_dir(&r, "cache"));
    assert!(out(&r, "cache/a/b"));
}

#[test]
fn the_first_matching_rule_wins() {
    let r = rules(&["+ keep.log", "- *.log"]);
    assert!(!out(&r, "keep.log"));
    assert!(out(&r, "other.log"));
    let r = rules(&["- *.log", "+ keep.log"]);
    assert!(out(&r, "keep.log"));
    // rsync's classic: directories, then *.txt, nothing else.
    let r = rules(&["+ */", "+ *.txt", "- *"]);
    assert!(!out_dir(&r, "a"));
    assert!(!out(&r, "a/b.txt"));
    assert!(out(&r, "a/b.bin"));
}

#[test]
fn excluded_directories_hide_what_is_in_them() {
    let s = Select {
        rules: rules(&["- .git/", "+ *"]),
        ..Select::default()
    };
    let items: Vec<(&[u8], Kind)> = vec![
        (b"a", Kind::Dir),
        (b"a/.git", Kind::Dir),
        (b"a/.git/config", Kind::File { size: 1, mtime: 0 }),
        (b"a/x", Kind::File { size: 1, mtime: 0 }),
    ];
    assert_eq!(s.keep(items), vec![true, false, false, true]);
}

#[test]
fn sizes_and_ages_select_files_only() {
    let s = Select {
        min_size: 10,
        max_size: Some(100),
        not_before: Some(1000),
        ..Select::default()
    };
    let f = |size, mtime| Kind::File { size, mtime };
    assert!(s.admits(b"a", f(10, 1000)));
    assert!(s.admits(b"a", f(100, 2000)));
    assert!(!s.admits(b"a", f(9, 2000)));
    assert!(!s.admits(b"a", f(101, 2000)));
    assert!(!s.admits(b"a", f(50, 999)));
    assert!(s.admits(b"d", Kind::Dir));
}

#[test]
fn rules_are_parsed_as_rsync_writes_them() {
    assert!(Rule::parse("- a").is_ok_and(|r| !r.include));
    assert!(Rule::parse("include a").is_ok_and(|r| r.include));
    assert!(Rule::parse("a").is_err());
    assert!(Rule::parse(": .rsync-filter").is_err());
    assert!(Rule::pattern(false, "+ a").is_ok_and(|r| r.include));
    assert!(Rule::pattern(true, "- a").is_ok_and(|r| !r.include));
    assert!(Rule::pattern(false, "").is_err());
    let listed = from_file("# comment\n; another\n\n*.o\n+ keep\r\n", false).unwrap();
    let lines: Vec<String> = listed.iter().map(Rule::line).collect();
    assert_eq!(lines, ["- *.o", "+ keep"]);
    // The wire's form comes back as it went.
    let r = Rules::from_lines(&lines).unwrap();
    assert_eq!(r.lines(), lines);
    let too_long = vec![format!("- {}", "a".repeat(4000)); 70];
    assert!(
        Rules::from_lines(&too_long).is_err(),
        "past MAX_RULES_BYTES"
    );
    let too_many = vec!["- a".to_string(); MAX_RULES + 1];
    assert!(Rules::from_lines(&too_many).is_err());
}

proptest::proptest! {
    /// Any rule text parses or is refused with a message; never a panic,
    /// and a parsed rule's line parses to the same line.
    #[test]
    fn any_rule_text_is_parsed_or_refused(text in ".{0,64}") {
        if let Ok(r) = Rule::parse(&text) {
            let again = Rule::parse(&r.line()).unwrap();
            proptest::prop_assert_eq!(again.line(), r.line());
            let _ = Rules::new(vec![r]).unwrap().excludes(text.as_bytes(), false);
        }
    }
}
