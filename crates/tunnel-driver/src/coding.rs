//! How a tunnel's data frames are coded on the lanes (P-37): the byte
//! cache first (content seen before, in any connection, becomes a copy of
//! its history position), then compression under the auto policy (P-30's,
//! fed the lanes' rate). The mux sees only plain bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use codec::{Codec, Coder};
use tunnel::history::{pieces, HistoryError, Planned, RecvHistory, Resolve, SendHistory};
use wire::tunnel::TunnelFrame;
use wire::{ErrorCode, CODEC_DELTA, CODEC_LZ4, CODEC_NONE};

use connect::error::TransferError;
use connect::progress::Progress;
use run::compress::Compression;

/// Bytes of history each direction keeps: copies reach back half of it
/// (P-37).
pub const HISTORY_WINDOW: u64 = 64 << 20;

/// Both directions' coding state of one session.
pub(crate) struct Coding {
    /// `None`: the byte cache is off.
    send: Option<Mutex<SendHistory>>,
    recv: Option<(Mutex<RecvHistory>, Condvar)>,
    compression: Compression,
    /// Bytes the byte cache and compression kept off the wire, sent and
    /// received.
    pub saved_cache: AtomicU64,
    pub saved_compress: AtomicU64,
}

impl Coding {
    pub fn new(cache: bool, compress: codec::Mode) -> Coding {
        Coding {
            send: cache.then(|| Mutex::new(SendHistory::new(HISTORY_WINDOW))),
            recv: cache.then(|| (Mutex::new(RecvHistory::new(HISTORY_WINDOW)), Condvar::new())),
            compression: Compression::new(compress),
            saved_cache: AtomicU64::new(0),
            saved_compress: AtomicU64::new(0),
        }
    }

    /// Codes a data frame from the mux for its lane; other frames pass.
    /// Frames of one lane must be coded in the order the lane sends them.
    pub fn encode(
        &self,
        frame: TunnelFrame,
        progress: &Progress,
        tcp_rate: impl FnOnce() -> Option<f64>,
    ) -> TunnelFrame {
        let TunnelFrame::Data {
            id,
            offset,
            raw_len,
            data,
            ..
        } = frame
        else {
            return frame;
        };
        let (pos, mut plain, delta) = match &self.send {
            None => (0, data, false),
            Some(h) => {
                let (pos, plan) = h.lock().unwrap_or_else(|p| p.into_inner()).plan(&data);
                if matches!(plan[..], [Planned::Literal { at: 0, len }] if len == data.len()) {
                    (pos, data, false)
                } else {
                    let mut program = Vec::with_capacity(data.len() / 4);
                    wire::program::encode(pieces(&plan, &data), &mut program);
                    if program.len() < data.len() {
                        let saved = (data.len() - program.len()) as u64;
                        self.saved_cache.fetch_add(saved, Ordering::Relaxed);
                        (pos, program, true)
                    } else {
                        (pos, data, false)
                    }
                }
            }
        };
        let plain_len = plain.len() as u32;
        let codec = self.compression.encode(&mut plain, 0, progress, tcp_rate);
        if codec != CODEC_NONE {
            let saved = plain_len as u64 - plain.len() as u64;
            self.saved_compress.fetch_add(saved, Ordering::Relaxed);
        }
        TunnelFrame::Data {
            id,
            offset,
            pos,
            codec: codec | if delta { CODEC_DELTA } else { 0 },
            raw_len,
            plain_len,
            data: plain,
        }
    }

