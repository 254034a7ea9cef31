//! knee-node: role dispatch only.
//!
//! ```text
//! knee-node --version
//! knee-node serve <system> [--name NAME] [--config JSON|@FILE]
//! knee-node load  <system> [--name NAME]  --config JSON|@FILE
//! knee-node gemm-rate [N] [REPS]      GFLOP/s of the matrix product, for bench/
//! knee-node describe                  the contract with knee, as JSON (systems, statuses,
//!                                     the sample record's size)
//! ```
//! Configs are JSON (`docs/node-protocol.md`); a node prints JSON lines on stdout.

use std::net::TcpListener;
use std::process::ExitCode;

use knee_node::load::recorder::{Status, SAMPLE_BYTES};
use knee_node::serve::{self, ServeConfig};
use knee_node::systems::matrix::power;
use knee_node::{clock, signals, stdio, systems, wire};
use serde::Deserialize;

const USAGE: &str = "usage: knee-node --version
       knee-node serve <system> [--name NAME] [--config JSON|@FILE]
       knee-node load <system> [--name NAME] --config JSON|@FILE
       knee-node gemm-rate [N] [REPS]
       knee-node describe";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            stdio::log(&format!("error: {e}"));
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("--version" | "-V") => {
            println!("knee-node {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Some(role @ ("serve" | "load")) => {
            let system = args
                .get(1)
                .ok_or_else(|| format!("{role}: which system? ({})", systems::NAMES.join(", ")))?;
            let (name, config) = options(&args[2..])?;
            stdio::set_node_name(name.as_deref().unwrap_or(role));
            signals::install();
            if role == "serve" {
                serve_role(system, &config)
            } else {
                load_role(system, &config)
            }
        }
        Some("gemm-rate") => gemm_rate(args.get(1), args.get(2)),
        Some("describe") => {
            println!(
                "{}",
                serde_json::json!({
                    "systems": systems::NAMES,
                    "statuses": Status::NAMES,
                    "sample_bytes": SAMPLE_BYTES,
                })
            );
            Ok(())
        }
        _ => Err(USAGE.into()),
    }
}

/// `--name` and `--config` (inline JSON or `@path`).
fn options(rest: &[String]) -> Result<(Option<String>, serde_json::Value), String> {
    let (mut name, mut config) = (None, serde_json::json!({}));
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--name" => name = Some(value.clone()),
            "--config" => {
                let text = match value.strip_prefix('@') {
                    Some(path) => {
                        std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?
                    }
                    None => value.clone(),
                };
                config = serde_json::from_str(&text).map_err(|e| format!("--config: {e}"))?;
            }
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    Ok((name, config))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServeOptions {
    /// Loopback by default: a node listens elsewhere only when asked to.
    #[serde(default = "knee_node::config_defaults::listen")]
    listen: String,
    #[serde(default = "knee_node::config_defaults::max_frame_bytes")]
    max_frame_bytes: usize,
    #[serde(default = "knee_node::config_defaults::max_connections")]
    max_connections: usize,
    #[serde(default)]
    server: serde_json::Value,
}

fn serve_role(system: &str, config: &serde_json::Value) -> Result<(), String> {
    if system == "share" {
        return systems::share::serve(config); // peers stream files: their own server loop
    }
    if system == "stream" {
        return systems::stream::serve(config); // UDP block services, not the framed-TCP server
    }
    let opts: ServeOptions =
        serde_json::from_value(config.clone()).map_err(|e| format!("serve config: {e}"))?;
    let parts = systems::server(system, &opts.server)?;
    let listener =
        TcpListener::bind(&opts.listen).map_err(|e| format!("listening on {}: {e}", opts.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    // Before `ready`: accepted sockets inherit it, and the kernel is stamping by then.
    wire::arrival::enable_rx_timestamps(&listener);
    stdio::emit(&serde_json::json!({
        "event": "ready", "addr": addr.to_string(), "pid": std::process::id(), "t_ns": clock::now_ns(),
    }));
    let cfg = ServeConfig {
        threads: parts.threads,
        max_queue: parts.max_queue,
        max_frame_bytes: opts.max_frame_bytes,
        max_connections: opts.max_connections,
    };
    // The accept loop blocks; SIGTERM's flag is polled by this watcher, which exits cleanly.
    std::thread::spawn(|| loop {
        std::thread::sleep(std::time::Duration::from_millis(50));
        if signals::stop_requested() {
            std::process::exit(0);
        }
    });
    serve::run(listener, parts.service, cfg).map_err(|e| e.to_string())
}

fn load_role(system: &str, config: &serde_json::Value) -> Result<(), String> {
    systems::client(system, config)?.run_in_harness()
}

fn gemm_rate(n: Option<&String>, reps: Option<&String>) -> Result<(), String> {
    let n: usize = n.map_or(Ok(50), |s| s.parse()).map_err(|e| format!("N: {e}"))?;
    let reps: usize = reps
        .map_or(Ok(20_000), |s| s.parse())
        .map_err(|e| format!("REPS: {e}"))?;
    let m = systems::matrix::driver::stochastic_matrix(n, &mut knee_node::rng::Rng::new(1));
    let start = clock::now_ns();
    let r = power::power(n, &m, reps as u32 + 1, power::Algorithm::Naive);
    let secs = (clock::now_ns() - start) as f64 / 1e9;
    let gflops = 2.0 * (n * n * n) as f64 * reps as f64 / secs / 1e9;
    println!("{{\"n\": {n}, \"products\": {reps}, \"seconds\": {secs:.6}, \"gflop_per_s\": {gflops:.3}, \"checksum\": {:.6}}}", r.iter().sum::<f64>());
    Ok(())
}
