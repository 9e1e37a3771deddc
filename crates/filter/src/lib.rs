//! What a transfer sends, as rsync and rclone users select it: filter
//! rules (`--exclude`, `--include`, `--filter`, `--exclude-from`,
//! `--include-from`), file sizes (`--min-size`, `--max-size`) and ages
//! (`--max-age`). Pure computation: paths in, verdicts out.
//!
//! Rules follow rsync's (the common subset, P-44):
//! - each rule is `- PATTERN` (exclude) or `+ PATTERN` (include); the
//!   first rule that matches a path decides, and a path no rule matches
//!   is sent;
//! - `*` matches within one path component, `**` across components, `?`
//!   one character but '/', `[...]` a class;
//! - a pattern starting with '/' is anchored at the top of the transfer
//!   (what a `dir/` source holds, or the `dir` of a `dir` source);
//!   otherwise it matches the path's last components (`*.o` any file
//!   named so, `sub/*.o` those directly in any `sub`);
//! - a pattern ending in '/' matches directories only; `dir/***` matches
//!   the directory and everything in it;
//! - an excluded directory is not entered: nothing below it is sent,
//!   whatever the rules say of it.
//!
//! On the receiving side the same selection keeps `--delete` away from
//! what it leaves out, judged by the receiver's own file (rclone's rule).

mod rules;

pub use rules::{from_file, Rule, RuleError, Rules};

/// Most rules one transfer carries (the peer's bound, P-44).
pub const MAX_RULES: usize = 4096;
/// Longest rule, in bytes.
pub const MAX_RULE_LEN: usize = 4096;
/// All rules together, in bytes (as written on the wire: `- PATTERN`).
pub const MAX_RULES_BYTES: usize = 256 << 10;

/// What a path is, for the selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    /// A regular file: its size and modification time (seconds).
    File {
        size: u64,
        mtime: i64,
    },
    Link,
}

/// Everything that selects what is sent.
#[derive(Debug, Clone, Default)]
pub struct Select {
    pub rules: Rules,
    /// Files smaller than this are left out.
    pub min_size: u64,
    /// Files larger than this are left out.
    pub max_size: Option<u64>,
    /// Files modified before this time (seconds since the epoch) are left
    /// out (`--max-age`).
    pub not_before: Option<i64>,
}

impl Select {
    /// Whether nothing is left out.
    pub fn is_all(&self) -> bool {
        self.rules.is_empty()
            && self.min_size == 0
            && self.max_size.is_none()
            && self.not_before.is_none()
    }

    /// Whether `path` (relative to the top of the transfer) is sent, by
    /// itself: the directories above it are [`Select::keep`]'s to judge.
    pub fn admits(&self, path: &[u8], kind: Kind) -> bool {
        if let Kind::File { size, mtime } = kind {
            if size < self.min_size
                || self.max_size.is_some_and(|m| size > m)
                || self.not_before.is_some_and(|t| mtime < t)
            {
                return false;
            }
        }
        !self.rules.excludes(path, kind == Kind::Dir)
    }

    /// Which of `items` (a walk's order: each directory before what is in
    /// it) are sent: those admitted, below no directory left out.
    pub fn keep<'a>(&self, items: impl IntoIterator<Item = (&'a [u8], Kind)>) -> Vec<bool> {
        let mut out_dirs: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
        items
            .into_iter()
            .map(|(path, kind)| {
                let below_out = ancestors(path).any(|a| out_dirs.contains(a));
                let keep = !below_out && self.admits(path, kind);
                if !keep && kind == Kind::Dir {
                    out_dirs.insert(path);
                }
                keep
            })
            .collect()
    }
}

/// `a/b/c`'s ancestors: `a/b`, `a`.
fn ancestors(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.iter()
        .enumerate()
        .rev()
        .filter(|(_, &b)| b == b'/')
        .map(move |(i, _)| &path[..i])
}

#[cfg(test)]
mod tests;
