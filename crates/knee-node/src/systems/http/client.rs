//! `knee-node load http`: the http target's client role on the load harness.

use serde::Serialize;

use super::config::HttpConfig;
use super::engine::Engine;
use super::requests::Table;
use crate::load::harness::{Bounds, ClientRole, Plan, Role, RunContext};
use crate::load::schedule::Schedule;

/// The role's own fields of its `done` line.
#[derive(Serialize, Default, Debug, Clone, Copy)]
pub struct HttpDone {
    /// Connections made, the first ones included (more than `connections`: some were
    /// closed by the server, a timeout or an error, and opened again).
    pub connections_opened: u64,
    pub connect_failures: u64,
}

pub struct HttpClient {
    cfg: HttpConfig,
    table: Option<Table>,
}

pub fn role(config: &serde_json::Value) -> Result<Box<dyn ClientRole>, String> {
    let cfg = HttpConfig::parse(config).map_err(|e| format!("load config: {e}"))?;
    let table = Table::build(&cfg.driver, &cfg.authority).map_err(|e| format!("load config: {e}"))?;
    Ok(Box::new(HttpClient {
        cfg,
        table: Some(table),
    }))
}

impl Role for HttpClient {
    type Progress = crate::events::NoExtra;
    type Done = HttpDone;

    fn plan(&self) -> Plan {
        let load = &self.cfg.load;
        let schedule = Schedule::new(&load.schedule);
        let bounds = Bounds {
            duration_s: load.duration_s.or(schedule.as_ref().and_then(Schedule::length_s)),
            deadline_ns: None,
            requests: load.requests,
            max_in_flight: schedule.is_some().then_some(load.max_outstanding),
        };
        Plan {
            schedule,
            ..Plan::new(
                &load.samples_path,
                &load.histogram_path,
                load.warmup_s,
                Some(load.late_ms),
                bounds,
            )
        }
    }

    fn run(&mut self, ctx: &RunContext) -> Result<HttpDone, String> {
        let table = self.table.take().ok_or("the http role runs once")?;
        let mut engine = Engine::new(&self.cfg, table, ctx)?;
        engine.connect_all()?;
        let tally = engine.run();
        Ok(HttpDone {
            connections_opened: tally.connections_opened,
            connect_failures: tally.connect_failures,
        })
    }
}
