//! Control messages (P-6): everything except block bytes travels as one of
//! these, sealed, on the control connection.

use crate::asked::{decode_selection, decode_shard};
pub use crate::asked::{
    Piece, Selection, ShardSpec, SyncOptions, MAX_FILTER_BYTES, MAX_FILTER_RULES,
    MAX_FILTER_RULE_LEN, MAX_PIECES, MAX_SHARDS,
};
use crate::buf::{DecodeError, Reader, Writer};
use crate::error_code::ErrorCode;

pub use crate::buf::MAX_PATH_LEN;
const MAX_MESSAGE_TEXT: usize = 4096;
const MAX_PATHS: usize = 4096;

/// What the client asks of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Client sends; `paths` holds the one destination on the server.
    Push,
    /// Server sends; `paths` holds the sources on the server.
    Pull,
    /// Server sends `bytes` of generated, incompressible data as one file
    /// that the client verifies and discards: a memory-to-memory goodput
    /// test (`haul probe`, P-36). `paths` is empty.
    Probe { bytes: u64 },
    /// Carry TCP connections through this session to `paths[0]`, a
    /// `HOST:PORT` the server connects to (`haul tunnel`, P-37). The data
    /// connections become the tunnel's lanes.
    Tunnel,
    /// Issue a one-time grant (P-45 G-1 … G-6): the holder of the secret
    /// of `key` may push once into `paths[0]`, with at most the request's
    /// options, `budget` file bytes, within `lifetime` seconds. The server
    /// answers `Granted` and the session ends.
    Grant {
        key: [u8; 32],
        budget: u64,
        lifetime: u32,
        /// For a repeating sync (`--every`): used by one session at a
        /// time until it expires, not consumed by the first success.
        repeat: bool,
    },
    /// Managed transfers (P-45 J-1): the session carries `JobCall`s and
    /// the server's `JobAnswer`s. `paths` is empty.
    Job,
}

/// Longest `JobCall` (JSON).
pub const MAX_JOB_CALL: usize = 256 << 10;
/// Longest `JobAnswer` (JSON).
pub const MAX_JOB_ANSWER: usize = 4 << 20;
/// Longest lifetime of a grant: a year.
pub const MAX_GRANT_LIFETIME: u32 = 366 * 24 * 3600;

/// Most bytes one probe session may ask for.
pub const MAX_PROBE_BYTES: u64 = 64 << 30;

/// Protection of data frames (P-7). Control frames are always encrypted.
pub const PROTECT_AES256GCM: u8 = 0;
pub const PROTECT_CHACHA20POLY1305: u8 = 1;
pub const PROTECT_INTEGRITY_ONLY: u8 = 2;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub op: Op,
    pub paths: Vec<String>,
    /// Copy directories recursively.
    pub recursive: bool,
    /// Push: the client sends more than one top-level source, so the
    /// destination must be a directory.
    pub many_sources: bool,
    /// Streams the client will open (1..=256).
    pub streams: u16,
    pub block_size: u32,
    /// One of the `PROTECT_*` values.
    pub protection: u8,
    /// Sending rate cap in bytes per second; 0 means none.
    pub rate: u64,
    /// One of the `TRANSPORT_*` values (P-23).
    pub transport: u8,
    /// A source names a directory's contents (`dir/`, rsync's rule): the
    /// destination is a directory, created if missing (P-8).
    pub contents: bool,
    /// Keep modification times and exact modes (`-p`); otherwise files get
    /// the receiver's umask and the time they arrive (P-8).
    pub preserve: bool,
    /// How the sending side compresses blocks: one of the `COMPRESS_*`
    /// values (P-30).
    pub compress: u8,
    /// The zstd level with `COMPRESS_ZSTD` (1..=19); 0 otherwise.
    pub compress_level: u8,
    /// Options of P-31 and P-32, sent as bits.
    pub sync: SyncOptions,
    /// Push: a file on the server to use as the basis of the one file
    /// sent (`--basis`); empty for none (P-31).
    pub basis: String,
    /// Push: this is one shard of a transfer split across hosts (P-42).
    pub shard: Option<ShardSpec>,
    /// What the sender leaves out, and `--delete` leaves alone (P-44).
    pub select: Selection,
    /// Push: the receiver says how each file it receives differs from
    /// what was in place (`Changes`, for `--itemize-changes`, P-44).
    pub itemize: bool,
    /// How the sending side shares the path with other traffic: one of
    /// the `SHARE_*` values (P-46).
    pub share: u8,
}

