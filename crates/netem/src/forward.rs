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
    cut: Arc<AtomicBool>,
    filter: &Filter,
) -> (Counters, u64) {
    // SAFETY: prctl with integer arguments only affects this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
    let slack = (link.config().delay / 10).min(MAX_SLACK);
    let mut buf = vec![0u8; 65536];
    let mut write_errors = 0u64;
    let mut cut_drops = 0u64;
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
                    if !filter.passes(&buf[..n]) {
                        continue;
                    }
                    // An outage switched on while the emulator runs
                    // (`Emulator::cut`): nothing enters the link.
                    if cut.load(Ordering::Relaxed) {
                        cut_drops += 1;
                        continue;
                    }
                    if let Some(mtu) = filter.path_mtu.filter(|&m| n > m as usize) {
                        // A hop with a smaller MTU: it cannot forward this.
                        // Don't-fragment packets get ICMP "fragmentation
                        // needed" back, as a router sends; the rest are
                        // dropped (this hop does not fragment).
                        if let Some(icmp) = frag_needed(&buf[..n], mtu) {
                            if input.write(&icmp).is_err() {
                                write_errors += 1;
                            }
                        }
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
    let mut counters = link.counters().clone();
    counters.dropped_outage += cut_drops;
    (counters, write_errors)
}

/// The emulated firewall: which packets may enter the link. The link is
/// IPv4-only.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub block_udp: bool,
    /// When not empty, only TCP to or from these ports passes (and ICMP).
    pub only_tcp_ports: Vec<u16>,
    /// A hop's MTU, below the TUN devices': larger packets do not pass.
    pub path_mtu: Option<u32>,
}

/// The ICMP "fragmentation needed" (type 3, code 4) a router sends back
/// for an IPv4 packet with don't-fragment set that its next hop's `mtu`
/// cannot carry (RFC 1191): from the packet's destination to its source,
/// carrying the packet's IP header and the first 8 bytes after it. `None`
/// for anything else (no DF, not IPv4, ICMP itself).
pub fn frag_needed(p: &[u8], mtu: u32) -> Option<Vec<u8>> {
    if p.len() < 20 || p[0] >> 4 != 4 || p[6] & 0x40 == 0 || p[9] == ICMP {
        return None;
    }
    let ihl = (p[0] & 0x0f) as usize * 4;
    let quoted = p.get(..(ihl + 8).min(p.len()))?;
    let total = 20 + 8 + quoted.len();
    let mut out = vec![0u8; total];
    out[0] = 0x45;
    out[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    out[8] = 64;
    out[9] = ICMP;
    out[12..16].copy_from_slice(&p[16..20]);
    out[16..20].copy_from_slice(&p[12..16]);
    let c = checksum(&out[..20]);
    out[10..12].copy_from_slice(&c.to_be_bytes());
    out[20] = 3;
    out[21] = 4;
    out[26..28].copy_from_slice(&(mtu as u16).to_be_bytes());
    out[28..].copy_from_slice(quoted);
    let c = checksum(&out[20..]);
    out[22..24].copy_from_slice(&c.to_be_bytes());
    Some(out)
}

/// The Internet checksum (RFC 1071) of `b`.
fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32)
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

const ICMP: u8 = 1;
const TCP: u8 = 6;
const UDP: u8 = 17;

impl Filter {
    pub fn passes(&self, p: &[u8]) -> bool {
        if p.len() < 20 || p[0] >> 4 != 4 {
            return true;
        }
        let proto = p[9];
        if self.block_udp && proto == UDP {
            return false;
        }
        if self.only_tcp_ports.is_empty() || proto == ICMP {
            return true;
        }
        if proto != TCP {
            return false;
        }
        let ihl = (p[0] & 0x0f) as usize * 4;
        let Some(ports) = p.get(ihl..ihl + 4) else {
            return false;
        };
        let src = u16::from_be_bytes([ports[0], ports[1]]);
        let dst = u16::from_be_bytes([ports[2], ports[3]]);
        self.only_tcp_ports.contains(&src) || self.only_tcp_ports.contains(&dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(proto: u8, src: u16, dst: u16) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[9] = proto;
        p[20..22].copy_from_slice(&src.to_be_bytes());
        p[22..24].copy_from_slice(&dst.to_be_bytes());
        p
    }

    #[test]
    fn firewall_rules() {
        let open = Filter::default();
        assert!(open.passes(&packet(UDP, 1, 2)));
        let no_udp = Filter {
            block_udp: true,
            ..Filter::default()
        };
        assert!(!no_udp.passes(&packet(UDP, 1, 2)));
        assert!(no_udp.passes(&packet(TCP, 1, 2)));
        let ssh_only = Filter {
            only_tcp_ports: vec![22],
            ..Filter::default()
        };
        assert!(ssh_only.passes(&packet(TCP, 40000, 22)));
        assert!(ssh_only.passes(&packet(TCP, 22, 40000)));
        assert!(!ssh_only.passes(&packet(TCP, 40000, 7050)));
        assert!(!ssh_only.passes(&packet(UDP, 40000, 22)));
        assert!(ssh_only.passes(&packet(ICMP, 0, 0)));
        assert!(!ssh_only.passes(&packet(TCP, 1, 2)[..22]));
    }

    #[test]
    fn a_hop_refuses_dont_fragment_packets_with_icmp() {
        let mut p = packet(UDP, 5000, 7050);
        p.resize(3000, 7);
        p[2..4].copy_from_slice(&3000u16.to_be_bytes());
        p[12..16].copy_from_slice(&[198, 18, 0, 1]);
        p[16..20].copy_from_slice(&[198, 18, 0, 2]);
        // Without don't-fragment: no answer (dropped).
        assert_eq!(frag_needed(&p, 1400), None);
        p[6] |= 0x40;
        let icmp = frag_needed(&p, 1400).unwrap();
        assert_eq!(icmp.len(), 20 + 8 + 28);
        assert_eq!((icmp[9], icmp[20], icmp[21]), (ICMP, 3, 4));
        assert_eq!(&icmp[12..16], &[198, 18, 0, 2], "from the destination");
        assert_eq!(&icmp[16..20], &[198, 18, 0, 1], "to the source");
        assert_eq!(u16::from_be_bytes([icmp[26], icmp[27]]), 1400);
        assert_eq!(&icmp[28..], &p[..28], "the header and 8 bytes quoted");
        // Both checksums verify: the sum over each part is all ones.
        assert_eq!(checksum(&icmp[..20]), 0);
        assert_eq!(checksum(&icmp[20..]), 0);
        // ICMP itself is never answered with ICMP.
        let mut q = packet(ICMP, 0, 0);
        q[6] |= 0x40;
        assert_eq!(frag_needed(&q, 1400), None);
    }
}
