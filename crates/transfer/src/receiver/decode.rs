//! The receiver's decoding stages (P-30, P-31, P-33), the mirror of the
//! sender's: a block as it came (compressed, a delta program, a bundle)
//! becomes the bytes to place, within the bounds its header allows, and
//! goes to `place`. Bytes that do not decode are refused, and the block
//! asked for again.

use session::block_hash;
use wire::{BlockHeader, ErrorCode, CODEC_DELTA, CODEC_NONE};

use connect::error::TransferError;
use connect::progress::Progress;

use super::place::{Placed, Receiving};
use crate::bundle::{split, unbundle};
use crate::delta::apply;

impl Receiving<'_, '_> {
    /// Decodes a block as it came (P-30, P-31, P-33) and places it. The
    /// header is authenticated under every protection: a block longer
    /// than the session's blocks ends the session before anything is
    /// decoded. The bytes behind it are not under `--no-encrypt`: bytes
    /// that cannot decode within their bounds are refused before anything
    /// is allocated and the block is asked for again (`refuse`).
    pub(crate) fn place_encoded(&self, h: &BlockHeader, data: &[u8]) -> Placed {
        if h.len > self.block_size {
            return Err(TransferError::new(
                ErrorCode::Protocol,
                format!(
                    "block {} of file {} is {} bytes, longer than the session's {}-byte blocks",
                    h.index, h.file, h.len, self.block_size
                ),
            ));
        }
        if h.codec == wire::CODEC_NONE {
            self.place(h, data)
        } else if h.codec & wire::CODEC_BUNDLE != 0 {
            self.place_bundle(h, data)
        } else if h.codec & wire::CODEC_DELTA != 0 {
            match crate::compress::check_program(h.codec & !wire::CODEC_DELTA, data, h.len) {
                Ok(()) => self.place(h, &self.decode(h.file, h.codec, data, h.len)),
                Err(why) => self.refuse(h, &why),
            }
        } else {
            match crate::compress::decode_exact(h.codec, data, h.len, self.sh.progress) {
                Ok(decoded) => self.place(h, &decoded),
                Err(e) => self.refuse(h, &e.to_string()),
            }
        }
    }

    /// The bytes of a block as sent with `codec` (P-30, P-31). Bytes that
    /// do not decode come back as zeros, so the block fails its hash and
    /// is asked for again (whole, the second time).
    pub(crate) fn decode(&self, file: u32, codec: u8, data: &[u8], len: u32) -> Vec<u8> {
        let progress = self.sh.progress;
        if codec & CODEC_DELTA == 0 {
            return crate::compress::decode(codec, data, len, progress);
        }
        match self.rebuild(file, codec & !CODEC_DELTA, data, len) {
            Ok(out) => out,
            Err(why) => {
                tracing::warn!("a delta block of file {file} could not be rebuilt ({why}); asking for it whole");
                vec![0u8; len as usize]
            }
        }
    }

    fn rebuild(&self, file: u32, codec: u8, data: &[u8], len: u32) -> Result<Vec<u8>, String> {
        let (head, body) = data.split_at_checked(4).ok_or("short program")?;
        let plen = u32::from_le_bytes(head.try_into().expect("4 bytes"));
        if plen > 2 * wire::MAX_BLOCK_SIZE {
            return Err("program too long".into());
        }
        let progress = self.sh.progress;
        let prog = crate::compress::decode(codec, body, plen, progress);
        let (out, copied) = apply(
            &prog,
            len,
            |from, out| {
                let f = self.bases.get(file).ok_or("no basis for this file")?;
                f.read_exact_at(out, from)
                    .map_err(|e| format!("reading the basis: {e}"))
            },
            |hash, skip, out| {
                let c = self.opts.cache.as_ref().ok_or("no chunk cache here")?;
                match c.read(hash, skip, out) {
                    Ok(true) => Ok(()),
                    Ok(false) => Err("a chunk left the cache".into()),
                    Err(e) => Err(format!("reading the chunk cache: {e}")),
                }
            },
        )?;
        Progress::add(&progress.dedup_bytes, copied);
        Ok(out)
    }

    /// Places a received bundle led by the block `h` names: decodes the
    /// bundle within its bounds, checks it against `h.hash`, and only then
    /// reads its table (the hash covers the encoded bundle's every byte once
    /// decoded; no hash of the encoded bytes exists to check before decoding,
    /// so the decoder is bounded instead, issue 23). A bundle that does not
    /// decode or fails its hash is the leader's block failing its hash (under
    /// `--no-encrypt` its bytes may have been altered on the path): the leader
    /// is asked for again, and the sender sends the other members again with
    /// it. A bundle that passes its hash but whose table is bad, or does not
    /// begin with the leader, is the sender's doing: the session ends
    /// (`Protocol`). Every member is then placed as its file's one block.
    /// The leader's verdict comes back.
    fn place_bundle(&self, h: &BlockHeader, data: &[u8]) -> Placed {
        let rx = self;
        let bytes = match unbundle(h, data, rx.sh.progress) {
            Ok(b) if block_hash(&b) == h.hash => b,
            Ok(_) => return rx.refuse(h, "a bundle that fails its hash"),
            Err(why) => return rx.refuse(h, &why),
        };
        let members = match split(h, &bytes) {
            Ok(m) => m,
            Err(why) => return Err(malformed(h, &why)),
        };
        let mut leader = None;
        for (m, bytes) in members {
            let mh = BlockHeader {
                file: m.file,
                index: 0,
                offset: 0,
                len: m.len,
                hash: block_hash(bytes),
                codec: CODEC_NONE,
                wire_len: m.len,
            };
            let Some(v) = rx.place_hashed(&mh, bytes)? else {
                return Ok(None);
            };
            leader.get_or_insert(v);
        }
        Ok(leader)
    }
}

/// A bundle that passed its hash but is malformed: its bytes are the
/// sender's, whatever the protection, and the session ends.
fn malformed(h: &BlockHeader, why: &str) -> TransferError {
    TransferError::new(
        ErrorCode::Protocol,
        format!(
            "the bundle led by file {} passed its hash but {why}",
            h.file
        ),
    )
}
