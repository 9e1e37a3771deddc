//! Sealed frames over a TCP stream (P-4):
//! `u32 body length (LE) | body | 16-byte tag`. The length is checked
//! against [`wire::MAX_FRAME_LEN`], or the lower limit the connection's
//! use sets ([`FrameReader::set_max_len`]: a join frame, a tunnel lane,
//! a session's block size, P-39), before anything is allocated, and a
//! frame that fails to open ends the connection.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use codec::{Codec, Coder};
use secure::{OpenError, Opener, Sealer};
use wire::{packed, DecodeError, ErrorCode, Msg, MAX_FRAME_LEN, TAG_LEN};

use crate::error::TransferError;
use crate::net;
use crate::progress::Progress;

#[derive(Debug)]
pub enum FrameError {
    Io(io::Error),
    TooLong(u32),
    Open(OpenError),
    Decode(DecodeError),
}

impl FrameError {
    pub fn into_transfer(self, what: &str) -> TransferError {
        match self {
            FrameError::Io(e) => TransferError::lost(what, &e),
            FrameError::TooLong(n) => TransferError::new(
                ErrorCode::Protocol,
                format!(
                    "peer sent a {n}-byte frame while {what}; not a haul peer of this version?"
                ),
            ),
            FrameError::Open(e) => {
                TransferError::new(ErrorCode::Integrity, format!("{e} while {what}"))
            }
            FrameError::Decode(e) => TransferError::new(
                ErrorCode::Protocol,
                format!("undecodable message while {what}: {e}"),
            ),
        }
    }
}

// The tag length is defined by the sealing crate and the wire crate alike.
const _: () = assert!(TAG_LEN == secure::seal::TAG_LEN);

/// Room to leave before a body so the length can be written in place.
pub const LEN_PREFIX: usize = 4;

/// What a [`FrameReader`] reads ahead from its socket.
pub const READ_BUFFER: usize = 256 << 10;

/// The most a block frame's reader waits to gather before it is woken
/// (`SO_RCVLOWAT`): sixteen streams on a 2-core host each woke for every
/// burst of segments, and the switches cost the receiver more CPU than
/// opening and hashing the data.
const BLOCK_LOWAT: usize = 256 << 10;

/// Uncompressed bytes of control messages packed into one frame (P-34).
const PACK_AT: usize = 256 << 10;

/// The zstd level that packs control messages: fast, and paths shrink
/// about as much as at higher levels.
const PACK_CODEC: Codec = Codec::Zstd(3);

pub struct FrameWriter {
    stream: TcpStream,
    sealer: Sealer,
    progress: Arc<Progress>,
    coder: Coder,
}

impl FrameWriter {
    pub fn new(stream: TcpStream, sealer: Sealer, progress: Arc<Progress>) -> FrameWriter {
        FrameWriter {
            stream,
            sealer,
            progress,
            coder: Coder::new(),
        }
    }

    /// Sends `buf[LEN_PREFIX..]` as one frame; `buf[..LEN_PREFIX]` is
    /// overwritten with the length and the tag is appended.
    pub fn send_in_place(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        let covered = buf.len() - LEN_PREFIX;
        self.send_covering(buf, covered)
    }

    /// Sends a block frame: under `--no-encrypt` only its header is
    /// authenticated, and the header's hash vouches for the data (P-7).
    pub fn send_block_in_place(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        self.send_covering(buf, wire::BLOCK_HEADER_LEN)
    }

    fn send_covering(&mut self, buf: &mut Vec<u8>, covered: usize) -> io::Result<()> {
        let body_len = buf.len() - LEN_PREFIX;
        buf[..LEN_PREFIX].copy_from_slice(&(body_len as u32).to_le_bytes());
        let tag = self.sealer.seal_prefix(&mut buf[LEN_PREFIX..], covered);
        buf.extend_from_slice(&tag);
        self.stream.write_all(buf)?;
        Progress::add(&self.progress.wire_tx, buf.len() as u64);
        Ok(())
    }

