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
    send_file_in(socket, file, size_bytes, SENDFILE_MAX_BYTES, COPY_BUFFER_BYTES).map(|_| ())
}

/// `send_file` with at most `call_max_bytes` per sendfile call and a fallback buffer of
/// `copy_buffer_bytes` (the tests give small caps to see each call bounded); returns the
/// system calls that moved bytes (sendfile calls, or the fallback's writes).
fn send_file_in<S: Write + AsRawFd>(
    socket: &mut S,
    file: &mut File,
    size_bytes: u64,
    call_max_bytes: usize,
    copy_buffer_bytes: usize,
) -> io::Result<u64> {
    let mut offset: libc::off_t = 0;
    let mut left = size_bytes;
    let mut calls = 0;
    while left > 0 {
        let want = left.min(call_max_bytes as u64) as usize;
        // SAFETY: both descriptors are open for the duration of the call; `offset` is ours.
        let n = unsafe { libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut offset, want) };
        if n < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                // The socket blocks, so EAGAIN is its send timeout: the client does not read.
                Some(libc::EAGAIN) => return Err(err),
                Some(libc::EINVAL) | Some(libc::ENOSYS) if offset == 0 => {
                    return copy(socket, file, size_bytes, copy_buffer_bytes)
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
        calls += 1;
    }
    Ok(calls)
}

/// The fallback: a read/write copy through one bounded buffer.
fn copy(socket: &mut impl Write, file: &mut File, size_bytes: u64, buffer_bytes: usize) -> io::Result<u64> {
    let mut buf = vec![0u8; buffer_bytes];
    let mut left = size_bytes;
    let mut writes = 0;
    while left > 0 {
        let n = file.read(&mut buf[..left.min(buffer_bytes as u64) as usize])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank"));
        }
        socket.write_all(&buf[..n])?;
        left -= n as u64;
        writes += 1;
    }
    Ok(writes)
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

    /// Reads everything `rx` receives until it is closed, on a thread.
    fn drain(mut rx: UnixStream) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut got = Vec::new();
            rx.read_to_end(&mut got).unwrap();
            got
        })
    }

    #[test]
    fn each_sendfile_call_is_bounded_by_its_cap() {
        // 10,000 bytes fit the socket pair's buffer in one call; a cap of 1000 takes 10.
        let (mut file, bytes) = file_of(10_000, "capped");
        let (mut tx, rx) = UnixStream::pair().unwrap();
        let reader = drain(rx);
        let calls = send_file_in(&mut tx, &mut file, bytes.len() as u64, 1000, COPY_BUFFER_BYTES).unwrap();
        let uncapped = send_file_in(
            &mut tx,
            &mut file,
            bytes.len() as u64,
            SENDFILE_MAX_BYTES,
            COPY_BUFFER_BYTES,
        )
        .unwrap();
        drop(tx);
        assert!(calls >= 10, "each call moves at most 1000 bytes: {calls} calls");
        assert!(
            uncapped < calls,
            "without the small cap fewer calls suffice ({uncapped})"
        );
        let got = reader.join().unwrap();
        assert_eq!(&got[..bytes.len()], &bytes[..]);
        assert_eq!(&got[bytes.len()..], &bytes[..]);
    }

    #[test]
    fn the_sendfile_cap_is_1_gib_under_the_kernels_own() {
        // Linux moves at most MAX_RW_COUNT (2 GiB minus a page) per call: the cap stays under
        // it, so a call is never refused or silently shortened for its size.
        assert_eq!(SENDFILE_MAX_BYTES, 1 << 30);
        const { assert!(SENDFILE_MAX_BYTES <= 0x7fff_f000) };
    }

    /// A writer that keeps its bytes and the largest single write it was given.
    #[derive(Default)]
    struct Recording {
        bytes: Vec<u8>,
        largest_write: usize,
    }

    impl Write for Recording {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.largest_write = self.largest_write.max(buf.len());
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_fallback_copy_goes_through_one_1_mib_buffer() {
        // 3.5 MiB through the real buffer: every write is at most 1 MiB, never the file.
        let (mut file, bytes) = file_of(7 * COPY_BUFFER_BYTES / 2, "copy");
        let mut out = Recording::default();
        let writes = copy(&mut out, &mut file, bytes.len() as u64, COPY_BUFFER_BYTES).unwrap();
        assert_eq!(COPY_BUFFER_BYTES, 1 << 20);
        assert!(out.largest_write <= COPY_BUFFER_BYTES, "{}", out.largest_write);
        assert!(writes >= 4, "3.5 MiB in {writes} writes");
        assert_eq!(out.bytes, bytes);
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
