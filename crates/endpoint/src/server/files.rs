//! What a request names in the served root's files: its paths resolved
//! inside the root (P-16), the sources of a pull walked, a basis opened.

use std::path::PathBuf;
use std::sync::Arc;

use connect::error::TransferError;
use store::{walk, Held, Root, Walked};
use wire::Request;

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

    /// The sources of a pull, walked. A path naming a directory's
    /// contents keeps its final '/' through resolving, for the walk (P-8).
    pub(super) fn walk_request(&self, root: &Root, req: &Request) -> Result<Walked, TransferError> {
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
        Ok(walk(&paths, req.recursive)?)
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
