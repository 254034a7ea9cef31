//! A plain Zenoh request/reply ping-pong: the reference for the slices round trip at low
//! load (`bench/slices_goals.py`, goal 3). Two processes, each one Zenoh session set up as
//! `src/systems/slices/session.rs` sets up a node's: peer mode, multicast scouting off,
//! gossip on, an explicit `tcp/127.0.0.1` listen endpoint, the same one-worker runtimes,
//! every put `express` with `CongestionControl::Block`.
//!
//! ```text
//! zenoh_pingpong pong --prefix P [--reply-bytes 70]
//!     prints {"event":"ready","addr":"tcp/127.0.0.1:PORT"}; answers every message on
//!     P/ping with one of --reply-bytes on P/pong; ends at the end of its stdin.
//! zenoh_pingpong ping --prefix P --connect tcp/127.0.0.1:PORT --bytes N --rate-per-s R
//!     --count C [--reply-bytes 70] [--timeout-ms 1000]
//!     sends C messages of N bytes on a constant schedule, each when due, waits for its
//!     reply, and prints one `done` line with the round trips' percentiles, from the
//!     intended send time (as knee's RTD) and from the actual send.
//! ```
//! A message's first 8 bytes are its id (little-endian); the reply echoes them.

use std::collections::HashMap;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use zenoh::qos::CongestionControl;
use zenoh::{Session, Wait};

/// As `session.rs`: one worker each for app, tx and rx; acc and net handed over to app.
const RUNTIME: &str = "(app: (worker_threads: 1), tx: (worker_threads: 1), \
                       rx: (worker_threads: 1), acc: (handover: app), net: (handover: app))";
/// Replies waiting for the ping thread: one is in flight at a time, plus late warm-up
/// probes; a full channel blocks zenoh's receive thread rather than losing a reply.
const REPLY_INBOX: usize = 1024;
/// Warm-up: probes until the first reply shows the routes are up.
const PROBE_EVERY: Duration = Duration::from_millis(20);
const PROBE_FOR: Duration = Duration::from_secs(10);
/// Probe ids have the top bit set, so a late probe reply is never taken for a message's.
const PROBE_BIT: u64 = 1 << 63;
/// The most messages a run sends: the round trips are kept in memory to sort.
const MAX_COUNT: u64 = 10_000_000;
const ID_BYTES: usize = 8;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("pong") => Opts::parse(&args[1..]).and_then(|o| pong(&o)),
        Some("ping") => Opts::parse(&args[1..]).and_then(|o| ping(&o)),
        _ => Err("usage: zenoh_pingpong pong|ping --prefix P [options] (see the source)".into()),
    };
    if let Err(e) = result {
        eprintln!("zenoh_pingpong: {e}");
        std::process::exit(2);
    }
}

struct Opts {
    prefix: String,
    listen: String,
    connect: Vec<String>,
    bytes: usize,
    reply_bytes: usize,
    rate_per_s: f64,
    count: u64,
    timeout_ms: u64,
}

impl Opts {
    fn parse(args: &[String]) -> Result<Opts, String> {
        let mut o = Opts {
            prefix: String::new(),
            listen: "127.0.0.1:0".into(),
            connect: Vec::new(),
            bytes: 8148,
            reply_bytes: 70,
            rate_per_s: 100.0,
            count: 1000,
            timeout_ms: 1000,
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it.next().ok_or(format!("{flag} needs a value"))?;
            let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
            match flag.as_str() {
                "--prefix" => o.prefix = value.clone(),
                "--listen" => o.listen = value.clone(),
                "--connect" => o.connect.push(value.clone()),
                "--bytes" => o.bytes = value.parse().map_err(|e| bad(&e))?,
                "--reply-bytes" => o.reply_bytes = value.parse().map_err(|e| bad(&e))?,
                "--rate-per-s" => o.rate_per_s = value.parse().map_err(|e| bad(&e))?,
                "--count" => o.count = value.parse().map_err(|e| bad(&e))?,
                "--timeout-ms" => o.timeout_ms = value.parse().map_err(|e| bad(&e))?,
                _ => return Err(format!("unknown option {flag}")),
            }
        }
        if o.prefix.is_empty() || o.prefix.contains(['*', '$', '?', '#']) {
            return Err("--prefix: a plain key such as bench/pingpong/<uuid>".into());
        }
        if o.bytes < ID_BYTES || o.reply_bytes < ID_BYTES {
            return Err(format!("--bytes and --reply-bytes must be >= {ID_BYTES}"));
        }
        let rate_ok = o.rate_per_s > 0.0 && o.rate_per_s.is_finite();
        if !rate_ok || !(1..=MAX_COUNT).contains(&o.count) {
            return Err(format!("--rate-per-s must be > 0 and --count 1..={MAX_COUNT}"));
        }
        Ok(o)
    }
}

