//! The journal beside a partial file (P-35): which blocks of it were
//! verified and written, and their hashes.
//!
//! `.NAME.haul.journal` sits beside `.NAME.haul.part`. It starts with a
//! 32-byte header naming what the partial is a copy of (the source's size
//! and modification time, and the block size), then one 36-byte record per
//! block written: `u32` index and the block's BLAKE3 hash, all
//! little-endian. A record is appended only after its block's `pwrite`
//! returned, so a process killed at any moment leaves a journal that lists
//! only blocks whose bytes reached the file (a torn record at the end is
//! ignored). A resuming receiver still reads each listed block back and
//! checks its hash before it claims it: the journal says where to look,
//! never what is true.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, OFlags};

use crate::beneath::Beneath;

use thiserror::Error;

/// The first 8 bytes of every journal.
pub const MAGIC: &[u8; 8] = b"HAULJNL1";
/// Header: magic, `u32` block size, `u64` size, `i64` mtime, `u32` mtime
/// nanoseconds.
pub const HEADER_LEN: usize = 32;
/// Record: `u32` block index, `bytes[32]` block hash.
pub const RECORD_LEN: usize = 36;

/// Why a journal was started afresh beside a partial that held data
/// (P-41): the partial is then reused by content only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Afresh {
    /// There was none.
    Missing,
    /// It could not be read or decoded: why.
    Unreadable(String),
    /// It was written for another copy: the stamp it names.
    OtherStamp(Stamp),
}

/// Blocks a journal lists: index and hash, in index order.
pub type Listed = Vec<(u32, [u8; 32])>;

pub use crate::storage::Stamp;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum JournalError {
    #[error("not a haul journal (bad magic)")]
    Magic,
    #[error("journal header is truncated")]
    Short,
    #[error("journal names a block size of {0}, outside 64 KiB to 16 MiB")]
    BlockSize(u32),
    #[error("journal lists block {index}, past the file's {blocks} blocks")]
    Index { index: u32, blocks: u64 },
}

pub fn encode_header(s: &Stamp) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&s.block_size.to_le_bytes());
    h[12..20].copy_from_slice(&s.size.to_le_bytes());
    h[20..28].copy_from_slice(&s.mtime.to_le_bytes());
    h[28..32].copy_from_slice(&s.mtime_nsec.to_le_bytes());
    h
}

pub fn encode_record(index: u32, hash: &[u8; 32]) -> [u8; RECORD_LEN] {
    let mut r = [0u8; RECORD_LEN];
    r[..4].copy_from_slice(&index.to_le_bytes());
    r[4..].copy_from_slice(hash);
    r
}

/// Decodes a journal: its stamp and the blocks it lists, in index order.
/// A block listed twice keeps its last record; a torn record at the end
/// is ignored.
pub fn decode(b: &[u8]) -> Result<(Stamp, Listed), JournalError> {
    if b.len() < HEADER_LEN {
        return Err(if b.starts_with(&MAGIC[..b.len().min(8)]) {
            JournalError::Short
        } else {
            JournalError::Magic
        });
    }
    if &b[..8] != MAGIC {
        return Err(JournalError::Magic);
    }
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    let stamp = Stamp {
        block_size: u32_at(8),
        size: u64::from_le_bytes(b[12..20].try_into().expect("8 bytes")),
        mtime: i64::from_le_bytes(b[20..28].try_into().expect("8 bytes")),
        mtime_nsec: u32_at(28),
    };
    if !(wire::MIN_BLOCK_SIZE..=wire::MAX_BLOCK_SIZE).contains(&stamp.block_size) {
        return Err(JournalError::BlockSize(stamp.block_size));
    }
    let blocks = stamp.blocks();
    let mut listed = BTreeMap::new();
    for rec in b[HEADER_LEN..].chunks_exact(RECORD_LEN) {
        let index = u32::from_le_bytes(rec[..4].try_into().expect("4 bytes"));
        if index as u64 >= blocks {
            return Err(JournalError::Index { index, blocks });
        }
        listed.insert(index, rec[4..].try_into().expect("32 bytes"));
    }
    Ok((stamp, listed.into_iter().collect()))
}

