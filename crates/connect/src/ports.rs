//! Port ranges for data sockets (`--data-ports`, `--remote-ports`): sites
//! whose firewalls open a fixed range for bulk transfers, as GridFTP's
//! `GLOBUS_TCP_PORT_RANGE` does, get their sockets bound inside it.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};

/// An inclusive range of ports, `LO-HI` or one `PORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

impl PortRange {
    pub fn parse(s: &str) -> Option<PortRange> {
        let (lo, hi) = match s.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let p = s.trim().parse().ok()?;
                (p, p)
            }
        };
        (lo > 0 && lo <= hi).then_some(PortRange { lo, hi })
    }

    fn len(&self) -> u32 {
        (self.hi - self.lo) as u32 + 1
    }

    /// Binds with `bind` on `ip` at a port of the range, starting at a
    /// random one so that sessions at once spread over it; a port in use
    /// is skipped. With no range, the OS picks a port.
    pub fn bind<T>(
        range: Option<PortRange>,
        ip: IpAddr,
        bind: impl Fn(SocketAddr) -> io::Result<T>,
    ) -> io::Result<T> {
        let Some(r) = range else {
            return bind(SocketAddr::new(ip, 0));
        };
        let mut start = [0u8; 4];
        getrandom::fill(&mut start).expect("the OS random source is available");
        let start = u32::from_le_bytes(start) % r.len();
        for i in 0..r.len() {
            let port = r.lo + ((start + i) % r.len()) as u16;
            match bind(SocketAddr::new(ip, port)) {
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
                other => return other,
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("every port of {r} is in use"),
        ))
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    #[test]
    fn parses_ranges() {
        assert_eq!(
            PortRange::parse("7060-7069"),
            Some(PortRange { lo: 7060, hi: 7069 })
        );
        assert_eq!(
            PortRange::parse("7060"),
            Some(PortRange { lo: 7060, hi: 7060 })
        );
        assert_eq!(PortRange::parse("7069-7060"), None);
        assert_eq!(PortRange::parse("0-10"), None);
        assert_eq!(PortRange::parse("x"), None);
        assert_eq!(
            PortRange::parse("7060-7069").unwrap().to_string(),
            "7060-7069"
        );
    }

    #[test]
    fn binds_inside_the_range_and_skips_ports_in_use() {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        // Two free ports next to each other, one of them taken.
        let (busy, free) = loop {
            let a = TcpListener::bind((ip, 0)).unwrap();
            let p = a.local_addr().unwrap().port();
            if p < u16::MAX && TcpListener::bind((ip, p + 1)).is_ok() {
                break (a, p + 1);
            }
        };
        let lo = busy.local_addr().unwrap().port();
        let r = PortRange { lo, hi: free };
        for _ in 0..8 {
            let l = PortRange::bind(Some(r), ip, TcpListener::bind).unwrap();
            assert_eq!(l.local_addr().unwrap().port(), free);
        }
        let full = PortRange { lo, hi: lo };
        let e = PortRange::bind(Some(full), ip, TcpListener::bind).unwrap_err();
        assert!(e.to_string().contains("in use"), "{e}");
    }
}