/// A peer session as a slices node opens it (`session.rs`), listening on `listen` (port 0:
/// a free one, picked just before zenoh binds it) and connecting to `connect`.
fn open(listen: &str, connect: &[String]) -> Result<(Session, String), String> {
    if std::env::var_os("ZENOH_RUNTIME").is_none() {
        std::env::set_var("ZENOH_RUNTIME", RUNTIME);
    }
    let mut addr: SocketAddr = listen.parse().map_err(|e| format!("--listen {listen}: {e}"))?;
    if addr.port() == 0 {
        let probe = TcpListener::bind(addr).map_err(|e| format!("--listen {listen}: {e}"))?;
        addr = probe.local_addr().map_err(|e| e.to_string())?;
    }
    let endpoint = format!("tcp/{addr}");
    let mut c = zenoh::Config::default();
    for (key, value) in [
        ("mode", json(&"peer")),
        ("scouting/multicast/enabled", "false".to_string()),
        ("scouting/gossip/enabled", "true".to_string()),
        ("listen/endpoints", json(&vec![endpoint.clone()])),
        ("connect/endpoints", json(&connect.to_vec())),
    ] {
        c.insert_json5(key, &value)
            .map_err(|e| format!("zenoh config {key} = {value}: {e}"))?;
    }
    let session = zenoh::open(c)
        .wait()
        .map_err(|e| format!("opening the zenoh session on {endpoint}: {e}"))?;
    Ok((session, endpoint))
}

/// A value as JSON5 text for `insert_json5`.
fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn put(session: &Session, key: &str, bytes: Vec<u8>) -> Result<(), String> {
    session
        .put(key, bytes)
        .congestion_control(CongestionControl::Block)
        .express(true)
        .wait()
        .map_err(|e| format!("publishing on {key}: {e}"))
}

fn message(id: u64, len: usize) -> Vec<u8> {
    let mut m = vec![0x5a; len];
    m[..ID_BYTES].copy_from_slice(&id.to_le_bytes());
    m
}

/// A message's id, if it has one (bytes from the network: never trusted to be long enough).
fn id_of(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(..ID_BYTES)?.try_into().ok()?))
}

fn pong(o: &Opts) -> Result<(), String> {
    let (session, endpoint) = open(&o.listen, &o.connect)?;
    let (ping_key, pong_key) = (format!("{}/ping", o.prefix), format!("{}/pong", o.prefix));
    let replied = Arc::new(AtomicU64::new(0));
    let (s, n, reply_bytes) = (session.clone(), replied.clone(), o.reply_bytes);
    // The plain way: the reply is published from zenoh's callback (as zenoh's z_pong does).
    let _sub = session
        .declare_subscriber(ping_key)
        .callback(move |sample| {
            let Some(id) = id_of(&sample.payload().to_bytes()) else {
                return;
            };
            match put(&s, &pong_key, message(id, reply_bytes)) {
                Ok(()) => n.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    eprintln!("pong: {e}");
                    0
                }
            };
        })
        .wait()
        .map_err(|e| format!("subscribing: {e}"))?;
    println!(
        "{}",
        serde_json::json!({"event": "ready", "addr": endpoint, "pid": std::process::id()})
    );
    // Runs until the parent closes stdin (or dies).
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    println!(
        "{}",
        serde_json::json!({"event": "done", "replied": replied.load(Ordering::Relaxed)})
    );
    let _ = session.close().wait();
    Ok(())
}

