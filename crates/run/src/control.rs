//! What a server imposes on a run from outside the engine (issue 39): a
//! pace it shares with the other sessions of the same key (`rate=`), a
//! stop it may call at any moment (a revoked key), and how its errors read
//! to the peer (paths below the key's root, not the server's own).
//!
//! It rides in the run's [`crate::progress::Progress`], which every engine already
//! holds: the TCP and UDP paths of both sides and the tunnel's lanes draw
//! from [`RunControl::pace`]; a stop wakes the transfer engine's threads
//! that sleep ([`RunControl::on_stop`]), and the tunnel's and UDP
//! channel's loops look at [`RunControl::stopped`] as they turn.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rate::TokenBucket;

use wire::TransferError;

/// A rate that several runs draw from together: a key's `rate=`, shared
/// by every session of that key, both directions, every transport.
#[derive(Debug)]
pub struct Pace {
    bucket: Mutex<TokenBucket>,
}

impl Pace {
    /// `rate` bytes per second, with bursts of a fiftieth of a second (at
    /// least 64 KiB), as `--rate`'s bucket.
    pub fn new(rate: u64) -> Pace {
        Pace {
            bucket: Mutex::new(TokenBucket::new(rate, burst(rate))),
        }
    }

    pub fn rate(&self) -> u64 {
        self.lock().rate()
    }

    /// Changes the rate from now on (a key's `rate=` raised or lowered
    /// while its sessions run).
    pub fn set_rate(&self, rate: u64) {
        self.lock().set_rate(rate, burst(rate));
    }

    /// Reserves `bytes` now; how long to wait before they go (or, for a
    /// receiver, before the next are read).
    pub fn delay(&self, bytes: u64) -> Duration {
        self.lock().take(Instant::now(), bytes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TokenBucket> {
        self.bucket.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn burst(rate: u64) -> u64 {
    (rate / 50).max(64 << 10)
}

/// How an error reads to the peer: the server's own paths left out.
pub type Hide = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// Wakes what sleeps in a run, so that it hears of a stop at once.
pub type Waker = Box<dyn Fn() + Send + Sync>;

/// What the side that runs a session imposes on it besides the request.
/// A client's runs have none of it.
#[derive(Default)]
pub struct RunControl {
    pace: Mutex<Option<Arc<Pace>>>,
    stop: Mutex<Option<TransferError>>,
    hide: Mutex<Option<Hide>>,
    wakers: Mutex<Vec<Waker>>,
}

impl std::fmt::Debug for RunControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunControl")
            .field("pace", &self.pace)
            .field("stop", &self.stop)
            .finish_non_exhaustive()
    }
}

impl RunControl {
    /// Every byte this run sends or takes in draws from `pace`.
    pub fn set_pace(&self, pace: Arc<Pace>) {
        *lock(&self.pace) = Some(pace);
    }

    /// Waits as the shared pace asks for `bytes` sent or received; no
    /// wait without one.
    pub fn pace(&self, bytes: u64) {
        let d = self.delay(bytes);
        if !d.is_zero() {
            std::thread::sleep(d);
        }
    }

    /// Reserves `bytes` of the shared pace now; how long to wait before
    /// they go. A caller with a pace of its own (`--rate`) reserves from
    /// both at once and waits for the longer, so the two never add up.
    pub fn delay(&self, bytes: u64) -> Duration {
        lock(&self.pace)
            .as_ref()
            .map_or(Duration::ZERO, |p| p.delay(bytes))
    }

    /// Ends the run as soon as its threads look, with `why` sent to the
    /// peer (and returned by the run).
    pub fn stop(&self, why: TransferError) {
        lock(&self.stop).get_or_insert(why);
        for wake in lock(&self.wakers).iter() {
            wake();
        }
    }

    /// Calls `wake` when the run is told to stop (at once if it was).
    pub fn on_stop(&self, wake: Waker) {
        if self.stopped().is_some() {
            wake();
        }
        lock(&self.wakers).push(wake);
    }

    /// Why the run was told to stop, if it was.
    pub fn stopped(&self) -> Option<TransferError> {
        lock(&self.stop).clone()
    }

    /// Errors sent to the peer read as `hide` makes them.
    pub fn set_hide(&self, hide: Hide) {
        *lock(&self.hide) = Some(hide);
    }

    /// `message` as the peer may read it.
    pub fn shown(&self, message: &str) -> String {
        match &*lock(&self.hide) {
            Some(h) => h(message),
            None => message.to_string(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::ErrorCode;

    #[test]
    fn a_stop_wakes_what_sleeps_now_or_at_once_if_it_came_first() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let c = RunControl::default();
        let woken = Arc::new(AtomicUsize::new(0));
        let w = woken.clone();
        c.on_stop(Box::new(move || {
            w.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(woken.load(Ordering::SeqCst), 0);
        c.stop(TransferError::new(ErrorCode::Auth, "revoked"));
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        let w = woken.clone();
        c.on_stop(Box::new(move || {
            w.fetch_add(10, Ordering::SeqCst);
        }));
        assert_eq!(woken.load(Ordering::SeqCst), 11);
    }

    #[test]
    fn a_shared_pace_holds_two_runs_to_one_rate() {
        let pace = Arc::new(Pace::new(1 << 20));
        let (a, b) = (RunControl::default(), RunControl::default());
        a.set_pace(pace.clone());
        b.set_pace(pace.clone());
        let t0 = Instant::now();
        // 64 KiB of burst, then 2 × 256 KiB at 1 MiB/s: about 0.44 s.
        std::thread::scope(|s| {
            s.spawn(|| (0..4).for_each(|_| a.pace(64 << 10)));
            s.spawn(|| (0..4).for_each(|_| b.pace(64 << 10)));
        });
        let took = t0.elapsed();
        assert!(took > Duration::from_millis(380), "{took:?}");
        pace.set_rate(2 << 20);
        assert_eq!(pace.rate(), 2 << 20);
    }

    #[test]
    fn a_stop_is_kept_first_and_errors_read_as_hidden() {
        let c = RunControl::default();
        assert!(c.stopped().is_none());
        c.stop(TransferError::new(ErrorCode::Auth, "revoked"));
        c.stop(TransferError::new(ErrorCode::Other, "later"));
        assert_eq!(c.stopped().unwrap().message, "revoked");
        assert_eq!(c.shown("/srv/x"), "/srv/x");
        c.set_hide(Arc::new(|m: &str| m.replace("/srv", "")));
        assert_eq!(c.shown("/srv/x"), "/x");
    }
}
