//! The sending side of a shard (P-42): the sources as the shard's
//! manifest names them, a piece read at its offset in the whole file.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use store::{BlockSource, Held, StoreError};

/// A source whose pieces (entry id to offset in the whole file) read at
/// their place in the file; every other entry reads as it is.
pub struct ShardSource {
    inner: Box<dyn BlockSource>,
    /// Entry id to (offset, length) of its piece.
    pieces: HashMap<u32, (u64, u64)>,
}

impl ShardSource {
    /// `pieces`: entry id, offset in the whole file, length.
    pub fn new(inner: Box<dyn BlockSource>, pieces: &[(u32, u64, u64)]) -> ShardSource {
        ShardSource {
            inner,
            pieces: pieces.iter().map(|&(id, o, l)| (id, (o, l))).collect(),
        }
    }

    fn base(&self, id: u32) -> u64 {
        self.pieces.get(&id).map_or(0, |p| p.0)
    }
}

impl BlockSource for ShardSource {
    fn name(&self, id: u32) -> String {
        match self.pieces.get(&id) {
            Some(&(o, l)) => format!("{} (bytes {o} to {})", self.inner.name(id), o + l),
            None => self.inner.name(id),
        }
    }

    fn read_block(&self, id: u32, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.inner.read_block(id, self.base(id) + offset, buf)
    }

    fn known_zero(&self, id: u32, offset: u64, len: u32) -> bool {
        self.inner.known_zero(id, self.base(id) + offset, len)
    }

    fn check_unchanged(&self, id: u32) -> Result<(), StoreError> {
        self.inner.check_unchanged(id)
    }

    fn open(&self, id: u32) -> Result<Arc<dyn Held>, StoreError> {
        let whole = self.inner.open(id)?;
        Ok(match self.pieces.get(&id) {
            Some(&(offset, len)) => Arc::new(PieceHeld { whole, offset, len }),
            None => whole,
        })
    }
}

/// A piece of a file, read as if it were the whole.
struct PieceHeld {
    whole: Arc<dyn Held>,
    offset: u64,
    len: u64,
}

impl Held for PieceHeld {
    fn size(&self) -> io::Result<u64> {
        Ok(self.len)
    }

    fn stat(&self) -> io::Result<(u64, i64, u32)> {
        let (_, t, n) = self.whole.stat()?;
        Ok((self.len, t, n))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if offset + buf.len() as u64 > self.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of a piece",
            ));
        }
        self.whole.read_exact_at(buf, self.offset + offset)
    }
}
