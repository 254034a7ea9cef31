//! The wakers of the HTTP/2 engine's tiny executor. h2's futures are polled from knee's own
//! ppoll loop, not by an async runtime: each connection has one waker, and whatever h2 wakes
//! on it (the connection task, a stream's response, capacity, data) only raises the
//! connection's flag. The engine then polls that connection again (its connection future and
//! every stream on it), a bounded number of rounds per pass of its loop; the socket's own
//! readiness comes from ppoll, which raises the same flag.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

/// A connection's "poll me again" flag, as a waker.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One connection's waker and its flag.
pub struct Wakeup {
    flag: Arc<Flag>,
    waker: Waker,
}

impl Default for Wakeup {
    fn default() -> Self {
        Self::new()
    }
}

impl Wakeup {
    pub fn new() -> Wakeup {
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        Wakeup {
            waker: Waker::from(flag.clone()),
            flag,
        }
    }

    /// A context whose waker raises this flag.
    pub fn context(&self) -> Context<'_> {
        Context::from_waker(&self.waker)
    }

    /// Raises the flag (the socket is ready, or a request was put on the connection).
    pub fn set(&self) {
        self.flag.0.store(true, Ordering::Relaxed);
    }

    pub fn is_set(&self) -> bool {
        self.flag.0.load(Ordering::Relaxed)
    }

    /// Whether the flag was raised, lowering it.
    pub fn take(&self) -> bool {
        self.flag.0.swap(false, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_raises_the_flag_and_take_lowers_it() {
        let w = Wakeup::new();
        assert!(!w.is_set() && !w.take());
        let cx = w.context();
        cx.waker().wake_by_ref();
        assert!(w.is_set());
        assert!(w.take() && !w.is_set());
        let cloned = cx.waker().clone();
        cloned.wake(); // a clone h2 keeps wakes the same flag
        assert!(w.take());
        w.set();
        assert!(w.take());
    }
}