/// Share a path fairly with other flows (`--fair on`, the default, P-46).
pub const SHARE_FAIR: u8 = 0;
/// Yield to other flows (`--background`).
pub const SHARE_BACKGROUND: u8 = 1;
/// Hold the rate found, for a dedicated path (`--fair off`).
pub const SHARE_OFF: u8 = 2;

/// `Changes` bits (P-44): the file was not in place.
pub const CHANGE_NEW: u8 = 1;
/// Its size differs.
pub const CHANGE_SIZE: u8 = 2;
/// Its modification time differs.
pub const CHANGE_TIME: u8 = 4;
/// Its content differs (known under `--checksum`).
pub const CHANGE_SUM: u8 = 8;
const CHANGE_ALL: u8 = CHANGE_NEW | CHANGE_SIZE | CHANGE_TIME | CHANGE_SUM;

/// A chunk a receiver holds (P-31): the first 16 bytes of its BLAKE3 hash,
/// and its length.
pub type ChunkId = ([u8; 16], u32);

/// The file id that `Chunks` uses for the receiver's chunk cache.
pub const CACHE_FILE: u32 = u32::MAX;

/// `--compress auto`: the sender decides per block (P-30).
pub const COMPRESS_AUTO: u8 = 0;
pub const COMPRESS_NONE: u8 = 1;
pub const COMPRESS_LZ4: u8 = 2;
pub const COMPRESS_ZSTD: u8 = 3;

/// Bits of a request's `options` byte.
const OPT_CONTENTS: u8 = 1;
const OPT_PRESERVE: u8 = 2;
const OPT_ITEMIZE: u8 = 4;
/// The share policy (P-46): `SHARE_BACKGROUND` or `SHARE_OFF`; neither is
/// `SHARE_FAIR`, both are invalid.
const OPT_BACKGROUND: u8 = 8;
const OPT_FAIR_OFF: u8 = 16;

/// Data travels over the TCP data connections (P-19).
pub const TRANSPORT_TCP: u8 = 0;
/// Data travels in UDP datagrams if the client can reach the server's UDP
/// port; the client confirms with [`Msg::UseTransport`] (P-23).
pub const TRANSPORT_UDP: u8 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File {
        size: u64,
        mode: u32,
        mtime: i64,
        mtime_nsec: u32,
    },
    Dir {
        mode: u32,
        mtime: i64,
        mtime_nsec: u32,
    },
    Symlink,
}

/// One item of the manifest. Paths are relative, '/'-separated raw bytes
/// whose first component is the source's own name (P-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: u32,
    pub path: Vec<u8>,
    pub kind: EntryKind,
    /// Symlink target, empty for other kinds.
    pub target: Vec<u8>,
}

