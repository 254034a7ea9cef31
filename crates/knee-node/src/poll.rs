//! Waiting for sockets with nanosecond timeouts (`ppoll(2)`): the load generator and the
//! stream client and services wait this way instead of with a thread per socket.

use std::os::fd::{AsRawFd, RawFd};

/// A slot that `ppoll` skips (a negative descriptor): a connection not made yet.
pub const UNWATCHED: libc::pollfd = libc::pollfd {
    fd: -1,
    events: 0,
    revents: 0,
};

/// `fd` watched for input (or its peer's close).
pub fn readable(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Each of `sockets` watched for input, in their order: a poll set whose slots are the
/// sockets' indices.
pub fn readable_all<'a, S: AsRawFd + 'a>(sockets: impl IntoIterator<Item = &'a S>) -> Vec<libc::pollfd> {
    sockets.into_iter().map(|s| readable(s.as_raw_fd())).collect()
}

/// Waits up to `wait_ns` for an event on any of `fds`. Returns how many have one; 0 on a
/// timeout, and also on an error such as EINTR (a stop signal): callers loop and look again.
pub fn ppoll_ns(fds: &mut [libc::pollfd], wait_ns: u64) -> usize {
    let timeout = libc::timespec {
        tv_sec: (wait_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (wait_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: fds is a live slice of pollfd; the timeout and a null signal mask are valid.
    let ready = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &timeout,
            std::ptr::null(),
        )
    };
    ready.max(0) as usize
}
