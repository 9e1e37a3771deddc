//! The plan (P-42): which share of one transfer each of N shards moves.
//!
//! Every shard walks the same sources and computes the same plan from the
//! manifest alone, without asking anyone: the manifest's files, in its
//! order, are laid end to end on one line of bytes, each file weighing its
//! size plus [`FILE_COST`] (so a shard of many small files is not one of
//! many more files than another's), and the line is cut into N equal
//! segments. A cut that falls inside a file splits it at the nearest
//! block boundary: each shard then moves one contiguous run of the
//! manifest, so it holds at most two pieces of files (its first and its
//! last) and whole files between. Directories go to every shard.
//!
//! The plan's id hashes everything it was made from, so two shards that
//! saw different sources (a file changed between them) have different ids
//! and the destination's ledger tells them apart (P-42).

use wire::{Entry, EntryKind, Piece};

/// What one file (or symlink) weighs beyond its bytes: about what a small
/// file costs in round trips, opens and syncs, as bytes at 10 Gbit/s.
pub const FILE_COST: u64 = 64 << 10;

pub use wire::MAX_SHARDS;

/// What a shard moves of one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    Whole,
    /// `len` bytes from `offset`, both multiples of the block size
    /// except at the file's end.
    Piece {
        offset: u64,
        len: u64,
    },
}

/// Why no plan could be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    Count(u32),
    Index { index: u32, count: u32 },
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::Count(n) => write!(
                f,
                "a transfer is split into 1 to {MAX_SHARDS} shards, not {n}"
            ),
            PlanError::Index { index, count } => write!(
                f,
                "shard {index} is out of range: a transfer of {count} shards has shards 0 to {}",
                count - 1
            ),
        }
    }
}

/// The shares of every shard, by position in the manifest.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Hash of the manifest, the shard count, the block size and the
    /// destination's context: equal plans have equal ids.
    pub id: [u8; 32],
    pub count: u32,
    pub block_size: u32,
    /// Per shard, `(position in the manifest, share)` of its files and
    /// symlinks, in manifest order.
    shares: Vec<Vec<(usize, Share)>>,
}

/// One shard's share, ready to send: its manifest (every directory, and
/// its files and symlinks, a piece as a file of the piece's length) and
/// its pieces, which the receiver places into the whole file.
#[derive(Debug, Clone)]
pub struct ShardView {
    pub entries: Vec<Entry>,
    pub pieces: Vec<(u32, Piece)>,
    /// Files (pieces counted as files) and their bytes.
    pub files: u64,
    pub bytes: u64,
}

fn weight(kind: &EntryKind) -> u64 {
    match kind {
        EntryKind::File { size, .. } => FILE_COST + size,
        EntryKind::Symlink => FILE_COST,
        EntryKind::Dir { .. } => 0,
    }
}

/// The plan's id: everything that decides the split and what it moves.
fn plan_id(entries: &[Entry], count: u32, block_size: u32, context: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key("haul 2026-11 shard plan v1");
    h.update(&count.to_le_bytes());
    h.update(&block_size.to_le_bytes());
    h.update(&(context.len() as u64).to_le_bytes());
    h.update(context);
    h.update(&(entries.len() as u64).to_le_bytes());
    for e in entries {
        h.update(&(e.path.len() as u64).to_le_bytes());
        h.update(&e.path);
        match e.kind {
            EntryKind::File {
                size,
                mode,
                mtime,
                mtime_nsec,
            } => {
                h.update(&[0]);
                h.update(&size.to_le_bytes());
                h.update(&mode.to_le_bytes());
                h.update(&mtime.to_le_bytes());
                h.update(&mtime_nsec.to_le_bytes());
            }
            EntryKind::Dir {
                mode,
                mtime,
                mtime_nsec,
            } => {
                h.update(&[1]);
                h.update(&mode.to_le_bytes());
                h.update(&mtime.to_le_bytes());
                h.update(&mtime_nsec.to_le_bytes());
            }
            EntryKind::Symlink => {
                h.update(&[2]);
                h.update(&(e.target.len() as u64).to_le_bytes());
                h.update(&e.target);
            }
        }
    }
    *h.finalize().as_bytes()
}

