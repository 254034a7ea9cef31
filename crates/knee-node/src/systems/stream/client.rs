//! The FrameAccessor client role (`knee-node load stream`): its sockets, set up before the
//! start, and the role the load harness runs. Its config and bounds are in `config.rs`, its
//! own line fields in `lines.rs`, the fetching itself in `accessor.rs`.

use std::net::UdpSocket;
use std::sync::Arc;

use super::accessor::Accessor;
use super::config::ClientConfig;
use super::lines::{Live, StreamFields};
use crate::clock;
use crate::load::harness::{Bounds, ClientRole, Plan, Role, RunContext};

pub struct StreamClient {
    cfg: ClientConfig,
    sockets: Vec<UdpSocket>,
    live: Arc<Live>,
}

pub fn role(config: &serde_json::Value) -> Result<Box<dyn ClientRole>, String> {
    let cfg: ClientConfig =
        serde_json::from_value(config.clone()).map_err(|e| format!("load config: {e}"))?;
    cfg.check().map_err(|e| format!("load config: {e}"))?;
    let sockets = cfg
        .services
        .iter()
        .map(|addr| {
            // One connected socket per service: the kernel keeps other senders' datagrams out.
            let s = UdpSocket::bind(local_for(addr)?).map_err(|e| format!("binding a socket: {e}"))?;
            s.connect(addr).map_err(|e| format!("service {addr}: {e}"))?;
            s.set_nonblocking(true).map_err(|e| e.to_string())?;
            Ok(s)
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Box::new(StreamClient {
        cfg,
        sockets,
        live: Arc::default(),
    }))
}

/// The local address a socket to `service` binds: loopback for a service on loopback (the
/// socket then never listens on the machine's real interfaces), else any address, for a
/// service on another host (an emulated host's namespace, or a real one).
fn local_for(service: &str) -> Result<&'static str, String> {
    let addr: std::net::SocketAddr = service
        .parse()
        .map_err(|e| format!("service {service}: not an address ({e})"))?;
    Ok(if addr.ip().is_loopback() {
        "127.0.0.1:0"
    } else {
        "0.0.0.0:0"
    })
}

impl Role for StreamClient {
    type Progress = StreamFields;
    type Done = StreamFields;

    /// In flight: `outstanding` per service, a slot count of the accessor's own.
    fn plan(&self) -> Plan<StreamFields> {
        let cfg = &self.cfg;
        let bounds = Bounds {
            duration_s: Some(cfg.duration_s),
            ..Bounds::default()
        };
        let live = self.live.clone();
        // A block request's intended time is its send (it leaves as soon as a slot is
        // free): no late sends by construction.
        Plan {
            progress: Some(Box::new(move |counts, elapsed_ns| {
                live.fields(counts, elapsed_ns)
            })),
            ..Plan::new(&cfg.samples_path, &cfg.histogram_path, cfg.warmup_s, None, bounds)
        }
    }

    fn run(&mut self, ctx: &RunContext) -> Result<StreamFields, String> {
        let sockets = std::mem::take(&mut self.sockets);
        Accessor::new(&self.cfg, sockets, ctx, &self.live).run();
        Ok(self.live.fields(&ctx.counts(), clock::now_ns() - ctx.start_ns))
    }
}