    /// Sends `msgs` with as few frames and writes as possible: runs of
    /// messages go packed and compressed together (P-34), so a manifest of
    /// many small entries costs a frame and a write per 256 KiB of entries,
    /// not one per entry.
    pub fn send_msgs(&mut self, msgs: &[Msg]) -> io::Result<()> {
        let mut out = Vec::new();
        let mut group: Vec<Vec<u8>> = Vec::new();
        let mut group_len = 0;
        for m in msgs {
            let body = m.encode();
            let len = packed::joined_len(body.len());
            if !group.is_empty() && group_len + len > PACK_AT {
                self.seal_group(&mut out, &mut group);
                group_len = 0;
                self.stream.write_all(&out)?;
                Progress::add(&self.progress.wire_tx, out.len() as u64);
                out.clear();
            }
            group_len += len;
            group.push(body);
        }
        self.seal_group(&mut out, &mut group);
        if !out.is_empty() {
            self.stream.write_all(&out)?;
            Progress::add(&self.progress.wire_tx, out.len() as u64);
        }
        Ok(())
    }

    /// Appends `group` to `out` as one frame and empties it: a lone message
    /// (any size) as itself, several (at most [`PACK_AT`] joined) as a
    /// packed message.
    fn seal_group(&mut self, out: &mut Vec<u8>, group: &mut Vec<Vec<u8>>) {
        match group.as_slice() {
            [] => {}
            [body] => self.seal_into(out, body),
            bodies => {
                let mut raw = Vec::new();
                for b in bodies {
                    packed::append(&mut raw, b);
                }
                let mut data = Vec::new();
                self.coder.compress(PACK_CODEC, &raw, &mut data);
                let body = Msg::Packed {
                    raw_len: raw.len() as u32,
                    data,
                }
                .encode();
                self.seal_into(out, &body);
            }
        }
        group.clear();
    }

    fn seal_into(&mut self, out: &mut Vec<u8>, body: &[u8]) {
        let at = out.len();
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(body);
        let tag = self
            .sealer
            .seal_prefix(&mut out[at + LEN_PREFIX..], body.len());
        out.extend_from_slice(&tag);
    }

    pub fn send_msg(&mut self, msg: &Msg) -> io::Result<()> {
        self.send_msgs(std::slice::from_ref(msg))
    }

    /// Signals the end of what this side sends; the peer reads EOF.
    pub fn shutdown_write(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }

    pub fn get_ref(&self) -> &TcpStream {
        &self.stream
    }
}

pub struct FrameReader {
    stream: BufReader<TcpStream>,
    opener: Opener,
    /// Longest body accepted, at most [`MAX_FRAME_LEN`].
    max_len: u32,
    buf: Vec<u8>,
    progress: Arc<Progress>,
    /// Messages of a packed frame not yet handed out (P-34).
    pending: VecDeque<Msg>,
    coder: Coder,
}

impl FrameReader {
    pub fn new(stream: TcpStream, opener: Opener, progress: Arc<Progress>) -> FrameReader {
        FrameReader {
            stream: BufReader::with_capacity(READ_BUFFER, stream),
            opener,
            max_len: MAX_FRAME_LEN,
            buf: Vec::new(),
            progress,
            pending: VecDeque::new(),
            coder: Coder::new(),
        }
    }

    /// Refuses frames longer than `max` (capped at [`MAX_FRAME_LEN`]) from
    /// now on, and lets go of a larger buffer kept from before.
    pub fn set_max_len(&mut self, max: u32) {
        self.max_len = max.min(MAX_FRAME_LEN);
        if self.buf.capacity() > self.max_len as usize + TAG_LEN {
            self.buf = Vec::new();
        }
    }

    /// Reads and opens the next frame. `Ok(None)` is a clean end of stream
    /// at a frame boundary.
    pub fn read_body(&mut self) -> Result<Option<&mut [u8]>, FrameError> {
        self.read_covering(usize::MAX, false)
    }

    /// Reads a block frame sent with [`FrameWriter::send_block_in_place`].
    /// Under `--no-encrypt` the data is authenticated only through the
    /// header's hash: the caller must check it before using the data.
    pub fn read_block_body(&mut self) -> Result<Option<&mut [u8]>, FrameError> {
        self.read_covering(wire::BLOCK_HEADER_LEN, true)
    }

