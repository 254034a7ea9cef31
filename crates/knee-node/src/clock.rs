//! Monotonic time in ns, shared by every process on the host.
//!
//! `CLOCK_MONOTONIC` is system-wide on Linux, so a load generator's timestamps and the
//! runner's (Python's `time.monotonic_ns()`) are on one axis without clock synchronization.

use std::time::Duration;

/// Now, in ns of `CLOCK_MONOTONIC`.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Now, in ns of `CLOCK_REALTIME` (wall clock; only to convert the kernel's receive
/// timestamps, see `wire::arrival`).
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec.max(0) as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Below this distance to the deadline we spin instead of sleeping: a sleep can overshoot by
/// tens of µs, a spin costs CPU only for this short while.
const SPIN_NS: u64 = 150_000;

/// Longest single sleep, so a stop request is noticed within this while waiting.
const MAX_SLEEP_NS: u64 = 50_000_000;

/// Waits until `deadline_ns` (monotonic), sleeping most of the way and spinning the end.
/// Returns false, early, if a stop was requested (SIGTERM/SIGINT).
pub fn wait_until_unless_stopped(deadline_ns: u64) -> bool {
    loop {
        if crate::signals::stop_requested() {
            return false;
        }
        let now = now_ns();
        if now >= deadline_ns {
            return true;
        }
        let left = deadline_ns - now;
        if left > SPIN_NS {
            std::thread::sleep(Duration::from_nanos((left - SPIN_NS).min(MAX_SLEEP_NS)));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Asks the kernel for 1 ns timer slack on this thread (default 50 µs), so sleeps end on time.
pub fn tighten_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes an integer and affects only the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}
