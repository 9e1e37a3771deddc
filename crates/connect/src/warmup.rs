//! Warm-ups (P-49): padding a data connection sends ahead of its own
//! preamble while its session's keys are on their way, so that TCP's
//! congestion window has grown by a round trip when the data starts. The
//! server reads past them, within bounds, to the data preamble.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use wire::{ConnKind, ErrorCode, Preamble, MAX_WARMUP, PREAMBLE_LEN};

use crate::error::TransferError;

/// Client: fills a data connection's first congestion window with warm-ups
/// (P-49) while its session's keys are on their way, so that its window
/// has doubled when the data starts. Returns the bytes written.
pub fn warm_up(mut stream: &TcpStream) -> std::io::Result<usize> {
    let window = crate::net::tcp_window(stream).unwrap_or(0).min(MAX_WARMUP);
    let out = warmups(window);
    stream.write_all(&out)?;
    Ok(out.len())
}

/// Warm-ups of `window` bytes at most in all, preambles included, each
/// with as much padding as its preamble can announce.
fn warmups(window: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(window);
    while out.len() + PREAMBLE_LEN < window {
        let padding = (window - out.len() - PREAMBLE_LEN).min(u16::MAX as usize);
        out.extend_from_slice(&Preamble::warmup(padding as u16).encode());
        out.resize(out.len() + padding, 0);
    }
    out
}

/// Server: reads past the warm-ups that open a data connection (P-49),
/// dropping their padding, to the data connection's own preamble, which
/// it returns. Refused: more than [`MAX_WARMUP`] bytes of padding, a
/// preamble that is neither, or all of it not read within `within`.
pub fn past_warmups(
    stream: &mut TcpStream,
    first: Preamble,
    within: Duration,
) -> Result<Preamble, TransferError> {
    let deadline = Instant::now() + within;
    let (mut pre, mut padding) = (first, 0usize);
    while pre.kind == ConnKind::Warmup {
        padding += pre.stream as usize;
        if padding > MAX_WARMUP {
            return Err(TransferError::new(
                ErrorCode::Protocol,
                format!("more than {MAX_WARMUP} bytes of warm-up before a data connection"),
            ));
        }
        let mut b = vec![0u8; pre.stream as usize + PREAMBLE_LEN];
        read_by(stream, &mut b, deadline)?;
        pre = Preamble::decode(&b[pre.stream as usize..]).map_err(|e| {
            TransferError::new(ErrorCode::Protocol, format!("after a warm-up: {e}"))
        })?;
    }
    match pre.kind {
        ConnKind::Data => Ok(pre),
        _ => Err(TransferError::new(
            ErrorCode::Protocol,
            "a warm-up ahead of a connection that is not a data connection",
        )),
    }
}

