//! Stop requests: SIGTERM/SIGINT set a flag that long-running loops poll, so a load
//! generator stops early but still flushes its samples and prints its summary.
//!
//! In a container (knee's docker hosts) the runner is not the node's parent: with
//! `KNEE_NODE_STDIN_LIFELINE=1` the node's stdin is its lifeline instead. When it ends (the
//! runner closed it, or died and the engine closed the attached stream) the node stops as
//! on SIGTERM, and exits after a grace period if it has not by then.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs the handler for SIGTERM and SIGINT, and asks the kernel to send SIGTERM to this
/// process when its parent (the runner) dies, so no node outlives the run that started it.
pub fn install() {
    if std::env::var_os(LIFELINE_ENV).is_some_and(|v| v == "1") {
        std::thread::spawn(stdin_lifeline);
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
        #[cfg(target_os = "linux")]
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0);
    }
}

/// The environment variable that makes stdin the node's lifeline.
pub const LIFELINE_ENV: &str = "KNEE_NODE_STDIN_LIFELINE";
/// How long a node whose lifeline ended may take to stop by itself (a runner's own grace).
const LIFELINE_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Reads stdin to its end (what is read is ignored), then stops the node.
fn stdin_lifeline() {
    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
    STOP.store(true, Ordering::SeqCst);
    std::thread::sleep(LIFELINE_GRACE);
    crate::stdio::log("stdin (the lifeline) ended and the node did not stop: exiting");
    std::process::exit(143);
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}
