//! Tunnel frames (P-37): what a `haul tunnel` session carries on its lanes.
//!
//! A tunnel multiplexes many TCP connections over the data connections of
//! one session. Each sealed frame on a lane holds one or more tunnel frames
//! back to back. Every frame names its connection and, for data, the byte
//! offset in that connection's stream, so lanes may deliver in any order:
//! the receiving mux reassembles by offset (`tunnel::Mux`).

use crate::buf::{DecodeError, Reader, Writer};
use crate::{CODEC_DELTA, CODEC_LZ4, CODEC_NONE, CODEC_ZSTD};

/// Most bytes of a connection's stream one `Data` frame stands for.
pub const MAX_TUNNEL_DATA: usize = 256 << 10;

/// Most bytes a `Data` frame carries, and most its carried bytes
/// decompress to (a program of literals and copies may be longer than
/// the bytes it stands for).
pub const MAX_TUNNEL_PLAIN: usize = 2 * MAX_TUNNEL_DATA;

/// Longest reason a `Reset` carries.
pub const MAX_RESET_REASON: usize = 1024;

const DATA: u8 = 1;
const FIN: u8 = 2;
const CREDIT: u8 = 3;
const RESET: u8 = 4;

/// One tunnel frame. `id` names a tunnelled connection: the client numbers
/// them 1, 2, 3, … in the order it accepts them, never reusing one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TunnelFrame {
    /// Bytes `offset .. offset + raw_len` of connection `id`'s stream in
    /// this direction, at positions `pos .. pos + raw_len` of the session's
    /// history in this direction (the byte cache). The low bits of `codec`
    /// (`CODEC_NONE`, `CODEC_LZ4`, `CODEC_ZSTD`) say how `data`
    /// decompresses to `plain_len` bytes; with `CODEC_DELTA` set those are a
    /// program (`wire::program`: literals and copies of earlier history
    /// positions) that rebuilds the `raw_len` bytes, otherwise they are the
    /// bytes.
    Data {
        id: u32,
        offset: u64,
        pos: u64,
        codec: u8,
        raw_len: u32,
        plain_len: u32,
        data: Vec<u8>,
    },
    /// The sender's stream in this direction ends at `end`: the peer sees
    /// end of file once every byte before it arrived.
    Fin { id: u32, end: u64 },
    /// The receiver accepts bytes of `id` up to offset `max` (absolute,
    /// never lowered; a smaller value than one already received is stale).
    /// The client's first frame for a new connection is its credit: it
    /// opens the connection at the server.
    Credit { id: u32, max: u64 },
    /// The connection ended abnormally (refused, reset, an error): both
    /// sides drop it at once.
    Reset { id: u32, reason: String },
}

impl TunnelFrame {
    pub fn id(&self) -> u32 {
        match self {
            TunnelFrame::Data { id, .. }
            | TunnelFrame::Fin { id, .. }
            | TunnelFrame::Credit { id, .. }
            | TunnelFrame::Reset { id, .. } => *id,
        }
    }

    /// Bytes this frame takes encoded.
    pub fn encoded_len(&self) -> usize {
        match self {
            TunnelFrame::Data { data, .. } => 1 + 4 + 8 + 8 + 1 + 4 + 4 + 4 + data.len(),
            TunnelFrame::Fin { .. } | TunnelFrame::Credit { .. } => 1 + 4 + 8,
            TunnelFrame::Reset { reason, .. } => {
                1 + 4 + 4 + floor_char_boundary(reason, MAX_RESET_REASON)
            }
        }
    }

    /// Appends the frame to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let mut w = Writer {
            buf: std::mem::take(out),
        };
        match self {
            TunnelFrame::Data {
                id,
                offset,
                pos,
                codec,
                raw_len,
                plain_len,
                data,
            } => {
                w.u8(DATA).u32(*id).u64(*offset).u64(*pos).u8(*codec);
                w.u32(*raw_len).u32(*plain_len).var_bytes(data);
            }
            TunnelFrame::Fin { id, end } => {
                w.u8(FIN).u32(*id).u64(*end);
            }
            TunnelFrame::Credit { id, max } => {
                w.u8(CREDIT).u32(*id).u64(*max);
            }
            TunnelFrame::Reset { id, reason } => {
                let cut = floor_char_boundary(reason, MAX_RESET_REASON);
                w.u8(RESET).u32(*id).var_bytes(&reason.as_bytes()[..cut]);
            }
        }
        *out = w.buf;
    }

    /// Decodes every frame of a lane frame's body; an empty body is
    /// refused.
    pub fn decode_all(body: &[u8]) -> Result<Vec<TunnelFrame>, DecodeError> {
        let mut r = Reader::new(body);
        let mut out = Vec::new();
        while r.remaining() > 0 {
            out.push(TunnelFrame::decode_one(&mut r)?);
        }
        if out.is_empty() {
            return Err(DecodeError::Invalid("empty tunnel frame"));
        }
        Ok(out)
    }

    fn decode_one(r: &mut Reader) -> Result<TunnelFrame, DecodeError> {
        Ok(match r.u8()? {
            DATA => {
                let id = r.u32()?;
                let offset = r.u64()?;
                let pos = r.u64()?;
                let codec = r.u8()?;
                let raw_len = r.u32()?;
                let plain_len = r.u32()?;
                let data = r.var_bytes("tunnel data", MAX_TUNNEL_PLAIN)?.to_vec();
                let delta = codec & CODEC_DELTA != 0;
                match codec & !CODEC_DELTA {
                    CODEC_NONE if plain_len as usize != data.len() => {
                        return Err(DecodeError::Invalid("tunnel data length"))
                    }
                    CODEC_NONE | CODEC_LZ4 | CODEC_ZSTD => {}
                    tag => return Err(DecodeError::UnknownTag { what: "codec", tag }),
                }
                if raw_len == 0 || raw_len as usize > MAX_TUNNEL_DATA {
                    return Err(DecodeError::Invalid("tunnel data length"));
                }
                if plain_len as usize > MAX_TUNNEL_PLAIN || (!delta && plain_len != raw_len) {
                    return Err(DecodeError::Invalid("tunnel data length"));
                }
                if offset.checked_add(raw_len as u64).is_none()
                    || pos.checked_add(raw_len as u64).is_none()
                {
                    return Err(DecodeError::Invalid("tunnel data offset"));
                }
                TunnelFrame::Data {
                    id,
                    offset,
                    pos,
                    codec,
                    raw_len,
                    plain_len,
                    data,
                }
            }
            FIN => TunnelFrame::Fin {
                id: r.u32()?,
                end: r.u64()?,
            },
            CREDIT => TunnelFrame::Credit {
                id: r.u32()?,
                max: r.u64()?,
            },
            RESET => TunnelFrame::Reset {
                id: r.u32()?,
                reason: r.string("reset reason", MAX_RESET_REASON)?,
            },
            tag => {
                return Err(DecodeError::UnknownTag {
                    what: "tunnel frame",
                    tag,
                })
            }
        })
    }
}

