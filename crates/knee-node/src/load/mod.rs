//! The load generator. Every client role runs inside the harness (`harness.rs`: recorder,
//! bounds, stop, stdout lines); the open and closed loops of the framed-TCP systems (echo,
//! matrix) are two such roles, driving a system's `DriverFactory`.

mod closed_loop;
pub mod config;
pub mod driver;
pub mod harness;
mod open_loop;
pub mod recorder;
pub mod schedule;

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use config::{LoadConfig, ScheduleConfig};
use driver::DriverFactory;
use harness::{Bounds, ClientRole, Plan};
use recorder::{Sample, Status};
use schedule::Schedule;

use crate::stdio;
use crate::wire::{ReplyHeader, WireStatus};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn connect(target: &str, count: usize) -> Result<Vec<TcpStream>, String> {
    let addr: SocketAddr = target
        .to_socket_addrs()
        .map_err(|e| format!("target {target}: {e}"))?
        .next()
        .ok_or_else(|| format!("target {target}: no address"))?;
    (0..count)
        .map(|i| {
            let s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
                .map_err(|e| format!("connection {i} to {addr}: {e}"))?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            Ok(s)
        })
        .collect()
}

/// The sample of a request that got a reply; the caller fills in its own times and ids.
pub(crate) fn reply_sample(
    h: &ReplyHeader,
    body: &[u8],
    factory: &dyn DriverFactory,
    op: u16,
    bytes_in: usize,
) -> Sample {
    let status = match WireStatus::from_u16(h.status) {
        Some(WireStatus::Ok) => match factory.check_reply(op, body) {
            Ok(()) => Status::Ok,
            Err(reason) => {
                stdio::log(&format!("request {}: bad reply: {reason}", h.request_id));
                Status::Error
            }
        },
        Some(WireStatus::Overloaded) => Status::Drop,
        _ => Status::Error,
    };
    Sample {
        request_id: h.request_id,
        server_ns: h.server_ns,
        queue_ns: h.queue_ns,
        service_ns: h.service_ns,
        detail_ns: h.detail_ns,
        bytes_in: bytes_in as u64,
        op,
        flags: h.flags,
        status: status as u8,
        ..Default::default()
    }
}

/// The role of a load config: the open or the closed loop (connected, ready to start).
pub fn role(cfg: LoadConfig, factory: Arc<dyn DriverFactory>) -> Result<Box<dyn ClientRole>, String> {
    cfg.check()?;
    Ok(match &cfg.schedule {
        ScheduleConfig::Closed { clients, .. } => {
            let streams = connect(&cfg.target, *clients)?;
            Box::new(closed_loop::ClosedLoop::new(cfg, streams, factory))
        }
        _ => {
            let streams = connect(&cfg.target, cfg.connections)?;
            Box::new(open_loop::OpenLoop::new(cfg, streams, factory))
        }
    })
}

/// The harness's plan of a load config; `schedule` is the open loop's, for the target rate.
fn plan(cfg: &LoadConfig, schedule: Option<Schedule>, max_in_flight: Option<usize>) -> Plan {
    let duration_s = cfg.duration_s.or(schedule.as_ref().and_then(Schedule::length_s));
    let bounds = Bounds {
        duration_s,
        deadline_ns: None,
        requests: cfg.requests,
        max_in_flight,
    };
    Plan {
        schedule,
        ..Plan::new(
            &cfg.samples_path,
            &cfg.histogram_path,
            cfg.warmup_s,
            Some(cfg.late_ms),
            bounds,
        )
    }
}
