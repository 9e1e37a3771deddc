//! The storage interface the transfer engine moves blocks between: a
//! source it reads blocks from ([`BlockSource`]) and a sink it places them
//! in ([`BlockSink`]), both by manifest id, and what a side already has
//! open to read at offsets ([`Held`]: a basis, a partial, a file in
//! place). The engine sees only these traits and the types here, which
//! belong to the interface, not to one backend.
//!
//! A backend implements a small core (a source: name a file, read a
//! block, open it whole; a sink: make a directory, open a file, write a
//! block, place the verified ones, finish, abort, and say what it can do)
//! and overrides the optional capabilities it has; the engine asks
//! [`BlockSink::capabilities`] before it relies on one. Files implement
//! every capability ([`Sources`], [`Sink`]: temporary names, journals, the
//! order of syncs, confinement, resume); object stores and a shard's layer
//! over files implement the same, and the engine does not change. A layer
//! over another sink names it in [`BlockSink::inner`], and every optional
//! capability it does not override goes to that sink.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{StoreError, StoreErrorKind};
use crate::source::Sources;

/// What a partial is a copy of: the source file's size and modification
/// time as its manifest entry gave them, and the session's block size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub block_size: u32,
    pub size: u64,
    pub mtime: i64,
    pub mtime_nsec: u32,
}

impl Stamp {
    /// How many blocks a file of this stamp has.
    pub fn blocks(&self) -> u64 {
        self.size.div_ceil(self.block_size.max(1) as u64)
    }
}

/// A file every block of which is verified, to be placed under its name
/// with its mode and modification time (P-17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    pub id: u32,
    pub mode: u32,
    pub mtime: i64,
    pub mtime_nsec: u32,
}

/// A directory of the manifest and the modification time it gets once
/// every file is placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirTimes {
    pub rel: Vec<u8>,
    pub mtime: i64,
    pub mtime_nsec: u32,
}

/// Something `--delete` removes: its place (for [`BlockSink::remove`]),
/// and its path relative to the destination (for the report).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extraneous {
    pub place: Vec<u8>,
    pub shown: Vec<u8>,
    /// A directory (or an object prefix).
    pub dir: bool,
    /// A regular file's size and modification time (seconds), where the
    /// store told them.
    pub file: Option<(u64, i64)>,
}

/// What a receiver notes about its files for the user (P-41): the kind,
/// and one line naming the file.
pub type Note = (wire::NoteKind, String);

/// Called when another transfer finds a partial of this one's that still
/// looks live (P-41): the holder says something to its peer at once, so a
/// peer gone without a word answers with a reset.
pub type Poke = dyn Fn() + Send + Sync;

/// What a sink can do besides placing files, for the engine to ask before
/// it relies on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Resumes an interrupted transfer from what it verified
    /// ([`BlockSink::partial_of`], [`BlockSink::held_blocks`], P-35).
    pub resume: bool,
    /// Reads what is in place, for sync and as a dedup basis
    /// ([`BlockSink::open_placed`], P-31, P-32).
    pub in_place: bool,
    /// Keeps symbolic links ([`BlockSink::make_symlink`]).
    pub links: bool,
    /// Removes what the source does not have (`--delete`, P-32).
    pub delete: bool,
    /// Keeps modes and directory times (`-p`).
    pub modes: bool,
}

/// A capability a sink lacks, as the engine is told if it asks anyway:
/// "this destination cannot {what}".
pub fn unsupported(what: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::BadRequest,
        format!("this destination cannot {what}"),
    )
}

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
    /// Entry `id` opened whole, to be cut into chunks (P-31) or hashed
    /// (P-32).
    fn open(&self, id: u32) -> Result<Arc<dyn Held>, StoreError>;
    /// Whether the block was found all zeros before the session started,
    /// so it need not be read again (P-29).
    fn known_zero(&self, _id: u32, _offset: u64, _len: u32) -> bool {
        false
    }
    /// Checks that entry `id` is still the version the manifest listed,
    /// as after every read.
    fn check_unchanged(&self, _id: u32) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Where a receiving side places what arrives, by manifest path and id.
/// A file is written under a temporary name (or an upload not yet
/// visible), and only placed under its name ([`BlockSink::finalize`])
/// once whole and verified (P-15, P-17).
pub trait BlockSink: Send + Sync {
    // The core, which every sink has.

    /// Makes directory `rel` (a store without directories takes it as
    /// given).
    fn make_dir(&self, rel: &[u8], mode: u32) -> Result<(), StoreError>;
    /// Opens entry `id`'s temporary (or takes its partial over).
    fn open_file(&self, id: u32, rel: &[u8], stamp: &Stamp) -> Result<(), StoreError>;
    fn write_block(&self, id: u32, offset: u64, data: &[u8]) -> Result<(), StoreError>;
    /// Places verified files under their names.
    fn finalize(&self, files: &[Verified]) -> Result<(), StoreError>;
    /// Every file is placed: directories get their times and modes.
    fn finish(&self, dirs: &[DirTimes]) -> Result<(), StoreError>;
    /// The transfer failed: removes temporaries that cannot be resumed.
    fn abort(&self);
    /// What it can do besides, for the engine to ask.
    fn capabilities(&self) -> Capabilities;

