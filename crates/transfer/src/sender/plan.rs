//! The sender's planner (P-31): cuts each file the receiver answered with
//! a basis into chunks, in order, and hands them to the session, which
//! matches them against what the receiver holds and then lets the file
//! go.

use std::path::Path;

use session::SenderSession;
use store::{BlockSource, HeldReader, StoreError};

use crate::shared::Shared;

/// Cuts each file the receiver answered with a basis into chunks, in
/// order, and hands them to the session, which then lets the file go.
pub(crate) fn planner(sh: &Shared<SenderSession>, sources: &dyn BlockSource) {
    while !sh.is_done() && !sh.stopped() {
        let file = {
            let mut st = sh.lock();
            match st.poll_plan() {
                Some(f) => f,
                None => {
                    drop(sh.wait(st, None));
                    continue;
                }
            }
        };
        let chunks = sources.open(file).and_then(|held| {
            HeldReader::new(&*held)
                .and_then(|r| {
                    chunk::chunks_of(std::io::BufReader::with_capacity(1 << 20, r), |_, _| {})
                })
                .map_err(|e| StoreError::io("read", Path::new(&sources.name(file)), &e))
        });
        let chunks = match chunks {
            Ok(c) => c,
            Err(e) => {
                sh.fail(e.into(), true);
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
