"""What each resource of one point was busy with: its utilization U and its demand D per
completed request, by the utilization law of operational analysis (Denning & Buzen 1978;
Lazowska et al., "Quantitative System Performance", ch. 3; docs/explain.md).

For a resource with capacity c (cores, workers, connections, bytes/s of a link):

    U = busy / c          busy: what it was doing on average over the point's window
    D = U / X             X: completions per second; D in seconds of the whole resource
    bound = 1 / D = X / U the highest X the resource allows (U = 1)

D is per completion, so resources of different kinds compare: the one with the largest D
reaches U = 1 first as the load rises. Where each busy time comes from:

- cpu: a node's CPU time (the runner's samples each interval), capacity its CPU quota or
  cpuset, else this machine's cores; a node with a worker pool of k threads uses at most k.
  A host with a CPU limit and several nodes is one resource too (`host:NAME`): its nodes
  share the limit.
- link: an emulated host's interface bytes each way, capacity its tbf rate.
- pool: a server's workers, busy X_ok x mean service time (its own split, Little's law).
- part: a system's named part that reports its own time (chat's database, `detail_ns`).
- connections: the generator's connections, each busy from its request's connect to its
  reply (http: one request at a time on each); also the share of time all were busy. Over
  HTTP/2, its streams instead: connections x the server's SETTINGS_MAX_CONCURRENT_STREAMS.
- machine: this machine's cores, shared by the run's processes (its nodes, the target's
  tree, the runner) when none has a CPU limit of its own: their CPU summed each interval
  (the host rows of knee.monitor), capacity the machine's cores. A target that takes the
  cores the generator needs shows here, beside the generator's run-queue delay
  (`cpu_wait_percent` of each node's CPU: time its threads waited for a core).

A node the runner has no CPU sample of in the window (it exited before the first one, or
its samples failed) is listed with `cpu_samples` 0, U and the bound unknown (None) and the
detail "no CPU samples": not idle.

The interval of U is the mean's t interval over the per-interval samples (cpu, link), or
the mean's interval of the sample times (pool, part); X's own error is left out (it is the
count over the whole window, a few % at most).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from knee.monitor import HOST_ROLE
from knee.stats.intervals import t_half_width
from knee.stats.summary import MACHINE, PointStats, Resource

#: The role of a host's link rows in timeseries.parquet.
LINK_ROLE = "link"
#: The runner's sampling interval, seconds (knee.runner.local.SAMPLE_INTERVAL_S).
ROW_S = 1.0
#: A pool busier than this many times its workers has workers that serve more than one
#: request at a time (threads): its size is unknown.
OVERFULL = 1.05
#: Fewer per-interval samples than this give no interval for U.
MIN_INTERVALS = 3
#: Foreign CPU (cores) the machine's label mentions: the interference check's threshold.
FOREIGN_NOTED = 0.1
#: The fewest cores counted as left to the run (a guard against dividing by nothing).
MIN_CORES_LEFT = 0.01


@dataclass
class NodeInfo:
    """What the runner knows of a node that the resources need."""

    role: str  # "serve", "load", or "target" (the service knee http measures)
    label: str  # the system's name for it: "the central index", "PN 2"
    cpu_cores: float | None  # its CPU limit (quota or cpuset), None: the machine's cores
    pool: int | None = None  # its worker pool's size, when the system or listener knows it
    generator: bool = False  # part of the load generator
    host: str = ""  # the host it runs on


@dataclass
class Inputs:
    point: int
    after_s: float  # the end of the warm-up, in run seconds
    rows: list[dict[str, Any]]  # timeseries rows of the run so far
    stats: PointStats  # the point's statistics (knee.stats.point)
    nodes: dict[str, NodeInfo]
    link_bytes_per_s: dict[str, float] = field(default_factory=dict)  # host -> tbf rate
    frame: pd.DataFrame | None = None  # the point's samples, for the connections
    connections: int | None = None  # the generator's connections (one request each)
    slots: str = "connections"  # what they are: "streams" over HTTP/2 (connections x limit)
    timeout_ms: float | None = None
    part: tuple[str, str, float | None] | None = None  # (name, label, capacity) of detail_ns
    host_cores: dict[str, float] = field(default_factory=dict)  # host -> its CPU limit


def machine_cores() -> float:
    return float(os.cpu_count() or 1)


def cpu_percent_between(before: tuple[float, float] | None, now: tuple[float, float]) -> float:
    """A process's CPU % (100 = one core) between two readings of (monotonic s, its
    cumulative CPU s), e.g. a remote node's host's `usage` lines; 0 without an earlier one."""
    if before is None or now[0] <= before[0]:
        return 0.0
    return 100.0 * (now[1] - before[1]) / (now[0] - before[0])


def _mean_ci(values: np.ndarray) -> tuple[float, list[float] | None]:
    mean = float(values.mean())
    n = len(values)
    if n < MIN_INTERVALS:
        return mean, None
    half = t_half_width(values)
    return mean, [max(0.0, mean - half), mean + half]


def entry(
    kind: str,
    label: str,
    busy: float | None,
    busy_ci: list[float] | None,
    capacity: float | None,
    unit: str,
    x_per_s: float,
    **extra: Any,
) -> Resource:
    """One resource's U, D and bound (module docstring), from its mean busy amount (in
    units of its capacity: cores, workers, bytes/s) and the point's completions."""
    out: dict[str, Any] = {"kind": kind, "label": label, "busy": busy, "capacity": capacity}
    out["capacity_unit"] = unit
    u = busy / capacity if capacity and busy is not None else None
    u_ci = [b / capacity for b in busy_ci] if capacity and busy_ci else None
    out["u"], out["u_ci"] = u, u_ci
    out["d_ns"] = u / x_per_s * 1e9 if u is not None and x_per_s > 0 else None
    out["bound_per_s"] = x_per_s / u if u else None
    out["bound_ci_per_s"] = (
        [x_per_s / u_ci[1] if u_ci[1] > 0 else None, x_per_s / u_ci[0] if u_ci[0] > 0 else None]
        if u_ci and x_per_s > 0
        else None
    )
    return cast(Resource, out | extra)