    // A layer over another sink (a shard's over files) names it: every
    // capability below that the layer does not override goes there.

    /// The sink this one is a layer over, if it is one.
    fn inner(&self) -> Option<&dyn BlockSink> {
        None
    }

    // Optional capabilities, with what a sink that lacks them does.

    /// A hole of `len` zero bytes (P-29); written as zeros by default.
    fn write_zero(&self, id: u32, offset: u64, len: u32) -> Result<(), StoreError> {
        match self.inner() {
            Some(i) => i.write_zero(id, offset, len),
            None => self.write_block(id, offset, &vec![0u8; len as usize]),
        }
    }
    /// Block `index` of `id` is written and verified: journal it (P-35).
    fn record(&self, id: u32, index: u32, hash: &[u8; 32]) {
        if let Some(i) = self.inner() {
            i.record(id, index, hash)
        }
    }
    /// Places a link at `rel` pointing at `target`.
    fn make_symlink(&self, rel: &[u8], target: &[u8]) -> Result<(), StoreError> {
        match self.inner() {
            Some(i) => i.make_symlink(rel, target),
            None => Err(unsupported("keep symbolic links")),
        }
    }
    /// Whether anything is at the destination already, so that a file
    /// may be found in place or serve as a basis (P-31).
    fn destination_exists(&self) -> bool {
        self.inner().is_some_and(|i| i.destination_exists())
    }
    /// Where manifest path `rel` ends up, for messages.
    fn final_path(&self, rel: &[u8]) -> Result<Option<PathBuf>, StoreError> {
        self.inner().map_or(Ok(None), |i| i.final_path(rel))
    }
    /// What is in place at `rel` now, if anything (never through a link).
    fn open_placed(&self, rel: &[u8]) -> Result<Option<Arc<dyn Held>>, StoreError> {
        self.inner().map_or(Ok(None), |i| i.open_placed(rel))
    }
    /// What an interrupted transfer left for `rel`, if no live transfer
    /// holds it (P-35).
    fn partial_of(&self, rel: &[u8]) -> Result<Option<Arc<dyn Held>>, StoreError> {
        self.inner().map_or(Ok(None), |i| i.partial_of(rel))
    }
    /// The blocks entry `id`'s partial holds, verified (P-35).
    fn held_blocks(&self, id: u32) -> Result<Vec<(u32, [u8; 32])>, StoreError> {
        self.inner().map_or(Ok(Vec::new()), |i| i.held_blocks(id))
    }
    /// What lies under `dirs` that `keep` does not name (`--delete`).
    fn extraneous(
        &self,
        dirs: &[Vec<u8>],
        keep: &[Vec<u8>],
        contents: bool,
        partials: bool,
    ) -> Result<Vec<Extraneous>, StoreError> {
        match self.inner() {
            Some(i) => i.extraneous(dirs, keep, contents, partials),
            None => Err(unsupported("delete what the source lacks (--delete)")),
        }
    }
    /// Removes what `extraneous` found; says which places went.
    fn remove(&self, places: &[Vec<u8>], partials: bool) -> Result<Vec<bool>, StoreError> {
        match self.inner() {
            Some(i) => i.remove(places, partials),
            None => Err(unsupported("delete what the source lacks (--delete)")),
        }
    }
    /// Runs `poke` when another transfer finds a partial of this one's
    /// that still looks live (P-41).
    fn on_contention(&self, poke: Arc<Poke>) {
        if let Some(i) = self.inner() {
            i.on_contention(poke)
        }
    }
    /// What was noted about files since the last call (P-41).
    fn take_notes(&self) -> Vec<Note> {
        self.inner().map_or(Vec::new(), |i| i.take_notes())
    }
    /// The transfer is ending: its partials stop looking live (P-41).
    fn let_go(&self) {
        if let Some(i) = self.inner() {
            i.let_go()
        }
    }
}

impl BlockSource for Sources {
    fn name(&self, id: u32) -> String {
        self.path(id)
            .map_or_else(|| format!("file {id}"), |p| p.display().to_string())
    }

    fn read_block(&self, id: u32, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        Sources::read_block(self, id, offset, buf)
    }

    fn open(&self, id: u32) -> Result<Arc<dyn Held>, StoreError> {
        Ok(Sources::open_whole(self, id)? as Arc<dyn Held>)
    }

    fn known_zero(&self, id: u32, offset: u64, len: u32) -> bool {
        Sources::known_zero(self, id, offset, len)
    }

    fn check_unchanged(&self, id: u32) -> Result<(), StoreError> {
        Sources::check_unchanged(self, id)
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
