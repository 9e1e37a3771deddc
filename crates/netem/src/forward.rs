//! One direction of the emulated link: read packets from a TUN device,
//! put them through the link model, write them to the other TUN device
//! when they arrive.
//!
//! The loop only sleeps when nothing is due and nothing is waiting to be
//! read; packets due within a small slack (a tenth of the delay, at most
//! 100 µs) go out together. Per-packet sleeps and wake-ups, not the model,
//! were what cost CPU at a million packets a second.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use netsim::{Counters, Link};

const MAX_WAIT: Duration = Duration::from_millis(20);
const MAX_SLACK: Duration = Duration::from_micros(100);
/// Packets read per pass before due arrivals are served again.
const READ_BATCH: usize = 64;

pub fn run(
    mut input: File,
    mut output: File,
    mut link: Link,
    start: Instant,
    stop: Arc<AtomicBool>,
    block_udp: bool,
) -> (Counters, u64) {
    // SAFETY: prctl with integer arguments only affects this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
    let slack = (link.config().delay / 10).min(MAX_SLACK);
    let mut buf = vec![0u8; 65536];
    let mut write_errors = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut busy = false;
        let horizon = start.elapsed() + slack;
        while let Some(p) = link.poll(horizon) {
            busy = true;
            if output.write(&p).is_err() {
                write_errors += 1;
            }
        }
        for _ in 0..READ_BATCH {
            match input.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    busy = true;
                    if block_udp && is_udp(&buf[..n]) {
                        continue;
                    }
                    link.send(start.elapsed(), buf[..n].to_vec());
                }
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted =>
                {
                    break
                }
                Err(_) => {
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
        if busy {
            continue;
        }
        let now = start.elapsed();
        let wait = link
            .next_arrival()
            .map(|t| t.saturating_sub(now + slack))
            .unwrap_or(MAX_WAIT)
            .min(MAX_WAIT);
        if wait.is_zero() {
            continue;
        }
        let mut pfd = libc::pollfd {
            fd: input.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as _,
            tv_nsec: wait.subsec_nanos() as _,
        };
        // SAFETY: one pollfd we own, a valid timespec, no signal mask.
        unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    }
    (link.counters().clone(), write_errors)
}

/// An IPv4 packet carrying UDP (protocol 17). The emulator's link is
/// IPv4-only.
fn is_udp(p: &[u8]) -> bool {
    p.len() > 9 && p[0] >> 4 == 4 && p[9] == 17
}
