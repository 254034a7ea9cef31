//! `knee-node load http`: the http target's client role on the load harness. The protocol
//! is decided at setup, before the start (`driver.protocol`): HTTP/1.1 (`engine.rs`), or
//! HTTP/2 (`h2/`) by prior knowledge (h2c), required by ALPN (h2), or as the server chooses
//! by ALPN over TLS (auto: the first connection made tells).

use super::config::{HttpConfig, Protocol};
use super::done::HttpDone;
use super::engine::Engine;
use super::h2::{run_h2, H2Pool, H2Setup, H2Table};
use super::judge::HttpJudge;
use super::pool::Pool;
use super::requests::{self, Table};
use super::tls::Tls;
use crate::load::harness::{ClientRole, Plan, Role, RunContext};

enum Setup {
    Http1(Table, Pool),
    H2(H2Table, Box<H2Pool>),
}

pub struct HttpClient {
    cfg: HttpConfig,
    /// The request table and the connections, made before the start; taken by the run.
    setup: Option<Setup>,
}

pub fn role(config: &serde_json::Value) -> Result<Box<dyn ClientRole>, String> {
    let cfg = HttpConfig::parse(config).map_err(|e| format!("load config: {e}"))?;
    let setup = setup(&cfg)?;
    Ok(Box::new(HttpClient {
        cfg,
        setup: Some(setup),
    }))
}

/// The engine the run uses, its connections made.
fn setup(cfg: &HttpConfig) -> Result<Setup, String> {
    let http1 = || -> Result<Setup, String> {
        let table =
            Table::build(&cfg.driver, &cfg.target.authority).map_err(|e| format!("load config: {e}"))?;
        Ok(Setup::Http1(table, Pool::open(cfg)?))
    };
    let protocol = cfg.driver.protocol;
    let alpn: &[&[u8]] = match (protocol, cfg.target.tls) {
        (Protocol::Http1, _) | (Protocol::Auto, false) => return http1(),
        (Protocol::H2c, _) => &[],
        (Protocol::H2, _) => &[b"h2"],
        (Protocol::Auto, true) => &[b"h2", b"http/1.1"],
    };
    let table = requests::h2_table(&cfg.driver).map_err(|e| format!("load config: {e}"))?;
    let addr = cfg.target.socket_addr(&cfg.tcp.target)?;
    let tls = match cfg.target.tls {
        true => Some(Tls::new(&cfg.driver, &cfg.target.host, alpn)?),
        false => None,
    };
    let setup = H2Setup {
        addr,
        authority: cfg.target.authority.clone(),
        tls,
        may_fall_back: protocol == Protocol::Auto,
        connections: cfg.tcp.connections,
        timeout_ms: cfg.load.timeout_ms,
        options: cfg.driver.h2_options(),
    };
    match H2Pool::open(setup)? {
        Some(pool) => Ok(Setup::H2(table, Box::new(pool))),
        None => http1(), // the server chose HTTP/1.1 by ALPN
    }
}

impl Role for HttpClient {
    type Progress = crate::events::NoExtra;
    type Done = HttpDone;

    fn plan(&self) -> Plan {
        self.cfg.load.plan_by_schedule()
    }

    fn run(&mut self, ctx: &RunContext) -> Result<HttpDone, String> {
        match self.setup.take().ok_or("the http role runs once")? {
            Setup::Http1(table, pool) => {
                let tally = Engine::new(&self.cfg, table, pool, ctx)?.run();
                Ok(HttpDone {
                    protocol: "http/1.1",
                    connections_opened: tally.connections_opened,
                    connect_failures: tally.connect_failures,
                    max_streams_in_use: tally.max_busy,
                    ..HttpDone::default()
                })
            }
            Setup::H2(table, pool) => {
                let judge = HttpJudge {
                    keys: self.cfg.driver.keys(),
                };
                let connections = self.cfg.tcp.connections as u64;
                let d = run_h2(*pool, &self.cfg.load, table, &judge, ctx);
                let per_conn = match (d.server_max_streams, self.cfg.driver.max_streams) {
                    (Some(s), Some(c)) => Some(s.min(c as u64)),
                    (s, c) => s.or(c.map(u64::from)),
                };
                Ok(d.with_streams_per_conn(per_conn, connections))
            }
        }
    }
}