/// Fills `b` from `stream` before `deadline`.
fn read_by(stream: &mut TcpStream, b: &mut [u8], deadline: Instant) -> Result<(), TransferError> {
    let mut got = 0;
    while got < b.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(TransferError::new(
                ErrorCode::Protocol,
                "a warm-up was not over in time",
            ));
        }
        stream.set_read_timeout(Some(left)).ok();
        let lost = |why: String| {
            TransferError::new(
                ErrorCode::ConnectionLost,
                format!("reading a warm-up: {why}"),
            )
        };
        match std::io::Read::read(stream, &mut b[got..]) {
            Ok(0) => return Err(lost("closed".into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(lost(e.to_string())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A connected pair of sockets on loopback: (client end, server end).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    fn data_preamble() -> Preamble {
        Preamble {
            version: wire::PROTOCOL_VERSION,
            kind: ConnKind::Data,
            session: [7; 16],
            stream: 3,
        }
    }

    /// What the server makes of `bytes`, sent ahead of a close.
    fn server_reads(bytes: Vec<u8>, within: Duration) -> Result<Preamble, TransferError> {
        let (mut c, mut s) = pair();
        let writer = std::thread::spawn(move || {
            let _ = c.write_all(&bytes);
            c
        });
        let res = crate::handshake::read_preamble(&mut s)
            .and_then(|first| past_warmups(&mut s, first, within));
        drop(s);
        drop(writer.join());
        res
    }

    #[test]
    fn warmups_fill_the_window_in_pieces_their_preambles_announce() {
        for window in [0, 10, 25, 26, 14_480, 89_480, 200_000, MAX_WARMUP] {
            let out = warmups(window);
            assert!(out.len() <= window, "{window}");
            assert!(
                out.len() + PREAMBLE_LEN >= window,
                "{window}: leaves a preamble's room at most"
            );
            let mut rest = &out[..];
            while !rest.is_empty() {
                let pre = Preamble::decode(&rest[..PREAMBLE_LEN]).unwrap();
                assert_eq!(pre.kind, ConnKind::Warmup);
                let padding = pre.stream as usize;
                assert!(rest[PREAMBLE_LEN..PREAMBLE_LEN + padding]
                    .iter()
                    .all(|&b| b == 0));
                rest = &rest[PREAMBLE_LEN + padding..];
            }
        }
    }

    #[test]
    fn the_server_reads_past_warmups_to_the_data_preamble() {
        let mut bytes = warmups(150_000);
        bytes.extend_from_slice(&data_preamble().encode());
        let pre = server_reads(bytes, Duration::from_secs(10)).unwrap();
        assert_eq!(pre, data_preamble());
    }

    #[test]
    fn a_client_warms_up_its_first_window() {
        let (c, mut s) = pair();
        let sent = warm_up(&c).unwrap();
        assert!(sent > 0 && sent <= MAX_WARMUP, "{sent}");
        (&c).write_all(&data_preamble().encode()).unwrap();
        let first = crate::handshake::read_preamble(&mut s).unwrap();
        let pre = past_warmups(&mut s, first, Duration::from_secs(10)).unwrap();
        assert_eq!(pre, data_preamble());
    }

    #[test]
    fn more_padding_than_the_limit_is_refused() {
        let mut bytes = Vec::new();
        for _ in 0..(MAX_WARMUP / u16::MAX as usize + 1) {
            bytes.extend_from_slice(&Preamble::warmup(u16::MAX).encode());
            bytes.resize(bytes.len() + u16::MAX as usize, 0);
        }
        bytes.extend_from_slice(&data_preamble().encode());
        let e = server_reads(bytes, Duration::from_secs(10)).unwrap_err();
        assert_eq!(e.code, ErrorCode::Protocol);
        assert!(e.message.contains("more than"), "{}", e.message);
    }

    #[test]
    fn a_warmup_leads_only_to_a_data_connection() {
        for kind in [
            ConnKind::Control,
            ConnKind::Pinned,
            ConnKind::Keyed,
            ConnKind::Relay,
        ] {
            let mut bytes = warmups(1_000);
            bytes.extend_from_slice(
                &Preamble {
                    kind,
                    ..data_preamble()
                }
                .encode(),
            );
            let e = server_reads(bytes, Duration::from_secs(10)).unwrap_err();
            assert_eq!(e.code, ErrorCode::Protocol, "{kind:?}");
        }
    }

    #[test]
    fn a_warmup_that_stalls_is_dropped_in_time() {
        let (mut c, mut s) = pair();
        c.write_all(&Preamble::warmup(1_000).encode()).unwrap();
        c.write_all(&[0; 10]).unwrap();
        let first = crate::handshake::read_preamble(&mut s).unwrap();
        let began = Instant::now();
        let e = past_warmups(&mut s, first, Duration::from_millis(200)).unwrap_err();
        assert!(began.elapsed() < Duration::from_secs(5));
        assert!(e.message.contains("warm-up"), "{}", e.message);
        drop(c);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Whatever follows a warm-up, the server returns a data preamble
        /// or an error; it never panics.
        #[test]
        fn any_bytes_after_a_warmup(padding in 0u16..64, tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let mut bytes = Preamble::warmup(padding).encode().to_vec();
            bytes.extend_from_slice(&tail);
            if let Ok(pre) = server_reads(bytes, Duration::from_millis(300)) {
                proptest::prop_assert_eq!(pre.kind, ConnKind::Data);
            }
        }
    }
}
