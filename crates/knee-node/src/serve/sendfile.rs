//! A reply's file tail: the file's bytes straight from the page cache to the socket with
//! `sendfile(2)` (a bounded read/write copy where the kernel refuses it).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;

/// Most bytes handed to one sendfile call (the kernel caps it near 2 GiB anyway).
const SENDFILE_MAX_BYTES: usize = 1 << 30;
/// The fallback copy's one buffer: large enough for few system calls, never a whole file.
const COPY_BUFFER_BYTES: usize = 1 << 20;

/// Sends exactly `size_bytes` of `file` from its start. A file that shrank meanwhile is an
/// error: the connection must then be closed, since the client expects `size_bytes`.
pub fn send_file<S: Write + AsRawFd>(socket: &mut S, file: &mut File, size_bytes: u64) -> io::Result<()> {
    let mut offset: libc::off_t = 0;
    let mut left = size_bytes;
    while left > 0 {
        let want = left.min(SENDFILE_MAX_BYTES as u64) as usize;
        // SAFETY: both descriptors are open for the duration of the call; `offset` is ours.
        let n = unsafe { libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut offset, want) };
        if n < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                // The socket blocks, so EAGAIN is its send timeout: the client does not read.
                Some(libc::EAGAIN) => return Err(err),
                Some(libc::EINVAL) | Some(libc::ENOSYS) if offset == 0 => {
                    return copy(socket, file, size_bytes)
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
fn copy(socket: &mut impl Write, file: &mut File, size_bytes: u64) -> io::Result<()> {
    let mut buf = vec![0u8; COPY_BUFFER_BYTES];
    let mut left = size_bytes;
    while left > 0 {
        let n = file.read(&mut buf[..left.min(COPY_BUFFER_BYTES as u64) as usize])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank"));
        }
        socket.write_all(&buf[..n])?;
        left -= n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::*;

    /// A real file of `len` bytes with a pattern, and its bytes.
    fn file_of(len: usize, tag: &str) -> (File, Vec<u8>) {
        let path = std::env::temp_dir().join(format!("knee-sendfile-{}-{tag}", std::process::id()));
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        (file, bytes)
    }

    #[test]
    fn sends_exactly_the_files_bytes_from_its_start() {
        let (mut file, bytes) = file_of(3 * COPY_BUFFER_BYTES / 2 + 5, "whole");
        let (mut tx, mut rx) = UnixStream::pair().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            rx.read_to_end(&mut got).unwrap();
            got
        });
        send_file(&mut tx, &mut file, bytes.len() as u64).unwrap();
        // The file's position is not moved: the same file is sent again whole.
        send_file(&mut tx, &mut file, 10).unwrap();
        drop(tx);
        let got = reader.join().unwrap();
        assert_eq!(got.len(), bytes.len() + 10);
        assert_eq!(&got[..bytes.len()], &bytes[..]);
        assert_eq!(&got[bytes.len()..], &bytes[..10]);
    }

    #[test]
    fn a_file_shorter_than_its_size_is_an_error() {
        let (mut file, bytes) = file_of(1000, "short");
        let (mut tx, rx) = UnixStream::pair().unwrap();
        let err = send_file(&mut tx, &mut file, bytes.len() as u64 + 1).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert!(err.to_string().contains("1000 of 1001"), "{err}");
        drop(rx);
    }
}
