//! What a client asks of a daemon besides moving files (P-45): a
//! one-time grant for another daemon's push, and calls on the daemon's
//! jobs. Both are conversations on the control connection alone.

use wire::{ErrorCode, Msg, Op};

use super::connected::Connected;
use connect::error::TransferError;

/// What a grant allows: the push it is for.
pub struct GrantAsk {
    /// The grantee's one-time public key.
    pub key: [u8; 32],
    /// The destination on this daemon.
    pub path: String,
    pub recursive: bool,
    pub contents: bool,
    pub many_sources: bool,
    pub sync: wire::SyncOptions,
    pub budget: u64,
    pub lifetime: u32,
    pub repeat: bool,
}

impl Connected {
    /// Asks the daemon for a one-time grant; returns when it expires
    /// (seconds since the epoch).
    pub fn grant(mut self, ask: &GrantAsk) -> Result<u64, TransferError> {
        let op = Op::Grant {
            key: ask.key,
            budget: ask.budget,
            lifetime: ask.lifetime,
            repeat: ask.repeat,
        };
        let mut req = self.build_request(op, vec![ask.path.clone()], 1);
        req.recursive = ask.recursive;
        req.contents = ask.contents;
        req.many_sources = ask.many_sources;
        req.sync = ask.sync;
        let sent = self.send_request(&req)?;
        self.await_welcome()?;
        sent.map_err(|e| TransferError::lost("asking for a grant", &e))?;
        match self.read_answer("a grant")? {
            Msg::Granted { expires } => Ok(expires),
            _ => Err(unexpected()),
        }
    }

    /// Opens a job session: calls and answers from now on.
    pub fn jobs(mut self) -> Result<JobSession, TransferError> {
        let req = self.build_request(Op::Job, Vec::new(), 1);
        let sent = self.send_request(&req)?;
        self.await_welcome()?;
        sent.map_err(|e| TransferError::lost("opening a job session", &e))?;
        Ok(JobSession { conn: self })
    }

    fn read_answer(&mut self, what: &str) -> Result<Msg, TransferError> {
        match self.ctrl()?.r.read_msg() {
            Ok(Some(Msg::Error { code, message })) => {
                Err(TransferError::new(code, format!("server: {message}")))
            }
            Ok(Some(m)) => Ok(m),
            Ok(None) => Err(TransferError::new(
                ErrorCode::ConnectionLost,
                format!("the server closed the connection before answering {what}"),
            )),
            Err(e) => Err(e.into_transfer(&format!("waiting for {what}"))),
        }
    }
}

fn unexpected() -> TransferError {
    TransferError::new(
        ErrorCode::Protocol,
        "the server answered with something else",
    )
}

/// A session of job calls (P-45 J-1).
pub struct JobSession {
    conn: Connected,
}

impl JobSession {
    /// Sends one call (JSON).
    pub fn call(&mut self, call: &[u8]) -> Result<(), TransferError> {
        self.conn
            .ctrl()?
            .w
            .send_msg(&Msg::JobCall(call.to_vec()))
            .map_err(|e| TransferError::lost("sending a job call", &e))
    }

    /// The next answer (JSON).
    pub fn answer(&mut self) -> Result<Vec<u8>, TransferError> {
        match self.conn.read_answer("a job call")? {
            Msg::JobAnswer(b) => Ok(b),
            _ => Err(unexpected()),
        }
    }
}
