//! How much CPU this process can have now, for the compression policy
//! (P-30): the cores it uses plus the cores the host leaves idle. On a
//! host of its own a transfer may have every core; on one whose other
//! work keeps the cores busy (a database taking a backup of itself, or the
//! receiver and an emulator on one test machine) it has what it gets, and
//! a codec that needs more than that slows the transfer instead of
//! speeding it.
//!
//! Linux: the process's CPU time from `CLOCK_PROCESS_CPUTIME_ID`, idle and
//! I/O wait time from the first line of `/proc/stat`. Elsewhere nothing
//! is measured and the policy keeps assuming every core.

use std::time::{Duration, Instant};

/// Shortest interval a share is measured over: `/proc/stat` counts in
/// hundredths of a second, so over 250 ms on two cores one tick is 2%.
pub const MIN_INTERVAL: Duration = Duration::from_millis(250);

/// Measures the cores available to this process between calls.
pub struct CpuShare {
    cores: f64,
    last: Option<(Instant, f64, f64)>,
}

impl CpuShare {
    pub fn new() -> CpuShare {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        CpuShare { cores, last: None }
    }

    /// What this process had since the last measurement; `None` before
    /// the first interval of [`MIN_INTERVAL`] is over, or where the clocks
    /// cannot be read.
    pub fn sample(&mut self) -> Option<Share> {
        let now = Instant::now();
        if let Some((at, _, _)) = self.last {
            if now.duration_since(at) < MIN_INTERVAL {
                return None;
            }
        }
        let (own, idle) = (process_seconds()?, idle_seconds()?);
        let prev = self.last.replace((now, own, idle));
        let (at, own0, idle0) = prev?;
        let wall = now.duration_since(at).as_secs_f64();
        Some(Share {
            cores: available(own - own0, idle - idle0, wall, self.cores),
            used: (own - own0).max(0.0),
        })
    }
}

/// One interval's measurement.
#[derive(Debug, Clone, Copy)]
pub struct Share {
    /// The cores this process could have used (its own use plus the
    /// host's idle time), at most the host's cores.
    pub cores: f64,
    /// The CPU seconds it used, on all its threads.
    pub used: f64,
}

impl Default for CpuShare {
    fn default() -> Self {
        CpuShare::new()
    }
}

/// Cores available over `wall` seconds in which this process used `own`
/// CPU seconds and the host was idle for `idle` (summed over its cores):
/// at least a tenth of a core, at most `cores`.
pub fn available(own: f64, idle: f64, wall: f64, cores: f64) -> f64 {
    if wall <= 0.0 || !own.is_finite() || !idle.is_finite() {
        return cores;
    }
    ((own.max(0.0) + idle.max(0.0)) / wall).clamp(0.1, cores)
}

/// CPU seconds this process has used, on all its threads.
fn process_seconds() -> Option<f64> {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU seconds the calling thread has used: what a piece of work cost
/// whether or not the thread was made to wait for a core meanwhile.
pub fn thread_seconds() -> Option<f64> {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn clock(id: libc::clockid_t) -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    (rc == 0).then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

/// Seconds the host's cores have been idle or waiting for I/O since boot.
fn idle_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    idle_from_stat(&stat, if hz > 0 { hz as f64 } else { 100.0 })
}

/// Idle plus I/O wait seconds from `/proc/stat`'s `cpu` line, counted in
/// `hz` ticks a second.
fn idle_from_stat(stat: &str, hz: f64) -> Option<f64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map_while(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait ...
    let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0.0);
    Some(idle / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_is_read_from_the_cpu_line() {
        let stat = "cpu  100 5 50 1000 20 0 3 0 0 0\ncpu0 50 2 25 500 10 0 1 0 0 0\n";
        assert_eq!(idle_from_stat(stat, 100.0), Some(10.2));
        assert_eq!(idle_from_stat("intr 1 2 3\n", 100.0), None);
    }

    #[test]
    fn available_is_own_use_plus_idle_within_the_host() {
        // Over one second: 0.8 s used here, the host idle 0.1 s.
        assert!((available(0.8, 0.1, 1.0, 2.0) - 0.9).abs() < 1e-9);
        // A host idle but for this process: all its cores.
        assert_eq!(available(0.5, 1.6, 1.0, 2.0), 2.0);
        // Busy elsewhere and idle here: still a tenth of a core.
        assert_eq!(available(0.0, 0.0, 1.0, 2.0), 0.1);
        assert_eq!(available(0.0, 0.0, 0.0, 2.0), 2.0);
    }

    #[test]
    fn a_busy_process_measures_its_own_cores() {
        let mut share = CpuShare::new();
        if share.sample().is_none() && process_seconds().is_none() {
            eprintln!("skipped: no process clock or /proc/stat here");
            return;
        }
        let t0 = Instant::now();
        let spun0 = thread_seconds().expect("a thread clock where there is a process clock");
        let mut x = 0u64;
        while t0.elapsed() < MIN_INTERVAL + Duration::from_millis(20) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let spun = thread_seconds().unwrap() - spun0;
        let wall = t0.elapsed().as_secs_f64();
        let got = share.sample().expect("a second sample after the interval");
        // However busy the host (other tests, other work), what the
        // process used covers what this thread spun, and what it could
        // have had covers what it used, within the host's cores.
        assert!(spun > 0.0, "the spinning thread got no CPU at all");
        assert!(
            got.used >= spun * 0.95,
            "{got:?} after spinning {spun:.3} s"
        );
        assert!(
            got.cores >= (spun / wall) * 0.9 && got.cores <= share.cores,
            "{got:?} after spinning {spun:.3} s in {wall:.3} s"
        );
    }
}
