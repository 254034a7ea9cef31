//! Closed loop: N clients, each on its own connection, send one request, wait for its reply
//! (or its timeout), think, and send again. Throughput is an outcome here, not an input.

use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use super::config::{ScheduleConfig, Think};
use super::driver::DriverFactory;
use super::harness::{Plan, Role, RunContext};
use super::recorder::{Sample, Status};
use super::{reply_sample, Connected};
use crate::events::NoExtra;
use crate::rng::Rng;
use crate::wire::{frame_bytes, request_frame_bytes, write_frame, FrameReader, ReplyHeader, RequestHeader};
use crate::{clock, stdio};

/// Granularity at which a waiting client checks its request's timeout and the stop flag.
const READ_TICK: Duration = Duration::from_millis(20);

/// The closed-loop role: one connection per client, the clients still to start.
pub struct ClosedLoop(pub Connected);

impl Role for ClosedLoop {
    type Progress = NoExtra;
    type Done = NoExtra;

    /// One request in flight per client by construction: no in-flight bound.
    fn plan(&self) -> Plan {
        self.0.cfg.plan(None)
    }

    fn run(&mut self, ctx: &RunContext) -> Result<NoExtra, String> {
        let (think_ns, think) = match &self.0.cfg.schedule {
            ScheduleConfig::Closed { think_ms, think, .. } => (think_ms * 1e6, *think),
            _ => return Err("the closed loop needs a closed schedule".into()),
        };
        let tickets = AtomicU64::new(0);
        std::thread::scope(|s| {
            for (i, stream) in std::mem::take(&mut self.0.streams).into_iter().enumerate() {
                let client = Client {
                    index: i as u32,
                    factory: &*self.0.factory,
                    ctx,
                    timeout_ns: (self.0.cfg.timeout_ms * 1e6) as u64,
                    max_frame_bytes: self.0.tcp.max_frame_bytes,
                    seed: self.0.cfg.seed,
                    think_ns,
                    think,
                };
                let tickets = &tickets;
                s.spawn(move || {
                    if let Err(e) = client.run(stream, tickets) {
                        stdio::log(&format!("client {i}: {e}"));
                    }
                });
            }
        });
        Ok(NoExtra {})
    }
}

struct Client<'a> {
    index: u32,
    factory: &'a dyn DriverFactory,
    ctx: &'a RunContext,
    timeout_ns: u64,
    max_frame_bytes: usize,
    seed: u64,
    think_ns: f64,
    think: Think,
}

impl Client<'_> {
    fn run(&self, stream: TcpStream, tickets: &AtomicU64) -> Result<(), String> {
        stream
            .set_read_timeout(Some(READ_TICK))
            .map_err(|e| e.to_string())?;
        let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
        let mut src = &stream;
        let mut reader = FrameReader::new(self.max_frame_bytes);
        let mut driver = self.factory.driver(self.seed, self.index as u64 + 1);
        let mut rng = Rng::new(self.seed ^ (0xC1E7 + self.index as u64));
        let recorder = &self.ctx.recorder;
        let (mut body, mut scratch) = (Vec::new(), Vec::new());
        let mut next_ns = clock::now_ns();
        loop {
            if !clock::wait_until_unless_stopped(next_ns) || self.ctx.stopping() || self.ctx.past_end(next_ns)
            {
                return Ok(());
            }
            let ticket = tickets.fetch_add(1, Ordering::Relaxed);
            if !self.ctx.allows_request(ticket) {
                return Ok(());
            }
            // Ids are unique across clients: client index in the high bits.
            let request_id = ((self.index as u64) << 40) | ticket;
            body.clear();
            let (op, arg) = driver.next_request(&mut body);
            let sent_ns = clock::now_ns();
            let bytes_out = request_frame_bytes(body.len()) as u64;
            let mut sample = Sample {
                request_id,
                intended_ns: next_ns,
                sent_ns,
                bytes_out,
                client: self.index,
                arg,
                op,
                ..Default::default()
            };
            let header = RequestHeader {
                request_id,
                op,
                flags: 0,
            };
            if let Err(e) = write_frame(&mut writer, &mut scratch, &[&header.encode(), &body]) {
                // Never sent: no send time, no bytes.
                sample.sent_ns = 0;
                sample.bytes_out = 0;
                sample.status = Status::Drop as u8;
                recorder.record(&sample);
                return Err(format!("send failed: {e}; this client stops"));
            }
            self.ctx.count_send(next_ns, sent_ns, bytes_out);
            let deadline_ns = sent_ns + self.timeout_ns;
            let got = loop {
                match reader.read_frame(&mut src) {
                    Ok(Some(payload)) => {
                        let received_ns = clock::now_ns();
                        let (h, reply_body) = ReplyHeader::decode(payload)
                            .ok_or_else(|| format!("malformed reply of {} bytes", payload.len()))?;
                        if h.request_id != request_id {
                            continue; // a late reply to a request that already timed out
                        }
                        if received_ns >= deadline_ns {
                            // Read after its deadline: a timeout, as if the tick had come first.
                            break Err(Status::Timeout);
                        }
                        let mut s =
                            reply_sample(&h, reply_body, self.factory, op, frame_bytes(payload.len()));
                        s.received_ns = received_ns;
                        break Ok(s);
                    }
                    Ok(None) => {
                        let now = clock::now_ns();
                        if now >= deadline_ns {
                            break Err(Status::Timeout);
                        }
                        if self.ctx.grace_over(now) {
                            // Stopped with this request in flight: after the grace, a drop.
                            break Err(Status::Drop);
                        }
                    }
                    Err(e) => {
                        sample.status = Status::Drop as u8;
                        recorder.record(&sample);
                        return Err(format!("{e}; this client stops"));
                    }
                }
            };
            match got {
                Ok(s) => {
                    sample = Sample {
                        intended_ns: sample.intended_ns,
                        sent_ns,
                        bytes_out,
                        client: self.index,
                        arg,
                        ..s
                    };
                }
                Err(status) => sample.status = status as u8,
            }
            recorder.record(&sample);
            let think_ns = match self.think {
                Think::Fixed => self.think_ns,
                Think::Exponential => rng.exponential(self.think_ns),
            };
            next_ns = clock::now_ns() + think_ns as u64;
        }
    }
}
