//! Why a session ended, as both peers and the CLI's exit status say it
//! (P-6, "Error codes" in docs/PROTOCOL.md): the code, and the error every
//! path of a transfer returns with it, one line for a person.

use std::fmt;

/// Why a peer ended the session. Numbers match the CLI's exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    Other = 1,
    BadRequest = 2,
    /// The client could not reach the server (never sent for that), or the
    /// UDP channel could not be set up under `--transport udp`.
    Connect = 3,
    Auth = 4,
    Protocol = 5,
    NotFound = 6,
    Permission = 7,
    OutsideRoot = 8,
    DiskFull = 9,
    ConnectionLost = 10,
    Integrity = 11,
    Busy = 12,
    /// Client only, never sent: ssh could not start the remote haul
    /// (ssh's own message says why), or haul is not installed there.
    Ssh = 13,
    /// The server's policy refuses what was asked: less than full
    /// encryption from a server that requires it (P-39).
    Policy = 14,
    /// A peer went past what it may make the other side hold: a tunnel's
    /// frames too far ahead of those received (P-39), a receiver's answers
    /// past a sending session's budget (P-43).
    Limit = 15,
    /// An object store refused the credentials, or none were found.
    StoreAuth = 16,
    /// An object store has no such bucket.
    NoBucket = 17,
    /// An object store kept answering "slow down" past every retry.
    Throttled = 18,
    /// The shards of one transfer disagree about its plan: the sources
    /// changed between them (P-42).
    ShardPlan = 19,
    /// A one-time grant was used up by a push that ended verified here
    /// (P-45 G-5): its key comes back after the push completed, as a job
    /// whose daemon stopped before it heard so does.
    GrantSpent = 20,
    /// Client only, never sent: some sources were not there to send (a
    /// `--files-from` list naming missing files), as rsync's exit 23;
    /// everything else is verified and in place.
    Partial = 23,
}

impl ErrorCode {
    pub fn from_u8(v: u8) -> ErrorCode {
        match v {
            2 => ErrorCode::BadRequest,
            3 => ErrorCode::Connect,
            4 => ErrorCode::Auth,
            5 => ErrorCode::Protocol,
            6 => ErrorCode::NotFound,
            7 => ErrorCode::Permission,
            8 => ErrorCode::OutsideRoot,
            9 => ErrorCode::DiskFull,
            10 => ErrorCode::ConnectionLost,
            11 => ErrorCode::Integrity,
            12 => ErrorCode::Busy,
            13 => ErrorCode::Ssh,
            14 => ErrorCode::Policy,
            15 => ErrorCode::Limit,
            16 => ErrorCode::StoreAuth,
            17 => ErrorCode::NoBucket,
            18 => ErrorCode::Throttled,
            19 => ErrorCode::ShardPlan,
            20 => ErrorCode::GrantSpent,
            23 => ErrorCode::Partial,
            _ => ErrorCode::Other,
        }
    }
}

/// The error every driver path returns: a code the CLI turns into an exit
/// status, and one line for a person.
#[derive(Debug, Clone)]
pub struct TransferError {
    pub code: ErrorCode,
    pub message: String,
}

impl TransferError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> TransferError {
        TransferError {
            code,
            message: message.into(),
        }
    }

    /// A connection that broke while `what`: the peer is gone or the path
    /// is (past `--timeout` when the kernel says the peer was silent).
    pub fn lost(what: &str, e: &std::io::Error) -> TransferError {
        let silent = match e.kind() == std::io::ErrorKind::TimedOut {
            true => " (the peer was silent past --timeout)",
            false => "",
        };
        TransferError::new(
            ErrorCode::ConnectionLost,
            format!("connection lost while {what}: {e}{silent}. What was verified is kept: run the same command again to resume"),
        )
    }
}

impl fmt::Display for TransferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TransferError {}