    fn read_covering(
        &mut self,
        covered: usize,
        batched: bool,
    ) -> Result<Option<&mut [u8]>, FrameError> {
        let mut len = [0u8; LEN_PREFIX];
        match read_full(&mut self.stream, &mut len) {
            Ok(0) => return Ok(None),
            Ok(n) if n == LEN_PREFIX => {}
            Ok(_) => return Err(FrameError::Io(io::ErrorKind::UnexpectedEof.into())),
            Err(e) => return Err(FrameError::Io(e)),
        }
        let n = u32::from_le_bytes(len);
        if n > self.max_len {
            return Err(FrameError::TooLong(n));
        }
        let total = n as usize + TAG_LEN;
        self.buf.resize(total, 0);
        match batched {
            true => self.read_batched(),
            false => self.stream.read_exact(&mut self.buf),
        }
        .map_err(FrameError::Io)?;
        Progress::add(&self.progress.wire_rx, (LEN_PREFIX + total) as u64);
        let (body, tag) = self.buf.split_at_mut(n as usize);
        let tag: &[u8; TAG_LEN] = (&*tag).try_into().expect("tag slice has TAG_LEN bytes");
        self.opener
            .open_prefix(body, covered, tag)
            .map_err(FrameError::Open)?;
        Ok(Some(&mut self.buf[..n as usize]))
    }

    /// Fills `buf` as `read_exact` does, asking the kernel to wake this
    /// thread only once [`BLOCK_LOWAT`] (or what is left of the frame, if
    /// less) has arrived; the mark is back at one byte after, so that the
    /// next frame's length, or the stream's end, wakes it as before.
    ///
    /// It waits in `poll`, never in a blocking read: a read that has
    /// copied part of what it wants sleeps until the *queue* reaches the
    /// mark, which the rest of a frame may never do.
    fn read_batched(&mut self) -> io::Result<()> {
        let held = self.stream.buffer();
        let mut got = held.len().min(self.buf.len());
        self.buf[..got].copy_from_slice(&held[..got]);
        self.stream.consume(got);
        let sock = self.stream.get_ref();
        let mut mark = 1;
        let read = loop {
            let left = self.buf.len() - got;
            if left == 0 {
                break Ok(());
            }
            match net::recv_now(sock, &mut self.buf[got..]) {
                Ok(0) => break Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    got += n;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => break Err(e),
            }
            // Nothing queued: sleep until the mark, which is never above
            // what is left of the frame.
            let want = left.min(BLOCK_LOWAT);
            if want != mark {
                net::set_rcvlowat(sock, want);
                mark = want;
            }
            if let Err(e) = net::wait_readable(sock) {
                break Err(e);
            }
        };
        if mark != 1 {
            net::set_rcvlowat(sock, 1);
        }
        read
    }

    /// The next control message, unpacking packed frames (P-34).
    pub fn read_msg(&mut self) -> Result<Option<Msg>, FrameError> {
        if let Some(m) = self.pending.pop_front() {
            return Ok(Some(m));
        }
        let msg = match self.read_body()? {
            None => return Ok(None),
            Some(body) => Msg::decode(body).map_err(FrameError::Decode)?,
        };
        let Msg::Packed { raw_len, data } = msg else {
            return Ok(Some(msg));
        };
        let mut raw = Vec::new();
        self.coder
            .decompress(PACK_CODEC, &data, raw_len as usize, &mut raw)
            .map_err(|_| FrameError::Decode(DecodeError::Invalid("packed messages")))?;
        self.pending = packed::split(&raw).map_err(FrameError::Decode)?.into();
        Ok(self.pending.pop_front())
    }

    pub fn get_ref(&self) -> &TcpStream {
        self.stream.get_ref()
    }
}

/// Reads until `buf` is full or the stream ends; returns bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Handshake messages travel before any keys exist: `u16 length | bytes`.
pub fn write_raw(stream: &mut TcpStream, msg: &[u8]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(2 + msg.len());
    buf.extend_from_slice(&(msg.len() as u16).to_le_bytes());
    buf.extend_from_slice(msg);
    stream.write_all(&buf)
}

