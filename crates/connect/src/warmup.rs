//! Warm-ups (P-49): padding a data connection carries ahead of its data
//! while its session's keys are on their way, so that TCP's congestion
//! window has grown by a round trip when the data starts. A push's client
//! sends them ahead of its data preamble, and the server reads past them
//! within bounds; a pull's client asks for them, and the server sends its
//! own back, which the client reads past before the session's frames.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use wire::{ConnKind, ErrorCode, Preamble, MAX_WARMUP, PREAMBLE_LEN, PROTOCOL_VERSION};

use crate::error::TransferError;

/// Client: fills a data connection's first congestion window with warm-ups
/// (P-49) while its session's keys are on their way, so that its window
/// has doubled when the data starts. Returns the bytes written.
pub fn warm_up(mut stream: &TcpStream) -> std::io::Result<usize> {
    let out = warmups(first_window(stream));
    stream.write_all(&out)?;
    Ok(out.len())
}

/// Client: asks the server for warm-ups on a pull's data connection,
/// whose data the server sends (P-49).
pub fn ask_warm_up(mut stream: &TcpStream) -> std::io::Result<()> {
    stream.write_all(&Preamble::warmup_asking().encode())
}

/// What `stream` may send before its first acknowledgement, bytes, within
/// [`MAX_WARMUP`].
fn first_window(stream: &TcpStream) -> usize {
    crate::net::tcp_window(stream).unwrap_or(0).min(MAX_WARMUP)
}

/// Warm-ups of `window` bytes at most in all, preambles included, each
/// with as much padding as its preamble can announce (at least a byte).
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
/// it returns. The first that asks is answered with the server's own
/// warm-ups, ended by one with no padding. Refused: a warm-up of another
/// version or with anything but that flag in `session`, more than
/// [`MAX_WARMUP`] bytes of padding, a preamble after them that is not a
/// data connection's, or all of it not over within `within`.
pub fn past_warmups(
    stream: &mut TcpStream,
    first: Preamble,
    within: Duration,
) -> Result<Preamble, TransferError> {
    let deadline = Instant::now() + within;
    let before = stream.read_timeout().ok().flatten();
    let (mut pre, mut padding, mut answered) = (first, 0usize, false);
    while pre.kind == ConnKind::Warmup {
        if check(&pre, &mut padding)? && !std::mem::replace(&mut answered, true) {
            answer(stream, deadline)?;
        }
        let mut b = vec![0u8; pre.stream as usize + PREAMBLE_LEN];
        read_by(stream, &mut b, deadline)?;
        pre = Preamble::decode(&b[pre.stream as usize..]).map_err(|e| {
            TransferError::new(ErrorCode::Protocol, format!("after a warm-up: {e}"))
        })?;
    }
    stream.set_read_timeout(before).ok();
    match pre.kind {
        ConnKind::Data => Ok(pre),
        _ => Err(TransferError::new(
            ErrorCode::Protocol,
            "a warm-up ahead of a connection that is not a data connection",
        )),
    }
}

/// Client: reads past the warm-ups the server sent back on a pull's data
/// connection (P-49), to the one with no padding that ends them. Refused
/// as the server refuses a client's.
pub fn past_answer(stream: &mut TcpStream, within: Duration) -> Result<(), TransferError> {
    let deadline = Instant::now() + within;
    let before = stream.read_timeout().ok().flatten();
    let mut padding = 0usize;
    loop {
        let mut b = [0u8; PREAMBLE_LEN];
        read_by(stream, &mut b, deadline)?;
        let pre = Preamble::decode(&b).map_err(|e| {
            TransferError::new(ErrorCode::Protocol, format!("the server's warm-up: {e}"))
        })?;
        if pre.kind != ConnKind::Warmup || check(&pre, &mut padding)? {
            return Err(TransferError::new(
                ErrorCode::Protocol,
                "the server answered a warm-up with something else",
            ));
        }
        if pre.stream == 0 {
            stream.set_read_timeout(before).ok();
            return Ok(());
        }
        read_by(stream, &mut vec![0u8; pre.stream as usize], deadline)?;
    }
}

