//! `haul-netem`: run an emulated WAN between two network namespaces until
//! interrupted, then print what each direction did.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use netem::profile::{self, apply};
use netem::{emulator::Report, Emulator, EmulatorConfig, ADDR_A, ADDR_B};
use netsim::{Counters, LinkConfig};

#[derive(Parser)]
#[command(
    name = "haul-netem",
    about = "Emulate a long, lossy, fat link between two network namespaces (needs root)",
    after_help = "Creates namespaces NAME-a (tun-a, 198.18.0.1) and NAME-b (tun-b, 198.18.0.2).\n\
Run programs inside with `ip netns exec NAME-a CMD`. Each link option takes one value\n\
for both directions, or A2B/B2A, e.g. --loss 1/0 loses 1% from a to b only.\n\n\
Example: haul-netem --name wan --delay 75 --rate 1G --loss 0.1"
)]
struct Args {
    /// Namespace prefix (unique, short).
    #[arg(long)]
    name: String,
    /// One-way delay in milliseconds (RTT is twice this).
    #[arg(long, allow_hyphen_values = false)]
    delay: Option<String>,
    /// Delay variation in ms (uniform, never reorders by itself).
    #[arg(long)]
    jitter: Option<String>,
    /// Bottleneck rate in bits per second: 1G, 100M.
    #[arg(long)]
    rate: Option<String>,
    /// Queue in bytes before tail drop (default: one bandwidth-delay product).
    #[arg(long)]
    queue: Option<String>,
    /// Random loss, percent.
    #[arg(long)]
    loss: Option<String>,
    /// Gilbert-Elliott burst loss: P_GB,P_BG,LOSS_BAD[,LOSS_GOOD] in percent.
    #[arg(long)]
    ge: Option<String>,
    /// Packets reordered, percent.
    #[arg(long)]
    reorder: Option<String>,
    /// Packets duplicated, percent.
    #[arg(long)]
    dup: Option<String>,
    /// Packets with a flipped bit, percent.
    #[arg(long)]
    corrupt: Option<String>,
    /// Link down from START to END seconds (repeatable).
    #[arg(long)]
    outage: Vec<String>,
    /// MTU of both TUN devices.
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// MTU of a hop in the middle of the path, below --mtu: larger packets
    /// with don't-fragment set get ICMP "fragmentation needed" back, others
    /// are dropped.
    #[arg(long)]
    path_mtu: Option<u32>,
    /// Drop every UDP datagram both ways (a firewall that passes only TCP).
    #[arg(long)]
    block_udp: bool,
    /// Pass only TCP to or from these ports (and ICMP), dropping all else
    /// both ways: --only-tcp-ports 22 is a firewall that opens only ssh.
    #[arg(long, value_delimiter = ',', value_name = "PORT,...")]
    only_tcp_ports: Vec<u16>,
    /// Seed for loss and other random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM).
    #[arg(long)]
    duration: Option<f64>,
    /// Write this file once the link is up.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Write the final counters here as JSON.
    #[arg(long)]
    stats_json: Option<PathBuf>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn configs(a: &Args) -> Result<(LinkConfig, LinkConfig), String> {
    let (mut x, mut y) = (LinkConfig::default(), LinkConfig::default());
    apply(
        a.delay.as_deref(),
        profile::millis,
        |c, v| c.delay = v,
        &mut x,
        &mut y,
    )?;
    apply(
        a.jitter.as_deref(),
        profile::millis,
        |c, v| c.jitter = v,
        &mut x,
        &mut y,
    )?;
    apply(
        a.rate.as_deref(),
        profile::rate_bps,
        |c, v| c.rate_bps = Some(v),
        &mut x,
        &mut y,
    )?;
    let bytes = |v: &str| {
        v.parse::<u64>()
            .map_err(|_| format!("{v:?} is not a byte count"))
    };
    apply(
        a.queue.as_deref(),
        bytes,
        |c, v| c.queue_bytes = Some(v),
        &mut x,
        &mut y,
    )?;
    apply(
        a.loss.as_deref(),
        profile::percent,
        |c, v| c.loss = v,
        &mut x,
        &mut y,
    )?;
    apply(
        a.ge.as_deref(),
        profile::gilbert_elliott,
        |c, v| c.gilbert_elliott = Some(v),
        &mut x,
        &mut y,
    )?;
    apply(
        a.reorder.as_deref(),
        profile::percent,
        |c, v| c.reorder = v,
        &mut x,
        &mut y,
    )?;
    apply(
        a.dup.as_deref(),
        profile::percent,
        |c, v| c.duplicate = v,
        &mut x,
        &mut y,
    )?;
    apply(
        a.corrupt.as_deref(),
        profile::percent,
        |c, v| c.corrupt = v,
        &mut x,
        &mut y,
    )?;
    for o in &a.outage {
        apply(
            Some(o),
            profile::outage,
            |c, v| c.outages.push(v),
            &mut x,
            &mut y,
        )?;
    }
    Ok((x, y))
}

fn counters_json(c: &Counters) -> serde_json::Value {
    serde_json::json!({
        "packets_in": c.packets_in, "bytes_in": c.bytes_in,
        "delivered": c.delivered, "bytes_delivered": c.bytes_delivered,
        "dropped_outage": c.dropped_outage, "dropped_loss": c.dropped_loss, "dropped_queue": c.dropped_queue,
        "reordered": c.reordered, "duplicated": c.duplicated, "corrupted": c.corrupted,
        "max_queue_bytes": c.max_queue_bytes,
    })
}

fn print(label: &str, c: &Counters, secs: f64) {
    eprintln!(
        "haul-netem {label}: in {} pkts / {} B, delivered {} / {} B ({:.1} Mbit/s avg), dropped: loss {} queue {} outage {}, reordered {}, duplicated {}, corrupted {}, max queue {} B",
        c.packets_in, c.bytes_in, c.delivered, c.bytes_delivered,
        c.bytes_delivered as f64 * 8.0 / secs.max(1e-9) / 1e6,
        c.dropped_loss, c.dropped_queue, c.dropped_outage, c.reordered, c.duplicated, c.corrupted, c.max_queue_bytes
    );
}

fn main() {
    let args = Args::parse();
    let (a2b, b2a) = match configs(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("haul-netem: {e}");
            std::process::exit(2);
        }
    };
    if !netem::testing::is_root() {
        eprintln!("haul-netem: needs root (it creates network namespaces and TUN devices)");
        std::process::exit(1);
    }
    // SAFETY: installing an async-signal-safe handler (one atomic store).
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let cfg = EmulatorConfig {
        name: args.name.clone(),
        a2b: a2b.clone(),
        b2a,
        mtu: args.mtu,
        seed: args.seed,
        block_udp: args.block_udp,
        only_tcp_ports: args.only_tcp_ports.clone(),
        path_mtu: args.path_mtu,
    };
    let mut emu = match Emulator::start(cfg) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("haul-netem: cannot set up the link: {e}");
            netem::netns::delete(&format!("{}-a", args.name));
            netem::netns::delete(&format!("{}-b", args.name));
            std::process::exit(1);
        }
    };
    eprintln!(
        "haul-netem: up: {} ({ADDR_A}) <-> {} ({ADDR_B}), mtu {}, a2b delay {:?} rate {:?} queue {} B loss {}%",
        emu.ns_a(),
        emu.ns_b(),
        args.mtu,
        a2b.delay,
        a2b.rate_bps,
        a2b.queue_limit(),
        a2b.loss * 100.0
    );
    if let Some(p) = &args.ready_file {
        let _ = std::fs::write(p, format!("{} {}\n", emu.ns_a(), emu.ns_b()));
    }
    let t0 = Instant::now();
    while !STOP.load(Ordering::Relaxed)
        && args.duration.is_none_or(|d| t0.elapsed().as_secs_f64() < d)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let Report {
        a2b,
        b2a,
        write_errors,
    } = emu.stop();
    let secs = t0.elapsed().as_secs_f64();
    print("a2b", &a2b, secs);
    print("b2a", &b2a, secs);
    if let Some(p) = &args.stats_json {
        let j = serde_json::json!({ "seconds": secs, "a2b": counters_json(&a2b), "b2a": counters_json(&b2a), "write_errors": write_errors });
        let _ = std::fs::write(p, j.to_string());
    }
}