/// The receiver's side of the final accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    pub files: u64,
    pub file_bytes: u64,
    pub bad_blocks: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    Request(Request),
    /// Server accepts; data connections join with this session id.
    Accept {
        session: [u8; 16],
        streams: u16,
        /// The server's UDP port for this session; 0 unless UDP was asked.
        udp_port: u16,
        /// Push: the server, as receiver, answers every file with `Ready`
        /// or `Skip` before the client sends its blocks (P-31).
        gated: bool,
    },
    Entry(Entry),
    ManifestEnd {
        files: u64,
        bytes: u64,
    },
    /// Sender has sent every block of `file`; `digest` covers them all (P-12).
    FileEnd {
        file: u32,
        digest: [u8; 32],
    },
    /// Receiver verified these blocks.
    Acks(Vec<(u32, u32)>),
    /// Receiver rejected a block: send it again.
    Nack {
        file: u32,
        index: u32,
    },
    /// Receiver placed the file under its final name.
    FileDone {
        file: u32,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
    /// Receiver finished every entry.
    Done(Summary),
    /// Server authenticated the client (first sealed control frame).
    Welcome,
    /// Client, after a UDP request: the datagram payload size the path
    /// carries both ways, or 0 to fall back to the TCP streams (P-23);
    /// and the rate, in datagram bytes per second, that the server's
    /// set-up train arrived at (0: not measured).
    UseTransport {
        udp_payload: u16,
        path_rate: u64,
    },
    /// Sender: these blocks are all zeros, and are not sent (P-29). The
    /// receiver stores each as a hole, with the hash of zeros of the
    /// block's length.
    Zeros(Vec<(u32, u32)>),
    /// Receiver: chunks it can copy into `file` (its basis, in order from
    /// offset 0 across messages), or anywhere ([`CACHE_FILE`]: its cache).
    Chunks {
        file: u32,
        chunks: Vec<ChunkId>,
    },
    /// Receiver: every chunk of these files is announced; send them.
    Ready(Vec<u32>),
    /// Receiver: these files are already in place (P-32); send nothing.
    Skip(Vec<u32>),
    /// Receiver, in a gated session: how each file it answered `Ready`
    /// differs from what was in place (P-44): `CHANGE_*` bits, for the
    /// sender's `--itemize-changes`.
    Changes(Vec<(u32, u8)>),
    /// Sender, under `--checksum`: the whole-file digest of `file`, sent
    /// right after its entry (P-32).
    Digest {
        file: u32,
        digest: [u8; 32],
    },
    /// Receiver, under `--delete`: these paths (relative to the
    /// destination) were removed, or would be under `--dry-run` (P-32).
    Deleted(Vec<Vec<u8>>),
    /// Receiver, at most once a second while it decodes compressed
    /// blocks (P-30): its cores, and the output bytes and microseconds it
    /// spent decompressing each codec since its last report.
    DecodeSpeed {
        cores: u16,
        lz4_bytes: u64,
        lz4_micros: u64,
        zstd_bytes: u64,
        zstd_micros: u64,
    },
    /// Receiver, resuming (P-35): blocks of `file` its partial already
    /// holds, verified, with their hashes; sent before the file's `Ready`.
    Have {
        file: u32,
        blocks: Vec<(u32, [u8; 32])>,
    },
    /// Sender: these blocks are as the receiver's `Have` said, and are not
    /// sent (P-35).
    Kept(Vec<(u32, u32)>),
    /// Receiver: something the user should know about a file that did not
    /// stop the transfer, as one line of text naming the file: above all,
    /// why a partial left by an interrupted transfer could not be resumed
    /// from (P-41). At most [`MAX_NOTES`] a session.
    Note {
        kind: NoteKind,
        text: String,
    },
    /// Two or more control messages in one frame (P-34): `data` is a zstd
    /// frame that decompresses to exactly `raw_len` bytes, the messages
    /// joined by [`crate::packed::join`].
    Packed {
        raw_len: u32,
        data: Vec<u8>,
    },
    /// Server, to a `Grant` request: granted until `expires`, seconds
    /// since the epoch (P-45 G-1).
    Granted {
        expires: u64,
    },
    /// Client, in a `Job` session: one call, UTF-8 JSON (P-45 J-1).
    JobCall(Vec<u8>),
    /// Server, in a `Job` session: an answer, or a followed job's next
    /// report, UTF-8 JSON.
    JobAnswer(Vec<u8>),
}

/// Most `Note`s a receiver sends in one session; a sender keeps no more.
pub const MAX_NOTES: usize = 32;

/// What a `Note` is about (P-41). A code this version does not know
/// decodes as `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum NoteKind {
    Other = 0,
    /// The partial is held by another transfer that is still running:
    /// this one was received under another name.
    PartialHeld = 1,
    /// The partial is of another version of the source (size, time or
    /// block size differ): only what it holds by content was reused.
    PartialStale = 2,
    /// The partial has no usable journal: only what it holds by content
    /// was reused.
    PartialUnjournaled = 3,
    /// Blocks the partial's journal lists no longer hold what was
    /// written there (a host crash before they were synced, or another
    /// writer): they were sent again.
    PartialDamaged = 4,
    /// Where the shards of a split transfer stand (P-42): which are done,
    /// and whether the whole transfer is complete and verified.
    Shards = 5,
}