fn ping(o: &Opts) -> Result<(), String> {
    let (session, _) = open(&o.listen, &o.connect)?;
    let (ping_key, pong_key) = (format!("{}/ping", o.prefix), format!("{}/pong", o.prefix));
    let (tx, rx) = mpsc::sync_channel::<(u64, Instant)>(REPLY_INBOX);
    let _sub = session
        .declare_subscriber(pong_key)
        .callback(move |sample| {
            let at = Instant::now();
            if let Some(id) = id_of(&sample.payload().to_bytes()) {
                let _ = tx.send((id, at));
            }
        })
        .wait()
        .map_err(|e| format!("subscribing: {e}"))?;
    warm_up(&session, &ping_key, o, &rx)?;
    let period = Duration::from_secs_f64(1.0 / o.rate_per_s);
    let timeout = Duration::from_millis(o.timeout_ms);
    let mut from_intended_ns = Vec::with_capacity(o.count as usize);
    let mut from_sent_ns = Vec::with_capacity(o.count as usize);
    let mut stray = HashMap::new();
    let start = Instant::now();
    for id in 0..o.count {
        let intended = start + period.mul_f64(id as f64);
        if let Some(wait) = intended.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let sent = Instant::now();
        put(&session, &ping_key, message(id, o.bytes))?;
        // Its reply, or the timeout; a stray reply (a late one) is kept aside.
        let received = loop {
            if let Some(at) = stray.remove(&id) {
                break Some(at);
            }
            let left = timeout.checked_sub(sent.elapsed());
            match left.map(|l| rx.recv_timeout(l)) {
                Some(Ok((got, at))) if got == id => break Some(at),
                Some(Ok((got, at))) => {
                    if got & PROBE_BIT == 0 && got > id {
                        stray.insert(got, at);
                    }
                }
                _ => break None,
            }
        };
        if let Some(at) = received {
            from_intended_ns.push(at.duration_since(intended).as_nanos() as u64);
            from_sent_ns.push(at.duration_since(sent).as_nanos() as u64);
        }
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    from_intended_ns.sort_unstable();
    from_sent_ns.sort_unstable();
    let q = |v: &[u64], p: f64| {
        v.get(((v.len().max(1) - 1) as f64 * p) as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{}",
        serde_json::json!({
            "event": "done",
            "count": o.count,
            "ok": from_intended_ns.len(),
            "timeouts": o.count as usize - from_intended_ns.len(),
            "elapsed_s": elapsed_s,
            "bytes": o.bytes,
            "reply_bytes": o.reply_bytes,
            "rate_per_s": o.rate_per_s,
            "p50_ns": q(&from_intended_ns, 0.5),
            "p90_ns": q(&from_intended_ns, 0.9),
            "p99_ns": q(&from_intended_ns, 0.99),
            "p50_from_sent_ns": q(&from_sent_ns, 0.5),
            "p99_from_sent_ns": q(&from_sent_ns, 0.99),
        })
    );
    let _ = session.close().wait();
    Ok(())
}

/// Probes until a reply comes back: until then zenoh may not yet route `ping_key` to the
/// pong (the peers connect and declare their subscriptions asynchronously).
fn warm_up(
    session: &Session,
    ping_key: &str,
    o: &Opts,
    rx: &mpsc::Receiver<(u64, Instant)>,
) -> Result<(), String> {
    let start = Instant::now();
    let mut probe = PROBE_BIT;
    while start.elapsed() < PROBE_FOR {
        put(session, ping_key, message(probe, o.bytes))?;
        probe += 1;
        if rx.recv_timeout(PROBE_EVERY).is_ok() {
            // Late probe replies are told apart by PROBE_BIT; drain what is here now.
            while rx.try_recv().is_ok() {}
            return Ok(());
        }
    }
    Err(format!("no reply to a probe within {PROBE_FOR:?}"))
}
