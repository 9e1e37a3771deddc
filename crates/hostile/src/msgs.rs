//! Builders for what a hostile peer sends: requests, manifest entries and
//! blocks, valid by default so that a test changes only what it attacks.

use wire::datagram::{ChunkHeader, FirstChunk};
use wire::{
    BlockHeader, Entry, EntryKind, Msg, Op, Request, SyncOptions, CODEC_NONE, COMPRESS_NONE,
    TRANSPORT_TCP,
};

/// The block size hostile requests use unless a test says otherwise.
pub const BLOCK: u32 = 64 << 10;

/// A push of one data stream to `dest`, recursive, no dedup, no
/// compression, TCP, 64 KiB blocks, this host's best encryption.
pub fn push(dest: &str) -> Request {
    Request {
        op: Op::Push,
        paths: vec![dest.to_string()],
        recursive: true,
        many_sources: false,
        streams: 1,
        block_size: BLOCK,
        protection: crate::best_protection(),
        rate: 0,
        transport: TRANSPORT_TCP,
        contents: false,
        preserve: false,
        compress: COMPRESS_NONE,
        compress_level: 0,
        sync: SyncOptions::default(),
        basis: String::new(),
        shard: None,
        select: wire::Selection::default(),
        itemize: false,
        share: wire::SHARE_FAIR,
    }
}

/// A tunnel request to `target` over `streams` lanes, byte cache on.
pub fn tunnel(target: &str, streams: u16) -> Request {
    Request {
        op: Op::Tunnel,
        streams,
        sync: SyncOptions {
            dedup: true,
            ..Default::default()
        },
        recursive: false,
        ..push(target)
    }
}

/// A file entry (mode 0644, mtime 0).
pub fn file(id: u32, path: impl AsRef<[u8]>, size: u64) -> Msg {
    Msg::Entry(Entry {
        id,
        path: path.as_ref().to_vec(),
        kind: EntryKind::File {
            size,
            mode: 0o644,
            mtime: 0,
            mtime_nsec: 0,
        },
        target: Vec::new(),
    })
}

/// A directory entry with `mode` (mtime 0).
pub fn dir(id: u32, path: impl AsRef<[u8]>, mode: u32) -> Msg {
    Msg::Entry(Entry {
        id,
        path: path.as_ref().to_vec(),
        kind: EntryKind::Dir {
            mode,
            mtime: 0,
            mtime_nsec: 0,
        },
        target: Vec::new(),
    })
}

/// A symlink entry.
pub fn link(id: u32, path: impl AsRef<[u8]>, target: impl AsRef<[u8]>) -> Msg {
    Msg::Entry(Entry {
        id,
        path: path.as_ref().to_vec(),
        kind: EntryKind::Symlink,
        target: target.as_ref().to_vec(),
    })
}

/// The end of a manifest: its files and their bytes.
pub fn end(files: u64, bytes: u64) -> Msg {
    Msg::ManifestEnd { files, bytes }
}

/// The file digest (P-12) of a file of `size` bytes from its block hashes.
pub fn file_digest(size: u64, hashes: &[[u8; 32]]) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key("haul 2026-11 file digest v1");
    h.update(&size.to_le_bytes());
    for b in hashes {
        h.update(b);
    }
    *h.finalize().as_bytes()
}

/// The raw block `index` of file `file` holding `data`, as the real
/// sender would describe it with block size `block_size`.
pub fn block(file: u32, index: u32, block_size: u32, data: &[u8]) -> BlockHeader {
    BlockHeader {
        file,
        index,
        offset: index as u64 * block_size as u64,
        len: data.len() as u32,
        hash: *blake3::hash(data).as_bytes(),
        codec: CODEC_NONE,
        wire_len: data.len() as u32,
    }
}

/// Every message and block that sends `content` as file `id` of a
/// manifest, blocks of `block_size`: the blocks, then the `FileEnd` (only
/// for two blocks or more, P-12).
pub fn blocks_of(
    id: u32,
    block_size: u32,
    content: &[u8],
) -> (Vec<(BlockHeader, Vec<u8>)>, Option<Msg>) {
    let blocks: Vec<(BlockHeader, Vec<u8>)> = content
        .chunks(block_size as usize)
        .enumerate()
        .map(|(i, d)| (block(id, i as u32, block_size, d), d.to_vec()))
        .collect();
    let end = (blocks.len() >= 2).then(|| Msg::FileEnd {
        file: id,
        digest: file_digest(
            content.len() as u64,
            &blocks.iter().map(|(h, _)| h.hash).collect::<Vec<_>>(),
        ),
    });
    (blocks, end)
}

/// A UDP chunk header for `data` at `offset` of a raw block of
/// `block_len` bytes; the first chunk (offset 0) says the block's hash.
pub fn chunk(file: u32, index: u32, offset: u32, block_len: u32, hash: [u8; 32]) -> ChunkHeader {
    ChunkHeader {
        sent_us: 0,
        file,
        index,
        offset,
        block_len,
        first: (offset == 0).then_some(FirstChunk {
            hash,
            codec: CODEC_NONE,
            len: block_len,
        }),
    }
}