impl NoteKind {
    pub fn from_u8(v: u8) -> NoteKind {
        match v {
            1 => NoteKind::PartialHeld,
            2 => NoteKind::PartialStale,
            3 => NoteKind::PartialUnjournaled,
            4 => NoteKind::PartialDamaged,
            5 => NoteKind::Shards,
            _ => NoteKind::Other,
        }
    }

    /// Its name in `--json`.
    pub fn name(self) -> &'static str {
        match self {
            NoteKind::Other => "other",
            NoteKind::PartialHeld => "partial_held",
            NoteKind::PartialStale => "partial_stale",
            NoteKind::PartialUnjournaled => "partial_unjournaled",
            NoteKind::PartialDamaged => "partial_damaged",
            NoteKind::Shards => "shards",
        }
    }
}

/// Most blocks in one `Have` message: 36 bytes each, 144 KiB.
pub const HAVE_PER_MESSAGE: usize = 4096;

/// Most paths in one `Deleted` message.
pub const DELETED_PER_MESSAGE: usize = 1024;

fn encode_ids(w: &mut Writer, list: &[u32]) {
    w.u32(list.len() as u32);
    for f in list {
        w.u32(*f);
    }
}

fn decode_ids(r: &mut Reader) -> Result<Vec<u32>, DecodeError> {
    let n = r.u32()? as usize;
    if n > r.remaining() / 4 {
        return Err(DecodeError::Invalid("file count"));
    }
    (0..n).map(|_| r.u32()).collect()
}

/// A list of `(file, index)` blocks: a `u32` count, then 8 bytes each.
fn encode_blocks(w: &mut Writer, list: &[(u32, u32)]) {
    w.u32(list.len() as u32);
    for (f, i) in list {
        w.u32(*f).u32(*i);
    }
}

fn decode_blocks(r: &mut Reader) -> Result<Vec<(u32, u32)>, DecodeError> {
    let n = r.u32()? as usize;
    // Each entry is 8 bytes; a count the frame cannot hold is a lie.
    if n > r.remaining() / 8 {
        return Err(DecodeError::Truncated {
            needed: n * 8 - r.remaining(),
        });
    }
    let mut list = Vec::with_capacity(n);
    for _ in 0..n {
        list.push((r.u32()?, r.u32()?));
    }
    Ok(list)
}

