//! A server node's config (`knee-node serve <system> --config`), and the limits `run` keeps.

use serde::Deserialize;

use crate::config_defaults;

/// `{"listen", "max_frame_bytes", "max_connections", "server"}` (`docs/node-protocol.md`).
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
        }
    }

    /// A datagram server has no frames and no connections: their limits would mean
    /// nothing, so they are refused like unknown keys.
    pub fn datagram(&self) -> Result<(), String> {
        match (self.max_frame_bytes, self.max_connections) {
            (None, None) => Ok(()),
            _ => Err(
                "serve config: max_frame_bytes and max_connections are for TCP servers; \
                      this one is UDP"
                    .into(),
            ),
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(json: &str) -> Result<ServeOptions, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn tcp_limits_default_and_a_datagram_server_refuses_them() {
        let opts = options(r#"{"server": {"threads": 2}}"#).unwrap();
        let cfg = opts.framed(2, 10);
        assert_eq!(cfg.max_frame_bytes, config_defaults::max_frame_bytes());
        assert_eq!(cfg.max_connections, config_defaults::max_connections());
        assert_eq!(opts.listen, "127.0.0.1:0");
        assert!(opts.datagram().is_ok());
        let opts = options(r#"{"max_connections": 3}"#).unwrap();
        assert_eq!(opts.framed(0, 0).max_connections, 3);
        assert!(opts.datagram().unwrap_err().contains("UDP"));
        assert!(options(r#"{"colour": 3}"#).unwrap_err().contains("unknown field"));
    }
}
