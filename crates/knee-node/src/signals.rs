//! Stop requests: SIGTERM/SIGINT set a flag that long-running loops poll, so a load
//! generator stops early but still flushes its samples and prints its summary.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs the handler for SIGTERM and SIGINT, and asks the kernel to send SIGTERM to this
/// process when its parent (the runner) dies, so no node outlives the run that started it.
pub fn install() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
        #[cfg(target_os = "linux")]
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0);
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}