impl Msg {
    /// The message's kind, for an error that must not quote a peer's
    /// message whole (a `Deleted` of 4 MiB, say).
    pub fn name(&self) -> &'static str {
        match self {
            Msg::Request(_) => "Request",
            Msg::Accept { .. } => "Accept",
            Msg::Entry(_) => "Entry",
            Msg::ManifestEnd { .. } => "ManifestEnd",
            Msg::FileEnd { .. } => "FileEnd",
            Msg::Acks(_) => "Acks",
            Msg::Nack { .. } => "Nack",
            Msg::FileDone { .. } => "FileDone",
            Msg::Error { .. } => "Error",
            Msg::Done(_) => "Done",
            Msg::Welcome => "Welcome",
            Msg::UseTransport { .. } => "UseTransport",
            Msg::Zeros(_) => "Zeros",
            Msg::Chunks { .. } => "Chunks",
            Msg::Ready(_) => "Ready",
            Msg::Skip(_) => "Skip",
            Msg::Changes(_) => "Changes",
            Msg::Granted { .. } => "Granted",
            Msg::JobCall(_) => "JobCall",
            Msg::JobAnswer(_) => "JobAnswer",
            Msg::Digest { .. } => "Digest",
            Msg::Deleted(_) => "Deleted",
            Msg::DecodeSpeed { .. } => "DecodeSpeed",
            Msg::Have { .. } => "Have",
            Msg::Kept(_) => "Kept",
            Msg::Note { .. } => "Note",
            Msg::Packed { .. } => "Packed",
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Msg::Request(r) => {
                match r.op {
                    Op::Push => w.u8(1).u8(0),
                    Op::Pull => w.u8(1).u8(1),
                    Op::Probe { bytes } => w.u8(1).u8(2).u64(bytes),
                    Op::Tunnel => w.u8(1).u8(3),
                    Op::Grant {
                        key,
                        budget,
                        lifetime,
                        repeat,
                    } => w
                        .u8(1)
                        .u8(4)
                        .bytes(&key)
                        .u64(budget)
                        .u32(lifetime)
                        .u8(repeat as u8),
                    Op::Job => w.u8(1).u8(5),
                };
                w.u32(r.paths.len() as u32);
                for p in &r.paths {
                    w.var_bytes(p.as_bytes());
                }
                w.u8(r.recursive as u8)
                    .u8(r.many_sources as u8)
                    .u16(r.streams);
                w.u32(r.block_size)
                    .u8(r.protection)
                    .u64(r.rate)
                    .u8(r.transport)
                    .u8(if r.contents { OPT_CONTENTS } else { 0 }
                        | if r.preserve { OPT_PRESERVE } else { 0 }
                        | if r.itemize { OPT_ITEMIZE } else { 0 }
                        | match r.share {
                            SHARE_BACKGROUND => OPT_BACKGROUND,
                            SHARE_OFF => OPT_FAIR_OFF,
                            _ => 0,
                        })
                    .u8(r.compress)
                    .u8(r.compress_level)
                    .u8(r.sync.bits())
                    .var_bytes(r.basis.as_bytes());
                match &r.shard {
                    None => {
                        w.u8(0);
                    }
                    Some(s) => {
                        w.u8(if s.status { 2 } else { 1 })
                            .bytes(&s.transfer)
                            .bytes(&s.plan);
                        w.u32(s.index).u32(s.count).u8(s.pieces.len() as u8);
                        for p in &s.pieces {
                            w.var_bytes(&p.path).u64(p.offset).u64(p.whole);
                        }
                    }
                }
                let s = &r.select;
                w.u32(s.rules.len() as u32);
                for rule in &s.rules {
                    w.var_bytes(rule.as_bytes());
                }
                w.u64(s.min_size).u64(s.max_size).i64(s.not_before);
            }
            Msg::Accept {
                session,
                streams,
                udp_port,
                gated,
            } => {
                w.u8(2)
                    .bytes(session)
                    .u16(*streams)
                    .u16(*udp_port)
                    .u8(*gated as u8);
            }
            Msg::Chunks { file, chunks } => {
                w.u8(14).u32(*file).u32(chunks.len() as u32);
                for (hash, len) in chunks {
                    w.bytes(hash).u32(*len);
                }
            }
            Msg::Have { file, blocks } => {
                w.u8(21).u32(*file).u32(blocks.len() as u32);
                for (index, hash) in blocks {
                    w.u32(*index).bytes(hash);
                }
            }
            Msg::Kept(list) => {
                w.u8(22);
                encode_blocks(&mut w, list);
            }
            Msg::Ready(list) => {
                w.u8(15);
                encode_ids(&mut w, list);
            }
            Msg::Skip(list) => {
                w.u8(16);
                encode_ids(&mut w, list);
            }
            Msg::Changes(list) => {
                w.u8(24).u32(list.len() as u32);
                for (file, bits) in list {
                    w.u32(*file).u8(*bits);
                }
            }
            Msg::Digest { file, digest } => {
                w.u8(17).u32(*file).bytes(digest);
            }
            Msg::DecodeSpeed {
                cores,
                lz4_bytes,
                lz4_micros,
                zstd_bytes,
                zstd_micros,
            } => {
                w.u8(19)
                    .u16(*cores)
                    .u64(*lz4_bytes)
                    .u64(*lz4_micros)
                    .u64(*zstd_bytes)
                    .u64(*zstd_micros);
            }
            Msg::Packed { raw_len, data } => {
                w.u8(20).u32(*raw_len).bytes(data);
            }
            Msg::Granted { expires } => {
                w.u8(25).u64(*expires);
            }
            Msg::JobCall(b) => {
                w.u8(26).var_bytes(b);
            }
            Msg::JobAnswer(b) => {
                w.u8(27).var_bytes(b);
            }
            Msg::Note { kind, text } => {
                w.u8(23)
                    .u8(*kind as u8)
                    .var_bytes(truncate(text).as_bytes());
            }
            Msg::Deleted(paths) => {
                w.u8(18).u32(paths.len() as u32);
                for p in paths {
                    w.var_bytes(p);
                }
            }
            Msg::Entry(e) => {
                w.u8(3).u32(e.id).var_bytes(&e.path);
                match e.kind {
                    EntryKind::File {
                        size,
                        mode,
                        mtime,
                        mtime_nsec,
                    } => {
                        w.u8(0).u64(size).u32(mode).i64(mtime).u32(mtime_nsec);
                    }
                    EntryKind::Dir {
                        mode,
                        mtime,
                        mtime_nsec,
                    } => {
                        w.u8(1).u32(mode).i64(mtime).u32(mtime_nsec);
                    }
                    EntryKind::Symlink => {
                        w.u8(2);
                    }
                }
                w.var_bytes(&e.target);
            }
            Msg::ManifestEnd { files, bytes } => {
                w.u8(4).u64(*files).u64(*bytes);
            }
            Msg::FileEnd { file, digest } => {
                w.u8(5).u32(*file).bytes(digest);
            }
            Msg::Acks(list) => {
                w.u8(6);
                encode_blocks(&mut w, list);
            }
            Msg::Zeros(list) => {
                w.u8(13);
                encode_blocks(&mut w, list);
            }
            Msg::Nack { file, index } => {
                w.u8(7).u32(*file).u32(*index);
            }
            Msg::FileDone { file } => {
                w.u8(8).u32(*file);
            }
            Msg::Error { code, message } => {
                w.u8(9)
                    .u8(*code as u8)
                    .var_bytes(truncate(message).as_bytes());
            }
            Msg::Done(s) => {
                w.u8(10).u64(s.files).u64(s.file_bytes).u64(s.bad_blocks);
            }
            Msg::Welcome => {
                w.u8(11);
            }
            Msg::UseTransport {
                udp_payload,
                path_rate,
            } => {
                w.u8(12).u16(*udp_payload).u64(*path_rate);
            }
        }
        w.buf
    }

    pub fn decode(b: &[u8]) -> Result<Msg, DecodeError> {
        let mut r = Reader::new(b);
        let msg = match r.u8()? {
            1 => {
                let op = match r.u8()? {
                    0 => Op::Push,
                    1 => Op::Pull,
                    2 => Op::Probe { bytes: r.u64()? },
                    3 => Op::Tunnel,
                    4 => {
                        let (key, budget, lifetime) = (r.array()?, r.u64()?, r.u32()?);
                        if lifetime == 0 || lifetime > MAX_GRANT_LIFETIME {
                            return Err(DecodeError::Invalid("grant lifetime"));
                        }
                        Op::Grant {
                            key,
                            budget,
                            lifetime,
                            repeat: bool_of(r.u8()?)?,
                        }
                    }
                    5 => Op::Job,
                    tag => return Err(DecodeError::UnknownTag { what: "op", tag }),
                };
                let n = r.u32()? as usize;
                if n > MAX_PATHS {
                    return Err(DecodeError::TooLong {
                        what: "path list",
                        len: n,
                        max: MAX_PATHS,
                    });
                }
                let mut paths = Vec::with_capacity(n.min(64));
                for _ in 0..n {
                    paths.push(r.string("path", MAX_PATH_LEN)?);
                }
                let recursive = bool_of(r.u8()?)?;
                let many_sources = bool_of(r.u8()?)?;
                let streams = r.u16()?;
                let block_size = r.u32()?;
                let protection = r.u8()?;
                if protection > PROTECT_INTEGRITY_ONLY {
                    return Err(DecodeError::UnknownTag {
                        what: "protection",
                        tag: protection,
                    });
                }
                let rate = r.u64()?;
                let transport = r.u8()?;
                if transport > TRANSPORT_UDP {
                    return Err(DecodeError::UnknownTag {
                        what: "transport",
                        tag: transport,
                    });
                }
                let options = r.u8()?;
                let known =
                    OPT_CONTENTS | OPT_PRESERVE | OPT_ITEMIZE | OPT_BACKGROUND | OPT_FAIR_OFF;
                if options & !known != 0 {
                    return Err(DecodeError::UnknownTag {
                        what: "request option",
                        tag: options,
                    });
                }
                // One share policy at most (P-46).
                if options & (OPT_BACKGROUND | OPT_FAIR_OFF) == OPT_BACKGROUND | OPT_FAIR_OFF {
                    return Err(DecodeError::Invalid("request option: two share policies"));
                }
                let compress = r.u8()?;
                let compress_level = r.u8()?;
                let level_ok = match compress {
                    COMPRESS_ZSTD => (1..=19).contains(&compress_level),
                    COMPRESS_AUTO | COMPRESS_NONE | COMPRESS_LZ4 => compress_level == 0,
                    tag => {
                        return Err(DecodeError::UnknownTag {
                            what: "compression",
                            tag,
                        })
                    }
                };
                if !level_ok {
                    return Err(DecodeError::Invalid("compression level"));
                }
                let sync = SyncOptions::from_bits(r.u8()?)?;
                let basis = r.string("basis path", MAX_PATH_LEN)?;
                let shard = match r.u8()? {
                    0 => None,
                    1 => Some(decode_shard(&mut r, false)?),
                    2 => Some(decode_shard(&mut r, true)?),
                    tag => return Err(DecodeError::UnknownTag { what: "shard", tag }),
                };
                let select = decode_selection(&mut r)?;
                Msg::Request(Request {
                    select,
                    sync,
                    basis,
                    shard,
                    compress,
                    compress_level,
                    contents: options & OPT_CONTENTS != 0,
                    preserve: options & OPT_PRESERVE != 0,
                    itemize: options & OPT_ITEMIZE != 0,
                    share: if options & OPT_BACKGROUND != 0 {
                        SHARE_BACKGROUND
                    } else if options & OPT_FAIR_OFF != 0 {
                        SHARE_OFF
                    } else {
                        SHARE_FAIR
                    },
                    op,
                    paths,
                    recursive,
                    many_sources,
                    streams,
                    block_size,
                    protection,
                    rate,
                    transport,
                })
            }
            2 => Msg::Accept {
                session: r.array()?,
                streams: r.u16()?,
                udp_port: r.u16()?,
                gated: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(DecodeError::Invalid("accept flags")),
                },
            },
            14 => {
                let file = r.u32()?;
                let n = r.u32()? as usize;
                if n > r.remaining() / 20 {
                    return Err(DecodeError::Invalid("chunk count"));
                }
                let mut chunks = Vec::with_capacity(n);
                for _ in 0..n {
                    chunks.push((r.array()?, r.u32()?));
                }
                Msg::Chunks { file, chunks }
            }
            21 => {
                let file = r.u32()?;
                let n = r.u32()? as usize;
                if n > HAVE_PER_MESSAGE {
                    return Err(DecodeError::TooLong {
                        what: "held blocks",
                        len: n,
                        max: HAVE_PER_MESSAGE,
                    });
                }
                if n > r.remaining() / 36 {
                    return Err(DecodeError::Invalid("held block count"));
                }
                let mut blocks = Vec::with_capacity(n);
                for _ in 0..n {
                    blocks.push((r.u32()?, r.array()?));
                }
                Msg::Have { file, blocks }
            }
            22 => Msg::Kept(decode_blocks(&mut r)?),
            15 => Msg::Ready(decode_ids(&mut r)?),
            16 => Msg::Skip(decode_ids(&mut r)?),
            24 => {
                let n = r.u32()? as usize;
                if n > r.remaining() / 5 {
                    return Err(DecodeError::Invalid("file count"));
                }
                let mut list = Vec::with_capacity(n);
                for _ in 0..n {
                    let (file, bits) = (r.u32()?, r.u8()?);
                    if bits & !CHANGE_ALL != 0 {
                        return Err(DecodeError::UnknownTag {
                            what: "change",
                            tag: bits,
                        });
                    }
                    list.push((file, bits));
                }
                Msg::Changes(list)
            }
            17 => Msg::Digest {
                file: r.u32()?,
                digest: r.array()?,
            },
            19 => Msg::DecodeSpeed {
                cores: r.u16()?,
                lz4_bytes: r.u64()?,
                lz4_micros: r.u64()?,
                zstd_bytes: r.u64()?,
                zstd_micros: r.u64()?,
            },
            20 => {
                let raw_len = r.u32()?;
                if raw_len == 0 || raw_len as usize > crate::packed_limit::MAX_PACKED {
                    return Err(DecodeError::Invalid("packed length"));
                }
                let data = r.bytes(r.remaining())?.to_vec();
                if data.is_empty() {
                    return Err(DecodeError::Invalid("packed data"));
                }
                Msg::Packed { raw_len, data }
            }
            18 => {
                let n = r.u32()? as usize;
                if n > DELETED_PER_MESSAGE {
                    return Err(DecodeError::TooLong {
                        what: "deleted paths",
                        len: n,
                        max: DELETED_PER_MESSAGE,
                    });
                }
                let mut paths = Vec::with_capacity(n);
                for _ in 0..n {
                    paths.push(r.var_bytes("path", MAX_PATH_LEN)?.to_vec());
                }
                Msg::Deleted(paths)
            }
            3 => {
                let id = r.u32()?;
                let path = r.var_bytes("path", MAX_PATH_LEN)?.to_vec();
                let kind = match r.u8()? {
                    0 => EntryKind::File {
                        size: r.u64()?,
                        mode: r.u32()?,
                        mtime: r.i64()?,
                        mtime_nsec: r.u32()?,
                    },
                    1 => EntryKind::Dir {
                        mode: r.u32()?,
                        mtime: r.i64()?,
                        mtime_nsec: r.u32()?,
                    },
                    2 => EntryKind::Symlink,
                    tag => {
                        return Err(DecodeError::UnknownTag {
                            what: "entry kind",
                            tag,
                        })
                    }
                };
                let target = r.var_bytes("symlink target", MAX_PATH_LEN)?.to_vec();
                Msg::Entry(Entry {
                    id,
                    path,
                    kind,
                    target,
                })
            }
            4 => Msg::ManifestEnd {
                files: r.u64()?,
                bytes: r.u64()?,
            },
            5 => Msg::FileEnd {
                file: r.u32()?,
                digest: r.array()?,
            },
            6 => Msg::Acks(decode_blocks(&mut r)?),
            13 => Msg::Zeros(decode_blocks(&mut r)?),
            7 => Msg::Nack {
                file: r.u32()?,
                index: r.u32()?,
            },
            8 => Msg::FileDone { file: r.u32()? },
            9 => {
                let code = ErrorCode::from_u8(r.u8()?);
                let b = r.var_bytes("error message", MAX_MESSAGE_TEXT)?;
                Msg::Error {
                    code,
                    message: String::from_utf8_lossy(b).into_owned(),
                }
            }
            10 => Msg::Done(Summary {
                files: r.u64()?,
                file_bytes: r.u64()?,
                bad_blocks: r.u64()?,
            }),
            23 => {
                let kind = NoteKind::from_u8(r.u8()?);
                let b = r.var_bytes("note", MAX_MESSAGE_TEXT)?;
                Msg::Note {
                    kind,
                    text: String::from_utf8_lossy(b).into_owned(),
                }
            }
            25 => Msg::Granted { expires: r.u64()? },
            26 => Msg::JobCall(r.var_bytes("job call", MAX_JOB_CALL)?.to_vec()),
            27 => Msg::JobAnswer(r.var_bytes("job answer", MAX_JOB_ANSWER)?.to_vec()),
            11 => Msg::Welcome,
            12 => Msg::UseTransport {
                udp_payload: r.u16()?,
                path_rate: r.u64()?,
            },
            tag => {
                return Err(DecodeError::UnknownTag {
                    what: "message",
                    tag,
                })
            }
        };
        r.finish()?;
        Ok(msg)
    }
}

fn bool_of(v: u8) -> Result<bool, DecodeError> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::Invalid("boolean")),
    }
}

fn truncate(s: &str) -> &str {
    if s.len() <= MAX_MESSAGE_TEXT {
        return s;
    }
    let mut end = MAX_MESSAGE_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
#[path = "msg_tests.rs"]
pub(crate) mod tests;
