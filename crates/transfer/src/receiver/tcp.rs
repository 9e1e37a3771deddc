//! A TCP data stream of the receiving side: reads sealed block frames
//! until the sender closes it, and hands each to `decode`.

use wire::{BlockHeader, ErrorCode, BLOCK_HEADER_LEN};

use connect::error::TransferError;
use connect::framed::{FrameError, FrameReader};
use connect::progress::Mark;

use super::place::Receiving;

impl Receiving<'_, '_> {
    pub(crate) fn receive_blocks(&self, mut r: FrameReader) {
        loop {
            // Under --no-encrypt only the header is authenticated here; the
            // data is checked against the header's hash below (P-7).
            let body = match r.read_block_body() {
                Ok(Some(b)) => b,
                // The sender closes a data stream only when it has nothing
                // more to send; completion is decided on the control stream.
                Ok(None) => return,
                Err(e) => {
                    if !self.sh.is_done() {
                        // A frame that fails to open or is oversized is ours
                        // to report; a broken connection may have a reason
                        // waiting on the control stream.
                        match e {
                            FrameError::Io(_) => {
                                self.sh.fail_transport(e.into_transfer("receiving data"))
                            }
                            _ => self.sh.fail(e.into_transfer("receiving data"), true),
                        }
                    }
                    return;
                }
            };
            self.sh.progress.timeline.mark(Mark::FirstData);
            // A key's `rate=` (issue 39): the sender is slowed by this
            // side reading no faster, whatever pace it promised.
            self.sh.progress.control.pace(body.len() as u64);
            let h = match BlockHeader::decode(body) {
                Ok(h) => h,
                Err(e) => {
                    self.sh.fail(
                        TransferError::new(ErrorCode::Protocol, format!("bad block header: {e}")),
                        true,
                    );
                    return;
                }
            };
            let data = &body[BLOCK_HEADER_LEN..];
            match self.place_encoded(&h, data) {
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(e) => return self.sh.fail(e, true),
            }
        }
    }
}
