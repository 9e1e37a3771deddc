//! Files and directories, and nothing about networks.
//!
//! - [`walk`]: turn command-line sources into manifest entries;
//!   [`walk_beneath`] a served pull's, by descriptor, following no link.
//! - [`cache`]: the receiver's persistent chunk cache (`--cache DIR`).
//! - [`beneath`]: every change at a destination, made through directory
//!   descriptors without following a link.
//! - [`confine`]: map a peer's path into a served root and refuse escapes.
//! - [`source`]: read a block of a source file at its offset.
//! - [`partial`]: the files an interrupted transfer leaves, found again
//!   and resumed from.
//! - [`journal`]: the record beside a partial of which blocks it holds.
//! - `out_file`: one file being received: its temporary, its descriptor,
//!   its journal.
//! - [`storage`]: the interface the engine uses, [`BlockSource`] and
//!   [`BlockSink`], which the files here implement.
//! - [`sink`]: create directories, links and temporary files at the
//!   destination, write blocks in place, and rename a file into place only
//!   after it is verified and synced.

pub mod beneath;
pub mod cache;
pub mod confine;
pub mod durable;
pub mod error;
pub mod journal;
mod out_file;
pub mod partial;
pub mod sink;
pub mod source;
pub mod storage;
mod temp;
pub mod walk;
pub mod walk_beneath;

pub use cache::ChunkCache;
pub use confine::Root;
pub use error::{StoreError, StoreErrorKind};
pub use sink::{Destination, OutFile, Sink};
pub use source::Sources;
pub use storage::{
    unsupported, BlockSink, BlockSource, Capabilities, DirTimes, Extraneous, Held, HeldReader,
    Note, Poke, Stamp, Verified,
};
pub use walk::{names_contents, walk, walk_listed, Inode, Walked};
pub use walk_beneath::walk_beneath;
