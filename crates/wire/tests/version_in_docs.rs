//! The docs name the protocol version the code speaks (issue 41: the
//! README said 12 where the code spoke 14): README.md and
//! docs/PROTOCOL.md's title and preamble table, each against
//! `wire::PROTOCOL_VERSION`.

fn doc(rel: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_docs_name_the_version_the_code_speaks() {
    let v = wire::PROTOCOL_VERSION;
    let readme = doc("README.md");
    assert!(
        readme.contains(&format!("of the same protocol version ({v};")),
        "README.md must name protocol version {v}"
    );
    let protocol = doc("docs/PROTOCOL.md");
    assert!(
        protocol.starts_with(&format!("# haul wire protocol, version {v}\n")),
        "docs/PROTOCOL.md's title must name version {v}"
    );
    assert!(
        protocol.contains(&format!("(`PROTOCOL_VERSION`, {v})")),
        "docs/PROTOCOL.md's preamble table must name version {v}"
    );
}
