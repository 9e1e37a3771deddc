//! Hostile peers against the receiving state machines, for property tests
//! (`tests/hostile.rs`) and fuzzing (`fuzz/`, through `crates/fuzzing`).
//!
//! A player feeds a [`ReceiverSession`] or a [`DatagramReceiver`] a
//! sequence of steps a peer could send, plays the driver's part honestly
//! (opens files, writes blocks a step later, renames, finishes), and
//! checks after every step what must hold whatever the peer sends (P-40,
//! S-1 … S-7): nothing panics; the bookkeeping stays within the budget and the
//! assemblies within their limits; nothing is created twice, under a file
//! or a link, or outside what a pull asked for; a block is written only
//! where the manifest puts it and only with the bytes its hash names; a
//! file is finalised only once all its blocks are written; a sequence
//! number never wraps and a gap is never expanded. A broken rule panics,
//! which is what the property test and the fuzzer look for. An error from
//! the session ends the play, as it ends a session.
//!
//! Steps name files by `pick`, an index into the files accepted so far
//! (modulo their number), so random steps reach real blocks instead of
//! missing the manifest almost always.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use wire::datagram::{ChunkHeader, FirstChunk, DATA_SEQ_START, MAX_MISSING, MAX_STALE};
use wire::{BlockHeader, Entry, EntryKind, Msg};

use session::datagram::{DatagramError, DatagramReceiver, MAX_SEQ_AHEAD};
use session::digest::FileDigest;
use session::paths::{self, Asked};
use session::receiver::{Action, BlockVerdict, ReceiverError, ReceiverSession, Wanted};
use session::{block_count, block_len};

/// One thing that happens to a receiving session.
#[derive(Debug, Clone)]
pub enum RxStep {
    /// A manifest entry from the peer.
    Entry(Entry),
    /// The manifest's end: with the totals of what was accepted, or these.
    End { right: bool, files: u64, bytes: u64 },
    /// A block of an accepted file: `index` modulo its blocks when `fit`,
    /// a header that matches the manifest, and bytes that match the hash
    /// when `intact`.
    Block {
        pick: u32,
        index: u32,
        fit: bool,
        intact: bool,
    },
    /// A block header exactly as given, its bytes matching its hash.
    RawBlock(BlockHeader),
    /// `Zeros` announced a block (P-29).
    Zeros { pick: u32, index: u32 },
    /// The file's digest, once, for a file of several blocks: of what was
    /// written, or all zeros.
    FileEnd { pick: u32, right: bool },
    /// The sender's digest of a non-empty file, once, ahead of its blocks
    /// (`--checksum`). A hostile one goes as [`RxStep::Msg`].
    Digest { pick: u32 },
    /// Any other message, as the peer sent it (`Digest`, `Kept`, …).
    Msg(Msg),
    /// The driver answers a file in a gated session: `Ready` or `Skip`.
    Answer { pick: u32, skip: bool },
    /// The driver found blocks of a file in a partial (P-35).
    Hold { pick: u32, index: u32 },
    /// The peer says it kept a block the receiver holds (the `index`-th
    /// held, modulo). A hostile one goes as [`RxStep::Msg`].
    Kept { pick: u32, index: u32 },
}

/// How the receiving side is set up.
#[derive(Debug, Clone)]
pub struct RxSetup {
    pub block_size: u32,
    pub budget: u64,
    pub gated: bool,
    pub expect_digests: bool,
    pub dry_run: bool,
    /// A pull: its sources and `-r`.
    pub asked: Option<(Vec<String>, bool)>,
}

/// What a play came to.
#[derive(Debug, Default)]
pub struct RxOutcome {
    pub error: Option<ReceiverError>,
    pub steps: usize,
    pub entries: usize,
    pub blocks_written: usize,
    pub finalized: usize,
    pub finished: bool,
    pub peak_bookkeeping: u64,
}

