//! `knee-node load http`: the http target's client role on the load harness.

use serde::Serialize;

use super::config::HttpConfig;
use super::engine::Engine;
use super::pool::Pool;
use super::requests::Table;
use crate::load::harness::{ClientRole, Plan, Role, RunContext};
use crate::load::schedule::Schedule;

/// The role's own fields of its `done` line.
#[derive(Serialize, Default, Debug, Clone, Copy)]
pub struct HttpDone {
    /// Connections made, the first ones included (more than `connections`: some were
    /// closed by the server, a timeout or an error, and made again).
    pub connections_opened: u64,
    /// Connects that failed: refused, timed out, or a TLS handshake that failed.
    pub connect_failures: u64,
}

pub struct HttpClient {
    cfg: HttpConfig,
    /// The request table and the connections, made before the start; taken by the run.
    setup: Option<(Table, Pool)>,
}

pub fn role(config: &serde_json::Value) -> Result<Box<dyn ClientRole>, String> {
    let cfg = HttpConfig::parse(config).map_err(|e| format!("load config: {e}"))?;
    let table = Table::build(&cfg.driver, &cfg.target.authority).map_err(|e| format!("load config: {e}"))?;
    let pool = Pool::open(&cfg)?;
    Ok(Box::new(HttpClient {
        cfg,
        setup: Some((table, pool)),
    }))
}

impl Role for HttpClient {
    type Progress = crate::events::NoExtra;
    type Done = HttpDone;

    fn plan(&self) -> Plan {
        let load = &self.cfg.load;
        let schedule = Schedule::new(&load.schedule);
        let max_in_flight = schedule.is_some().then_some(load.max_outstanding);
        load.plan(schedule, max_in_flight)
    }

    fn run(&mut self, ctx: &RunContext) -> Result<HttpDone, String> {
        let (table, pool) = self.setup.take().ok_or("the http role runs once")?;
        let tally = Engine::new(&self.cfg, table, pool, ctx)?.run();
        Ok(HttpDone {
            connections_opened: tally.connections_opened,
            connect_failures: tally.connect_failures,
        })
    }
}