impl Plan {
    /// Splits the manifest `entries` (in the order they will be sent) into
    /// `count` shards. `context` names what else the shards must agree
    /// on (the destination, say); it changes the id, not the split.
    pub fn new(
        entries: &[Entry],
        count: u32,
        block_size: u32,
        context: &[u8],
    ) -> Result<Plan, PlanError> {
        if count == 0 || count > MAX_SHARDS {
            return Err(PlanError::Count(count));
        }
        let bs = block_size.max(1) as u64;
        let total: u128 = entries.iter().map(|e| weight(&e.kind) as u128).sum();
        // Cut `j` (1..count) ends shard j-1's segment.
        let cut = |j: u32| -> u128 { total * j as u128 / count as u128 };
        let mut shares = vec![Vec::new(); count as usize];
        let (mut pos, mut shard) = (0u128, 0u32);
        for (k, e) in entries.iter().enumerate() {
            let (start_cost, size) = match e.kind {
                EntryKind::Dir { .. } => continue,
                EntryKind::Symlink => (FILE_COST as u128, 0u64),
                EntryKind::File { size, .. } => (FILE_COST as u128, size),
            };
            // A cut before the entry's bytes begin puts it in a later shard.
            let data = pos + start_cost;
            while shard + 1 < count && cut(shard + 1) <= data {
                shard += 1;
            }
            let mut start = 0u64;
            if matches!(e.kind, EntryKind::File { .. }) {
                while shard + 1 < count {
                    let c = cut(shard + 1);
                    if c >= data + size as u128 {
                        break;
                    }
                    let into = (c - data) as u64;
                    let off = (into + bs / 2) / bs * bs;
                    if off >= size {
                        // Rounds to the file's end: the cut falls after it.
                        break;
                    }
                    if off > start {
                        shares[shard as usize].push((
                            k,
                            Share::Piece {
                                offset: start,
                                len: off - start,
                            },
                        ));
                        start = off;
                    }
                    shard += 1;
                }
            }
            let share = if start == 0 {
                Share::Whole
            } else {
                Share::Piece {
                    offset: start,
                    len: size - start,
                }
            };
            shares[shard as usize].push((k, share));
            pos = data + size as u128;
        }
        Ok(Plan {
            id: plan_id(entries, count, block_size, context),
            count,
            block_size,
            shares,
        })
    }

    /// Shard `index`'s shares, `(position in the manifest, share)`.
    pub fn shares(&self, index: u32) -> Result<&[(usize, Share)], PlanError> {
        self.shares
            .get(index as usize)
            .map(|v| v.as_slice())
            .ok_or(PlanError::Index {
                index,
                count: self.count,
            })
    }

    /// Shard `index`'s manifest and pieces, from the same `entries` the
    /// plan was made from.
    pub fn view(&self, index: u32, entries: &[Entry]) -> Result<ShardView, PlanError> {
        let shares = self.shares(index)?;
        let mut v = ShardView {
            entries: Vec::new(),
            pieces: Vec::new(),
            files: 0,
            bytes: 0,
        };
        let mut next = shares.iter().peekable();
        for (k, e) in entries.iter().enumerate() {
            let share = match next.peek() {
                Some(&&(at, share)) if at == k => {
                    next.next();
                    Some(share)
                }
                _ => None,
            };
            match (&e.kind, share) {
                (EntryKind::Dir { .. }, _) => v.entries.push(e.clone()),
                (_, None) => {}
                (EntryKind::Symlink, Some(_)) => v.entries.push(e.clone()),
                (EntryKind::File { size, .. }, Some(Share::Whole)) => {
                    v.files += 1;
                    v.bytes += size;
                    v.entries.push(e.clone());
                }
                (
                    EntryKind::File {
                        size,
                        mode,
                        mtime,
                        mtime_nsec,
                    },
                    Some(Share::Piece { offset, len }),
                ) => {
                    v.files += 1;
                    v.bytes += len;
                    v.pieces.push((
                        e.id,
                        Piece {
                            path: e.path.clone(),
                            offset,
                            whole: *size,
                        },
                    ));
                    v.entries.push(Entry {
                        kind: EntryKind::File {
                            size: len,
                            mode: *mode,
                            mtime: *mtime,
                            mtime_nsec: *mtime_nsec,
                        },
                        ..e.clone()
                    });
                }
            }
        }
        Ok(v)
    }
}

/// The plan's id as people see it: 16 hex digits.
pub fn short_id(id: &[u8; 32]) -> String {
    id[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
