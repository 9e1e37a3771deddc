//! Opening a TUN device inside a network namespace. A device belongs to the
//! namespace of the thread that creates it, so a short-lived thread enters
//! the namespace, creates the device, and hands back its descriptor, which
//! keeps working from any thread.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Enters `netns` on a fresh thread and runs `f` there.
pub fn in_netns<T: Send>(netns: &str, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    let path = format!("/var/run/netns/{netns}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let ns = File::open(&path)?;
            // SAFETY: setns on a descriptor we own; it only changes this
            // thread's network namespace, and the thread ends after `f`.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("thread inside the namespace panicked")))
    })
}

/// Creates TUN device `ifname` (no packet-info header) inside `netns`.
pub fn open_tun_in(netns: &str, ifname: &str) -> io::Result<File> {
    in_netns(netns, || {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")?;
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: IFF_TUN | IFF_NO_PI,
            _pad: [0; 22],
        };
        let n = ifname.len().min(libc::IFNAMSIZ - 1);
        req.name[..n].copy_from_slice(&ifname.as_bytes()[..n]);
        // SAFETY: TUNSETIFF reads and writes an ifreq-sized struct we own.
        if unsafe { libc::ioctl(f.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(f)
    })
}
