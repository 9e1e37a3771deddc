//! `--files-from LIST`: the files a job chose, as rsync reads them: one
//! path a line (or NUL-separated with `--from0`), relative to the one
//! source directory named; `-` reads standard input.

use std::io::Read;
use std::path::{Path, PathBuf};

use connect::TransferError;

use crate::reach::usage;

/// Most bytes a list may hold: about ten million paths.
const MAX_LIST: u64 = 1 << 30;

/// The paths of `list`: lines, or NUL-separated with `from0`. Blank lines
/// and, without `from0`, lines starting `#` or `;` are skipped.
pub fn read(list: &Path, from0: bool) -> Result<Vec<Vec<u8>>, TransferError> {
    let mut bytes = Vec::new();
    let r = if list == Path::new("-") {
        std::io::stdin()
            .lock()
            .take(MAX_LIST)
            .read_to_end(&mut bytes)
    } else {
        std::fs::File::open(list).and_then(|f| f.take(MAX_LIST).read_to_end(&mut bytes))
    };
    r.map_err(|e| TransferError::from(store::StoreError::io("read the file list", list, &e)))?;
    let sep = if from0 { 0 } else { b'\n' };
    Ok(bytes
        .split(|&b| b == sep)
        .map(|l| {
            if from0 {
                l
            } else {
                l.strip_suffix(b"\r").unwrap_or(l)
            }
        })
        .filter(|l| !l.is_empty())
        .filter(|l| from0 || !(l.starts_with(b"#") || l.starts_with(b";")))
        .map(<[u8]>::to_vec)
        .collect())
}

/// The manifest of a push with `--files-from`: the listed paths under the
/// one source directory.
pub fn walk(
    list: &Path,
    from0: bool,
    sources: &[PathBuf],
    recursive: bool,
) -> Result<store::Walked, TransferError> {
    let [base] = sources else {
        return Err(usage(
            "--files-from lists paths relative to one source directory: name exactly one before the destination",
        ));
    };
    if !base.is_dir() {
        return Err(usage(format!(
            "--files-from lists paths relative to a directory, and {} is not one",
            base.display()
        )));
    }
    let paths = read(list, from0)?;
    Ok(store::walk_listed(base, &paths, recursive)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_as_rsync_reads_them() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("list");
        std::fs::write(&p, b"a\r\n# note\n\n;x\nb c\n").unwrap();
        assert_eq!(read(&p, false).unwrap(), [b"a".to_vec(), b"b c".to_vec()]);
        std::fs::write(&p, b"a\nb\0#c\0").unwrap();
        assert_eq!(read(&p, true).unwrap(), [b"a\nb".to_vec(), b"#c".to_vec()]);
    }
}
