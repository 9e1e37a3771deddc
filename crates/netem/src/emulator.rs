//! Building and tearing down the emulated WAN.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use netsim::{Counters, Link, LinkConfig};

use crate::{forward, netns, tun};

/// Address of side A (namespace `NAME-a`).
pub const ADDR_A: &str = "198.18.0.1";
/// Address of side B (namespace `NAME-b`).
pub const ADDR_B: &str = "198.18.0.2";

#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// Namespaces are `NAME-a` and `NAME-b`; keep it unique and short.
    pub name: String,
    pub a2b: LinkConfig,
    pub b2a: LinkConfig,
    pub mtu: u32,
    pub seed: u64,
    /// Drop every UDP datagram, both ways, as a firewall that lets only TCP
    /// through would.
    pub block_udp: bool,
    /// When not empty, a firewall that passes only TCP to or from these
    /// ports (and ICMP): everything else, UDP and other TCP ports included,
    /// is dropped both ways, as between two sites that open only ssh.
    pub only_tcp_ports: Vec<u16>,
    /// A hop's MTU below `mtu`, both ways: larger packets are refused with
    /// ICMP "fragmentation needed" if they may not be fragmented, and
    /// dropped otherwise, as by a router in the middle of the path.
    pub path_mtu: Option<u32>,
}

/// What each direction did, reported when the emulator stops.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub a2b: Counters,
    pub b2a: Counters,
    /// Packets the destination TUN refused.
    pub write_errors: u64,
}

pub struct Emulator {
    name: String,
    stop: Arc<AtomicBool>,
    /// An outage switched on and off while running, both ways.
    cut: Arc<AtomicBool>,
    threads: Vec<JoinHandle<(Counters, u64)>>,
    report: Option<Report>,
}

fn nonblocking(f: &File) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Emulator {
    /// Creates both namespaces and starts forwarding. Needs root.
    pub fn start(cfg: EmulatorConfig) -> io::Result<Emulator> {
        let (a, b) = (format!("{}-a", cfg.name), format!("{}-b", cfg.name));
        for ns in [&a, &b] {
            if netns::exists(ns) {
                return Err(io::Error::other(format!("network namespace {ns} already exists; pick another --name or remove it (ip netns del {ns})")));
            }
        }
        let mut emu = Emulator {
            name: cfg.name.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            cut: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            report: None,
        };
        netns::add(&a)?;
        netns::add(&b)?;
        let tun_a = tun::open_tun_in(&a, "tun-a")?;
        let tun_b = tun::open_tun_in(&b, "tun-b")?;
        netns::configure_p2p(&a, "tun-a", ADDR_A, ADDR_B, cfg.mtu)?;
        netns::configure_p2p(&b, "tun-b", ADDR_B, ADDR_A, cfg.mtu)?;
        nonblocking(&tun_a)?;
        nonblocking(&tun_b)?;
        let start = Instant::now();
        let pairs = [
            (
                tun_a.try_clone()?,
                tun_b.try_clone()?,
                Link::new(cfg.a2b, cfg.seed),
                "a2b",
            ),
            (
                tun_b,
                tun_a,
                Link::new(cfg.b2a, cfg.seed.wrapping_add(1)),
                "b2a",
            ),
        ];
        let filter = forward::Filter {
            block_udp: cfg.block_udp,
            only_tcp_ports: cfg.only_tcp_ports.clone(),
            path_mtu: cfg.path_mtu,
        };
        for (input, output, link, label) in pairs {
            let (stop, cut) = (emu.stop.clone(), emu.cut.clone());
            let filter = filter.clone();
            let t = std::thread::Builder::new()
                .name(format!("netem-{label}"))
                .spawn(move || forward::run(input, output, link, start, stop, cut, &filter))?;
            emu.threads.push(t);
        }
        Ok(emu)
    }

    /// Cuts the link both ways from now (`true`) until called again with
    /// `false`: an outage at a moment a test picks while it runs. Packets
    /// already on the link still arrive; counted as `dropped_outage`.
    pub fn cut(&self, down: bool) {
        self.cut.store(down, Ordering::Relaxed);
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn ns_a(&self) -> String {
        format!("{}-a", self.name)
    }

    pub fn ns_b(&self) -> String {
        format!("{}-b", self.name)
    }

    /// `ip netns exec NAME-a program`.
    pub fn command_a(&self, program: &str) -> Command {
        crate::programs::check_program(program);
        let mut c = crate::programs::program("ip");
        c.args(["netns", "exec", &self.ns_a(), program]);
        c
    }

    /// `ip netns exec NAME-b program`.
    pub fn command_b(&self, program: &str) -> Command {
        crate::programs::check_program(program);
        let mut c = crate::programs::program("ip");
        c.args(["netns", "exec", &self.ns_b(), program]);
        c
    }

    /// Runs `f` on a thread inside namespace A (or B).
    pub fn in_a<T: Send>(&self, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
        tun::in_netns(&self.ns_a(), f)
    }

    pub fn in_b<T: Send>(&self, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
        tun::in_netns(&self.ns_b(), f)
    }

    /// Stops forwarding, removes the namespaces, and returns the counters.
    pub fn stop(&mut self) -> Report {
        if let Some(r) = &self.report {
            return r.clone();
        }
        self.stop.store(true, Ordering::Relaxed);
        let mut report = Report::default();
        for (i, t) in self.threads.drain(..).enumerate() {
            let (c, w) = t.join().unwrap_or_default();
            report.write_errors += w;
            if i == 0 {
                report.a2b = c;
            } else {
                report.b2a = c;
            }
        }
        netns::delete(&self.ns_a());
        netns::delete(&self.ns_b());
        self.report = Some(report.clone());
        report
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.stop();
    }
}
