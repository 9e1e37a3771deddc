//! What a run of `cp` or `sync` says at its end.

/// What a run says at its end.
pub(super) struct Said {
    /// The report's JSON line.
    pub json: String,
    /// Its text, unless `--quiet`.
    pub text: Option<String>,
    /// The lines of `--itemize-changes` (or `-v`), for standard output.
    pub items: Vec<String>,
    /// Why the run is a partial transfer (exit 23) though what it sent is
    /// verified and in place: sources listed but missing.
    pub partial: Option<String>,
}

impl Said {
    pub(super) fn new(json: String, text: Option<String>) -> Said {
        Said {
            json,
            text,
            items: Vec::new(),
            partial: None,
        }
    }
}
