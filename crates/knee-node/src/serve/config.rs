//! A server node's config (`knee-node serve <system> --config`), and the limits `run` keeps.

use std::time::Duration;

use serde::Deserialize;

use crate::config_defaults;

/// `{"listen", "max_frame_bytes", "max_connections", "read_timeout_ms", "write_timeout_ms",
/// "server"}` (`docs/node-protocol.md`, `docs/limits.md`).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ServeOptions {
    /// Loopback by default: a node listens elsewhere only when asked to.
    #[serde(default = "config_defaults::listen")]
    pub listen: String,
    /// Framed TCP only (absent: the default); a datagram server refuses it.
    #[serde(default)]
    pub max_frame_bytes: Option<usize>,
    /// Framed TCP only (absent: the default); a datagram server refuses it.
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Framed TCP only: longest a request frame may take once its first byte has come.
    #[serde(default)]
    pub read_timeout_ms: Option<u64>,
    /// Framed TCP only: longest a reply write may make no progress.
    #[serde(default)]
    pub write_timeout_ms: Option<u64>,
    /// The system's own parameters.
    #[serde(default)]
    pub server: serde_json::Value,
}

impl ServeOptions {
    /// The limits of a framed-TCP server with `threads` workers behind `max_queue`.
    pub fn framed(&self, threads: usize, max_queue: usize) -> ServeConfig {
        ServeConfig {
            threads,
            max_queue,
            max_frame_bytes: self
                .max_frame_bytes
                .unwrap_or_else(config_defaults::max_frame_bytes),
            max_connections: self
                .max_connections
                .unwrap_or_else(config_defaults::max_connections),
            read_timeout: Duration::from_millis(
                self.read_timeout_ms
                    .unwrap_or_else(config_defaults::read_timeout_ms)
                    .max(1),
            ),
            write_timeout: Duration::from_millis(
                self.write_timeout_ms
                    .unwrap_or_else(config_defaults::write_timeout_ms)
                    .max(1),
            ),
        }
    }

    /// A datagram server has no frames and no connections: their limits would mean
    /// nothing, so they are refused like unknown keys.
    pub fn datagram(&self) -> Result<(), String> {
        let tcp_only = self.max_frame_bytes.is_some()
            || self.max_connections.is_some()
            || self.read_timeout_ms.is_some()
            || self.write_timeout_ms.is_some();
        if tcp_only {
            return Err(
                "serve config: max_frame_bytes, max_connections, read_timeout_ms and \
                 write_timeout_ms are for TCP servers; this one is UDP"
                    .into(),
            );
        }
        Ok(())
    }

    /// A server that is not knee's framed TCP (slices' Zenoh, nginx, grpc-go) refuses the
    /// framed-TCP limits like unknown keys, as a datagram server does.
    pub fn not_framed(&self) -> Result<(), String> {
        self.datagram().map_err(|_| {
            "serve config: max_frame_bytes, max_connections, read_timeout_ms and write_timeout_ms \
             are for knee's framed TCP servers"
                .to_string()
        })
    }
}

/// Limits and execution mode of a framed-TCP server.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// 0: serve on the connection's thread; N: a pool of N workers behind one FIFO queue.
    pub threads: usize,
    /// Requests waiting for a worker beyond this are answered `Overloaded` at once.
    pub max_queue: usize,
    /// Longer request frames close their connection (the handler may lower it further).
    pub max_frame_bytes: usize,
    /// Connections beyond this are closed on accept (each costs a thread).
    pub max_connections: usize,
    /// A request frame not whole this long after its first byte closes its connection.
    pub read_timeout: Duration,
    /// A reply write that makes no progress this long closes its connection.
    pub write_timeout: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(json: &str) -> Result<ServeOptions, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn tcp_limits_default_and_a_datagram_or_unframed_server_refuses_them() {
        let opts = options(r#"{"server": {"threads": 2}}"#).unwrap();
        let cfg = opts.framed(2, 10);
        assert_eq!(cfg.max_frame_bytes, config_defaults::max_frame_bytes());
        assert_eq!(cfg.max_connections, config_defaults::max_connections());
        assert_eq!(opts.listen, "127.0.0.1:0");
        assert!(opts.datagram().is_ok());
        let opts = options(r#"{"max_connections": 3}"#).unwrap();
        assert_eq!(opts.framed(0, 0).max_connections, 3);
        assert!(opts.datagram().unwrap_err().contains("UDP"));
        let opts = options(r#"{"read_timeout_ms": 250, "write_timeout_ms": 0}"#).unwrap();
        let cfg = opts.framed(0, 0);
        assert_eq!(cfg.read_timeout, Duration::from_millis(250));
        assert_eq!(
            cfg.write_timeout,
            Duration::from_millis(1),
            "0 would mean no timeout"
        );
        assert!(opts.datagram().unwrap_err().contains("UDP"));
        assert!(opts
            .not_framed()
            .unwrap_err()
            .contains("knee's framed TCP servers"));
        assert!(options("{}").unwrap().not_framed().is_ok());
        assert!(options(r#"{"colour": 3}"#).unwrap_err().contains("unknown field"));
    }
}
