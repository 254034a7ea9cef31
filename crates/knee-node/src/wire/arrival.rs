//! When a request reached the host: the kernel's receive timestamp of TCP data.
//!
//! With `SO_TIMESTAMPNS` on a socket, Linux stamps each packet as the network stack receives
//! it (`CLOCK_REALTIME`), and `recvmsg` on a TCP socket returns in a control message the
//! stamp of the latest segment it copied bytes from (segments merged in the receive queue
//! keep the latest stamp). Every byte of that read had therefore reached the host at or
//! before the stamp. [`StampedSocket`] converts it to `CLOCK_MONOTONIC` with the offset
//! between the two clocks measured right after the read:
//! `arrival = mono_now - (real_now - stamp)`, clamped to at most `mono_now`.
//!
//! Where the kernel gives no stamp (the option failed, or a read carried none), the read's
//! own time stands in (`mono_now` after the read returned), and the node says so once on
//! stderr.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use super::frame::StampedRead;
use crate::{clock, stdio};

static FALLBACK_SAID: AtomicBool = AtomicBool::new(false);

fn say_fallback_once(why: &str) {
    if !FALLBACK_SAID.swap(true, Ordering::Relaxed) {
        stdio::log(&format!(
            "{why}: a request's arrival is then the time its bytes were read, which misses the \
             time they waited in the socket buffer (said once)"
        ));
    }
}

/// Asks the kernel to stamp the data received on `socket` (a listener's accepted sockets
/// inherit it). On failure the reads fall back to their own time, which is said once.
pub fn enable_rx_timestamps(socket: &impl AsRawFd) {
    #[cfg(target_os = "linux")]
    {
        let on: libc::c_int = 1;
        // SAFETY: setsockopt reads an int we own, of the size we pass, on an open descriptor.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            say_fallback_once(&format!("SO_TIMESTAMPNS is not available ({e})"));
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = socket.as_raw_fd();
        say_fallback_once("kernel receive timestamps are used on Linux only");
    }
}

/// A TCP socket read with `recvmsg`, each read stamped with when its bytes reached the host
/// (monotonic ns; see the module's documentation).
pub struct StampedSocket<'a>(pub &'a TcpStream);

/// Room for one `SCM_TIMESTAMPNS` control message (a `timespec`), u64-aligned.
const CONTROL_WORDS: usize = 8;

impl StampedRead for StampedSocket<'_> {
    #[cfg(target_os = "linux")]
    fn read_stamped(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
        let mut control = [0u64; CONTROL_WORDS];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: an all-zero msghdr is valid (no name, no iovecs, no control); we fill it next.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: msg points at one iovec over `buf` and at `control`, both live and owned
        // mutably here; the kernel writes at most their stated lengths.
        let n = unsafe { libc::recvmsg(self.0.as_raw_fd(), &mut msg, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mono_now = clock::now_ns();
        if n == 0 {
            return Ok((0, Some(mono_now)));
        }
        let Some(stamp) = kernel_stamp(&msg) else {
            say_fallback_once("a read carried no kernel receive timestamp");
            return Ok((n as usize, Some(mono_now)));
        };
        let age_ns = clock::realtime_ns().saturating_sub(stamp);
        Ok((n as usize, Some(mono_now.saturating_sub(age_ns))))
    }

    #[cfg(not(target_os = "linux"))]
    fn read_stamped(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
        use std::io::Read;
        let n = (&mut &*self.0).read(buf)?;
        Ok((n, Some(clock::now_ns())))
    }
}

/// The `SCM_TIMESTAMPNS` stamp of a received message, in `CLOCK_REALTIME` ns.
#[cfg(target_os = "linux")]
fn kernel_stamp(msg: &libc::msghdr) -> Option<u64> {
    // SAFETY: msg's control buffer was filled by recvmsg, which set msg_controllen to the
    // bytes it wrote; the CMSG macros walk within that length.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !cmsg.is_null() {
        // SAFETY: cmsg is non-null and points at a header inside the control buffer.
        let header = unsafe { &*cmsg };
        let want_len = unsafe { libc::CMSG_LEN(std::mem::size_of::<libc::timespec>() as u32) } as usize;
        if header.cmsg_level == libc::SOL_SOCKET
            && header.cmsg_type == libc::SCM_TIMESTAMPNS
            && header.cmsg_len as usize >= want_len
        {
            // SAFETY: a SCM_TIMESTAMPNS message carries one timespec, possibly unaligned.
            let ts: libc::timespec =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::timespec>()) };
            if ts.tv_sec <= 0 && ts.tv_nsec <= 0 {
                return None;
            }
            return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
        }
        // SAFETY: as above; CMSG_NXTHDR returns null past the last header.
        cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
    }
    None
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;
    use std::time::Duration;

    /// Bytes that waited in the socket buffer are stamped with when they arrived, not with
    /// when they were read.
    ///
    /// The first socket on a host to ask for stamps turns stamping on in the kernel
    /// asynchronously (a static key flipped from a work queue), so data arriving in the
    /// first moments may carry none: the test tries a few times and needs one stamped read.
    #[test]
    fn a_read_is_stamped_with_the_arrival_of_its_bytes() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        enable_rx_timestamps(&listener);
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        enable_rx_timestamps(&server);
        let mut waits_ns = Vec::new();
        for _ in 0..10 {
            let before_ns = clock::now_ns();
            client.write_all(b"hello").unwrap();
            std::thread::sleep(Duration::from_millis(50));
            let mut buf = [0u8; 16];
            let (n, stamp) = StampedSocket(&server).read_stamped(&mut buf).unwrap();
            let read_ns = clock::now_ns();
            assert_eq!(&buf[..n], b"hello");
            let stamp = stamp.unwrap();
            assert!(
                stamp >= before_ns.saturating_sub(1_000_000),
                "{stamp} vs {before_ns}"
            );
            assert!(stamp <= read_ns);
            waits_ns.push(read_ns - stamp);
            // The bytes waited about 50 ms unread; a read-time stamp would be within a few
            // ms of the read (the kernel stamped nothing, which this test is here to catch).
            if read_ns - stamp >= 40_000_000 {
                return;
            }
        }
        panic!("no read was stamped with its arrival: waited {waits_ns:?} ns");
    }
}
