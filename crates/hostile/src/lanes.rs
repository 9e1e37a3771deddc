//! Tunnel frames (P-37) on a tunnel session's lanes: each sealed frame on
//! a lane holds one or more tunnel frames back to back.

use std::io;

use connect::framed::{FrameReader, FrameWriter, LEN_PREFIX};
use wire::tunnel::TunnelFrame;

/// Sends `frames` as one sealed lane frame.
pub fn send(w: &mut FrameWriter, frames: &[TunnelFrame]) -> io::Result<()> {
    let mut buf = vec![0u8; LEN_PREFIX];
    for f in frames {
        f.encode_into(&mut buf);
    }
    w.send_in_place(&mut buf)
}

/// Reads one lane frame: `Ok(None)` at a clean end of the lane.
pub fn recv(r: &mut FrameReader) -> Result<Option<Vec<TunnelFrame>>, String> {
    match r.read_body() {
        Ok(None) => Ok(None),
        Ok(Some(body)) => TunnelFrame::decode_all(body)
            .map(Some)
            .map_err(|e| e.to_string()),
        Err(e) => Err(format!("{e:?}")),
    }
}
