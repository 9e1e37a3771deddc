//! The sender's planner (P-31): cuts each file the receiver answered with
//! a basis into chunks, in order, and hands them to the session, which
//! matches them against what the receiver holds and then lets the file
//! go.

use std::fs::File;

use session::SenderSession;
use store::{Sources, StoreError};

use crate::shared::{Shared, POLL};

/// Cuts each file the receiver answered with a basis into chunks, in
/// order, and hands them to the session, which then lets the file go.
pub(crate) fn planner(sh: &Shared<SenderSession>, sources: &Sources) {
    while !sh.is_done() && !sh.stopped() {
        let file = {
            let mut st = sh.lock();
            match st.poll_plan() {
                Some(f) => f,
                None => {
                    let _ = sh.cv.wait_timeout(st, POLL);
                    continue;
                }
            }
        };
        let path = sources.path(file).cloned().unwrap_or_default();
        let chunks = File::open(&path).and_then(|f| {
            chunk::chunks_of(std::io::BufReader::with_capacity(1 << 20, f), |_, _| {})
        });
        let chunks = match chunks {
            Ok(c) => c,
            Err(e) => {
                sh.fail(StoreError::io("read", &path, &e).into(), true);
                return;
            }
        };
        let r = sh.lock().planned(file, &chunks);
        if let Err(e) = r {
            sh.fail(e.into(), true);
            return;
        }
        sh.cv.notify_all();
    }
}
