//! A session's data connections, gathered once joined (P-20): one per
//! stream index, each index once (P-39).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use connect::error::TransferError;
use connect::join::{DataConn, Joined};
use wire::ErrorCode;

/// How long a session waits for all its data connections to join.
const JOIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits for the session's data connections, already joined, one per
/// stream index. A second join of an index, a replay of a genuine
/// connection, ends the session (P-39).
pub(super) fn gather(
    rx: &mpsc::Receiver<Joined>,
    streams: u16,
) -> Result<Vec<DataConn>, TransferError> {
    let deadline = Instant::now() + JOIN_TIMEOUT;
    let mut slots: Vec<Option<DataConn>> = (0..streams).map(|_| None).collect();
    let mut got = 0;
    while got < streams {
        let left = deadline.saturating_duration_since(Instant::now());
        let joined = rx.recv_timeout(left).map_err(|_| {
            TransferError::new(
                ErrorCode::ConnectionLost,
                format!("only {got} of {streams} data connections joined within {}s (a firewall between the hosts?)", JOIN_TIMEOUT.as_secs()),
            )
        })?;
        let (index, conn) = match joined {
            Joined::Conn(index, conn) => (index, *conn),
            Joined::Again(index) => return Err(joined_twice(index)),
        };
        // Indices were checked against the count before the join (P-39).
        let slot = index.checked_sub(1).and_then(|i| slots.get_mut(i as usize));
        let Some(slot) = slot.filter(|s| s.is_none()) else {
            return Err(joined_twice(index));
        };
        *slot = Some(conn);
        got += 1;
    }
    Ok(slots.into_iter().flatten().collect())
}

fn joined_twice(index: u16) -> TransferError {
    TransferError::new(
        ErrorCode::Integrity,
        format!("data stream {index} joined twice: a copy of a genuine connection (replayed by someone on the path?); the session is ended, run the command again"),
    )
}