/// The largest index at most `max` that starts a character of `s`.
fn floor_char_boundary(s: &str, max: usize) -> usize {
    let mut i = max.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame() -> impl Strategy<Value = TunnelFrame> {
        prop_oneof![
            (
                any::<u32>(),
                0..u64::MAX / 2,
                prop::collection::vec(any::<u8>(), 1..300)
            )
                .prop_map(|(id, offset, data)| TunnelFrame::Data {
                    id,
                    offset,
                    pos: offset / 3,
                    codec: CODEC_NONE,
                    raw_len: data.len() as u32,
                    plain_len: data.len() as u32,
                    data,
                }),
            (
                any::<u32>(),
                1..MAX_TUNNEL_DATA as u32,
                any::<bool>(),
                prop::collection::vec(any::<u8>(), 0..50)
            )
                .prop_map(|(id, raw_len, delta, data)| TunnelFrame::Data {
                    id,
                    offset: 7,
                    pos: 9,
                    codec: CODEC_ZSTD | if delta { CODEC_DELTA } else { 0 },
                    raw_len,
                    plain_len: if delta { raw_len / 2 + 3 } else { raw_len },
                    data,
                }),
            (any::<u32>(), any::<u64>()).prop_map(|(id, end)| TunnelFrame::Fin { id, end }),
            (any::<u32>(), any::<u64>()).prop_map(|(id, max)| TunnelFrame::Credit { id, max }),
            (any::<u32>(), ".{0,40}").prop_map(|(id, reason)| TunnelFrame::Reset { id, reason }),
        ]
    }

    proptest! {
        #[test]
        fn frames_round_trip_back_to_back(frames in prop::collection::vec(frame(), 1..8)) {
            let mut body = Vec::new();
            for f in &frames {
                let before = body.len();
                f.encode_into(&mut body);
                prop_assert_eq!(body.len() - before, f.encoded_len());
            }
            prop_assert_eq!(TunnelFrame::decode_all(&body).unwrap(), frames);
        }

        #[test]
        fn any_bytes_decode_or_fail_cleanly(body in prop::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(frames) = TunnelFrame::decode_all(&body) {
                let mut again = Vec::new();
                for f in &frames {
                    f.encode_into(&mut again);
                }
                prop_assert_eq!(again, body);
            }
        }
    }

    #[test]
    fn bad_lengths_and_tags_are_refused() {
        let data = |codec, raw_len, data: &[u8]| {
            let mut b = Vec::new();
            TunnelFrame::Data {
                id: 1,
                offset: 0,
                pos: 0,
                codec,
                raw_len,
                plain_len: raw_len,
                data: data.to_vec(),
            }
            .encode_into(&mut b);
            TunnelFrame::decode_all(&b)
        };
        assert!(data(CODEC_NONE, 3, b"abc").is_ok());
        assert!(
            data(CODEC_NONE, 4, b"abc").is_err(),
            "raw length must match"
        );
        assert!(data(CODEC_NONE, 0, b"").is_err(), "no empty data");
        assert!(data(9, 3, b"abc").is_err(), "unknown codec");
        assert!(data(CODEC_LZ4, MAX_TUNNEL_DATA as u32 + 1, b"x").is_err());
        assert!(TunnelFrame::decode_all(&[]).is_err());
        assert!(TunnelFrame::decode_all(&[9]).is_err());
        let mut b = Vec::new();
        TunnelFrame::Data {
            id: 1,
            offset: u64::MAX - 1,
            pos: 0,
            codec: CODEC_NONE,
            raw_len: 3,
            plain_len: 3,
            data: b"abc".to_vec(),
        }
        .encode_into(&mut b);
        assert!(TunnelFrame::decode_all(&b).is_err(), "offset overflow");
    }

    #[test]
    fn a_long_reason_is_cut_on_a_character() {
        let mut b = Vec::new();
        TunnelFrame::Reset {
            id: 2,
            reason: "é".repeat(MAX_RESET_REASON),
        }
        .encode_into(&mut b);
        let TunnelFrame::Reset { reason, .. } = &TunnelFrame::decode_all(&b).unwrap()[0] else {
            panic!("a reset")
        };
        assert_eq!(reason.len(), MAX_RESET_REASON);
    }
}