#[derive(Clone)]
struct FileModel {
    id: u32,
    size: u64,
    hashes: HashMap<u32, [u8; 32]>,
    /// Blocks a partial holds (P-35).
    held: Vec<u32>,
    /// Its digest (`FileEnd`) or checksum (`Digest`) was sent.
    ended: bool,
    digested: bool,
    finalized: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Made {
    Dir,
    File,
    Link,
}

/// The driver's side of a receiving session, and the rules it checks.
struct RxPlayer {
    rx: ReceiverSession,
    setup: RxSetup,
    asked: Option<Asked>,
    files: Vec<FileModel>,
    by_id: HashMap<u32, usize>,
    made: BTreeMap<Vec<u8>, Made>,
    accepted_bytes: u64,
    /// Blocks told to be written, written at the next step.
    writing: Vec<(u32, u32, [u8; 32])>,
    out: RxOutcome,
}

/// Plays `steps` against a receiving session set up as `setup`.
pub fn play_receiver(setup: &RxSetup, steps: impl IntoIterator<Item = RxStep>) -> RxOutcome {
    let mut rx = ReceiverSession::new(setup.block_size);
    rx.set_budget(setup.budget);
    if setup.gated {
        rx.gate();
    }
    if setup.expect_digests {
        rx.expect_digests();
    }
    if setup.dry_run {
        rx.dry_run();
    }
    let asked = setup
        .asked
        .as_ref()
        .map(|(sources, recursive)| Asked::new(sources, *recursive));
    if let Some(a) = &asked {
        rx.expect(a.clone());
    }
    let mut p = RxPlayer {
        rx,
        setup: setup.clone(),
        asked,
        files: Vec::new(),
        by_id: HashMap::new(),
        made: BTreeMap::new(),
        accepted_bytes: 0,
        writing: Vec::new(),
        out: RxOutcome::default(),
    };
    for step in steps {
        p.out.steps += 1;
        if let Err(e) = p.step(step).and_then(|()| p.drive()) {
            p.out.error = Some(e);
            break;
        }
        let b = p.rx.bookkeeping();
        assert!(b <= setup.budget, "bookkeeping {b} over the budget");
        p.out.peak_bookkeeping = p.out.peak_bookkeeping.max(b);
    }
    p.out.finished = p.rx.is_finished();
    p.out
}

impl RxPlayer {
    fn pick(&self, pick: u32) -> Option<FileModel> {
        (!self.files.is_empty()).then(|| self.files[pick as usize % self.files.len()].clone())
    }

    fn blocks(&self, f: &FileModel) -> u64 {
        block_count(f.size, self.setup.block_size)
    }

    fn header(&self, f: &FileModel, index: u32) -> BlockHeader {
        let bs = self.setup.block_size;
        let len = block_len(f.size, bs, index as u64);
        BlockHeader {
            file: f.id,
            index,
            offset: index as u64 * bs as u64,
            len,
            hash: fake_hash(f.id, index),
            codec: wire::CODEC_NONE,
            wire_len: len,
        }
    }

    fn arrive(&mut self, h: &BlockHeader, computed: [u8; 32]) -> Result<(), ReceiverError> {
        let v = self.rx.block_arrived(h, &computed)?;
        if v == BlockVerdict::Write {
            // Only a block the manifest has, where it puts it, with the
            // bytes its hash names.
            let f = self.by_id.get(&h.file).map(|&i| &self.files[i]);
            let f = f.expect("a block written for a file the manifest has");
            let bs = self.setup.block_size;
            assert!((h.index as u64) < block_count(f.size, bs));
            assert_eq!(h.offset, h.index as u64 * bs as u64);
            assert_eq!(h.len, block_len(f.size, bs, h.index as u64));
            assert_eq!(
                computed, h.hash,
                "a block whose bytes fail its hash is written"
            );
            self.writing.push((h.file, h.index, h.hash));
        }
        Ok(())
    }

