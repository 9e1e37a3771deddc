//! The sender's bundling stage (P-33): having taken a block that is a
//! whole small file, it takes the next blocks too while each is one and
//! they fit, and makes them one block, so they are compressed together.

use std::time::Instant;

use session::{block_hash, BlockRef, SenderSession};
use store::BlockSource;
use wire::bundle::{self, Member, MAX_MEMBERS};

use super::read::{read_block, Read};
use crate::bundle::{BUNDLE_BODY_MAX, MEMBER_MAX};
use crate::shared::Shared;

/// Adds whole small files after `leader`, whose bytes are `buf[at..]`,
/// while the next block is one and fits. With at least one taken,
/// `buf[at..]` becomes the bundle's length (4 bytes) and the bundle, and
/// the bundle's hash comes back; otherwise nothing changes.
pub(crate) fn gather(
    sh: &Shared<SenderSession>,
    sources: &dyn BlockSource,
    buf: &mut Vec<u8>,
    at: usize,
    leader: &BlockRef,
) -> Option<[u8; 32]> {
    let budget = BUNDLE_BODY_MAX as usize;
    let mut members = vec![Member {
        file: leader.file,
        len: leader.len,
    }];
    let mut data: Vec<u8> = Vec::new();
    while members.len() < MAX_MEMBERS {
        let used = bundle::table_len(members.len() + 1) + leader.len as usize + data.len();
        let room = budget.saturating_sub(used).min(MEMBER_MAX as usize) as u32;
        if room == 0 {
            break;
        }
        let Some(m) = sh.lock().next_bundle_member(room, Instant::now()) else {
            break;
        };
        let start = data.len();
        // A zero file is announced (P-29), not bundled.
        let Read::Data(..) = read_block(sh, sources, &m, &mut data, start)? else {
            data.truncate(start);
            continue;
        };
        members.push(Member {
            file: m.file,
            len: m.len,
        });
    }
    if members.len() == 1 {
        return None;
    }
    let mut out =
        Vec::with_capacity(at + 4 + bundle::table_len(members.len()) + buf.len() + data.len());
    out.extend_from_slice(&buf[..at]);
    out.extend_from_slice(&[0; 4]);
    bundle::encode_table(&members, &mut out);
    out.extend_from_slice(&buf[at..]);
    out.extend_from_slice(&data);
    let total = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&total.to_le_bytes());
    debug_assert!(total as usize <= budget);
    let hash = block_hash(&out[at + 4..]);
    sh.lock()
        .bundled(leader.file, members[1..].iter().map(|m| m.file).collect());
    *buf = out;
    Some(hash)
}
