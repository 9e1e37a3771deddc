//! Exit codes: one per kind of failure, so scripts can tell them apart.
//! The same numbers are `wire::ErrorCode`, so a server's refusal keeps its
//! meaning on the client.

use wire::ErrorCode;

pub const OK: i32 = 0;

pub const HELP: &str = "\
Exit codes:
   0  success: every file verified and in place
   1  other error (e.g. a source changed while it was sent)
   2  usage error or bad request
   3  cannot connect: unknown host, refused port, no route
   4  authentication failed: unknown or wrong key, server key changed
   5  protocol error: peer speaks another haul version, or is not haul
   6  source not found
   7  permission denied at the destination
   8  path outside the served root
   9  disk full at the destination (partial data is never left under a final name)
  10  connection lost during the transfer
  11  integrity failure: data failed verification
  12  server busy
  13  ssh failed (its own message is shown above), or haul is missing on the remote host
  14  refused by the server's policy: it requires encryption (drop --no-encrypt)
  15  past a limit of the peer: more than a tunnel may make it hold
  16  object store: credentials refused or missing
  17  object store: no such bucket
  18  object store: still throttled (SlowDown) after retries with backoff
  19  the shards of one transfer disagree about its plan: the sources changed between them
  20  a one-time grant was used up by a push that ended verified (a job then ends succeeded)
  23  partial transfer: some listed sources were missing (--files-from, as rsync's 23); the rest is verified and in place";

pub fn code(c: ErrorCode) -> i32 {
    c as i32
}