    fn step(&mut self, step: RxStep) -> Result<(), ReceiverError> {
        // The driver finishes the writes of the step before.
        for (file, index, hash) in std::mem::take(&mut self.writing) {
            if let Some(&i) = self.by_id.get(&file) {
                self.files[i].hashes.insert(index, hash);
            }
            self.out.blocks_written += 1;
            self.rx.block_written(file, index)?;
        }
        match step {
            RxStep::Entry(e) => {
                let (id, size) = match e.kind {
                    EntryKind::File { size, .. } => (Some(e.id), size),
                    _ => (None, 0),
                };
                self.rx.handle(Msg::Entry(e))?;
                self.out.entries += 1;
                if let Some(id) = id {
                    self.by_id.insert(id, self.files.len());
                    self.files.push(FileModel {
                        id,
                        size,
                        hashes: HashMap::new(),
                        held: Vec::new(),
                        ended: false,
                        digested: false,
                        finalized: false,
                    });
                    self.accepted_bytes += size;
                }
            }
            RxStep::End {
                right,
                files,
                bytes,
            } => {
                let (files, bytes) = match right {
                    true => (self.files.len() as u64, self.accepted_bytes),
                    false => (files, bytes),
                };
                self.rx.handle(Msg::ManifestEnd { files, bytes })?;
            }
            RxStep::Block {
                pick,
                index,
                fit,
                intact,
            } => {
                let Some(f) = self.pick(pick) else {
                    return Ok(());
                };
                let blocks = self.blocks(&f).max(1);
                let index = match fit {
                    true => (index as u64 % blocks) as u32,
                    false => index,
                };
                let h = self.header(&f, index);
                let computed = match intact {
                    true => h.hash,
                    false => [0xEE; 32],
                };
                self.arrive(&h, computed)?;
            }
            RxStep::RawBlock(h) => self.arrive(&h, h.hash)?,
            RxStep::Zeros { pick, index } => {
                let Some(f) = self.pick(pick) else {
                    return Ok(());
                };
                if let Some(h) = self.rx.zero_header(f.id, index) {
                    assert!((index as u64) < self.blocks(&f));
                    self.arrive(&h, h.hash)?;
                }
            }
            RxStep::FileEnd { pick, right } => {
                let Some(f) = self.pick(pick).filter(|f| !f.ended && self.blocks(f) > 1) else {
                    return Ok(());
                };
                self.files[self.by_id[&f.id]].ended = true;
                let digest = match right {
                    true => {
                        let n = self.blocks(&f) as u32;
                        let hashes: Vec<[u8; 32]> = (0..n)
                            .map(|i| f.hashes.get(&i).copied().unwrap_or(fake_hash(f.id, i)))
                            .collect();
                        FileDigest::of(f.size, hashes.iter())
                    }
                    false => [0; 32],
                };
                self.rx.handle(Msg::FileEnd { file: f.id, digest })?;
            }
            RxStep::Digest { pick } => {
                let Some(f) = self.pick(pick) else {
                    return Ok(());
                };
                if !self.setup.expect_digests || f.digested || f.size == 0 {
                    return Ok(());
                }
                self.files[self.by_id[&f.id]].digested = true;
                let digest = fake_hash(f.id, u32::MAX);
                self.rx.handle(Msg::Digest { file: f.id, digest })?;
            }
            RxStep::Msg(m) => {
                // A raw `Kept` stores held blocks as `RxStep::Kept` does:
                // the model must know them written (found by the fuzzer).
                let kept = match &m {
                    Msg::Kept(list) => list.clone(),
                    _ => Vec::new(),
                };
                self.rx.handle(m)?;
                for (file, index) in kept {
                    let held = self.by_id.get(&file).copied().filter(|&i| {
                        let f = &self.files[i];
                        f.held.contains(&index) && !f.hashes.contains_key(&index)
                    });
                    if let Some(i) = held {
                        self.files[i].hashes.insert(index, fake_hash(file, index));
                    }
                }
            }
            RxStep::Answer { pick, skip } => {
                let Some(f) = self.pick(pick) else {
                    return Ok(());
                };
                match skip {
                    // A driver skips only what it may; a refusal is its bug
                    // to avoid, not the peer's doing.
                    true => {
                        let _ = self.rx.skip(f.id);
                    }
                    false => self.rx.ready(f.id, Vec::new()),
                }
            }
            RxStep::Hold { pick, index } => {
                let Some(f) = self.pick(pick) else {
                    return Ok(());
                };
                if (index as u64) < self.blocks(&f) {
                    self.files[self.by_id[&f.id]].held.push(index);
                }
                self.rx.hold(f.id, vec![(index, fake_hash(f.id, index))]);
            }
            RxStep::Kept { pick, index } => {
                let Some(f) = self.pick(pick).filter(|f| !f.held.is_empty()) else {
                    return Ok(());
                };
                let index = f.held[index as usize % f.held.len()];
                let before = self.rx.bytes_stored;
                self.rx.handle(Msg::Kept(vec![(f.id, index)]))?;
                if self.rx.bytes_stored > before {
                    let i = self.by_id[&f.id];
                    self.files[i].hashes.insert(index, fake_hash(f.id, index));
                }
            }
        }
        Ok(())
    }

