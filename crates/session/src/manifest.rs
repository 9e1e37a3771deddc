//! The shape a manifest may have (P-8; P-40, S-3), checked by the receiver as
//! each entry arrives: every path is named once, and nothing lies under a
//! file or a symlink. A peer's symlink entry therefore never becomes the
//! parent of a later entry, whatever the store does on disk, and a later
//! entry never turns a directory that earlier entries lie in into a file
//! or a link.
//!
//! Paths are kept as 128-bit BLAKE3 keys, not copies: 18 bytes a bucket
//! whatever its path's length, and a peer cannot make two paths meet
//! without a BLAKE3 collision. The keys of a path's ancestors come from
//! one pass over it (the hasher is finalised at each `/`), so a deep path
//! costs its length, not its length times its depth.

use std::collections::HashMap;

/// What the manifest says a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Node {
    Dir,
    File,
    Symlink,
    /// An ancestor of an entry that is not an entry itself (yet): a
    /// directory as far as later entries are concerned.
    Implied,
}

impl Node {
    fn name(self) -> &'static str {
        match self {
            Node::Dir | Node::Implied => "directory",
            Node::File => "file",
            Node::Symlink => "symlink",
        }
    }
}

/// Why an entry does not fit the manifest so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TreeError {
    /// The path was named by an earlier entry.
    Twice,
    /// An earlier entry lies inside this path, which is not a directory.
    HasEntriesInside { kind: &'static str },
    /// The path lies under `ancestor`, an earlier file or symlink entry.
    UnderNonDir {
        ancestor: Vec<u8>,
        kind: &'static str,
    },
}

impl TreeError {
    pub(crate) fn describe(&self) -> String {
        match self {
            TreeError::Twice => "the manifest names it twice".into(),
            TreeError::HasEntriesInside { kind } => format!(
                "it is sent as a {kind}, but earlier entries lie inside it"
            ),
            TreeError::UnderNonDir { ancestor, kind } => format!(
                "it lies under {:?}, which the manifest sent as a {kind}; entries may lie only under directories",
                String::from_utf8_lossy(ancestor)
            ),
        }
    }
}

/// What adding one entry changes, worked out before anything is changed.
pub(crate) struct Plan {
    key: [u8; 16],
    node: Node,
    /// Ancestors not seen before, to be marked [`Node::Implied`].
    implied: Vec<[u8; 16]>,
}

impl Plan {
    /// Keys this entry adds (its own, unless it names an implied
    /// directory, and its new ancestors).
    pub(crate) fn new_keys(&self, tree: &Tree) -> u64 {
        let own = !tree.nodes.contains_key(&self.key);
        self.implied.len() as u64 + own as u64
    }
}

#[derive(Default)]
pub(crate) struct Tree {
    nodes: HashMap<[u8; 16], Node>,
}

/// Bytes one key costs in the map: key, node and control byte (18), and
/// the table's spare room (it grows by doubling, so between 1.14 and 2.3
/// buckets an entry).
pub(crate) const KEY_COST: u64 = 40;

fn key(h: &blake3::Hasher) -> [u8; 16] {
    let out = h.finalize();
    out.as_bytes()[..16].try_into().expect("16 of 32 bytes")
}

impl Tree {
    /// Checks `path` (already through `paths::components`) as a new entry.
    pub(crate) fn check(&self, path: &[u8], node: Node) -> Result<Plan, TreeError> {
        let mut ancestors = Vec::new();
        let mut h = blake3::Hasher::new();
        let mut from = 0;
        for (i, &b) in path.iter().enumerate() {
            if b == b'/' {
                h.update(&path[from..i]);
                from = i;
                ancestors.push((i, key(&h)));
            }
        }
        h.update(&path[from..]);
        let own = key(&h);
        match (self.nodes.get(&own), node) {
            (None, _) | (Some(Node::Implied), Node::Dir) => {}
            (Some(Node::Implied), kind) => {
                return Err(TreeError::HasEntriesInside { kind: kind.name() })
            }
            (Some(_), _) => return Err(TreeError::Twice),
        }
        // Deepest first: the first ancestor already known is a directory
        // whose own ancestors were checked when it was added.
        let mut implied = Vec::new();
        for &(end, k) in ancestors.iter().rev() {
            match self.nodes.get(&k) {
                Some(Node::Dir | Node::Implied) => break,
                Some(n) => {
                    return Err(TreeError::UnderNonDir {
                        ancestor: path[..end].to_vec(),
                        kind: n.name(),
                    })
                }
                None => implied.push(k),
            }
        }
        Ok(Plan {
            key: own,
            node,
            implied,
        })
    }

    pub(crate) fn commit(&mut self, plan: Plan) {
        for k in plan.implied {
            self.nodes.insert(k, Node::Implied);
        }
        self.nodes.insert(plan.key, plan.node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(t: &mut Tree, path: &str, node: Node) -> Result<(), TreeError> {
        let plan = t.check(path.as_bytes(), node)?;
        t.commit(plan);
        Ok(())
    }

    #[test]
    fn a_path_is_named_once_and_nothing_lies_under_a_file_or_link() {
        let mut t = Tree::default();
        add(&mut t, "d", Node::Dir).unwrap();
        add(&mut t, "d/f", Node::File).unwrap();
        add(&mut t, "d/l", Node::Symlink).unwrap();
        assert_eq!(add(&mut t, "d/f", Node::File), Err(TreeError::Twice));
        assert_eq!(add(&mut t, "d", Node::Dir), Err(TreeError::Twice));
        assert!(matches!(
            add(&mut t, "d/l/x", Node::File),
            Err(TreeError::UnderNonDir { ref ancestor, kind: "symlink" }) if ancestor == b"d/l"
        ));
        assert!(matches!(
            add(&mut t, "d/f/x/y", Node::Dir),
            Err(TreeError::UnderNonDir { ref ancestor, kind: "file" }) if ancestor == b"d/f"
        ));
        // Children before their directory's entry: the directory may come
        // later as a directory, never as a file or a link.
        add(&mut t, "e/g/h", Node::File).unwrap();
        assert_eq!(
            add(&mut t, "e/g", Node::Symlink),
            Err(TreeError::HasEntriesInside { kind: "symlink" })
        );
        assert_eq!(
            add(&mut t, "e", Node::File),
            Err(TreeError::HasEntriesInside { kind: "file" })
        );
        add(&mut t, "e/g", Node::Dir).unwrap();
        add(&mut t, "e", Node::Dir).unwrap();
        assert_eq!(add(&mut t, "e", Node::Dir), Err(TreeError::Twice));
    }

    #[test]
    fn ancestor_keys_are_the_keys_of_the_ancestors_own_entries() {
        let mut t = Tree::default();
        add(&mut t, "a/b/c/d", Node::File).unwrap();
        for p in ["a", "a/b", "a/b/c"] {
            assert_eq!(
                add(&mut t, p, Node::File),
                Err(TreeError::HasEntriesInside { kind: "file" }),
                "{p}"
            );
        }
        // Similar bytes, other paths.
        add(&mut t, "a/b/cd", Node::File).unwrap();
        add(&mut t, "ab", Node::File).unwrap();
    }
}
