//! What a request names in the served root's files: its paths resolved
//! inside the root (P-16), the sources of a pull walked and read beneath
//! it by descriptor (P-43), a basis opened.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use connect::error::TransferError;
use store::walk_beneath::Source;
use store::{walk, walk_beneath, Held, Root, Sources, Walked};
use wire::{ErrorCode, Request};

/// A basis as the receiver takes it: where it is, and the file open.
type Basis = Option<(PathBuf, Arc<dyn Held>)>;

impl super::Server {
    /// A path of the request, inside the root (P-16).
    /// `root`: the served root, or the part of it a key sees (`root=`).
    pub(super) fn resolve(&self, root: &Root, path: &str) -> Result<PathBuf, TransferError> {
        let path = match &self.cfg.base {
            Some(base) if !path.starts_with('/') => base.join(path).to_string_lossy().into_owned(),
            _ => path.to_string(),
        };
        root.resolve(&path).map_err(TransferError::from)
    }

    /// The sources of a pull, walked, and read from where the walk found
    /// them. Under a served root each is walked and opened by descriptor,
    /// following no link (P-43); the login's own tree over ssh is walked
    /// as scp would. A path naming a directory's contents keeps its final
    /// '/' through resolving, for the walk (P-8).
    pub(super) fn walk_request(
        &self,
        root: &Root,
        req: &Request,
    ) -> Result<(Walked, Sources), TransferError> {
        if !root.follows_links() {
            let sources = req
                .paths
                .iter()
                .map(|p| {
                    Source::parse(p).ok_or_else(|| {
                        TransferError::new(
                            ErrorCode::OutsideRoot,
                            format!("path {p:?} is outside the served root"),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let tree = Arc::new(root.tree()?);
            let top = root.path().file_name().map_or(&[][..], |n| n.as_bytes());
            let mut w = walk_beneath(&tree, &sources, req.recursive, top)?;
            select(&mut w, req)?;
            let s = Sources::beneath(tree, w.paths.clone()).stamped(&w.entries, &w.inodes);
            return Ok((w, s));
        }
        let paths = req
            .paths
            .iter()
            .map(|p| {
                let mut r = self.resolve(root, p)?;
                if store::names_contents(p.as_bytes()) {
                    r.push("");
                }
                Ok(r)
            })
            .collect::<Result<Vec<_>, TransferError>>()?;
        let mut w = walk(&paths, req.recursive)?;
        select(&mut w, req)?;
        let s = Sources::new(w.paths.clone()).stamped(&w.entries, &w.inodes);
        Ok((w, s))
    }

    /// The basis a push names (`--basis`), if any: opened now, beneath the
    /// root (P-38), never by name later.
    pub(super) fn open_basis(&self, root: &Root, basis: &str) -> Result<Basis, TransferError> {
        if basis.is_empty() {
            return Ok(None);
        }
        let p = self.resolve(root, basis)?;
        let f = root.open_file(&p)?;
        Ok(Some((p, Arc::new(f) as Arc<dyn Held>)))
    }

    /// Where a push's blocks go: the destination's files, through the
    /// ledger of a split transfer when the push is one of its shards
    /// (P-42).
    pub(super) fn receiving_sink(
        &self,
        sink: store::Sink,
        shard: Option<&wire::ShardSpec>,
    ) -> Result<Box<dyn store::BlockSink>, TransferError> {
        Ok(match shard {
            None => Box::new(sink),
            Some(spec) => Box::new(shard::ShardSink::new(sink, spec, spec.status)?),
        })
    }
}

/// Leaves out of a pull what its request's selection does (P-44).
fn select(w: &mut Walked, req: &Request) -> Result<(), TransferError> {
    let select = transfer::selection(&req.select)?;
    if !select.is_all() {
        w.retain(&transfer::selected(&select, &w.entries));
    }
    Ok(())
}
