//! One error type for the file side, classified so the CLI can pick an exit
//! code and the server can tell the client what went wrong.

use std::io;
use std::path::Path;

use thiserror::Error;
use wire::ErrorCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    NotFound,
    Permission,
    DiskFull,
    OutsideRoot,
    BadRequest,
    /// An object store refused the credentials (or none were found).
    StoreAuth,
    /// An object store has no such bucket.
    NoBucket,
    /// An object store kept answering "slow down" past every retry.
    Throttled,
    /// An object store could not be reached.
    Unreachable,
    /// The shards of one transfer disagree about its plan (P-42).
    ShardPlan,
    Other,
}

#[derive(Debug, Error, Clone)]
#[error("{message}")]
pub struct StoreError {
    pub kind: StoreErrorKind,
    pub message: String,
}

impl StoreError {
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> StoreError {
        StoreError {
            kind,
            message: message.into(),
        }
    }

    /// Wraps an I/O error with what was being done and to which path.
    pub fn io(what: &str, path: &Path, e: &io::Error) -> StoreError {
        let kind = match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => StoreErrorKind::DiskFull,
            Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => {
                StoreErrorKind::Permission
            }
            Some(libc::ENOENT) => StoreErrorKind::NotFound,
            _ => StoreErrorKind::Other,
        };
        let hint = match kind {
            StoreErrorKind::DiskFull => {
                " (free space at the destination, then run the same command again)"
            }
            StoreErrorKind::Permission => " (check the permissions of the destination)",
            _ => "",
        };
        StoreError::new(kind, format!("cannot {what} {}: {e}{hint}", path.display()))
    }

    pub fn code(&self) -> ErrorCode {
        match self.kind {
            StoreErrorKind::NotFound => ErrorCode::NotFound,
            StoreErrorKind::Permission => ErrorCode::Permission,
            StoreErrorKind::DiskFull => ErrorCode::DiskFull,
            StoreErrorKind::OutsideRoot => ErrorCode::OutsideRoot,
            StoreErrorKind::BadRequest => ErrorCode::BadRequest,
            StoreErrorKind::StoreAuth => ErrorCode::StoreAuth,
            StoreErrorKind::NoBucket => ErrorCode::NoBucket,
            StoreErrorKind::Throttled => ErrorCode::Throttled,
            StoreErrorKind::Unreachable => ErrorCode::Connect,
            StoreErrorKind::ShardPlan => ErrorCode::ShardPlan,
            StoreErrorKind::Other => ErrorCode::Other,
        }
    }
}

impl From<StoreError> for wire::TransferError {
    fn from(e: StoreError) -> Self {
        wire::TransferError::new(e.code(), e.message)
    }
}
