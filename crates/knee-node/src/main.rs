//! knee-node: role dispatch only.
//!
//! ```text
//! knee-node --version
//! knee-node serve <system> [--name NAME] [--config JSON|@FILE]
//! knee-node load  <system> [--name NAME]  --config JSON|@FILE
//! knee-node gemm-rate [N] [REPS]      GFLOP/s of the matrix product, for bench/
//! knee-node grpc-check --config JSON   a grpc driver's call built as the node would (one
//!                                     JSON line), or its mistake in one line
//! knee-node describe                  the contract with knee, as JSON (systems: ops, flags,
//!                                     columns, config keys; load keys; statuses; events)
//! knee-node clock                     CLOCK_MONOTONIC ns for each line on stdin (clock offset
//!                                     of an ssh host)
//! knee-node clock --dial ADDR         the same, from the node answering on TCP ADDR (a swarm
//!                                     host's, KNEE_NODE_CLOCK_LISTEN), each line relayed
//! knee-node relay --dial ADDR         stdin to TCP ADDR, ADDR to stdout (a swarm host's node
//!                                     protocol: KNEE_NODE_CONTROL_LISTEN, src/control.rs)
//! ```
//! Configs are JSON (`docs/node-protocol.md`); a node prints JSON lines on stdout.

use std::process::ExitCode;

use knee_node::serve::ServeOptions;
use knee_node::systems::matrix::power;
use knee_node::{clock, signals, stdio, systems};

const USAGE: &str = "usage: knee-node --version
       knee-node serve <system> [--name NAME] [--config JSON|@FILE]
       knee-node load <system> [--name NAME] --config JSON|@FILE
       knee-node gemm-rate [N] [REPS]
       knee-node grpc-check --config JSON|@FILE
       knee-node describe
       knee-node clock [--dial ADDR]
       knee-node relay --dial ADDR";

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
                .ok_or_else(|| format!("{role}: which system? ({})", systems::names().join(", ")))?;
            let (name, mut config) = options(&args[2..])?;
            stdio::set_node_name(name.as_deref().unwrap_or(role));
            // The clock's port first: the agent checks it once the config is given.
            knee_node::clock_probe::listen_from_env();
            if let Some(given) = knee_node::control::take_control()? {
                config = given;
            }
            signals::install();
            let done = if role == "serve" {
                serve_role(system, &config)
            } else {
                load_role(system, &config)
            };
            knee_node::control::push_new(); // what the files gained since the last push
            done
        }
        Some("gemm-rate") => gemm_rate(args.get(1), args.get(2)),
        Some("grpc-check") => {
            let (_, config) = options(&args[1..])?;
            println!("{}", systems::grpc::check(&config)?);
            Ok(())
        }
        Some("describe") => {
            println!("{}", knee_node::describe::describe());
            Ok(())
        }
        Some("clock") => match (args.get(1).map(String::as_str), args.get(2)) {
            (None, _) => knee_node::clock_probe::run(std::io::stdin().lock(), std::io::stdout().lock()),
            (Some("--dial"), Some(addr)) => {
                knee_node::clock_probe::dial(addr, std::io::stdin().lock(), std::io::stdout().lock())
            }
            _ => Err(USAGE.into()),
        },
        Some("relay") => match (args.get(1).map(String::as_str), args.get(2)) {
            (Some("--dial"), Some(addr)) => knee_node::control::relay(addr),
            _ => Err(USAGE.into()),
        },
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

/// Each role refuses a config outside its contract (`knee-node describe`) before it parses
/// it: the contract checks every bound once; a role checks only what the contract cannot say
/// (and the bounds of the keys it marks `checked`, with its own message).
fn serve_role(system: &str, config: &serde_json::Value) -> Result<(), String> {
    knee_node::describe::check("serve", system, config)?;
    let opts: ServeOptions =
        serde_json::from_value(config.clone()).map_err(|e| format!("serve config: {e}"))?;
    systems::serve(system, &opts)
}

fn load_role(system: &str, config: &serde_json::Value) -> Result<(), String> {
    knee_node::describe::check("load", system, config)?;
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
