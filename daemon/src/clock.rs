//! `CLOCK_MONOTONIC` as plain nanoseconds: lease deadlines cross a process boundary (daemon → supervisor),
//! so they cannot be `Instant`s, and they must not follow wall-clock jumps.

use std::time::Duration;

use nix::time::{ClockId, clock_gettime};
use tokio::time::Instant;

/// Nanoseconds of `CLOCK_MONOTONIC` now; the same clock in every process of the host.
pub fn monotonic_ns() -> u64 {
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always readable");
    u64::try_from(now.tv_sec()).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec()).unwrap_or(0)
}

/// The [`Instant`] of this process at the monotonic time `ns` (tokio's clock is `CLOCK_MONOTONIC` too).
pub fn instant_at(ns: u64) -> Instant {
    let (now, now_ns) = (Instant::now(), monotonic_ns());
    if ns >= now_ns {
        now + Duration::from_nanos(ns - now_ns)
    } else {
        now.checked_sub(Duration::from_nanos(now_ns - ns)).unwrap_or(now)
    }
}

/// A time that never comes, for an idle timer.
pub fn far() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

/// Adds a duration to a monotonic time.
pub fn after(ns: u64, duration: Duration) -> u64 {
    ns.saturating_add(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX))
}

/// How long until the monotonic time `ns` (zero if it passed).
pub fn until(ns: u64) -> Duration {
    Duration::from_nanos(ns.saturating_sub(monotonic_ns()))
}

/// The safety margin kept between the supervisor's kill and the database's lease expiry: a sixth of the lease,
/// at least 250 ms and at most 5 s.
pub fn lease_margin(lease: Duration) -> Duration {
    (lease / 6).clamp(Duration::from_millis(250), Duration::from_secs(5))
}

/// The deadline a lease renewed (or claimed) by a query sent at monotonic time `sent_ns` gives the worker.
/// The database computes the expiry from its own clock when the statement runs, which is after `sent_ns`, so
/// this deadline always falls at least `margin` before the expiry, however late the answer comes back.
pub fn lease_deadline(sent_ns: u64, lease: Duration) -> u64 {
    after(sent_ns, lease.saturating_sub(lease_margin(lease)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_keep_a_margin() {
        assert_eq!(lease_margin(Duration::from_secs(3)), Duration::from_millis(500));
        assert_eq!(lease_margin(Duration::from_secs(30)), Duration::from_secs(5));
        assert_eq!(lease_deadline(1_000, Duration::from_secs(3)), 1_000 + 2_500_000_000);
        // Bounded by readings of the clock on either side, not by how long this thread was left to run: `at` is a
        // second after a moment between `before` and `after` (less the few instructions between the two clock
        // readings inside `instant_at`, given half a second here).
        let before = Instant::now();
        let at = instant_at(monotonic_ns() + 1_000_000_000);
        let after = Instant::now();
        let one = Duration::from_secs(1);
        assert!(at >= before + one / 2 && at <= after + one, "{:?} after {before:?}", at - before);
    }
}
