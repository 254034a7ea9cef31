//! Opening a node's Zenoh session: peer mode (or router), multicast scouting off, gossip on
//! (peers learn of each other through the nodes they connect to), explicit TCP listen and
//! connect endpoints. Blocking API only (`Wait`): the node's own threads stay plain threads.

use std::net::{SocketAddr, TcpListener};

use zenoh::pubsub::Publisher;
use zenoh::qos::CongestionControl;
use zenoh::{Session, Wait};

/// Zenoh's tokio runtimes, unless the environment already sets them: one worker each for
/// the application, transmit and receive pools, and the accept and network pools handed
/// over to the application's (zenoh's default is 6 workers). Five PNs share 2 cores here;
/// fewer threads per node means fewer context switches between them.
const RUNTIME: &str = "(app: (worker_threads: 1), tx: (worker_threads: 1), \
                       rx: (worker_threads: 1), acc: (handover: app), net: (handover: app))";
/// Attempts at listening: the port is picked free just before zenoh binds it, so another
/// process can take it in between (rare); a new port is then tried.
const LISTEN_ATTEMPTS: usize = 5;
/// Every put blocks rather than drops when a link is congested: losing an item or a
/// control message silently would break the exactly-once accounting.
pub const CONGESTION: CongestionControl = CongestionControl::Block;
/// How long a blocked put waits for a congested link before zenoh closes that link (and
/// drops what was queued on it). Zenoh's default, 5 s, is shorter than the stalls a
/// quarter-core PN on a busy 2-core machine can have: the client's link to such a PN was
/// closed, the items queued for it were gone, and when that PN later took a slice its ring
/// lacked them (2 items lost in a 10 MB/s point with no re-publication). A stalled PN now
/// holds the client back (its latency shows it) for up to this long; a dead one closes its
/// TCP connection at once and does not.
const BLOCK_CLOSE_US: u64 = 60_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Peer,
    Router,
}

/// An open session and the endpoint it listens on ("tcp/IP:PORT").
pub struct Opened {
    pub session: Session,
    pub endpoint: String,
}

/// Opens a session listening on `listen` ("IP:PORT"; port 0: a free one) and connecting to
/// `connect` (zenoh endpoints, "tcp/IP:PORT").
pub fn open(mode: Mode, listen: &str, connect: &[String]) -> Result<Opened, String> {
    if std::env::var_os("ZENOH_RUNTIME").is_none() {
        // Before zenoh's runtimes exist (they start with the first session), and before this
        // node starts threads of its own.
        std::env::set_var("ZENOH_RUNTIME", RUNTIME);
    }
    let mut last_error = String::new();
    for _ in 0..LISTEN_ATTEMPTS {
        let addr = pick(listen)?;
        let endpoint = format!("tcp/{addr}");
        let config = config(mode, &endpoint, connect)?;
        match zenoh::open(config).wait() {
            Ok(session) => return Ok(Opened { session, endpoint }),
            Err(e) => last_error = format!("opening the zenoh session on {endpoint}: {e}"),
        }
    }
    Err(last_error)
}

/// `listen` with its port 0 replaced by a free one (zenoh cannot report the port it bound
/// without its unstable API).
fn pick(listen: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = listen
        .parse()
        .map_err(|e| format!("listen {listen}: not IP:PORT ({e})"))?;
    if addr.port() != 0 {
        return Ok(addr);
    }
    let probe = TcpListener::bind(addr).map_err(|e| format!("listen {listen}: {e}"))?;
    probe.local_addr().map_err(|e| e.to_string())
}

fn config(mode: Mode, endpoint: &str, connect: &[String]) -> Result<zenoh::Config, String> {
    let mut c = zenoh::Config::default();
    let mut set = |key: &str, value: String| {
        c.insert_json5(key, &value)
            .map_err(|e| format!("zenoh config {key} = {value}: {e}"))
    };
    let mode_name = match mode {
        Mode::Peer => "peer",
        Mode::Router => "router",
    };
    set("mode", json(&mode_name))?;
    set("scouting/multicast/enabled", "false".into())?;
    set("scouting/gossip/enabled", "true".into())?;
    set("listen/endpoints", json(&vec![endpoint.to_string()]))?;
    set("connect/endpoints", json(&connect.to_vec()))?;
    set(
        "transport/link/tx/queue/congestion_control/block/wait_before_close",
        BLOCK_CLOSE_US.to_string(),
    )?;
    Ok(c)
}

/// A value as JSON5 text for `insert_json5`.
fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Publishes `bytes` on `key`, blocking on congestion; an error is a reason.
pub fn put(session: &Session, key: &str, bytes: Vec<u8>) -> Result<(), String> {
    session
        .put(key, bytes)
        .congestion_control(CONGESTION)
        .express(true)
        .wait()
        .map_err(|e| format!("publishing on {key}: {e}"))
}