/// Checks a warm-up and counts its padding into `padding`; whether it
/// asks for warm-ups back.
fn check(pre: &Preamble, padding: &mut usize) -> Result<bool, TransferError> {
    let refused = |what: String| Err(TransferError::new(ErrorCode::Protocol, what));
    if pre.version != PROTOCOL_VERSION {
        return refused(format!("a warm-up of protocol version {}", pre.version));
    }
    let Some(asks) = pre.warmup_asks() else {
        return refused("a warm-up with an unknown flag".into());
    };
    *padding += pre.stream as usize;
    if *padding > MAX_WARMUP {
        return refused(format!("more than {MAX_WARMUP} bytes of warm-up"));
    }
    Ok(asks)
}

/// Server: sends its first window of warm-ups and the empty one that ends
/// them, before `deadline` (a client that does not read them does not
/// hold the server past it).
fn answer(mut stream: &TcpStream, deadline: Instant) -> Result<(), TransferError> {
    let mut out = warmups(first_window(stream).saturating_sub(PREAMBLE_LEN));
    out.extend_from_slice(&Preamble::warmup(0).encode());
    let left = deadline.saturating_duration_since(Instant::now());
    let before = stream.write_timeout().ok().flatten();
    stream
        .set_write_timeout(Some(left.max(Duration::from_millis(1))))
        .ok();
    let sent = stream.write_all(&out);
    stream.set_write_timeout(before).ok();
    sent.map_err(|e| {
        TransferError::new(
            ErrorCode::ConnectionLost,
            format!("answering a warm-up: {e}"),
        )
    })
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

    #[test]
    fn a_pull_asks_and_the_server_answers_once() {
        let (mut c, mut s) = pair();
        let server = std::thread::spawn(move || {
            let first = crate::handshake::read_preamble(&mut s)?;
            past_warmups(&mut s, first, Duration::from_secs(10))
        });
        ask_warm_up(&c).unwrap();
        ask_warm_up(&c).unwrap();
        past_answer(&mut c, Duration::from_secs(10)).unwrap();
        c.write_all(&data_preamble().encode()).unwrap();
        assert_eq!(server.join().unwrap().unwrap(), data_preamble());
        // One answer for two asks: nothing more follows it.
        c.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut more = [0u8; 1];
        let after = std::io::Read::read(&mut c, &mut more);
        assert!(!matches!(after, Ok(n) if n > 0), "{after:?}");
    }

    /// What the client makes of `bytes` as the server's answer.
    fn client_reads(bytes: Vec<u8>) -> Result<(), TransferError> {
        let (mut c, mut s) = pair();
        let writer = std::thread::spawn(move || {
            let _ = s.write_all(&bytes);
            s
        });
        let res = past_answer(&mut c, Duration::from_secs(5));
        drop(c);
        drop(writer.join());
        res
    }

    #[test]
    fn a_client_refuses_an_answer_that_is_not_warm_ups() {
        let mut ok = warmups(20_000);
        ok.extend_from_slice(&Preamble::warmup(0).encode());
        client_reads(ok).unwrap();
        let e = client_reads(data_preamble().encode().to_vec()).unwrap_err();
        assert_eq!(e.code, ErrorCode::Protocol);
        let e = client_reads(Preamble::warmup_asking().encode().to_vec()).unwrap_err();
        assert_eq!(e.code, ErrorCode::Protocol, "an answer does not ask");
        let mut long = Vec::new();
        for _ in 0..(MAX_WARMUP / u16::MAX as usize + 1) {
            long.extend_from_slice(&Preamble::warmup(u16::MAX).encode());
            long.resize(long.len() + u16::MAX as usize, 0);
        }
        let e = client_reads(long).unwrap_err();
        assert!(e.message.contains("more than"), "{}", e.message);
        let e = client_reads(warmups(1_000)).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConnectionLost, "closed before its end");
    }

    #[test]
    fn a_warmup_of_another_version_or_flag_is_refused() {
        let mut other = Preamble::warmup(10);
        other.version -= 1;
        let mut flagged = Preamble::warmup(10);
        flagged.session[3] = 1;
        for pre in [other, flagged] {
            let mut bytes = pre.encode().to_vec();
            bytes.resize(bytes.len() + 10, 0);
            bytes.extend_from_slice(&data_preamble().encode());
            let e = server_reads(bytes, Duration::from_secs(10)).unwrap_err();
            assert_eq!(e.code, ErrorCode::Protocol, "{pre:?}");
        }
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
