//! Creating, configuring and removing namespaces with iproute2.

use std::io;

/// Runs `ip ARGS`, turning a failure into an error that names the command.
pub fn ip(args: &[&str]) -> io::Result<()> {
    let out = crate::programs::program("ip").args(args).output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "`ip {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// Creates namespace `name` with loopback up and IPv6 off, so the link
/// carries only the traffic under test (no router solicitations).
pub fn add(name: &str) -> io::Result<()> {
    ip(&["netns", "add", name])?;
    ip(&["-n", name, "link", "set", "lo", "up"])?;
    let out = crate::programs::program("ip")
        .args([
            "netns",
            "exec",
            name,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ])
        .output()?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "haul-netem: could not disable IPv6 in {name}: {}",
            why.trim()
        );
    }
    Ok(())
}

pub fn delete(name: &str) {
    let _ = ip(&["netns", "del", name]);
}

pub fn exists(name: &str) -> bool {
    std::path::Path::new(&format!("/var/run/netns/{name}")).exists()
}

/// Gives `dev` in `ns` address `local` with point-to-point peer `peer`.
pub fn configure_p2p(ns: &str, dev: &str, local: &str, peer: &str, mtu: u32) -> io::Result<()> {
    ip(&["-n", ns, "addr", "add", local, "peer", peer, "dev", dev])?;
    ip(&[
        "-n",
        ns,
        "link",
        "set",
        dev,
        "mtu",
        &mtu.to_string(),
        "txqueuelen",
        "10000",
        "up",
    ])
}