/// A publisher for messages a later one replaces (heartbeats): they are dropped rather than
/// blocking on a congested link, so a PN's main loop never waits on a slow receiver (zenoh
/// sends to each subscriber in turn, so one stalled peer would hold up the sender).
/// Declared once, so zenoh checks the key and finds its route at the declaration instead of
/// on every put (a PN beats all run long, by default five times per failure timeout).
pub fn droppable_publisher(session: &Session, key: String) -> Result<Publisher<'static>, String> {
    session
        .declare_publisher(key.clone())
        .congestion_control(CongestionControl::Drop)
        .express(true)
        .wait()
        .map_err(|e| format!("declaring a publisher on {key}: {e}"))
}

/// Publishes `bytes` with `publisher`; an error is a reason.
pub fn put_on(publisher: &Publisher<'_>, bytes: Vec<u8>) -> Result<(), String> {
    publisher
        .put(bytes)
        .wait()
        .map_err(|e| format!("publishing on {}: {e}", publisher.key_expr()))
}

/// Every slices key lives under the run's prefix.
pub struct Keys {
    pub prefix: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Result<Keys, String> {
        let bad = prefix.is_empty()
            || prefix.starts_with('/')
            || prefix.ends_with('/')
            || prefix.contains(['*', '$', '?', '#'])
            || prefix.contains("//");
        if bad {
            return Err(format!(
                "prefix {prefix:?}: give a plain key like knee/slices/<uuid>"
            ));
        }
        Ok(Keys {
            prefix: prefix.to_string(),
        })
    }
    pub fn item(&self, slice: u32) -> String {
        format!("{}/items/{slice}", self.prefix)
    }
    pub fn items(&self) -> String {
        format!("{}/items/*", self.prefix)
    }
    pub fn replies(&self, sender: u32) -> String {
        format!("{}/replies/{sender}", self.prefix)
    }
    /// The ids a client was answered for (`codec::Acks`).
    pub fn acks(&self, sender: u32) -> String {
        format!("{}/acks/{sender}", self.prefix)
    }
    pub fn all_acks(&self) -> String {
        format!("{}/acks/*", self.prefix)
    }
    pub fn lb(&self) -> String {
        format!("{}/ctl/lb", self.prefix)
    }
    pub fn pn(&self, pn: u32) -> String {
        format!("{}/ctl/pn/{pn}", self.prefix)
    }
    pub fn handoff(&self, pn: u32) -> String {
        format!("{}/ctl/handoff/{pn}", self.prefix)
    }
    /// Items a giver forwards to a taker that missed them (whole item messages).
    pub fn fwd(&self, pn: u32) -> String {
        format!("{}/fwd/{pn}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sit_under_a_plain_prefix() {
        let k = Keys::new("knee/slices/ab12").unwrap();
        assert_eq!(k.item(7), "knee/slices/ab12/items/7");
        assert_eq!(k.handoff(2), "knee/slices/ab12/ctl/handoff/2");
        for bad in ["", "/a", "a/", "a/**", "a//b"] {
            assert!(Keys::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_zenoh_config_carries_knees_bounds_and_zenohs_documented_defaults() {
        let c = config(Mode::Peer, "tcp/127.0.0.1:7447", &["tcp/127.0.0.1:7448".into()]).unwrap();
        let get = |key: &str| c.get_json(key).unwrap();
        // Set by knee (docs/limits.md, "Zenoh endpoints").
        assert_eq!(
            get("transport/link/tx/queue/congestion_control/block/wait_before_close"),
            "60000000"
        );
        assert_eq!(get("scouting/multicast/enabled"), "false");
        assert_eq!(get("listen/endpoints"), r#"["tcp/127.0.0.1:7447"]"#);
        // Zenoh's own, as the table states them: a zenoh upgrade that moves one fails here.
        assert_eq!(get("transport/unicast/max_sessions"), "1000");
        assert_eq!(get("transport/unicast/max_links"), "1");
        assert_eq!(get("transport/unicast/accept_pending"), "100");
        assert_eq!(get("transport/unicast/accept_timeout"), "10000");
        assert_eq!(get("transport/unicast/open_timeout"), "10000");
        assert_eq!(get("transport/link/tx/lease"), "10000");
        assert_eq!(get("transport/link/tx/batch_size"), "65535");
        assert_eq!(get("transport/link/tx/queue/size/data"), "2");
        assert_eq!(
            get("transport/link/tx/queue/congestion_control/drop/wait_before_drop"),
            "1000"
        );
        assert_eq!(get("transport/link/rx/max_message_size"), "1073741824");
        assert_eq!(LISTEN_ATTEMPTS, 5);
    }

    #[test]
    fn a_free_port_is_picked_for_port_zero() {
        let a = pick("127.0.0.1:0").unwrap();
        assert!(a.port() != 0 && a.ip().is_loopback());
        assert_eq!(pick("127.0.0.1:7447").unwrap().port(), 7447);
        assert!(pick("localhost").is_err());
    }
}
