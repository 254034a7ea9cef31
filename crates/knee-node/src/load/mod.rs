//! The load generator. Every client role runs inside the harness (`harness.rs`: recorder,
//! bounds, stop, stdout lines); the open and closed loops of the framed-TCP systems (echo,
//! matrix) are two such roles, driving a system's `DriverFactory`. `clients.rs`: a closed
//! loop's clients as the engines on the drive loop keep them.

pub mod clients;
mod closed_loop;
pub mod config;
pub mod drive;
pub mod driver;
pub mod flights;
pub mod harness;
mod open_loop;
pub mod recorder;
pub mod schedule;

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use config::{LoadConfig, ScheduleConfig, TcpTarget};
use driver::DriverFactory;
use harness::ClientRole;
use recorder::{Sample, Status};

use crate::stdio;
use crate::wire::{ReplyHeader, WireStatus};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the connections to a TCP target could not be made before the start.
#[derive(Debug)]
pub enum ConnectError {
    /// The target names no address (or could not be resolved).
    Resolve { target: String, error: String },
    /// Connection number `index` to `addr` failed.
    Connect {
        index: usize,
        addr: SocketAddr,
        error: std::io::Error,
    },
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Resolve { target, error } => write!(f, "target {target}: {error}"),
            ConnectError::Connect { index, addr, error } => {
                write!(f, "connection {index} to {addr}: {error}")
            }
        }
    }
}

impl std::error::Error for ConnectError {}

/// The node's error line (its callers return `Result<_, String>`).
impl From<ConnectError> for String {
    fn from(e: ConnectError) -> String {
        e.to_string()
    }
}

fn connect(target: &str, count: usize) -> Result<Vec<TcpStream>, ConnectError> {
    let resolve = |error: String| ConnectError::Resolve {
        target: target.to_string(),
        error,
    };
    let addr: SocketAddr = target
        .to_socket_addrs()
        .map_err(|e| resolve(e.to_string()))?
        .next()
        .ok_or_else(|| resolve("no address".into()))?;
    (0..count)
        .map(|index| {
            let s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
                .and_then(|s| s.set_nodelay(true).map(|()| s))
                .map_err(|error| ConnectError::Connect { index, addr, error })?;
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

/// What the open and the closed loop start from: the load config, the framed-TCP target,
/// its connections (made) and the system's driver factory.
pub struct Connected {
    pub cfg: LoadConfig,
    pub tcp: TcpTarget,
    pub streams: Vec<TcpStream>,
    pub factory: Arc<dyn DriverFactory>,
}

/// The role of a load config: the open or the closed loop (connected, ready to start).
pub fn role(
    cfg: LoadConfig,
    tcp: TcpTarget,
    factory: Arc<dyn DriverFactory>,
) -> Result<Box<dyn ClientRole>, String> {
    Ok(match &cfg.schedule {
        ScheduleConfig::Closed { clients, .. } => {
            let streams = connect(&tcp.target, *clients)?;
            Box::new(closed_loop::ClosedLoop(Connected {
                cfg,
                tcp,
                streams,
                factory,
            }))
        }
        _ => {
            let streams = connect(&tcp.target, tcp.connections)?;
            Box::new(open_loop::OpenLoop(Connected {
                cfg,
                tcp,
                streams,
                factory,
            }))
        }
    })
}
