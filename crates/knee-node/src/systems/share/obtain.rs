//! The serving side of `obtain`: a reply frame with the file's size, then the file's bytes
//! straight from the page cache to the socket with `sendfile(2)` (a bounded read/write copy
//! where the kernel refuses it).

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use super::files::CHUNK_BYTES;

/// Most bytes handed to one sendfile call (the kernel caps it near 2 GiB anyway).
const SENDFILE_MAX_BYTES: usize = 1 << 30;

/// Sends exactly `size_bytes` of `file` from its start. A file that shrank meanwhile is an
/// error: the connection must then be closed, since the client expects `size_bytes`.
pub fn send_file(stream: &mut TcpStream, file: &mut File, size_bytes: u64) -> io::Result<()> {
    let mut offset: libc::off_t = 0;
    let mut left = size_bytes;
    while left > 0 {
        let want = left.min(SENDFILE_MAX_BYTES as u64) as usize;
        // SAFETY: both descriptors are open for the duration of the call; `offset` is ours.
        let n = unsafe { libc::sendfile(stream.as_raw_fd(), file.as_raw_fd(), &mut offset, want) };
        if n < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                Some(libc::EINVAL) | Some(libc::ENOSYS) if offset == 0 => {
                    return copy(stream, file, size_bytes)
                }
                _ => return Err(err),
            }
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("file shrank: {} of {size_bytes} bytes sent", size_bytes - left),
            ));
        }
        left -= n as u64;
    }
    Ok(())
}

/// The fallback: a read/write copy through one bounded buffer.
fn copy(stream: &mut TcpStream, file: &mut File, size_bytes: u64) -> io::Result<()> {
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut left = size_bytes;
    while left > 0 {
        let n = file.read(&mut buf[..left.min(CHUNK_BYTES as u64) as usize])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank"));
        }
        stream.write_all(&buf[..n])?;
        left -= n as u64;
    }
    Ok(())
}
