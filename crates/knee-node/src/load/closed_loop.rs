//! Closed loop: N clients, each on its own connection, send one request, wait for its reply
//! (or its timeout), think, and send again. Throughput is an outcome here, not an input.

use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::config::Think;
use super::driver::DriverFactory;
use super::recorder::{Recorder, Sample, Status};
use super::{reply_sample, Limits, SendWindow};
use crate::rng::Rng;
use crate::wire::{frame_bytes, request_frame_bytes, write_frame, FrameReader, ReplyHeader, RequestHeader};
use crate::{clock, signals, stdio};

/// Granularity at which a waiting client checks its request's timeout and the stop flag.
const READ_TICK: Duration = Duration::from_millis(20);
/// After a stop request, how long a reply in flight is still waited for (as in the open
/// loop); a request still unanswered then is a drop.
const STOP_GRACE_NS: u64 = 1_000_000_000;

pub struct ClosedLoop {
    pub think_ns: f64,
    pub think: Think,
}

pub fn run(
    streams: Vec<TcpStream>,
    params: &ClosedLoop,
    factory: Arc<dyn DriverFactory>,
    recorder: Arc<Recorder>,
    limits: &Limits,
) -> Result<SendWindow, String> {
    let tickets = Arc::new(AtomicU64::new(0));
    let last_sent = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for (i, stream) in streams.into_iter().enumerate() {
        let (factory, recorder, tickets, last_sent) = (
            factory.clone(),
            recorder.clone(),
            tickets.clone(),
            last_sent.clone(),
        );
        let limits = limits.clone();
        let (think_ns, think) = (params.think_ns, params.think);
        clients.push(std::thread::spawn(move || {
            let client = Client {
                index: i as u32,
                factory,
                recorder,
                limits,
                think_ns,
                think,
            };
            if let Err(e) = client.run(stream, &tickets, &last_sent) {
                stdio::log(&format!("client {i}: {e}"));
            }
        }));
    }
    for c in clients {
        let _ = c.join();
    }
    Ok(SendWindow {
        last_sent_ns: last_sent.load(Ordering::Relaxed),
    })
}

struct Client {
    index: u32,
    factory: Arc<dyn DriverFactory>,
    recorder: Arc<Recorder>,
    limits: Limits,
    think_ns: f64,
    think: Think,
}

impl Client {
    fn run(&self, stream: TcpStream, tickets: &AtomicU64, last_sent: &AtomicU64) -> Result<(), String> {
        stream
            .set_read_timeout(Some(READ_TICK))
            .map_err(|e| e.to_string())?;
        let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
        let mut src = &stream;
        let mut reader = FrameReader::new(self.limits.max_frame_bytes);
        let mut driver = self.factory.driver(self.limits.seed, self.index as u64 + 1);
        let mut rng = Rng::new(self.limits.seed ^ (0xC1E7 + self.index as u64));
        let counters = &self.recorder.counters;
        let (mut body, mut scratch) = (Vec::new(), Vec::new());
        let mut next_ns = clock::now_ns();
        loop {
            if !clock::wait_until_unless_stopped(next_ns)
                || self.limits.end_ns.is_some_and(|end| next_ns >= end)
            {
                return Ok(());
            }
            let ticket = tickets.fetch_add(1, Ordering::Relaxed);
            if self.limits.requests.is_some_and(|max| ticket >= max) {
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
                self.recorder.record(&sample);
                return Err(format!("send failed: {e}; this client stops"));
            }
            if sent_ns.saturating_sub(next_ns) > self.limits.late_ns {
                counters.late.fetch_add(1, Ordering::Relaxed);
            }
            counters.sent.fetch_add(1, Ordering::Relaxed);
            counters.bytes_tx.fetch_add(bytes_out, Ordering::Relaxed);
            last_sent.fetch_max(sent_ns, Ordering::Relaxed);
            let deadline_ns = sent_ns + self.limits.timeout_ns;
            let mut stop_deadline_ns: Option<u64> = None;
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
                            reply_sample(&h, reply_body, &*self.factory, op, frame_bytes(payload.len()));
                        s.received_ns = received_ns;
                        break Ok(s);
                    }
                    Ok(None) => {
                        let now = clock::now_ns();
                        if now >= deadline_ns {
                            break Err(Status::Timeout);
                        }
                        if signals::stop_requested() {
                            // Stopped with this request in flight: after the grace, a drop.
                            let stop_at = *stop_deadline_ns.get_or_insert(now + STOP_GRACE_NS);
                            if now >= stop_at {
                                break Err(Status::Drop);
                            }
                        }
                    }
                    Err(e) => {
                        sample.status = Status::Drop as u8;
                        self.recorder.record(&sample);
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
            self.recorder.record(&sample);
            let think_ns = match self.think {
                Think::Fixed => self.think_ns,
                Think::Exponential => rng.exponential(self.think_ns),
            };
            next_ns = clock::now_ns() + think_ns as u64;
        }
    }
}
