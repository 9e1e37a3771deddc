//! What a client may ask of a server, bounded before anything is
//! allocated for it (P-39): the request's counts and sizes (P-21), the
//! protection it names, against the server's policy, and the streams it
//! asks for, against the memory a session may take and what the daemon's
//! sessions may take together.

use secure::Protection;
use wire::{ErrorCode, Op, Request};

use connect::error::TransferError;

/// The protection a request's code names. An unknown code is refused,
/// never taken for a weaker one (P-39).
pub fn parse_protection(code: u8) -> Result<Protection, TransferError> {
    Protection::from_wire(code).ok_or_else(|| {
        TransferError::new(
            ErrorCode::Protocol,
            format!("unknown protection code {code}; install the same haul release on both hosts"),
        )
    })
}

/// Refuses a protection the server's policy does not allow (P-39).
pub fn check_policy(protection: Protection, require_encryption: bool) -> Result<(), TransferError> {
    if require_encryption && !protection.encrypts() {
        return Err(TransferError::new(
            ErrorCode::Policy,
            "this server requires encryption (serve --require-encryption); run the transfer without --no-encrypt",
        ));
    }
    Ok(())
}

/// The protection of a code already checked (a decoded `Request`'s, P-7).
/// An unknown code, which the decoder never lets through, is taken for
/// the strongest, never the weakest; the server itself goes through
/// [`parse_protection`], which refuses it.
pub fn protection_of(code: u8) -> Protection {
    parse_protection(code).unwrap_or(Protection::Aes256Gcm)
}

/// Most memory a session's buffers may take (P-39): per data connection,
/// a frame being read and one being decoded or sent, and its read buffer.
/// A request for more streams than fit is given fewer.
pub const SESSION_MEMORY: u64 = 1 << 30;

/// What the buffers of all a daemon's sessions may take together, by
/// default (`haul serve --memory`, P-39): each session reserves its own
/// from it, and is given fewer streams, or told the server is busy, when
/// the rest will not do.
pub const DAEMON_MEMORY: u64 = 1 << 30;

/// What a request may have within [`SESSION_MEMORY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionBudget {
    /// Longest frame its data connections may carry.
    pub frame_max: u32,
    /// Streams accepted: those asked, or as many as fit.
    pub streams: u16,
    /// What each stream's buffers may take.
    pub per_stream: u64,
}

impl SessionBudget {
    /// The budget of a request that passed [`check_request`].
    pub fn of(req: &Request) -> SessionBudget {
        let (frame_max, fixed) = match req.op {
            Op::Tunnel => (tunnel_driver::LANE_FRAME_MAX, tunnel_driver::SESSION_HELD),
            _ => (data_frame_max(req.block_size), 0),
        };
        let per_stream = 2 * u64::from(frame_max) + connect::framed::READ_BUFFER as u64;
        let fit = SESSION_MEMORY.saturating_sub(fixed) / per_stream;
        let streams = u64::from(req.streams).min(fit.max(1)) as u16;
        SessionBudget {
            frame_max,
            streams,
            per_stream,
        }
    }

    /// What its streams' buffers may take.
    pub fn bytes(&self) -> u64 {
        u64::from(self.streams) * self.per_stream
    }

    /// The same with no more streams than `bytes` holds buffers for.
    pub fn within(self, bytes: u64) -> SessionBudget {
        let streams = u64::from(self.streams).min(bytes / self.per_stream) as u16;
        SessionBudget { streams, ..self }
    }
}

/// The longest frame a data connection of a session of `block_size`
/// carries: a block, or a bundle of small files (up to 4 MiB, P-33), with
/// room for its header, as [`wire::MAX_FRAME_LEN`] leaves room for the
/// largest block's.
pub fn data_frame_max(block_size: u32) -> u32 {
    let body = block_size.max(transfer::BUNDLE_MAX);
    body.saturating_add(wire::MAX_FRAME_LEN - wire::MAX_BLOCK_SIZE)
        .min(wire::MAX_FRAME_LEN)
}

