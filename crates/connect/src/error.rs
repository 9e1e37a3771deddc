//! The error every driver path returns: a code the CLI turns into an exit
//! status, and one line for a person.

use std::fmt;

use wire::ErrorCode;

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

    pub fn lost(what: &str, e: &std::io::Error) -> TransferError {
        let silent = match e.raw_os_error() == Some(libc::ETIMEDOUT) {
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

impl From<store::StoreError> for TransferError {
    fn from(e: store::StoreError) -> Self {
        TransferError::new(e.code(), e.message)
    }
}

impl From<session::SenderError> for TransferError {
    fn from(e: session::SenderError) -> Self {
        TransferError::new(e.code(), e.to_string())
    }
}

impl From<session::ReceiverError> for TransferError {
    fn from(e: session::ReceiverError) -> Self {
        TransferError::new(e.code(), e.to_string())
    }
}
