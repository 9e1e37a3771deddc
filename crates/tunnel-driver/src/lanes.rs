//! A tunnel's lanes (P-37): the session's data connections, each with a
//! writer thread taking frames from the mux and a reader thread giving it
//! the frames that arrive. A lane frame is at most [`LANE_FRAME_MAX`], and
//! what it decodes to goes to the mux (which checks it against the credit
//! given) a megabyte at a time, so a peer cannot make a lane hold more
//! (P-39).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use wire::tunnel::TunnelFrame;
use wire::ErrorCode;

use crate::options::LANE_FRAME_MAX;
use crate::shared::Shared;
use connect::error::TransferError;
use connect::framed::{FrameError, FrameReader, FrameWriter, LEN_PREFIX};
use connect::join::DataConn;
use connect::net;

/// Most frame bytes sealed together in one lane frame.
const BATCH: usize = 256 << 10;

/// Unsent bytes a lane's socket may hold: an interactive connection's frame
/// waits behind at most this much of a bulk one on each lane.
const LANE_NOTSENT: usize = 128 << 10;

/// Decoded bytes a lane's reader gathers before handing them to the mux.
const HAND_AT: usize = 1 << 20;

// A lane frame is a batch and one frame more, coded no longer than plain.
const _: () =
    assert!(BATCH + wire::tunnel::MAX_TUNNEL_PLAIN + (64 << 10) <= LANE_FRAME_MAX as usize);

pub(crate) fn start(shared: &Arc<Shared>, conns: Vec<DataConn>) -> Vec<JoinHandle<()>> {
    let mut handles = Vec::new();
    for (i, DataConn { mut reader, writer }) in conns.into_iter().enumerate() {
        reader.set_max_len(LANE_FRAME_MAX);
        net::set_notsent_lowat(writer.get_ref(), LANE_NOTSENT);
        if let Ok(s) = writer.get_ref().try_clone() {
            shared
                .lanes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(s);
        }
        let s = shared.clone();
        handles.push(spawn(format!("lane{i}-tx"), move || write_lane(&s, writer)));
        let s = shared.clone();
        handles.push(spawn(format!("lane{i}-rx"), move || read_lane(&s, reader)));
    }
    handles
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .expect("a thread for a tunnel lane")
}

/// Takes frames from the mux while it has any and sends them, sealed
/// together up to [`BATCH`] bytes.
fn write_lane(shared: &Shared, mut w: FrameWriter) {
    let mut buf = Vec::with_capacity(BATCH + (64 << 10));
    let mut frames = Vec::new();
    let mut sizes = Vec::new();
    loop {
        buf.clear();
        buf.resize(LEN_PREFIX, 0);
        {
            let mut mux = shared.lock();
            while !mux.has_output() {
                if shared.stopped() {
                    drop(mux);
                    w.shutdown_write();
                    return;
                }
                mux = shared.wait(mux);
            }
            let mut taken = 0;
            while taken < BATCH {
                let Some(f) = mux.poll_frame() else { break };
                taken += f.encoded_len();
                frames.push(f);
            }
            if !frames.is_empty() {
                // A session ending waits for these to be written.
                shared.writing.fetch_add(1, Ordering::AcqRel);
            }
        }
        // Bytes left the connections' send buffers: their readers may go on.
        shared.cv.notify_all();
        if frames.is_empty() {
            continue;
        }
        // Cache and compression, outside the lock.
        let rate = || net::tcp_path_rate(&shared.lanes.lock().unwrap_or_else(|p| p.into_inner()));
        for f in frames.drain(..) {
            let f = shared.coding.encode(f, &shared.progress, rate);
            let before = buf.len();
            f.encode_into(&mut buf);
            sizes.push((f.id(), (buf.len() - before) as u64));
        }
        {
            let mut mux = shared.lock();
            for (id, n) in sizes.drain(..) {
                mux.note_wire(id, n, 0);
            }
        }
        // A key's `rate=`, shared by its sessions (issue 39).
        shared.progress.control.pace(buf.len() as u64);
        let sent = w.send_in_place(&mut buf);
        shared.writing.fetch_sub(1, Ordering::AcqRel);
        shared.cv.notify_all();
        if let Err(e) = sent {
            shared.fail(TransferError::lost("sending on a tunnel lane", &e));
            return;
        }
    }
}

/// Hands every frame that arrives to the mux; a frame that does not open
/// or decode, or breaks P-37, ends the session.
fn read_lane(shared: &Shared, mut r: FrameReader) {
    let mut coder = codec::Coder::new();
    loop {
        let body = match r.read_body() {
            Ok(Some(b)) => b,
            Ok(None) => {
                shared.fail(TransferError::new(
                    ErrorCode::ConnectionLost,
                    "the peer closed a tunnel lane",
                ));
                return;
            }
            Err(e) => {
                if !shared.stopped() {
                    // A lost connection is not the peer's doing to report;
                    // a frame too long, or one that fails to open, is.
                    let lost = matches!(e, FrameError::Io(_));
                    let e = e.into_transfer("receiving on a tunnel lane");
                    if lost {
                        shared.fail(e);
                    } else {
                        shared.fail_ours(e);
                    }
                }
                return;
            }
        };
        // A key's `rate=`: the peer is slowed by this side reading no
        // faster (issue 39).
        shared.progress.control.pace(body.len() as u64);
        let frames = match TunnelFrame::decode_all(body) {
            Ok(f) => f,
            Err(e) => {
                shared.fail_ours(FrameError::Decode(e).into_transfer("receiving on a tunnel lane"));
                return;
            }
        };
        let mut plain = Vec::with_capacity(frames.len());
        let mut gathered = 0;
        let count = frames.len();
        for (i, f) in frames.into_iter().enumerate() {
            let len = f.encoded_len() as u64;
            match shared.coding.decode(f, &mut coder, || shared.stopped()) {
                Ok(f) => {
                    gathered += f.encoded_len();
                    plain.push((f, len));
                }
                Err(e) => {
                    shared.fail_ours(e);
                    return;
                }
            }
            if (gathered >= HAND_AT || i + 1 == count) && !hand(shared, &mut plain) {
                return;
            }
            if plain.is_empty() {
                gathered = 0;
            }
        }
    }
}

/// Hands decoded frames to the mux; false if one broke P-37 (the session
/// then ends).
fn hand(shared: &Shared, plain: &mut Vec<(TunnelFrame, u64)>) -> bool {
    let mut mux = shared.lock();
    for (f, len) in plain.drain(..) {
        let id = f.id();
        if let Err(e) = mux.handle(f) {
            drop(mux);
            shared.fail_ours(TransferError::new(ErrorCode::Protocol, e.to_string()));
            return false;
        }
        mux.note_wire(id, 0, len);
    }
    drop(mux);
    shared.cv.notify_all();
    true
}