    /// Decodes a data frame from a lane into plain bytes for the mux; other
    /// frames pass. May wait for a frame it copies from to arrive on
    /// another lane, while `stopped` says no.
    pub fn decode(
        &self,
        frame: TunnelFrame,
        coder: &mut Coder,
        stopped: impl Fn() -> bool,
    ) -> Result<TunnelFrame, TransferError> {
        let TunnelFrame::Data {
            id,
            offset,
            pos,
            codec,
            raw_len,
            plain_len,
            data,
        } = frame
        else {
            return Ok(frame);
        };
        let bad = |why: String| TransferError::new(ErrorCode::Protocol, why);
        let plain = match codec & !CODEC_DELTA {
            CODEC_NONE => data,
            c => {
                let c = if c == CODEC_LZ4 {
                    Codec::Lz4
                } else {
                    Codec::Zstd(3)
                };
                let mut out = Vec::new();
                coder
                    .decompress(c, &data, plain_len as usize, &mut out)
                    .map_err(|e| bad(format!("a tunnel frame does not decompress: {e}")))?;
                self.saved_compress.fetch_add(
                    (plain_len as u64).saturating_sub(data.len() as u64),
                    Ordering::Relaxed,
                );
                out
            }
        };
        let raw = if codec & CODEC_DELTA == 0 {
            plain
        } else {
            let Some((hist, cv)) = &self.recv else {
                return Err(bad("a tunnel frame copies from a cache that is off".into()));
            };
            let program = wire::program::decode(&plain, raw_len)
                .map_err(|e| bad(format!("a tunnel frame's program: {e}")))?;
            let mut h = hist.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                match h.resolve(pos, raw_len, &program) {
                    Ok(Resolve::Ready(raw)) => {
                        let saved = (raw.len() as u64).saturating_sub(plain.len() as u64);
                        self.saved_cache.fetch_add(saved, Ordering::Relaxed);
                        break raw;
                    }
                    Ok(Resolve::Wait) if stopped() => {
                        return Err(bad("the tunnel stopped".into()));
                    }
                    Ok(Resolve::Wait) => {
                        h = cv
                            .wait_timeout(h, Duration::from_millis(200))
                            .map(|(g, _)| g)
                            .unwrap_or_else(|p| p.into_inner().0);
                    }
                    Err(e) => return Err(bad(e.to_string())),
                }
            }
        };
        if raw.len() != raw_len as usize {
            return Err(bad("a tunnel frame's length".into()));
        }
        if let Some((hist, cv)) = &self.recv {
            hist.lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(pos, raw.clone())
                .map_err(|e| match e {
                    // Past the memory the byte cache may hold (P-39).
                    HistoryError::TooFarAhead(_) => TransferError::new(
                        ErrorCode::Limit,
                        format!("{e}; the tunnel session is ended"),
                    ),
                    HistoryError::Broken(_) => bad(e.to_string()),
                })?;
            cv.notify_all();
        }
        Ok(TunnelFrame::Data {
            id,
            offset,
            pos,
            codec: CODEC_NONE,
            raw_len,
            plain_len: raw_len,
            data: raw,
        })
    }

    /// Wakes frames waiting for history (the session is stopping).
    pub fn wake(&self) {
        if let Some((_, cv)) = &self.recv {
            cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::CODEC_ZSTD;

    fn frame(id: u32, offset: u64, data: Vec<u8>) -> TunnelFrame {
        TunnelFrame::Data {
            id,
            offset,
            pos: 0,
            codec: CODEC_NONE,
            raw_len: data.len() as u32,
            plain_len: data.len() as u32,
            data,
        }
    }

    #[test]
    fn repeated_and_compressible_data_crosses_small_and_comes_back_whole() {
        let tx = Coding::new(true, codec::Mode::Fixed(Codec::Zstd(3)));
        let rx = Coding::new(true, codec::Mode::Auto);
        let p = Progress::default();
        let mut coder = Coder::new();
        let text: Vec<u8> = (0..60_000u32)
            .flat_map(|i| format!("row {i} value {}\n", i % 97).into_bytes())
            .take(200_000)
            .collect();
        let noise = codec::samples::noise(100_000, 4);
        let mut wire_bytes = 0;
        for (i, d) in [&noise, &text, &noise, &text].iter().enumerate() {
            let f = tx.encode(frame(1 + i as u32 % 2, 0, d.to_vec()), &p, || None);
            wire_bytes += f.encoded_len();
            let back = rx.decode(f, &mut coder, || false).unwrap();
            let TunnelFrame::Data { data, codec, .. } = back else {
                panic!("data")
            };
            assert_eq!(codec, CODEC_NONE);
            assert!(&data == *d, "frame {i} comes back whole");
        }
        // The noise crosses once; the text compresses.
        assert!(wire_bytes < 130_000, "{wire_bytes} bytes on the wire");
        assert!(tx.saved_cache.load(Ordering::Relaxed) > 90_000);
        assert!(tx.saved_compress.load(Ordering::Relaxed) > 100_000);
    }

    #[test]
    fn a_frame_that_does_not_decompress_ends_the_session() {
        let rx = Coding::new(false, codec::Mode::Auto);
        let f = TunnelFrame::Data {
            id: 1,
            offset: 0,
            pos: 0,
            codec: CODEC_ZSTD,
            raw_len: 100,
            plain_len: 100,
            data: vec![1, 2, 3],
        };
        let e = rx.decode(f, &mut Coder::new(), || false).unwrap_err();
        assert_eq!(e.code, ErrorCode::Protocol);
    }
}
