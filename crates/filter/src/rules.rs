//! rsync's filter rules: parsed from the command line, a file or the
//! wire, and matched against paths relative to the top of the transfer.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use globset::{GlobBuilder, GlobMatcher};

use crate::{MAX_RULES, MAX_RULES_BYTES, MAX_RULE_LEN};

/// A rule that cannot be used, said for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError(pub String);

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RuleError {}

/// One rule: include or exclude what its pattern matches.
#[derive(Debug, Clone)]
pub struct Rule {
    pub include: bool,
    /// The pattern as written.
    pub pattern: String,
    dir_only: bool,
    /// Any of these matching is a match (`dir/***` is two).
    globs: Vec<GlobMatcher>,
}

impl Rule {
    /// A rule as `--filter` takes it: `- PATTERN`, `+ PATTERN`, or
    /// `exclude PATTERN`, `include PATTERN`.
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let (include, pattern) = match text.split_once(' ') {
            Some(("-" | "exclude", p)) => (false, p),
            Some(("+" | "include", p)) => (true, p),
            _ => {
                return Err(RuleError(format!(
                    "filter rule {text:?}: write it as \"- PATTERN\" (exclude) or \"+ PATTERN\" (include); other rsync rule kinds (merge files, per-directory rules, modifiers) are not supported"
                )))
            }
        };
        Rule::new(include, pattern)
    }

    /// A pattern as `--exclude` (or, with `include`, `--include`) takes
    /// it: a leading `- ` or `+ ` decides instead, as in rsync.
    pub fn pattern(include: bool, text: &str) -> Result<Rule, RuleError> {
        match (text.strip_prefix("- "), text.strip_prefix("+ ")) {
            (Some(p), _) => Rule::new(false, p),
            (_, Some(p)) => Rule::new(true, p),
            _ => Rule::new(include, text),
        }
    }

    fn new(include: bool, pattern: &str) -> Result<Rule, RuleError> {
        if pattern.is_empty() || pattern == "/" {
            return Err(RuleError(
                "an empty filter pattern matches nothing; remove it".into(),
            ));
        }
        if pattern.len() > MAX_RULE_LEN {
            return Err(RuleError(format!(
                "a filter pattern is at most {MAX_RULE_LEN} bytes"
            )));
        }
        let (body, all_below) = match pattern.strip_suffix("/***") {
            Some(b) => (b, true),
            None => (pattern, false),
        };
        let dir_only = !all_below && body.ends_with('/');
        let body = body.trim_end_matches('/');
        let (body, anchored) = match body.strip_prefix('/') {
            Some(b) => (b, true),
            None => (body, false),
        };
        let at = |p: &str| match anchored {
            true => p.to_string(),
            false => format!("**/{p}"),
        };
        let mut texts = vec![at(body)];
        if all_below {
            texts.push(at(&format!("{body}/**")));
        }
        let globs = texts
            .iter()
            .map(|t| compile(t, pattern))
            .collect::<Result<_, _>>()?;
        Ok(Rule {
            include,
            pattern: pattern.to_string(),
            dir_only,
            globs,
        })
    }

    /// The rule as the wire carries it: `- PATTERN` or `+ PATTERN`.
    pub fn line(&self) -> String {
        format!("{} {}", if self.include { '+' } else { '-' }, self.pattern)
    }

    fn matches(&self, path: &Path, is_dir: bool) -> bool {
        (is_dir || !self.dir_only) && self.globs.iter().any(|g| g.is_match(path))
    }
}

fn compile(text: &str, pattern: &str) -> Result<GlobMatcher, RuleError> {
    GlobBuilder::new(text)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| RuleError(format!("filter pattern {pattern:?}: {e}")))
}

/// Rules in order: the first that matches decides.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    rules: Vec<Rule>,
}

impl Rules {
    pub fn new(rules: Vec<Rule>) -> Result<Rules, RuleError> {
        if rules.len() > MAX_RULES {
            return Err(RuleError(format!(
                "{} filter rules; at most {MAX_RULES} may be given",
                rules.len()
            )));
        }
        let bytes: usize = rules.iter().map(|r| r.pattern.len() + 2).sum();
        if bytes > MAX_RULES_BYTES {
            return Err(RuleError(format!(
                "the filter rules take {bytes} bytes; at most {} KiB may be given",
                MAX_RULES_BYTES >> 10
            )));
        }
        Ok(Rules { rules })
    }

    /// Rules as the wire carries them, each `- PATTERN` or `+ PATTERN`.
    pub fn from_lines(lines: &[String]) -> Result<Rules, RuleError> {
        Rules::new(
            lines
                .iter()
                .map(|l| Rule::parse(l))
                .collect::<Result<_, _>>()?,
        )
    }

    pub fn lines(&self) -> Vec<String> {
        self.rules.iter().map(Rule::line).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether the first rule matching `path` excludes it.
    pub fn excludes(&self, path: &[u8], is_dir: bool) -> bool {
        let p = Path::new(OsStr::from_bytes(path));
        self.rules
            .iter()
            .find(|r| r.matches(p, is_dir))
            .is_some_and(|r| !r.include)
    }
}

/// The rules of an `--exclude-from` (or, with `include`,
/// `--include-from`) file: one pattern a line; blank lines and lines
/// starting with `#` or `;` are skipped, as rsync skips them.
pub fn from_file(text: &str, include: bool) -> Result<Vec<Rule>, RuleError> {
    text.lines()
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .map(|l| Rule::pattern(include, l))
        .collect()
}