/// A journal, appended to as blocks are written. It holds no descriptor
/// between records, so a receiver of many files needs none for them (one
/// `open` per block written costs microseconds against a block's
/// milliseconds).
/// The journal `name` in a directory, reached without following a link
/// (P-38): opened, appended to and removed through the directory's
/// descriptor, so a link planted under the journal's name is never
/// written through.
pub struct Journal<'a> {
    pub dir: &'a OwnedFd,
    pub name: &'a OsStr,
}

impl Journal<'_> {
    fn open_with(&self, flags: OFlags) -> io::Result<File> {
        Beneath::open_in(self.dir, self.name, flags, 0o600)
    }

    /// Opens the journal for a partial of `stamp`. With `keep` (the
    /// partial held data from an earlier transfer), a journal written for
    /// the same stamp is kept and what it lists returned; anything else
    /// (missing, unreadable, another stamp) is started afresh.
    pub fn open(&self, stamp: &Stamp, keep: bool) -> io::Result<Listed> {
        self.open_why(stamp, keep).map(|(listed, _)| listed)
    }

    /// [`Journal::open`], saying also why a journal was started afresh
    /// where `keep` asked to keep it (P-41).
    pub fn open_why(&self, stamp: &Stamp, keep: bool) -> io::Result<(Listed, Option<Afresh>)> {
        let mut why = None;
        if keep {
            why = Some(Afresh::Missing);
            if let Ok(mut f) = self.open_with(OFlags::RDWR | OFlags::APPEND | OFlags::NONBLOCK) {
                let regular = f.metadata()?.is_file();
                let mut b = Vec::new();
                // Bounded: a journal lists each block at most a few times.
                let limit = HEADER_LEN as u64 + 4 * RECORD_LEN as u64 * stamp.blocks();
                if regular && f.metadata()?.len() <= limit {
                    f.read_to_end(&mut b)?;
                }
                why = Some(match decode(&b) {
                    Ok((s, listed)) if s == *stamp => {
                        // A torn record at the end is cut, so the next
                        // one lines up.
                        let whole = HEADER_LEN + (b.len() - HEADER_LEN) / RECORD_LEN * RECORD_LEN;
                        if whole != b.len() {
                            f.set_len(whole as u64)?;
                        }
                        return Ok((listed, None));
                    }
                    Ok((s, _)) => Afresh::OtherStamp(s),
                    Err(_) if !regular => Afresh::Unreadable("not a regular file".into()),
                    Err(_) if b.is_empty() => Afresh::Unreadable("empty or too long".into()),
                    Err(e) => Afresh::Unreadable(e.to_string()),
                });
            }
        }
        // Whatever else is under the name goes (a link is removed, never
        // followed), and the journal starts afresh.
        match rustix::fs::unlinkat(self.dir, self.name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
        let mut f = self.open_with(OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL)?;
        f.write_all(&encode_header(stamp))?;
        Ok((Vec::new(), why))
    }

    /// Records that block `index`, hashing to `hash`, was written. One
    /// `write` of 36 bytes in append mode: records from several threads
    /// do not interleave.
    pub fn record(&self, index: u32, hash: &[u8; 32]) -> io::Result<()> {
        let mut f = self.open_with(OFlags::WRONLY | OFlags::APPEND)?;
        f.write_all(&encode_record(index, hash))
    }

    /// Removes the journal (its file is placed, or given up).
    pub fn remove(&self) {
        let _ = rustix::fs::unlinkat(self.dir, self.name, AtFlags::empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stamp() -> Stamp {
        Stamp {
            block_size: 1 << 20,
            size: 5 << 20,
            mtime: 1_700_000_000,
            mtime_nsec: 7,
        }
    }

    #[test]
    fn a_journal_keeps_its_records_for_the_same_stamp_only() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(".x.haul.journal");
        let dir = crate::beneath::open_dir(d.path()).unwrap();
        let j = Journal {
            dir: &dir,
            name: OsStr::new(".x.haul.journal"),
        };
        let listed = j.open(&stamp(), true).unwrap();
        assert!(listed.is_empty());
        j.record(3, &[3; 32]).unwrap();
        j.record(1, &[1; 32]).unwrap();
        j.record(3, &[9; 32]).unwrap();
        // A torn record, as a kill mid-write would leave.
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(&[4, 0, 0]).unwrap();
        drop(f);
        let listed = j.open(&stamp(), true).unwrap();
        assert_eq!(listed, vec![(1, [1; 32]), (3, [9; 32])]);
        j.record(4, &[4; 32]).unwrap();
        let (_, listed) = decode(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(listed.len(), 3, "the torn record was cut: {listed:?}");
        let other = Stamp {
            mtime: 1,
            ..stamp()
        };
        let listed = j.open(&other, true).unwrap();
        assert!(listed.is_empty(), "another version of the source");
        let listed = j.open(&other, false).unwrap();
        assert!(listed.is_empty(), "a fresh partial");
        // A link under the journal's name is removed, never written through.
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"secret").unwrap();
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        assert!(j.open(&stamp(), true).unwrap().is_empty());
        assert!(!std::fs::symlink_metadata(&p).unwrap().is_symlink());
        assert_eq!(std::fs::read(&victim).unwrap(), b"secret");
    }

    #[test]
    fn a_journal_started_afresh_says_why() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(".x.haul.journal");
        let dir = crate::beneath::open_dir(d.path()).unwrap();
        let j = Journal {
            dir: &dir,
            name: OsStr::new(".x.haul.journal"),
        };
        assert_eq!(j.open_why(&stamp(), true).unwrap().1, Some(Afresh::Missing));
        j.record(1, &[1; 32]).unwrap();
        let kept = j.open_why(&stamp(), true).unwrap();
        assert_eq!(kept, (vec![(1, [1; 32])], None));
        let other = Stamp {
            size: 6 << 20,
            ..stamp()
        };
        assert_eq!(
            j.open_why(&other, true).unwrap().1,
            Some(Afresh::OtherStamp(stamp()))
        );
        std::fs::write(&p, b"not a journal at all, longer than a header").unwrap();
        assert!(matches!(
            j.open_why(&stamp(), true).unwrap().1,
            Some(Afresh::Unreadable(_))
        ));
        assert_eq!(
            j.open_why(&stamp(), false).unwrap().1,
            None,
            "nothing to keep"
        );
    }

    #[test]
    fn bad_journals_are_refused() {
        assert_eq!(decode(b"HAUL"), Err(JournalError::Short));
        assert_eq!(decode(b"nonsense"), Err(JournalError::Magic));
        let mut b = encode_header(&stamp()).to_vec();
        b.extend_from_slice(&encode_record(5, &[0; 32]));
        assert_eq!(
            decode(&b),
            Err(JournalError::Index {
                index: 5,
                blocks: 5
            })
        );
        let tiny = Stamp {
            block_size: 512,
            ..stamp()
        };
        assert_eq!(
            decode(&encode_header(&tiny)),
            Err(JournalError::BlockSize(512))
        );
    }

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = decode(&b);
        }

        #[test]
        fn records_roundtrip(recs in proptest::collection::vec((0u32..5, any::<[u8; 32]>()), 0..20)) {
            let mut b = encode_header(&stamp()).to_vec();
            let mut want = BTreeMap::new();
            for (i, h) in &recs {
                b.extend_from_slice(&encode_record(*i, h));
                want.insert(*i, *h);
            }
            let (s, listed) = decode(&b).unwrap();
            prop_assert_eq!(s, stamp());
            prop_assert_eq!(listed, want.into_iter().collect::<Vec<_>>());
        }
    }
}