/// Whether a request is within what any server serves (P-21): stream
/// count, block size, and the paths its operation needs.
pub(super) fn check_request(req: &Request) -> Result<(), TransferError> {
    let bad = |m: &str| Err(TransferError::new(ErrorCode::BadRequest, m.to_string()));
    // No data connections: a push whose every block the client announces
    // as zeros, its manifest right behind the request (P-29).
    let announced_only =
        req.streams == 0 && req.op == Op::Push && req.transport == wire::TRANSPORT_TCP;
    if (req.streams == 0 && !announced_only) || req.streams > 256 {
        return bad("stream count must be 1 to 256 (0 only for a push of zeros over TCP)");
    }
    if !(wire::MIN_BLOCK_SIZE..=wire::MAX_BLOCK_SIZE).contains(&req.block_size) {
        return bad("block size must be 64 KiB to 16 MiB");
    }
    match req.op {
        Op::Probe { bytes } if bytes > wire::MAX_PROBE_BYTES => {
            return bad("a probe may ask for 64 GiB at most");
        }
        Op::Probe { .. } if !req.paths.is_empty() => return bad("a probe names no path"),
        Op::Probe { .. } => {}
        Op::Tunnel if req.paths.len() != 1 => return bad("a tunnel names one target"),
        Op::Tunnel if req.transport != wire::TRANSPORT_TCP => {
            return bad("a tunnel travels on TCP streams")
        }
        Op::Tunnel => {}
        Op::Job if !req.paths.is_empty() => return bad("a job session names no path"),
        Op::Job => {}
        Op::Grant { .. } if req.paths.len() != 1 => return bad("a grant names one destination"),
        _ if req.paths.is_empty() || (req.op == Op::Push && req.paths.len() != 1) => {
            return bad("request names no path");
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use wire::{PROTECT_AES256GCM, PROTECT_CHACHA20POLY1305, PROTECT_INTEGRITY_ONLY};

    /// A request of `op` for one path, "x", with the rest plain.
    pub(in crate::server) fn request(op: Op, streams: u16, block_size: u32) -> Request {
        Request {
            op,
            paths: vec!["x".into()],
            recursive: false,
            many_sources: false,
            streams,
            block_size,
            protection: PROTECT_AES256GCM,
            rate: 0,
            transport: wire::TRANSPORT_TCP,
            contents: false,
            preserve: false,
            compress: 0,
            compress_level: 0,
            sync: Default::default(),
            basis: String::new(),
            shard: None,
            select: wire::Selection::default(),
            itemize: false,
            share: wire::SHARE_FAIR,
        }
    }

    #[test]
    fn unknown_protection_codes_are_refused_not_weakened() {
        assert_eq!(
            parse_protection(PROTECT_AES256GCM).unwrap(),
            Protection::Aes256Gcm
        );
        assert_eq!(
            parse_protection(PROTECT_CHACHA20POLY1305).unwrap(),
            Protection::ChaCha20Poly1305
        );
        assert_eq!(
            parse_protection(PROTECT_INTEGRITY_ONLY).unwrap(),
            Protection::IntegrityOnly
        );
        for code in [3, 7, 255] {
            let e = parse_protection(code).unwrap_err();
            assert_eq!(e.code, ErrorCode::Protocol);
            assert!(e.message.contains(&format!("code {code}")), "{}", e.message);
            assert_ne!(protection_of(code), Protection::IntegrityOnly);
        }
    }

    #[test]
    fn a_server_that_requires_encryption_refuses_integrity_only() {
        for p in [Protection::Aes256Gcm, Protection::ChaCha20Poly1305] {
            assert!(check_policy(p, true).is_ok());
        }
        let e = check_policy(Protection::IntegrityOnly, true).unwrap_err();
        assert_eq!(e.code, ErrorCode::Policy);
        assert!(e.message.contains("--no-encrypt"), "{}", e.message);
        assert!(check_policy(Protection::IntegrityOnly, false).is_ok());
    }

    /// Streams times frames stays within the session's memory: 256
    /// streams of 16 MiB blocks once took 8 to 12 GiB.
    #[test]
    fn streams_are_cut_to_what_fits_in_a_sessions_memory() {
        let mib = 1 << 20;
        for (streams, block, want) in [
            (16, mib, 16),
            (256, 64 << 10, 124),
            (256, 16 * mib, 31),
            (31, 16 * mib, 31),
            (64, 4 * mib, 64),
            (0, mib, 0),
        ] {
            let b = SessionBudget::of(&request(Op::Pull, streams, block));
            assert_eq!(b.streams, want, "{streams} streams of {block}-byte blocks");
            let per = 2 * u64::from(b.frame_max) + connect::framed::READ_BUFFER as u64;
            assert!(u64::from(b.streams) * per <= SESSION_MEMORY);
        }
        // What is left of the daemon's memory cuts further.
        let b = SessionBudget::of(&request(Op::Pull, 16, mib));
        assert_eq!(b.bytes(), 16 * b.per_stream);
        assert_eq!(b.within(b.per_stream * 5 + 1).streams, 5);
        assert_eq!(b.within(b.per_stream - 1).streams, 0);
        assert_eq!(b.within(u64::MAX), b);
        // A block frame, or a bundle of small files, with its header.
        assert_eq!(data_frame_max(64 << 10), (4 << 20) + 4096);
        assert_eq!(data_frame_max(16 * mib), wire::MAX_FRAME_LEN);
        // A tunnel's lanes share the session with what its peer may make
        // it hold.
        let t = SessionBudget::of(&request(Op::Tunnel, 256, mib));
        assert_eq!(t.frame_max, tunnel_driver::LANE_FRAME_MAX);
        let per = 2 * u64::from(t.frame_max) + connect::framed::READ_BUFFER as u64;
        assert!(u64::from(t.streams) * per + tunnel_driver::SESSION_HELD <= SESSION_MEMORY);
        assert_eq!(t.streams, 213);
        assert_eq!(tunnel_driver::SESSION_HELD, 544 << 20, "as documented");
    }
}
