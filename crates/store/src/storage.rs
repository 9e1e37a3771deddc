//! The storage interface the transfer engine moves blocks between: a
//! source it reads blocks from ([`BlockSource`]) and a sink it places them
//! in ([`BlockSink`]), both by manifest id, and what a side already has
//! open to read at offsets ([`Held`]: a basis, a partial, a file in
//! place). The engine sees only these traits. Files implement them today
//! ([`Sources`], [`Sink`], with every guarantee of theirs: temporary
//! names, journals, the order of syncs, confinement, resume); an object
//! store or a shard filter implements the same, and the engine does not
//! change.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::StoreError;
use crate::journal::Stamp;
use crate::out_file::Note;
use crate::partial::Poke;
use crate::sink::{Extraneous, Sink};
use crate::source::Sources;

/// Something whole and readable at offsets: a source opened for
/// chunking, or what a receiver holds (an old version, a partial).
pub trait Held: Send + Sync {
    /// Its length now, in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Its length and modification time (bytes, seconds, nanoseconds),
    /// read together: one `fstat` for a file.
    fn stat(&self) -> io::Result<(u64, i64, u32)>;
    /// Fills `buf` from `offset`; short is an error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl Held for File {
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn stat(&self) -> io::Result<(u64, i64, u32)> {
        let m = self.metadata()?;
        Ok((m.len(), m.mtime(), m.mtime_nsec() as u32))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

/// Reads a [`Held`] from its start as a stream, for what cuts it into
/// chunks or hashes it whole.
pub struct HeldReader<'a> {
    held: &'a dyn Held,
    at: u64,
    size: u64,
}

impl<'a> HeldReader<'a> {
    pub fn new(held: &'a dyn Held) -> io::Result<HeldReader<'a>> {
        Ok(HeldReader {
            held,
            at: 0,
            size: held.size()?,
        })
    }
}

impl Read for HeldReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (self.size.saturating_sub(self.at)).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        self.held.read_exact_at(&mut buf[..n], self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Where a sending side reads blocks from, by manifest id.
pub trait BlockSource: Send + Sync {
    /// How entry `id` is named to a person.
    fn name(&self, id: u32) -> String;
    /// Fills `buf` with the bytes at `offset`. A source that shrank since
    /// it was listed is an error, never a short block; so is one that
    /// changed (P-14).
    fn read_block(&self, id: u32, offset: u64, buf: &mut [u8]) -> Result<(), StoreError>;
    /// Whether the block was found all zeros before the session started,
    /// so it need not be read again (P-29).
    fn known_zero(&self, id: u32, offset: u64, len: u32) -> bool;
    /// Checks that entry `id` is still the version the manifest listed,
    /// as after every read.
    fn check_unchanged(&self, id: u32) -> Result<(), StoreError>;
    /// Entry `id` opened whole, to be cut into chunks (P-31) or hashed
    /// (P-32).
    fn open(&self, id: u32) -> Result<Arc<dyn Held>, StoreError>;
}

/// Where a receiving side places what arrives, by manifest path and id.
/// A file is written under a temporary name, journaled as its blocks are
/// verified, and only placed under its name (`finalize`) once whole and
/// synced (P-15, P-35).
pub trait BlockSink: Send + Sync {
    /// Runs `poke` when another transfer finds a partial of this one's
    /// that still looks live (P-41).
    fn on_contention(&self, poke: Arc<Poke>);
    /// What was noted about files since the last call (P-41).
    fn take_notes(&self) -> Vec<Note>;
    /// The transfer is ending: its partials stop looking live (P-41).
    fn let_go(&self);
    /// Whether anything is at the destination already, so that a file
    /// may be found in place or serve as a basis (P-31).
    fn destination_exists(&self) -> bool;
    /// Where manifest path `rel` ends up, for messages.
    fn final_path(&self, rel: &[u8]) -> Result<Option<PathBuf>, StoreError>;
    /// What is in place at `rel` now, if anything (never through a link).
    fn open_placed(&self, rel: &[u8]) -> Result<Option<Arc<dyn Held>>, StoreError>;
    /// What an interrupted transfer left for `rel`, if no live transfer
    /// holds it (P-35).
    fn partial_of(&self, rel: &[u8]) -> Result<Option<Arc<dyn Held>>, StoreError>;
    fn make_dir(&self, rel: &[u8], mode: u32) -> Result<(), StoreError>;
    fn make_symlink(&self, rel: &[u8], target: &[u8]) -> Result<(), StoreError>;
    /// Opens entry `id`'s temporary (or takes its partial over).
    fn open_file(&self, id: u32, rel: &[u8], stamp: &Stamp) -> Result<(), StoreError>;
    /// The blocks entry `id`'s partial holds, verified (P-35).
    fn held_blocks(&self, id: u32) -> Result<Vec<(u32, [u8; 32])>, StoreError>;
    fn write_block(&self, id: u32, offset: u64, data: &[u8]) -> Result<(), StoreError>;
    /// A hole of `len` zero bytes (P-29).
    fn write_zero(&self, id: u32, offset: u64, len: u32) -> Result<(), StoreError>;
    /// Block `index` of `id` is written and verified: journal it.
    fn record(&self, id: u32, index: u32, hash: &[u8; 32]);
    /// Syncs and places verified files: `(id, mode, mtime, mtime_nsec)`.
    fn finalize(&self, batch: &[(u32, u32, i64, u32)]) -> Result<(), StoreError>;
    /// Every file is placed: directories get their times and modes.
    fn finish(&self, dirs: &[(Vec<u8>, i64, u32)]) -> Result<(), StoreError>;
    /// What lies under `dirs` that `keep` does not name (`--delete`):
    /// `(place, shown)` each.
    fn extraneous(
        &self,
        dirs: &[Vec<u8>],
        keep: &[Vec<u8>],
        contents: bool,
        partials: bool,
    ) -> Result<Vec<Extraneous>, StoreError>;
    /// Removes what `extraneous` found; says which places went.
    fn remove(&self, places: &[Vec<u8>], partials: bool) -> Result<Vec<bool>, StoreError>;
    /// The transfer failed: removes temporaries that cannot be resumed.
    fn abort(&self);
}

impl BlockSource for Sources {
    fn name(&self, id: u32) -> String {
        self.path(id)
            .map_or_else(|| format!("file {id}"), |p| p.display().to_string())
    }

    fn read_block(&self, id: u32, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        Sources::read_block(self, id, offset, buf)
    }

    fn known_zero(&self, id: u32, offset: u64, len: u32) -> bool {
        Sources::known_zero(self, id, offset, len)
    }

    fn check_unchanged(&self, id: u32) -> Result<(), StoreError> {
        Sources::check_unchanged(self, id)
    }

    fn open(&self, id: u32) -> Result<Arc<dyn Held>, StoreError> {
        Ok(Sources::open_whole(self, id)? as Arc<dyn Held>)
    }
}

impl BlockSink for Sink {
    fn on_contention(&self, poke: Arc<Poke>) {
        Sink::on_contention(self, poke)
    }

    fn take_notes(&self) -> Vec<Note> {
        Sink::take_notes(self)
    }

    fn let_go(&self) {
        Sink::let_go(self)
    }

    fn destination_exists(&self) -> bool {
        Sink::destination_exists(self)
    }

    fn final_path(&self, rel: &[u8]) -> Result<Option<PathBuf>, StoreError> {
        Sink::final_path(self, rel)
    }

    fn open_placed(&self, rel: &[u8]) -> Result<Option<Arc<dyn Held>>, StoreError> {
        Ok(Sink::open_placed(self, rel)?.map(|f| Arc::new(f) as Arc<dyn Held>))
    }

    fn partial_of(&self, rel: &[u8]) -> Result<Option<Arc<dyn Held>>, StoreError> {
        Ok(Sink::partial_of(self, rel)?.map(|f| Arc::new(f) as Arc<dyn Held>))
    }

    fn make_dir(&self, rel: &[u8], mode: u32) -> Result<(), StoreError> {
        Sink::make_dir(self, rel, mode)
    }

    fn make_symlink(&self, rel: &[u8], target: &[u8]) -> Result<(), StoreError> {
        Sink::make_symlink(self, rel, target)
    }

    fn open_file(&self, id: u32, rel: &[u8], stamp: &Stamp) -> Result<(), StoreError> {
        Sink::open_file(self, id, rel, stamp)
    }

    fn held_blocks(&self, id: u32) -> Result<Vec<(u32, [u8; 32])>, StoreError> {
        Sink::held_blocks(self, id)
    }

    fn write_block(&self, id: u32, offset: u64, data: &[u8]) -> Result<(), StoreError> {
        Sink::write_block(self, id, offset, data)
    }

    fn write_zero(&self, id: u32, offset: u64, len: u32) -> Result<(), StoreError> {
        Sink::write_zero(self, id, offset, len)
    }

    fn record(&self, id: u32, index: u32, hash: &[u8; 32]) {
        Sink::record(self, id, index, hash)
    }

    fn finalize(&self, batch: &[(u32, u32, i64, u32)]) -> Result<(), StoreError> {
        Sink::finalize(self, batch)
    }

    fn finish(&self, dirs: &[(Vec<u8>, i64, u32)]) -> Result<(), StoreError> {
        Sink::finish(self, dirs)
    }

    fn extraneous(
        &self,
        dirs: &[Vec<u8>],
        keep: &[Vec<u8>],
        contents: bool,
        partials: bool,
    ) -> Result<Vec<Extraneous>, StoreError> {
        Sink::extraneous(self, dirs, keep, contents, partials)
    }

    fn remove(&self, places: &[Vec<u8>], partials: bool) -> Result<Vec<bool>, StoreError> {
        Sink::remove(self, places, partials)
    }

    fn abort(&self) {
        Sink::abort(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_file_reads_whole_as_a_stream_and_at_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let f = File::open(&p).unwrap();
        let held: &dyn Held = &f;
        assert_eq!(held.size().unwrap(), data.len() as u64);
        let mut back = Vec::new();
        HeldReader::new(held)
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, data);
        let mut mid = [0u8; 10];
        held.read_exact_at(&mut mid, 1000).unwrap();
        assert_eq!(&mid, &data[1000..1010]);
        assert!(held.read_exact_at(&mut mid, data.len() as u64 - 5).is_err());
    }

    #[test]
    fn files_are_one_source_and_one_sink_for_the_engine() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("src");
        std::fs::write(&p, b"hello, world").unwrap();
        let sources = Sources::new(vec![p.clone()]);
        let source: &dyn BlockSource = &sources;
        let mut buf = [0u8; 5];
        source.read_block(0, 7, &mut buf).unwrap();
        assert_eq!(&buf, b"world");
        assert_eq!(source.name(0), p.display().to_string());
        assert_eq!(source.open(0).unwrap().size().unwrap(), 12);
        assert!(source.open(1).is_err());
        assert_eq!(source.name(1), "file 1");
    }
}