pub fn read_raw(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 2];
    stream.read_exact(&mut len)?;
    let mut buf = vec![0u8; u16::from_le_bytes(len) as usize];
    stream.read_exact(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use secure::Protection;
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::time::Duration;

    fn block(len: usize, fill: u8) -> Vec<u8> {
        let mut b = vec![0u8; LEN_PREFIX + wire::BLOCK_HEADER_LEN];
        b.resize(b.len() + len, fill);
        b
    }

    fn rcvlowat(s: &TcpStream) -> libc::c_int {
        use std::os::fd::AsRawFd;
        let mut v: libc::c_int = -1;
        let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
        // SAFETY: getsockopt into a live c_int and its size.
        let rc = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                &mut v as *mut _ as *mut libc::c_void,
                &mut len,
            )
        };
        assert_eq!(rc, 0);
        v
    }

    /// Blocks longer and shorter than the wake-up mark arrive whole, and
    /// a short last block is read while the sender keeps the stream open
    /// (a mark above what is left would leave it waiting).
    #[test]
    fn batched_reads_never_wait_past_a_frame() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let key = [7u8; 32];
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let sender = std::thread::spawn(move || {
            let s = TcpStream::connect(addr).unwrap();
            let progress = Arc::new(Progress::default());
            let mut w = FrameWriter::new(s, Sealer::new(Protection::Aes256Gcm, &key), progress);
            for (len, fill) in [(3 * BLOCK_LOWAT + 17, 1u8), (100, 2), (BLOCK_LOWAT - 1, 3)] {
                w.send_block_in_place(&mut block(len, fill)).unwrap();
                // The reader is waiting by then, on whatever mark it set.
                std::thread::sleep(Duration::from_millis(100));
            }
            // Open until the reader has everything.
            done_rx.recv_timeout(Duration::from_secs(20)).ok();
        });
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let progress = Arc::new(Progress::default());
        let mut r = FrameReader::new(s, Opener::new(Protection::Aes256Gcm, &key), progress);
        for (len, fill) in [(3 * BLOCK_LOWAT + 17, 1u8), (100, 2), (BLOCK_LOWAT - 1, 3)] {
            let body = r
                .read_block_body()
                .expect("a whole frame")
                .expect("not the end");
            assert_eq!(body.len(), wire::BLOCK_HEADER_LEN + len);
            assert!(body[wire::BLOCK_HEADER_LEN..].iter().all(|&b| b == fill));
            assert_eq!(rcvlowat(r.get_ref()), 1, "the next length wakes the reader");
        }
        done_tx.send(()).unwrap();
        sender.join().unwrap();
        assert!(r.read_block_body().unwrap().is_none(), "a clean end");
    }

    /// A frame whose last part comes after a pause, and is smaller than
    /// the mark, is read as soon as it comes: a read that had copied the
    /// first part must not sleep until the queue reaches the mark.
    #[test]
    fn the_rest_of_a_frame_wakes_the_reader() {
        let key = [5u8; 32];
        // The frame's bytes, as a writer sends them.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let writer = std::thread::spawn(move || {
            let s = TcpStream::connect(addr).unwrap();
            let progress = Arc::new(Progress::default());
            let mut w = FrameWriter::new(s, Sealer::new(Protection::Aes256Gcm, &key), progress);
            w.send_block_in_place(&mut block(BLOCK_LOWAT + 4096, 9))
                .unwrap();
        });
        let mut frame = Vec::new();
        l.accept().unwrap().0.read_to_end(&mut frame).unwrap();
        writer.join().unwrap();
        // Sent on in two parts: most of it, then the last 2 KiB.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let cut = frame.len() - 2048;
        let relay = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&frame[..cut]).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            s.write_all(&frame[cut..]).unwrap();
            done_rx.recv_timeout(Duration::from_secs(20)).ok();
        });
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let progress = Arc::new(Progress::default());
        let mut r = FrameReader::new(s, Opener::new(Protection::Aes256Gcm, &key), progress);
        let began = std::time::Instant::now();
        let body = r.read_block_body().unwrap().unwrap();
        assert_eq!(body.len(), wire::BLOCK_HEADER_LEN + BLOCK_LOWAT + 4096);
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{:?}",
            began.elapsed()
        );
        done_tx.send(()).unwrap();
        relay.join().unwrap();
    }
}
