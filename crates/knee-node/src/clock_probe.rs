//! `knee-node clock`: answers each line read on stdin with this host's `CLOCK_MONOTONIC` in
//! ns, so the runner can estimate the offset of a remote host's clock from round trips
//! (`knee.hosts.ssh`, `docs/node-protocol.md`).

use std::io::{BufRead, Read, Write};

use crate::clock;

/// Longest request line: the runner sends empty lines; anything longer is not a request.
pub const MAX_LINE_BYTES: usize = 64;

/// Replies to every line of `input` with the time it was read, until end of input.
pub fn run(mut input: impl BufRead, mut output: impl Write) -> Result<(), String> {
    let mut line = Vec::with_capacity(MAX_LINE_BYTES);
    loop {
        line.clear();
        let n = input
            .by_ref()
            .take(MAX_LINE_BYTES as u64)
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("clock: reading stdin: {e}"))?;
        // Read the clock first: the reply's time is when the request arrived.
        let now_ns = clock::now_ns();
        if n == 0 {
            return Ok(());
        }
        if line.last() != Some(&b'\n') && n == MAX_LINE_BYTES {
            return Err(format!("clock: a line longer than {MAX_LINE_BYTES} bytes"));
        }
        writeln!(output, "{now_ns}")
            .and_then(|()| output.flush())
            .map_err(|e| format!("clock: writing stdout: {e}"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_increasing_time_per_line() {
        let mut out = Vec::new();
        run(&b"\n\nx\n"[..], &mut out).expect("three lines");
        let times: Vec<u64> = String::from_utf8(out)
            .expect("utf-8")
            .lines()
            .map(|l| l.parse().expect("a number"))
            .collect();
        assert_eq!(times.len(), 3);
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn a_last_line_without_newline_is_answered() {
        let mut out = Vec::new();
        run(&b"\nend"[..], &mut out).expect("two lines");
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 2);
    }

    #[test]
    fn an_overlong_line_is_refused() {
        let long = [b'a'; MAX_LINE_BYTES + 10];
        let err = run(&long[..], Vec::new()).expect_err("too long");
        assert!(err.contains("longer than"), "{err}");
    }
}
