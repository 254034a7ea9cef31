//! What a framed-TCP server does against clients that would exhaust it: the open-files
//! limit raised for `max_connections`, read and write timeouts on every connection, and log
//! lines about refused or timed-out connections at most once a second, so that a flood of
//! them costs the log a line a second, not a line each.

use std::io;
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

use crate::{clock, stdio};

/// At most one line a second per kind of notice.
const NOTICE_PERIOD_NS: u64 = 1_000_000_000;

/// Raises this process's soft limit on open files to its hard limit: every connection is a
/// descriptor (two: the replier holds a clone), and the usual soft limit of 1024 would
/// refuse connections below `max_connections` with EMFILE. Returns the soft limit now.
pub fn raise_open_files_limit() -> libc::rlim_t {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one live rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    lim.rlim_cur
}

/// A connection's timeouts: a read that waits longer than `read` returns, so that its
/// thread can check the frame deadline (`connection::Deadlined`); a reply write that
/// makes no progress for `write` fails, and the connection is closed.
pub fn set_timeouts(stream: &TcpStream, read: Duration, write: Duration) -> io::Result<()> {
    stream.set_read_timeout(Some(read))?;
    stream.set_write_timeout(Some(write))
}

/// Whether a write failed because the peer did not take its bytes within the timeout.
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// A kind of log line that may come in floods: logged at most once a second; the ones in
/// between are counted and the next line (or [`flush_notices`]) says how many.
pub struct Notice {
    state: Mutex<NoticeState>,
}

struct NoticeState {
    /// When the last line was logged (0: never).
    logged_ns: u64,
    /// Notices since then that were not logged.
    unlogged: u64,
}

impl Notice {
    pub const fn new() -> Self {
        Notice {
            state: Mutex::new(NoticeState {
                logged_ns: 0,
                unlogged: 0,
            }),
        }
    }

    /// Logs `msg()` unless a line of this kind was logged less than a second ago.
    pub fn log(&self, msg: impl FnOnce() -> String) {
        if let Some(line) = self.line_at(clock::now_ns(), msg) {
            stdio::log(&line);
        }
    }

    fn line_at(&self, now_ns: u64, msg: impl FnOnce() -> String) -> Option<String> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.logged_ns != 0 && now_ns.saturating_sub(s.logged_ns) < NOTICE_PERIOD_NS {
            s.unlogged += 1;
            return None;
        }
        let more = std::mem::take(&mut s.unlogged);
        s.logged_ns = now_ns;
        drop(s);
        let line = msg();
        Some(if more > 0 {
            format!("{line} (and {more} more like it since the last such line)")
        } else {
            line
        })
    }

    /// A line counting the notices not logged, once their second is over (the server's
    /// loop asks at every tick, so that the count of the last burst is not lost).
    fn flush_at(&self, now_ns: u64, what: &str) -> Option<String> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.unlogged == 0 || now_ns.saturating_sub(s.logged_ns) < NOTICE_PERIOD_NS {
            return None;
        }
        let more = std::mem::take(&mut s.unlogged);
        s.logged_ns = now_ns;
        Some(format!("{more} more {what} since the last such line"))
    }
}

/// Connections refused because `max_connections` were open.
pub static REFUSED: Notice = Notice::new();
/// Connections closed by a read or write timeout.
pub static TIMED_OUT: Notice = Notice::new();
/// Failed accepts (EMFILE: the listener stays readable, so these would repeat at once).
pub static ACCEPT_FAILED: Notice = Notice::new();

/// Logs the counts of every kind of notice whose second is over; with `at_end`, every
/// count left (the server is ending: nothing may go uncounted).
pub fn flush_notices(at_end: bool) {
    let now_ns = if at_end { u64::MAX } else { clock::now_ns() };
    for (notice, what) in [
        (&REFUSED, "connections refused"),
        (&TIMED_OUT, "connections closed on a timeout"),
        (&ACCEPT_FAILED, "failed accepts"),
    ] {
        if let Some(line) = notice.flush_at(now_ns, what) {
            stdio::log(&line);
        }
    }
}

/// Connections the kernel queues for `accept` (it caps this at `net.core.somaxconn`): std
/// listens with 128, and a burst beyond that (a flood, or many clients starting at once)
/// has its SYNs dropped and retried a second later.
const LISTEN_BACKLOG: libc::c_int = 4096;

/// Deepens a bound listener's accept queue to [`LISTEN_BACKLOG`] (`listen(2)` again on a
/// listening socket only changes its backlog).
pub fn deepen_backlog(listener: &std::net::TcpListener) {
    use std::os::fd::AsRawFd;
    // SAFETY: listen(2) on a descriptor the listener owns and keeps open.
    unsafe {
        libc::listen(listener.as_raw_fd(), LISTEN_BACKLOG);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = NOTICE_PERIOD_NS;

    #[test]
    fn a_flood_gives_one_line_a_second_and_the_next_line_counts_the_rest() {
        let n = Notice::new();
        assert_eq!(n.line_at(S, || "refused".into()).as_deref(), Some("refused"));
        for i in 0..9_999 {
            assert_eq!(n.line_at(S + i, || "refused".into()), None);
        }
        assert_eq!(n.flush_at(S + S / 2, "refused"), None, "its second is not over");
        assert_eq!(
            n.line_at(2 * S, || "refused".into()).as_deref(),
            Some("refused (and 9999 more like it since the last such line)")
        );
        assert_eq!(n.line_at(2 * S + 1, || "refused".into()), None);
        assert_eq!(
            n.flush_at(3 * S, "refused").as_deref(),
            Some("1 more refused since the last such line")
        );
        assert_eq!(n.flush_at(5 * S, "refused"), None, "nothing left to count");
    }

    #[test]
    fn the_open_files_limit_is_raised_to_the_hard_limit() {
        let soft = raise_open_files_limit();
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one live rlimit.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(soft, lim.rlim_max);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
    }
}