    /// The driver's part: carries out every action, checking each.
    fn drive(&mut self) -> Result<(), ReceiverError> {
        while let Some(a) = self.rx.poll_action() {
            match a {
                Action::MakeDir { path, .. } => self.made(path, Made::Dir),
                Action::MakeSymlink { path, .. } => self.made(path, Made::Link),
                Action::OpenFile { id, path, .. } => {
                    self.made(path, Made::File);
                    self.rx.opened(id)?;
                }
                Action::Finalize { id, .. } => {
                    let i = *self
                        .by_id
                        .get(&id)
                        .expect("finalized file is in the manifest");
                    let f = &mut self.files[i];
                    assert!(!f.finalized, "file {id} finalized twice");
                    let blocks = block_count(f.size, self.setup.block_size);
                    assert_eq!(
                        f.hashes.len() as u64,
                        blocks,
                        "file {id} finalized before all its blocks were written"
                    );
                    f.finalized = true;
                    self.out.finalized += 1;
                    self.rx.placed(id);
                }
                Action::Finish { .. } => self.rx.complete(),
            }
        }
        while self.rx.poll_control().is_some() {}
        Ok(())
    }

    /// Something is made on disk: the manifest rules (S-3) and, on a pull,
    /// what was asked for (S-5), as the driver would see them.
    fn made(&mut self, path: Vec<u8>, what: Made) {
        let parts = paths::components(&path).expect("only checked paths are made");
        if let Some(asked) = &self.asked {
            assert_eq!(
                asked.check(&parts, what == Made::Dir),
                Ok(()),
                "made {:?}, which was not asked for",
                String::from_utf8_lossy(&path)
            );
        }
        for (i, &b) in path.iter().enumerate() {
            if b == b'/' {
                let up = self.made.get(&path[..i]);
                assert!(
                    matches!(up, None | Some(Made::Dir)),
                    "made {:?} under a {up:?}",
                    String::from_utf8_lossy(&path)
                );
            }
        }
        if what != Made::Dir {
            let mut inside = path.clone();
            inside.push(b'/');
            let under = self.made.range(inside.clone()..).next();
            assert!(
                !under.is_some_and(|(p, _)| p.starts_with(&inside)),
                "made {what:?} {:?} where earlier entries lie",
                String::from_utf8_lossy(&path)
            );
        }
        let before = self.made.insert(path.clone(), what);
        assert!(
            before.is_none(),
            "made {:?} twice",
            String::from_utf8_lossy(&path)
        );
    }
}

/// The hash a test block of `file` and `index` claims.
fn fake_hash(file: u32, index: u32) -> [u8; 32] {
    let mut h = [0u8; 32];
    h[..4].copy_from_slice(&file.to_le_bytes());
    h[4..8].copy_from_slice(&index.to_le_bytes());
    h[8] = 0x5A;
    h
}

/// A sequence number relative to the receiver's state.
#[derive(Debug, Clone, Copy)]
pub enum Seq {
    /// The next number the sender would use.
    Next,
    /// `n` past the next one (a gap of `n`).
    Ahead(u64),
    /// `n` below the next one (a late arrival, or a repeat).
    Behind(u64),
    /// Exactly this number.
    Abs(u64),
}

/// One thing that happens to a datagram receiver.
#[derive(Debug, Clone)]
pub enum DgStep {
    /// A signal datagram (ping, stats).
    Signal(Seq),
    /// A data datagram. `pick` picks a file of the manifest (modulo), and
    /// `index` one of its blocks (modulo), or past them both when `stray`.
    /// Without `raw` the chunk is part `part` (modulo) of the block as an
    /// honest sender cuts it, in chunks of [`CHUNK`] bytes; with it,
    /// whatever `raw` says.
    Chunk {
        seq: Seq,
        pick: u32,
        stray: bool,
        index: u32,
        part: u32,
        raw: Option<RawChunk>,
    },
    /// Time passes; the reports are polled.
    Tick { ms: u32 },
    /// A completed block failed its hash: its chunks are wanted again.
    Reopen { pick: u32, index: u32 },
}

/// A chunk header's fields as a hostile sender picks them.
#[derive(Debug, Clone, Copy)]
pub struct RawChunk {
    pub offset: u32,
    pub block_len: u32,
    pub len: u32,
    pub first: bool,
}

/// Bytes of the chunks an honest sender's blocks are cut into here.
pub const CHUNK: u32 = 1200;

/// The length of a block as the honest sender of [`DgStep::Chunk`] has
/// it: 1 to 6000 bytes, one to five chunks.
fn honest_len(file: u32, index: u32) -> u32 {
    1 + ((file as u64 * 7919 + index as u64 * 104_729) % 6000) as u32
}

/// How the datagram receiver is set up: blocks per file of the manifest
/// (file ids 0, 1, …), whether the manifest is complete, and the assembly
/// limits.
#[derive(Debug, Clone)]
pub struct DgSetup {
    pub files: Vec<u32>,
    pub complete: bool,
    pub max_bytes: u64,
    pub max_blocks: usize,
}

#[derive(Debug, Default)]
pub struct DgOutcome {
    pub error: Option<DatagramError>,
    pub steps: usize,
    pub completed: usize,
    pub reports: usize,
    pub refused: u64,
}

/// What every chunk a play sends carries (made once, not per play).
static CHUNK_BYTES: [u8; 1 << 16] = [0xA5; 1 << 16];

/// Plays `steps` against a datagram receiver set up as `setup`.
pub fn play_datagram(setup: &DgSetup, steps: impl IntoIterator<Item = DgStep>) -> DgOutcome {
    let mut now = Duration::ZERO;
    let mut r = DatagramReceiver::new(Duration::from_millis(40), now);
    r.limit_assemblies(setup.max_bytes, setup.max_blocks);
    let mut out = DgOutcome::default();
    // Blocks handed out and not reopened: the receiver has them.
    let mut stored: HashSet<(u32, u32)> = HashSet::new();
    let mut next = DATA_SEQ_START;
    let data = &CHUNK_BYTES;
    for step in steps {
        out.steps += 1;
        let numbered = r.numbered();
        let seq_of = |s: Seq| match s {
            Seq::Next => next,
            Seq::Ahead(n) => next.saturating_add(n),
            Seq::Behind(n) => next.saturating_sub(n),
            Seq::Abs(n) => n,
        };
        // What on_seq must say: too far ahead, or fine.
        let highest = DATA_SEQ_START + numbered;
        let too_far =
            |seq: u64| seq >= highest && (seq - highest > MAX_SEQ_AHEAD || seq == u64::MAX);
        let result = match step {
            DgStep::Signal(s) => {
                let seq = seq_of(s);
                let got = r.on_seq(now, seq, 100);
                assert_eq!(
                    got.is_err(),
                    too_far(seq),
                    "seq {seq} past {highest}: {got:?}"
                );
                got.map(|_| ())
            }
            DgStep::Chunk {
                seq,
                pick,
                stray,
                index,
                part,
                raw,
            } => {
                let seq = seq_of(seq);
                let nfiles = setup.files.len() as u32;
                let (file, index) = match (stray, nfiles) {
                    (false, n) if n > 0 => {
                        let file = pick % n;
                        (file, index % setup.files[file as usize].max(1))
                    }
                    _ => (nfiles.saturating_add(pick), index),
                };
                let in_manifest = setup.files.get(file as usize).is_some_and(|&b| index < b);
                let RawChunk {
                    offset,
                    block_len,
                    len,
                    first,
                } = raw.unwrap_or_else(|| {
                    let block_len = honest_len(file, index);
                    let offset = part % block_len.div_ceil(CHUNK) * CHUNK;
                    RawChunk {
                        offset,
                        block_len,
                        len: CHUNK.min(block_len - offset),
                        first: offset == 0,
                    }
                });
                let len = (len as usize).min(data.len());
                let h = ChunkHeader {
                    sent_us: now.as_micros() as u32,
                    file,
                    index,
                    offset,
                    block_len,
                    first: first.then_some(FirstChunk {
                        hash: fake_hash(file, index),
                        codec: wire::CODEC_NONE,
                        len: block_len,
                    }),
                };
                let wanted = |f: u32, i: u32| {
                    assert_eq!((f, i), (file, index));
                    match (in_manifest, setup.complete) {
                        (true, _) if stored.contains(&(f, i)) => Wanted::Already,
                        (true, _) => Wanted::Yes,
                        (false, false) => Wanted::NotYet,
                        (false, true) => Wanted::Never,
                    }
                };
                let got = r.on_seq(now, seq, len + 60);
                assert_eq!(
                    got.is_err(),
                    too_far(seq),
                    "seq {seq} past {highest}: {got:?}"
                );
                match got.and_then(|_| r.on_chunk(now, 0, &h, &data[..len], wanted)) {
                    Ok(Some(c)) => {
                        out.completed += 1;
                        assert!(
                            in_manifest || !setup.complete,
                            "assembled a block the manifest does not have"
                        );
                        assert!(stored.insert((c.file, c.index)), "completed twice");
                        assert!(c.data.len() <= wire::MAX_BLOCK_SIZE as usize);
                        Ok(())
                    }
                    Ok(None) => Ok(()),
                    Err(e) => {
                        if let DatagramError::NoSuchBlock { .. } = e {
                            assert!(setup.complete && !in_manifest, "{e}");
                        }
                        Err(e)
                    }
                }
            }
            DgStep::Tick { ms } => {
                now += Duration::from_millis(ms as u64);
                let gaps = r.gaps();
                let pending = r.pending_blocks();
                let reports = r.poll_reports(now);
                out.reports += reports.len();
                let ranges: usize = reports.iter().map(|x| x.missing.len()).sum();
                assert!(ranges <= gaps, "{ranges} ranges from {gaps} gaps");
                assert!(reports.len() <= 1 + gaps / MAX_MISSING + 2 * pending / MAX_STALE + 2);
                for x in &reports {
                    assert!(x.missing.iter().all(|&(_, n)| n as u64 <= MAX_SEQ_AHEAD));
                }
                Ok(())
            }
            DgStep::Reopen { pick, index } => {
                let file = match setup.files.len() as u32 {
                    0 => pick,
                    n => pick % n,
                };
                stored.remove(&(file, index));
                r.reopen(file, index);
                Ok(())
            }
        };
        assert!(r.numbered() >= numbered, "highest went back (wrapped?)");
        assert!(r.assembly_bytes() <= setup.max_bytes);
        assert!(r.pending_blocks() <= setup.max_blocks);
        assert!(r.gaps() as u64 <= r.stats.datagrams);
        next = DATA_SEQ_START + r.numbered();
        if let Err(e) = result {
            out.error = Some(e);
            break;
        }
    }
    out.refused = r.stats.refused;
    out
}