def point_resources(inp: Inputs) -> dict[str, Resource]:
    """summary.json's `resources` of one point: per node its CPU (and the bytes its own
    counters saw), per emulated link its bytes each way, the pools, parts and connections
    the run can see; each with U, D and the bound where its capacity is known."""
    x = float(inp.stats.get("completion_rate_per_s") or 0.0)
    # The samples inside the window the point's rates were measured over (from the end of
    # its warm-up, as long as its schedule ran): not its drain and stop. A row at t covers
    # the interval before t, so the row just after the window's end still belongs to it.
    end_s = (
        inp.after_s + float(inp.stats.get("window_s") or 0.0) + ROW_S
        if inp.stats.get("window_s")
        else float("inf")
    )
    mine = [
        r
        for r in inp.rows
        if r["point"] == inp.point
        and inp.after_s <= r["t_s"] <= end_s
        and r.get("role") != HOST_ROLE
    ]
    out: dict[str, Resource] = {}
    for name in sorted({r["node"] for r in mine}):
        rs = [r for r in mine if r["node"] == name]
        if rs[0].get("role") == LINK_ROLE:
            host = name.removeprefix("link:")
            out[name] = _link(rs, inp.link_bytes_per_s.get(host), x, host)
        else:
            role = str(rs[0].get("role") or "")
            default = NodeInfo(role, name, rs[0].get("cpu_quota_cores"), generator=role == "load")
            out[name] = _cpu(rs, inp.nodes.get(name, default), x)
    for name, node in inp.nodes.items():  # a node with no row in the window at all
        if name not in out:
            out[name] = _cpu([], node, x)
    out |= _hosts(mine, inp, x)
    if (machine := _machine(inp, end_s, x)) is not None:
        out[MACHINE] = machine
    for name, node in inp.nodes.items():
        if node.pool and name in out:
            if (pool := _pool(inp.stats, node, x, out[name])) is not None:
                out[f"pool:{name}"] = pool
    if inp.part is not None:
        if (part := _part(inp.stats, inp.part, x)) is not None:
            out[f"part:{inp.part[0]}"] = part
    if inp.connections and inp.frame is not None and len(inp.frame):
        out["connections"] = _connections(inp, x)
    return out


def _cpu(rows: list[dict[str, Any]], node: NodeInfo, x: float) -> Resource:
    values = np.array([r["cpu_percent"] for r in rows if r.get("cpu_percent") is not None])
    cores = node.cpu_cores or machine_cores()
    if node.pool:  # a pool of k threads runs on at most k cores
        cores = min(cores, float(node.pool))
    what = f"{node.label}'s CPU"
    if not len(values):  # not idle: unknown (it ended before a sample, or none was read)
        out = entry("cpu", what, None, None, cores, "cores", x, role=node.role)
        out |= {"generator": node.generator, "cpu_percent": None, "cpu_samples": 0}
        out["detail"] = "no CPU samples"
        return out
    busy, busy_ci = _mean_ci(values / 100.0)
    out = entry("cpu", what, busy, busy_ci, cores, "cores", x, role=node.role)
    out["generator"] = node.generator
    out["cpu_percent"] = busy * 100.0
    out["cpu_samples"] = len(values)
    waits = [r.get("cpu_wait_percent") for r in rows]
    # Its threads' time runnable without a core (None: unknown, e.g. a remote node).
    known = np.array([w for w in waits if w is not None], dtype=np.float64)
    out["cpu_wait_percent"] = (
        float(known.mean()) if len(known) and len(known) == len(waits) else None
    )
    if node.cpu_cores:
        out["cpu_percent_of_quota"] = busy * 100.0 / node.cpu_cores
    if len(rows) >= 2 and "bytes_tx" in rows[0] and "bytes_tx" in rows[-1]:
        dt = rows[-1]["t_s"] - rows[0]["t_s"]

        def per_s(key: str) -> float | None:
            return (rows[-1][key] - rows[0][key]) / dt if dt > 0 else None

        out["bytes_rx_per_s"], out["bytes_tx_per_s"] = per_s("bytes_rx"), per_s("bytes_tx")
    return out


