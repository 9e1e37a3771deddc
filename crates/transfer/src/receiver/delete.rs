//! `--delete` (P-32): once every file is in place, what the source does
//! not have is removed (unless `--dry-run`) and the sender is told. A
//! partial another transfer holds is never removed (P-41).

use session::ReceiverSession;
use store::{BlockSink, DirTimes};

use connect::error::TransferError;

use crate::options::ReceiveOptions;
use crate::shared::Shared;

/// `--delete` once every file is in place: removes (unless `--dry-run`)
/// what the source does not have, and tells the sender.
pub(crate) fn delete_extraneous(
    sh: &Shared<ReceiverSession>,
    sink: &dyn BlockSink,
    opts: &ReceiveOptions,
    dirs: &[DirTimes],
) -> Result<(), TransferError> {
    let keep = sh.lock().entry_paths().to_vec();
    let dir_paths: Vec<Vec<u8>> = dirs.iter().map(|d| d.rel.clone()).collect();
    let partials = opts.sync.delete_partials;
    let mut found = sink.extraneous(&dir_paths, &keep, opts.contents, partials)?;
    // What the selection leaves out is not the source's to delete (P-44).
    if !opts.select.is_all() {
        found.retain(|x| !left_out(&opts.select, x));
    }
    if !opts.sync.dry_run {
        // What holds a partial another transfer has taken meanwhile stays
        // (P-41), and is not reported as removed.
        let places: Vec<Vec<u8>> = found.iter().map(|x| x.place.clone()).collect();
        let gone = sink.remove(&places, partials)?;
        let mut it = gone.into_iter();
        found.retain(|_| it.next().unwrap_or(false));
    }
    let rels: Vec<Vec<u8>> = found.into_iter().map(|x| x.shown).collect();
    sh.progress
        .deleted
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend(rels.iter().map(|r| String::from_utf8_lossy(r).into_owned()));
    sh.lock().deleted(rels);
    Ok(())
}

/// Whether the selection leaves `x` out, judged by the receiver's own
/// file (rclone's rule): by its name where the store told nothing more.
fn left_out(select: &filter::Select, x: &store::Extraneous) -> bool {
    let kind = match (x.dir, x.file) {
        (true, _) => filter::Kind::Dir,
        (false, Some((size, mtime))) => filter::Kind::File { size, mtime },
        (false, None) => filter::Kind::Link,
    };
    !select.admits(&x.shown, kind)
}
