//! The FrameAccessor client role (`knee-node load stream`): sockets, recorder, the `start` and
//! `done` lines. Its config and bounds are in `config.rs`, its line contents in `lines.rs`,
//! the fetching itself in `accessor.rs`.

use std::net::UdpSocket;

use super::accessor::Accessor;
use super::config::ClientConfig;
use super::lines::summary;
use crate::load::recorder::Recorder;
use crate::{clock, stdio};

pub fn run(config: &serde_json::Value) -> Result<(), String> {
    let cfg: ClientConfig =
        serde_json::from_value(config.clone()).map_err(|e| format!("load config: {e}"))?;
    cfg.check().map_err(|e| format!("load config: {e}"))?;
    let sockets = cfg
        .services
        .iter()
        .map(|addr| {
            // One connected socket per service: the kernel keeps other senders' datagrams out.
            let s = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("binding a socket: {e}"))?;
            s.connect(addr).map_err(|e| format!("service {addr}: {e}"))?;
            s.set_nonblocking(true).map_err(|e| e.to_string())?;
            Ok(s)
        })
        .collect::<Result<Vec<_>, String>>()?;
    let recorder =
        Recorder::create(&cfg.samples_path).map_err(|e| format!("creating {}: {e}", cfg.samples_path))?;
    clock::tighten_timer_slack();
    let start_ns = clock::now_ns();
    recorder.set_warmup_end(start_ns + (cfg.warmup_s * 1e9) as u64);
    stdio::emit(&serde_json::json!({"event": "start", "start_ns": start_ns}));
    let mut accessor = Accessor::new(&cfg, sockets, &recorder, start_ns);
    accessor.run();
    let totals = accessor.totals();
    let latency = recorder.finish(&cfg.histogram_path)?;
    let mut done = summary(&totals, clock::now_ns() - start_ns);
    done["event"] = "done".into();
    done["latency"] = latency;
    stdio::emit(&done);
    Ok(())
}