def _hosts(rows: list[dict[str, Any]], inp: Inputs, x: float) -> dict[str, Resource]:
    """The CPU of each host with a limit and more than one node: its nodes share one cgroup
    (docs/hosts.md), so the host, not each node against the whole limit, is what runs out.
    Its busy cores each second are its nodes' summed."""
    out: dict[str, Resource] = {}
    for host, cores in inp.host_cores.items():
        names = sorted(n for n, info in inp.nodes.items() if info.host == host)
        mine = [r for r in rows if r["node"] in names and r.get("cpu_percent") is not None]
        if len({r["node"] for r in mine}) < 2:
            continue
        # Only the seconds with a row of every node: a node that ended (a client done) has
        # none for its last one, which would count as the host idle.
        table = pd.DataFrame(mine).pivot_table(index="t_s", columns="node", values="cpu_percent")
        per_row = table.dropna().sum(axis=1).to_numpy() / 100.0
        if not len(per_row):
            continue
        busy, busy_ci = _mean_ci(per_row)
        parts = ", ".join(inp.nodes[n].label for n in names if n in {r["node"] for r in mine})
        label = f"host {host}'s CPU ({parts})"
        out[f"host:{host}"] = entry("cpu", label, busy, busy_ci, cores, "cores", x, role="host")
    return out


def _machine(inp: Inputs, end_s: float, x: float) -> Resource | None:
    """This machine's cores as one resource of the run's processes (nodes, the target's
    tree, the runner), when every node runs here without a CPU limit: they share the cores.
    Busy is their CPU summed each interval (the host rows' nodes + runner), against the
    machine's cores; `host_cpu_percent` and `foreign_cpu_percent` are everything's and the
    other processes' (docs/statistics.md, Interference)."""
    if not inp.nodes or inp.host_cores:
        return None
    if any(n.cpu_cores or n.host not in ("", "local") for n in inp.nodes.values()):
        return None
    rows = [
        r
        for r in inp.rows
        if r["point"] == inp.point
        and inp.after_s <= r["t_s"] <= end_s
        and r.get("role") == HOST_ROLE
        and r.get("nodes_cpu_percent") is not None
    ]
    if not rows:
        return None
    run = np.array([r["nodes_cpu_percent"] + (r.get("runner_cpu_percent") or 0.0) for r in rows])
    foreign = np.array([r.get("foreign_cpu_percent") or 0.0 for r in rows])
    busy, busy_ci = _mean_ci(run / 100.0)
    cores = machine_cores()
    # What other processes left of the cores is what the run could use (never below what
    # it did use: host and process ticks are counted apart).
    left = max(cores - float(foreign.mean()) / 100.0, busy, MIN_CORES_LEFT)
    label = f"this machine's {cores:g} cores, shared by the run's processes"
    out = entry("cpu", label, busy, busy_ci, left, "cores", x, role=MACHINE)
    out["machine_cores"] = cores
    out["left_by_others"] = left < cores - FOREIGN_NOTED  # capacity: the cores left
    out["cpu_percent"] = busy * 100.0

    def mean_of(column: str) -> float | None:
        values = [r[column] for r in rows if r.get(column) is not None]
        return float(np.mean(values)) if values else None

    out["host_cpu_percent"] = mean_of("cpu_percent")
    out["foreign_cpu_percent"] = mean_of("foreign_cpu_percent")
    return out


def _link(rows: list[dict[str, Any]], rate: float | None, x: float, host: str) -> Resource:
    """The busier direction of a host's link: bytes/s each way from its counters."""
    t = np.array([r["t_s"] for r in rows])
    per_s: dict[str, np.ndarray] = {}
    for key in ("bytes_rx", "bytes_tx"):
        c = np.array([r.get(key, 0) for r in rows], dtype=float)
        per_s[key] = np.diff(c) / np.diff(t) if len(rows) >= 2 else np.zeros(0)
    means = {k: float(v.mean()) if len(v) else 0.0 for k, v in per_s.items()}
    way = max(means, key=lambda k: means[k])
    busy, busy_ci = _mean_ci(per_s[way]) if len(per_s[way]) else (0.0, None)
    label = f"the link of host {host}, " + ("sending" if way == "bytes_tx" else "receiving")
    out = entry("link", label, busy, busy_ci, rate, "bytes/s", x, role=LINK_ROLE)
    out["bytes_rx_per_s"], out["bytes_tx_per_s"] = means["bytes_rx"], means["bytes_tx"]
    out["direction"] = "out" if way == "bytes_tx" else "in"
    return out


