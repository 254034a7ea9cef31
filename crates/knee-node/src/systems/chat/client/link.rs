//! A client's way to the primary: one connection at a time, and on a timeout, a lost
//! connection or "not primary", another replica (the one named in the answer, else the
//! next in order), with the same request id, bounded attempts and exponential backoff.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::clock;
use crate::load::harness::RunContext;
use crate::load::recorder::Status;
use crate::systems::chat::replica::UNKNOWN;
use crate::systems::chat::FLAG_NOT_PRIMARY;
use crate::wire::{frame_bytes, write_frame, FrameReader, ReplyHeader, RequestHeader};

/// Granularity at which a waiting client checks its timeout and the stop flag.
const READ_TICK: Duration = Duration::from_millis(10);

pub struct Policy {
    pub timeout_ns: u64,
    pub retries: u32,
    pub backoff_ns: u64,
    pub max_backoff_ns: u64,
    pub max_frame_bytes: usize,
}

/// What became of one request after all its attempts.
pub struct Outcome {
    /// The reply (header, body, frame bytes), or the status of the last failed attempt.
    pub reply: Result<(ReplyHeader, Vec<u8>, usize), Status>,
    /// When the last attempt was written (0: never) and its reply read (0: none).
    pub sent_ns: u64,
    pub received_ns: u64,
    pub attempts: u32,
    /// The replica that answered (or was last tried).
    pub replica: usize,
}

pub struct Link {
    replicas: Vec<SocketAddr>,
    target: usize,
    conn: Option<(TcpStream, TcpStream, FrameReader)>,
    policy: Policy,
    scratch: Vec<u8>,
}

impl Link {
    pub fn new(replicas: Vec<SocketAddr>, policy: Policy) -> Link {
        Link {
            replicas,
            target: 0,
            conn: None,
            policy,
            scratch: Vec::new(),
        }
    }

    fn switch_to(&mut self, replica: usize) {
        self.conn = None;
        self.target = replica % self.replicas.len();
    }

    fn connected(&mut self) -> std::io::Result<&mut (TcpStream, TcpStream, FrameReader)> {
        if self.conn.is_none() {
            let timeout = Duration::from_nanos(self.policy.timeout_ns);
            let s = TcpStream::connect_timeout(&self.replicas[self.target], timeout)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(READ_TICK))?;
            let w = s.try_clone()?;
            self.conn = Some((s, w, FrameReader::new(self.policy.max_frame_bytes)));
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    /// Sends `body` as request `request_id` until a replica that is primary answers, the
    /// attempts run out or a stop is asked (a reply in flight then gets the harness's grace).
    /// `on_send` is told of each written attempt's send time and bytes.
    pub fn call(
        &mut self,
        ctx: &RunContext,
        request_id: u64,
        op: u16,
        body: &[u8],
        mut on_send: impl FnMut(u64, usize),
    ) -> Outcome {
        let header = RequestHeader {
            request_id,
            op,
            flags: 0,
        }
        .encode();
        let mut out = Outcome {
            reply: Err(Status::Drop),
            sent_ns: 0,
            received_ns: 0,
            attempts: 0,
            replica: self.target,
        };
        let mut backoff_ns = self.policy.backoff_ns;
        while out.attempts <= self.policy.retries && !ctx.stopping() {
            out.attempts += 1;
            out.replica = self.target;
            let next = self.target + 1;
            match self.attempt(ctx, &header, body, &mut out, &mut on_send) {
                Attempt::Reply(h, b, n) if h.flags & FLAG_NOT_PRIMARY != 0 => {
                    let hint = b
                        .get(..4)
                        .map_or(UNKNOWN, |x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]));
                    if (hint as usize) < self.replicas.len() && hint as usize != self.target {
                        self.switch_to(hint as usize); // told where to go: no wait
                        continue;
                    }
                    out.reply = Ok((h, b, n));
                    self.switch_to(next);
                }
                Attempt::Reply(h, b, n) => {
                    out.reply = Ok((h, b, n));
                    return out;
                }
                Attempt::Failed(status) => {
                    out.reply = Err(status);
                    self.switch_to(next);
                }
            }
            std::thread::sleep(Duration::from_nanos(backoff_ns));
            backoff_ns = (backoff_ns * 2).min(self.policy.max_backoff_ns);
        }
        out
    }

    fn attempt(
        &mut self,
        ctx: &RunContext,
        header: &[u8],
        body: &[u8],
        out: &mut Outcome,
        on_send: &mut impl FnMut(u64, usize),
    ) -> Attempt {
        let timeout_ns = self.policy.timeout_ns;
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = (|| {
            let Ok((read, write, reader)) = self.connected() else {
                return Attempt::Failed(Status::Drop);
            };
            let sent_ns = clock::now_ns();
            if write_frame(write, &mut scratch, &[header, body]).is_err() {
                return Attempt::Failed(Status::Drop); // not sent: `sent_ns` stays the last sent attempt's
            }
            out.sent_ns = sent_ns;
            on_send(sent_ns, 4 + header.len() + body.len());
            let deadline_ns = out.sent_ns + timeout_ns;
            let request_id = u64::from_le_bytes(header[..8].try_into().expect("8-byte id"));
            loop {
                match reader.read_frame(&mut &*read) {
                    Ok(Some(payload)) => {
                        out.received_ns = clock::now_ns();
                        let Some((h, b)) = ReplyHeader::decode(payload) else {
                            return Attempt::Failed(Status::Error);
                        };
                        if h.request_id != request_id {
                            continue; // a reply to an attempt that already timed out
                        }
                        if out.received_ns >= deadline_ns {
                            // Read after its deadline: a timeout, as if the tick had come first.
                            return Attempt::Failed(Status::Timeout);
                        }
                        return Attempt::Reply(h, b.to_vec(), frame_bytes(payload.len()));
                    }
                    Ok(None) => {
                        let now = clock::now_ns();
                        if now >= deadline_ns {
                            return Attempt::Failed(Status::Timeout);
                        }
                        if ctx.grace_over(now) {
                            // Stopped: not a timeout, its timeout did not pass.
                            return Attempt::Failed(Status::Drop);
                        }
                    }
                    Err(_) => return Attempt::Failed(Status::Drop),
                }
            }
        })();
        self.scratch = scratch;
        if matches!(result, Attempt::Failed(_)) {
            out.received_ns = 0;
            self.conn = None; // a late reply must not be read as the retry's
        }
        result
    }
}

enum Attempt {
    Reply(ReplyHeader, Vec<u8>, usize),
    Failed(Status),
}
