"""Runs every point of an experiment with its nodes as local processes on 127.0.0.1.

For each point: start the server, wait until it is ready (it reports its ephemeral port),
start the load generator against it, sample CPU and the nodes' counters every interval,
stop everything, and add the point's statistics to summary.json. Nodes are stopped on every
path out: normal end, a node failing (named with its last stderr lines), Ctrl-C.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from knee import env, results, systems
from knee.monitor import Monitor
from knee.runner.display import Display
from knee.runner.node import Node, node_binary
from knee.spec import Point, Spec, dump_toml
from knee.stats import point_stats

#: How often CPU and node counters go into the time series.
SAMPLE_INTERVAL_S = 1.0
#: A server that does not report its address within this is reported as failed.
READY_TIMEOUT_S = 15.0
#: Slack beyond a point's own bounds before the runner calls the load generator stuck.
STUCK_MARGIN_S = 60.0


@dataclass
class RunState:
    run_dir: Path
    t0_ns: int
    events: list[dict[str, Any]] = field(default_factory=list)
    timeseries: list[dict[str, Any]] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)
    raws: list[results.RawFile] = field(default_factory=list)
    nodes: dict[str, Node] = field(default_factory=dict)

    def t_s(self) -> float:
        return (time.monotonic_ns() - self.t0_ns) / 1e9

    def event(self, kind: str, point: int | None, node: str = "", detail: str = "") -> None:
        self.events.append(
            {
                "t_s": self.t_s(),
                "point": -1 if point is None else point,
                "node": node,
                "kind": kind,
                "detail": detail,
            }
        )


def create_run_dir(root: Path, name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name)
    path = root / f"{safe}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = root / f"{safe}-{stamp}-{suffix}"
    (path / "raw").mkdir(parents=True)
    (path / "nodes").mkdir()
    return path


def run_experiment(spec: Spec, out_root: Path, display: Display) -> Path:
    """Runs every point; returns the run directory. Raises NodeFailed or KeyboardInterrupt
    after stopping every node and writing what was measured."""
    binary = node_binary()
    run_dir = create_run_dir(out_root, spec.experiment["name"])
    header = f"# resolved from {spec.path}" + (f", preset {spec.preset}" if spec.preset else "")
    (run_dir / "spec.toml").write_text(header + "\n" + dump_toml(spec.resolved))
    results.write_json(run_dir / "env.json", env.collect(binary))
    state = RunState(run_dir=run_dir, t0_ns=time.monotonic_ns())
    display.run_started(run_dir, len(spec.points))
    status = "failed"
    try:
        for point in spec.points:
            _run_point(spec, point, state, display)
        status = "complete"
    except KeyboardInterrupt:
        status = "interrupted"
        state.event("run_interrupted", None)
        raise
    except Exception as e:
        state.event("run_failed", None, detail=str(e).splitlines()[0])
        raise
    finally:
        _stop_all(state)
        display.run_finished()
        _write_outputs(spec, state, status)
    return run_dir


def _run_point(spec: Spec, point: Point, state: RunState, display: Display) -> None:
    system = spec.experiment["system"]
    exp = point.experiment
    tag = f"p{point.index:03d}"
    state.event("point_start", point.index, detail=point.label)
    server = _start(state, point, "server", "serve", system, systems.server_config(point.server))
    ready = server.wait_ready(READY_TIMEOUT_S)
    state.event("node_ready", point.index, "server", ready.get("addr", ""))
    raw = results.RawFile(
        point=point.index,
        series=point.series,
        node="load",
        samples=f"raw/{tag}-load.samples.bin",
        histogram=f"raw/{tag}-load.histogram.csv",
        run_start_ns=state.t0_ns,
        # Approximate until the load generator reports its start; rewritten below.
        warmup_end_ns=time.monotonic_ns() + int(point.load["warmup_s"] * 1e9),
        warmup_requests=point.load["warmup_requests"],
    )
    load_cfg = systems.load_config(
        point.load,
        point.driver,
        target=ready["addr"],
        seed=exp["seed"],
        warmup_s=point.load["warmup_s"],
        samples_path=str(state.run_dir / raw.samples),
        histogram_path=str(state.run_dir / raw.histogram),
    )
    load = _start(state, point, "load", "load", system, load_cfg)
    state.raws.append(raw)
    results.write_manifest(state.run_dir, state.raws)
    display.point_started(point, systems.expected_requests(point.load))
    start_ns = _drive(point, state, display, server, load)
    raw.warmup_end_ns = start_ns + int(point.load["warmup_s"] * 1e9)
    results.write_manifest(state.run_dir, state.raws)
    done = load.latest.get("done", {})
    for name in ("load", "server"):
        _stop(state, point.index, name)
    stats = point_stats(raw.frame(state.run_dir))
    stats.update(
        point=point.index,
        series=point.series,
        label=point.label,
        swept=point.swept,
        target_rate_per_s=systems.target_rate_per_s(point.load),
        late_sends=done.get("late"),
        sent=done.get("sent"),
        resources=_resources(
            state.timeseries, point.index, (raw.warmup_end_ns - state.t0_ns) / 1e9
        ),
    )
    state.points.append(stats)
    results.write_json(state.run_dir / results.SUMMARY, _summary(spec, state, "running"))
    state.event("point_end", point.index)
    display.point_finished(point, stats)


def _start(
    state: RunState, point: Point, name: str, role: str, system: str, config: dict[str, Any]
) -> Node:
    tag = f"p{point.index:03d}"
    node = Node(
        name,
        role,
        system,
        config,
        config_path=state.run_dir / "nodes" / f"{name}.{tag}.json",
        log_path=state.run_dir / "nodes" / f"{name}.stderr.log",
    )
    state.nodes[name] = node
    state.event("node_start", point.index, name, f"pid {node.pid}")
    return node


def _drive(point: Point, state: RunState, display: Display, server: Node, load: Node) -> int:
    """Follows the load generator until it ends; returns its start time (monotonic ns)."""
    monitor = Monitor()
    monitor.add("server", server.pid)
    monitor.add("load", load.pid)
    bound_s = point.load.get("duration_s")
    deadline = (
        time.monotonic() + bound_s + point.load["timeout_ms"] / 1e3 + STUCK_MARGIN_S
        if bound_s
        else None
    )
    next_sample = time.monotonic() + SAMPLE_INTERVAL_S
    while True:
        while not load.events.empty():
            ev = load.events.get_nowait()
            if ev.get("event") == "progress":
                display.progress(ev)
        if not server.alive():
            raise server.failure(f"exited with code {server.proc.returncode} during the point")
        if not load.alive():
            break
        now = time.monotonic()
        if deadline is not None and now > deadline:
            raise load.failure(f"did not finish within {bound_s + STUCK_MARGIN_S:g} s")
        if now >= next_sample:
            next_sample += SAMPLE_INTERVAL_S
            _sample(state, point.index, monitor)
        time.sleep(0.05)
    _sample(state, point.index, monitor)
    code = load.proc.wait()
    if code != 0:
        raise load.failure(f"exited with code {code}")
    start = load.latest.get("start")
    if start is None:
        raise load.failure("ended without reporting its start")
    return int(start["start_ns"])


def _sample(state: RunState, point: int, monitor: Monitor) -> None:
    t_s = state.t_s()
    for name, usage in monitor.sample().items():
        node = state.nodes.get(name)
        if node is None:
            continue
        counters = node.latest.get("stats") or node.latest.get("progress") or {}
        row: dict[str, Any] = {"t_s": t_s, "point": point, "node": name, "role": node.role}
        row.update(usage)
        for key in (
            "requests",
            "completed",
            "errors",
            "timeouts",
            "drops",
            "bytes_rx",
            "bytes_tx",
            "queue_len",
            "connections",
            "rate_per_s",
            "p99_ns",
            "late",
        ):
            if key in counters:
                row[key] = counters[key]
        state.timeseries.append(row)


def _resources(rows: list[dict[str, Any]], point: int, after_s: float) -> dict[str, Any]:
    """Mean CPU % and network bytes/s per node over the point's post-warm-up samples."""
    out: dict[str, Any] = {}
    mine = [r for r in rows if r["point"] == point and r["t_s"] >= after_s]
    for name in sorted({r["node"] for r in mine}):
        rs = [r for r in mine if r["node"] == name]
        cpu = [r["cpu_percent"] for r in rs]
        entry: dict[str, Any] = {"cpu_percent": sum(cpu) / len(cpu) if cpu else None}
        if len(rs) >= 2 and "bytes_tx" in rs[0] and "bytes_tx" in rs[-1]:
            dt = rs[-1]["t_s"] - rs[0]["t_s"]
            for key in ("bytes_rx", "bytes_tx"):
                entry[f"{key}_per_s"] = (rs[-1][key] - rs[0][key]) / dt if dt > 0 else None
        out[name] = entry
    return out


def _stop(state: RunState, point: int | None, name: str) -> None:
    node = state.nodes.pop(name, None)
    if node is not None:
        code = node.stop()
        state.event("node_stop", point, name, f"exit code {code}")


def _stop_all(state: RunState) -> None:
    for name in list(state.nodes):
        _stop(state, None, name)


def _summary(spec: Spec, state: RunState, status: str) -> dict[str, Any]:
    return {
        "experiment": spec.experiment["name"],
        "system": spec.experiment["system"],
        "preset": spec.preset,
        "status": status,
        "points": state.points,
    }


def _write_outputs(spec: Spec, state: RunState, status: str) -> None:
    results.write_table(state.run_dir / results.EVENTS, state.events)
    results.write_table(state.run_dir / results.TIMESERIES, state.timeseries)
    results.write_samples(state.run_dir, state.raws)
    results.write_json(state.run_dir / results.SUMMARY, _summary(spec, state, status))