def _pool(stats: PointStats, node: NodeInfo, x: float, cpu: Resource) -> Resource | None:
    """Workers busy = X_ok x the mean service time (Little's law over the pool)."""
    service = stats.get("service_ns")
    x_ok = float(stats.get("throughput_per_s") or 0.0)
    if not service or not service["n"] or not service["mean"]:  # 0: no reply said (http)
        return None
    busy = x_ok * service["mean"] / 1e9
    ci = service["ci"].get("mean")
    busy_ci = [x_ok * v / 1e9 for v in ci if v is not None] if ci and None not in ci else None
    k = node.pool or 1
    label = f"{node.label}'s {k} worker{'s' if k != 1 else ''}"
    # More busy than there are workers: each serves several requests at once (threads), so
    # the pool's true size is not known and its U is not given.
    size = float(k) if busy <= k * OVERFULL else None
    out = entry("pool", label, busy, busy_ci, size, "workers", x, role=node.role)
    # The share of the workers' busy time spent on CPU: near 1, the pool is busy computing
    # and the CPU is what runs out; near 0, the workers wait (sleep, I/O, a lock).
    cpu_busy = cpu.get("busy")
    out["on_cpu"] = cpu_busy / busy if busy > 0 and cpu_busy is not None else None
    return out


def _part(stats: PointStats, part: tuple[str, str, float | None], x: float) -> Resource | None:
    """A system's named part that reports its own time per request (`detail_ns`)."""
    _, label, capacity = part
    detail = stats.get("detail_ns")
    x_ok = float(stats.get("throughput_per_s") or 0.0)
    if not detail or not detail["n"] or not detail["mean"]:
        return None
    busy = x_ok * detail["mean"] / 1e9
    ci = detail["ci"].get("mean")
    busy_ci = [x_ok * v / 1e9 for v in ci if v is not None] if ci and None not in ci else None
    if capacity != 1:
        return entry("part", label, busy, busy_ci, capacity, "servers", x, role="part")
    # One at a time (a lock): each request's time starts before it holds the lock, so the
    # sum counts the waits too. Over 1, the lock was contended the whole window: U is 1
    # (saturated); the demand of the lock itself is read where nobody waits, at low load
    # (knee.resources.bottleneck.by_demand).
    out = entry("part", label, min(busy, 1.0), None, 1.0, "lock", x, role="part")
    out |= {"includes_waiting": True, "contended": busy > OVERFULL, "busy_with_waits": busy}
    return out


def _connections(inp: Inputs, x: float) -> Resource:
    """The generator's connections: each held from its request's connect to its reply (or
    its deadline); U = the mean number held / connections; `all_busy_share` = the share of
    the window in which every one was held (a due request then waits for one)."""
    f, n = inp.frame, int(inp.connections or 0)
    assert f is not None
    sent = f["sent_ns"].to_numpy(np.int64)
    went = sent > 0
    start = sent[went] - f["queue_ns"].to_numpy(np.int64)[went]  # http: queue_ns = connect
    got = f["received_ns"].to_numpy(np.int64)[went]
    timeout_ns = int((inp.timeout_ms or 0) * 1e6)
    end = np.where(got > 0, got, sent[went] + timeout_ns)
    lo = int(inp.after_s * 1e9)
    hi = lo + int(float(inp.stats.get("window_s") or 0.0) * 1e9)
    if hi <= lo:
        hi = int(np.max(end)) if len(end) else lo
    start, end = np.clip(start, lo, hi), np.clip(end, lo, hi)
    window_ns = max(hi - lo, 1)
    busy = float((end - start).sum()) / window_ns
    # The number held over time: +1 at each start, -1 at each end, in time order.
    times = np.concatenate([start, end])
    steps = np.concatenate([np.ones(len(start)), -np.ones(len(end))])
    order = np.lexsort((steps, times))  # an end before a start at the same instant
    times, level = times[order], np.cumsum(steps[order])
    spans = np.diff(times, append=hi)
    all_busy = float(spans[level >= n].sum()) / window_ns
    out = entry("connections", f"the generator's {n} {inp.slots}", busy, None, n, inp.slots, x)
    out |= {"role": "load", "generator": True, "all_busy_share": all_busy}
    return out
