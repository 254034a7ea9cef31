#!/usr/bin/env python3
"""The slices system's performance goals (issue 13, item 9), each as a ratio beside its target.

1. Balancing time: one join = from the LB's first move start to the last slice's done (the
   LB's `handoff` lines of that join). Low load (100 items/s, 3 KB images): one PN, then a
   second, third and fourth join; rounds alternate 10 / 100 / 1,000 slices; medians, the
   ratio's bootstrap interval, and the joins compared by how many PNs gave. Target: 1,000
   slices under 1.2 x the 10-slice time (both measured here). The 10-slice time beside
   the issue's 50 ms is information only: a fixed figure is no baseline. The same at about
   80 % of one PN's measured capacity (information).
2. LB overhead on throughput: replies/s at saturation, 2 PNs on each side, each PN capped
   by a cgroup CPU quota (pn-i of both sides on core i), the side with the LB (`balance`)
   and the static one (no LB traffic) running at the same time, swapping places every
   round, with the failure detector of experiments/slices-overhead.toml (a 2 s timeout,
   heartbeats every 400 ms). The ratio and its 95 % interval (a crossover fit: the place's
   own effect leaves both) in the steady window, past the PNs' ring age; the rings' fill
   apart. Target: under 0.5 % lost, decided only when the interval is on one side of 0.995.
   `--only control` runs the same with the static pipeline on both sides (A/A): its
   interval must hold 1.
3. p50 RTD at 100 items/s (1 PN, work_repeat 1, the LB present) against a plain Zenoh
   request/reply ping-pong (`crates/knee-node/examples/zenoh_pingpong.rs`) with the same
   message sizes and rate, alternating. Target: knee / ping-pong <= 2.

Every node is a real `knee-node serve|load slices` ($KNEE_NODE, else PATH, else the
repository's release build) on 127.0.0.1, stopped by its PID, configured as `knee run`
configures it: each round's sections are read and checked by `knee.spec` and its nodes
planned by `knee.systems.slices` (the bench adds only what a spec does not set: addresses,
file paths, a PN's hello delay, a client's sender). Exits 0 even when a target is missed
(this is a measurement), 1 when something broke.

    python3 bench/slices_goals.py [--quick | --smoke] [--only GOAL ...]

`--smoke` (seconds): goal 1 at low load only, one round of 10 and 100 slices with one join
each; it runs every step and prints the table and its summary line, its figures unjudged.

GOAL: balancing, overhead, rtd or control; `--only` repeats (`--only balancing --only rtd`).
`--overhead-rounds N` sets goal 2's rounds (16 in the full plan).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import benchlib
import numpy as np
from benchlib import BENCH_DIR, BenchError, Row, Section, find_knee_node, json_lines, median
from scipy import stats

sys.path.insert(0, str(BENCH_DIR.parent / "python"))  # this tree's knee, not an installed one

from knee.hosts.base import HostError, Limits  # noqa: E402
from knee.hosts.cgroups import Cgroup, RunCgroups, wrap  # noqa: E402
from knee.results import read_sample_records  # noqa: E402
from knee.spec import load_spec  # noqa: E402
from knee.systems.base import NodePlan, plan_nodes  # noqa: E402
from knee.systems.slices import DEFAULT_IMAGE_BYTES, SYSTEM, heartbeat_ms  # noqa: E402
from knee.toml_writer import dump_toml  # noqa: E402

REPO = BENCH_DIR.parent
READY_TIMEOUT_S = 10.0
# A join whose handoff lines do not all arrive within this has stalled (a move never
# completes: the slices system has no retry), reported as such, not timed.
JOIN_TIMEOUT_S = 15.0
# Before each join, the load settles on the current split (queues at their steady level).
JOIN_GAP_S = 0.5
# How long stopped nodes get to exit before SIGKILL: a PN's planned leave waits at most
# 2 s for the LB, and a client's grace is 1 s.
STOP_GRACE_S = 2.5
POLL_S = 0.02


# A PN that hears no items says hello after this (its default, 30 s, protects a taker's
# ring; the overhead rounds start their PNs before the client and wait for the split). Not
# a spec parameter: the bench sets it on the planned PNs.
HELLO_AFTER_MS = 1000
# 52 x 52 RGB, the system's default and the report's item size (~8 KB).
ITEM_IMAGE_BYTES = DEFAULT_IMAGE_BYTES
ITEM_HEADER_BYTES = 36
REPLY_BYTES = 68 + 2  # reply header + "OK"
# Goal 1's small images (32 x 32 RGB): the join is timed, not the work.
SMALL_IMAGE_BYTES = 3072
# The figure for a 10-slice join: printed beside the time, as information only.
BALANCE_INFO_10_MS = 50.0
BALANCE_GROWTH_TARGET = 1.2
# Resamples of the bootstrap interval of a ratio of medians.
BOOTSTRAP_RESAMPLES = 4000
OVERHEAD_TARGET = 0.005
RTD_TARGET = 2.0
STATUS_OK = 0


@dataclass(frozen=True)
class Plan:
    balance_rounds: int  # per slice count, counts alternating
    balance_slices: tuple[int, ...]
    joins: int  # PNs joining after the first, per round
    loaded_rounds: int
    loaded_slices: tuple[int, ...]
    overhead_rounds: int  # both sides at once, the LB side first and second in turn
    overhead_duration_s: float
    rtd_rounds: int  # per side
    rtd_items: int


FULL = Plan(6, (10, 100, 1000), 3, 2, (10, 1000), 16, 16.0, 3, 1500)
QUICK = Plan(1, (10, 100, 1000), 3, 1, (10, 1000), 4, 9.0, 2, 300)
# Seconds: one low-load round of 10 and 100 slices, one join each; nothing loaded.
SMOKE = Plan(1, (10, 100), 1, 0, (), 4, 9.0, 2, 300)
SMOKE_GOALS = ("balancing",)

LOW_RATE_PER_S = 100.0
# Goal 1 under load: the offered rate as a share of one PN's measured capacity.
LOADED_WORK_REPEAT = 1000
LOADED_FRACTION = 0.8
# Goal 2: 2 one-thread PNs, each item ~ 1,500 grayscales of 8 KB (a few ms of CPU), offered
# this much above the capacity of both from the fastest service time measured: the work is
# the same for every item, only preemption by the neighbours makes one slower, so a busy
# moment during the calibration does not leave the PNs unsaturated.
OVERHEAD_PNS = 2
OVERHEAD_SLICES = 10
OVERHEAD_WORK_REPEAT = 1500
OVERHEAD_OVERLOAD = 1.5
# The detector of the report's overhead experiment (experiments/slices-overhead.toml): the
# LB waits 2 s before it calls a quarter-core PN crashed, and the PNs beat every 400 ms
# (the spec's default, a fifth of that), not every 100 ms as at the 0.5 s default.
OVERHEAD_FAILURE_TIMEOUT_MS = int(
    tomllib.loads((REPO / "experiments/slices-overhead.toml").read_text())["server"][
        "failure_timeout_ms"
    ]
)
# Each PN's CPU quota (a cgroup; pn-i of both sides on core i): 4 x 0.25 leaves the
# clients, the LB and zenoh a core, so that the quotas, not the neighbours, set the
# throughput.
OVERHEAD_PN_CORES = 0.25
OVERHEAD_SERVICE_QUANTILE = 0.0
# A PN keeps the items it does not own for its ring's age (the PN's default, 5 s). Until
# then its ring grows, each item copied into memory touched for the first time (page
# faults: about 3 us an 8 KB item here); after, into a buffer an expired item left.
RING_AGE_S = 5.0
# The steady window (the goal): from past the ring's age to the end of sending.
OVERHEAD_WARM_S = RING_AGE_S + 1.0
# The ring's fill (information): from when the queues are built and the routes up, to
# the ring's age.
OVERHEAD_FILL_FROM_S = 1.5
# The control (A/A) run's sides start on a settled mesh, as long after their PNs as the
# LB's side waits for its split.
CONTROL_SETTLE_S = 1.5
# A client's patience with an item (its timeout before a re-publication).
CLIENT_TIMEOUT_MS = 5000.0
# Goal 2's clients wait as long as an item takes: they measure what the PNs serve.
OVERHEAD_CLIENT_TIMEOUT_MS = 60_000.0
# Goal 3: samples intended in the client's first 0.5 s are left out (routes settling).
RTD_WARM_S = 0.5


# --- nodes -----------------------------------------------------------------------------


class Stalled(BenchError):
    """A wait timed out while every node was still running."""


class Node:
    """One knee-node (or ping-pong) process, its stdout and stderr in files, ended by PID."""

    def __init__(self, cmd: list[str], work: Path, name: str, stdin_pipe: bool = False) -> None:
        self.name = name
        self.out_path = work / f"{name}.out"
        self.err_path = work / f"{name}.err"
        with self.out_path.open("w") as out, self.err_path.open("w") as err:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=err, stdin=subprocess.PIPE if stdin_pipe else None
            )

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in json_lines(self.out_path.read_text()) if e.get("event") == kind]

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(f"{self.name} exited {self.proc.returncode}: {self.stderr_tail()}")

    def stderr_tail(self) -> str:
        return " | ".join(self.err_path.read_text().strip().splitlines()[-5:])

    def wait_ready(self) -> str:
        wait_for(lambda: bool(self.events("ready")), READY_TIMEOUT_S, f"{self.name} ready", [self])
        return str(self.events("ready")[0]["addr"])


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str, nodes: list[Node]) -> None:
    """Polls `cond` until true; broken if `timeout_s` passes or one of `nodes` exits."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        for n in nodes:
            n.check_alive()
        if time.monotonic() > deadline:
            raise Stalled(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(POLL_S)


def stop_all(nodes: list[Node]) -> None:
    """SIGTERM to every node still running at once, then SIGKILL to what is left after
    STOP_GRACE_S (a PN draining a saturated queue would take longer than the data needs)."""
    running = [n for n in nodes if n.proc.poll() is None]
    for n in running:
        if n.proc.stdin is not None:
            n.proc.stdin.close()  # the ping-pong's pong ends at the end of its stdin
        n.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for n in running:
        try:
            n.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            n.proc.kill()
            n.proc.wait(timeout=5)


@dataclass
class Planned:
    """One point's planned nodes by name, and the addresses of those started."""

    plans: dict[str, NodePlan]
    addrs: dict[str, str] = field(default_factory=dict)


_ADDR = re.compile(r"\{addr:([A-Za-z0-9_-]+)\}")


def node_config(plan: NodePlan, addrs: dict[str, str]) -> dict[str, Any]:
    """A copy of a planned node's config with every "{addr:NAME}" replaced by NAME's
    address, as the runner does (a node is started after those it connects to)."""

    def sub(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [sub(v) for v in value]
        if isinstance(value, str):
            return _ADDR.sub(lambda m: addrs[m.group(1)], value)
        return value

    return sub(plan.config)


def constant_load(rate_per_s: float, duration_s: float, timeout_ms: float) -> dict[str, Any]:
    """A spec's [load] of a constant rate for `duration_s`, every item counted (no
    warm-up: the bench picks its own windows)."""
    return {
        "schedule": "constant",
        "rate_per_s": rate_per_s,
        "duration_s": duration_s,
        "requests": int(rate_per_s * duration_s) + 1,
        "timeout_ms": timeout_ms,
        "warmup_s": 0.0,
    }


@dataclass
class Bench:
    """The binary, a scratch directory, and every node started (so all get stopped)."""

    knee: Path
    work: Path
    nodes: list[Node] = field(default_factory=list)
    seq: int = 0

    def _name(self, base: str) -> str:
        self.seq += 1
        return f"{self.seq:03d}-{base}"

    def plan(
        self,
        server: dict[str, Any],
        driver: dict[str, Any],
        load: dict[str, Any],
        seed: int = 1,
    ) -> Planned:
        """One point's nodes as `knee run` plans them: these spec sections read, defaulted
        and checked by `knee.spec`, the nodes drawn by `knee.systems.slices` (a key space
        of its own: nothing of an earlier round reaches this one)."""
        self.seq += 1
        path = self.work / f"{self.seq:03d}-spec.toml"
        experiment = {"name": "slices-bench", "system": "slices", "seed": seed}
        doc = {"experiment": experiment, "server": server, "driver": driver, "load": load}
        path.write_text(dump_toml(doc))
        (point,) = load_spec(path).points
        return Planned({p.name: p for p in plan_nodes(SYSTEM, point)})

    def start(self, planned: Planned, name: str, cgroup: Cgroup | None = None) -> Node:
        """Starts one planned server node (the LB or a PN) and waits until it is ready."""
        plan = planned.plans[name]
        config = node_config(plan, planned.addrs)
        config["listen"] = "127.0.0.1:0"
        server = config["server"]
        if server.get("role") == "pn":
            server["hello_after_ms"] = HELLO_AFTER_MS
        for key, file_name in plan.outputs.items():  # the PN's log ("server.log_path")
            table, _, last = key.rpartition(".")
            config[table][last] = str(self.work / f"{self.seq:03d}-{file_name}")
        cmd = [str(self.knee), plan.role, "slices", "--name", name, "--config", json.dumps(config)]
        if cgroup is not None:
            cmd = wrap(cmd, [cgroup])  # the node joins it before it runs: its pid stays
        node = Node(cmd, self.work, self._name(name))
        self.nodes.append(node)
        planned.addrs[name] = node.wait_ready()
        return node

    def start_client(self, planned: Planned, sender: int | None = None) -> tuple[Node, Path]:
        """Starts the planned client in the background: its samples file. `sender`: the
        client's sender id (and seed) instead of the plan's, for another client of the
        same nodes (a PN takes each sender's ids once)."""
        plan = planned.plans["client"]
        config = node_config(plan, planned.addrs)
        if sender is not None:
            config["driver"]["sender"] = sender
            config["seed"] = sender
        name = self._name("client")
        samples = self.work / f"{name}.samples.bin"
        config["samples_path"] = str(samples)
        config["histogram_path"] = str(self.work / f"{name}.histogram.csv")
        cmd = [
            str(self.knee),
            plan.role,
            "slices",
            "--name",
            "client",
            "--config",
            json.dumps(config),
        ]
        node = Node(cmd, self.work, name)
        self.nodes.append(node)
        return node, samples

    def stop(self) -> None:
        stop_all(self.nodes)
        self.nodes.clear()


def finish_client(client: Node, stop: bool, run_s: float = 0.0) -> dict[str, Any]:
    """The client's `done` line, after a SIGTERM if `stop`, else once its run of `run_s`
    ends by itself; broken on bad replies."""
    if stop and client.proc.poll() is None:
        client.proc.send_signal(signal.SIGTERM)
    try:
        client.proc.wait(timeout=run_s + STOP_GRACE_S + 5)
    except subprocess.TimeoutExpired as e:
        raise BenchError("the slices client did not end") from e
    if client.proc.returncode != 0:
        raise BenchError(f"client exited {client.proc.returncode}: {client.stderr_tail()}")
    done = client.events("done")
    if not done:
        raise BenchError("the slices client printed no done line")
    d = done[-1]
    if d.get("bad_checksums") or d.get("bad_replies") or d.get("errors"):
        raise BenchError(f"the slices client saw bad replies: {d}")
    return d


def lb_owns_all(lb: Node) -> bool:
    """The LB's last stats line shows every slice owned and settled (epoch >= 1)."""
    stats = lb.events("stats")
    return bool(stats) and all(o is not None and e >= 1 for o, e in stats[-1]["table"])


# --- 1. balancing time -----------------------------------------------------------------


@dataclass
class Join:
    slices: int
    pn: int
    moved: int
    balancing_ns: int | None  # None: stalled (not every slice's handoff line came)
    givers: int = 0  # PNs that gave slices


def joins_of(lb: Node, pn: int) -> list[dict[str, Any]]:
    return [h for h in lb.events("handoff") if h["to"] == pn and h["reason"] == "join"]


def balance_round(
    b: Bench, slices: int, joins: int, rate_per_s: float, work_repeat: int
) -> list[Join]:
    """LB + pn-0 under a steady load, then pn-1 .. pn-`joins` join one after the other."""
    server = {"slices": slices, "pns": joins + 1, "pns_at_start": 1, "threads": 1,
              "work_repeat": work_repeat}  # fmt: skip
    driver = {"image_bytes": SMALL_IMAGE_BYTES, "retries": 2}
    planned = b.plan(server, driver, constant_load(rate_per_s, 60.0, CLIENT_TIMEOUT_MS))
    try:
        lb = b.start(planned, "lb")
        pn0 = b.start(planned, "pn-0")
        client, _ = b.start_client(planned)
        live = [lb, pn0, client]
        wait_for(lambda: lb_owns_all(lb), 10.0, f"pn-0 owning {slices} slices", live)
        out = []
        for pn in range(1, joins + 1):
            time.sleep(JOIN_GAP_S)
            live.append(b.start(planned, f"pn-{pn}"))
            share = slices // (pn + 1)  # the LB's fair share for the newcomer
            try:
                wait_for(
                    lambda pn=pn, share=share: len(joins_of(lb, pn)) >= share,
                    JOIN_TIMEOUT_S,
                    f"pn-{pn} taking {share} of {slices} slices",
                    live,
                )
            except Stalled as e:
                kept = keep_logs(b, live)
                print(f"stalled: {e}; {len(joins_of(lb, pn))} moves done; logs in {kept}")
                out.append(Join(slices, pn, len(joins_of(lb, pn)), None))
                break  # the stuck slices stay stuck: later joins would not be comparable
            moves = joins_of(lb, pn)
            t0 = min(h["t_ns_start"] for h in moves)
            t1 = max(h["t_ns_done"] for h in moves)
            givers = len({h["from"] for h in moves})
            out.append(Join(slices, pn, len(moves), t1 - t0, givers))
        finish_client(client, stop=True)
        return out
    finally:
        b.stop()


def keep_logs(b: Bench, nodes: list[Node]) -> Path:
    """Copies the nodes' stdout and stderr out of the scratch directory, for a diagnosis."""
    kept = Path(tempfile.mkdtemp(prefix="knee-slices-stall-"))
    for n in nodes:
        for path in (n.out_path, n.err_path):
            shutil.copy(path, kept / path.name)
    return kept


def service_ns(b: Bench, image_bytes: int, work_repeat: int, quantile: float = 0.5) -> float:
    """A quantile of one item's service time on one one-thread PN, at a light 50 items/s
    (the neighbours' load stretches it: a low quantile is nearer the PN's own speed)."""
    rate, length_s = 50.0, 1.5
    # One PN of the baseline (no LB): it owns every slice from the start.
    server = {"slices": 10, "pns": 1, "balance": False, "threads": 1, "work_repeat": work_repeat}
    driver = {"image_bytes": image_bytes, "retries": 2}
    planned = b.plan(server, driver, constant_load(rate, length_s, CLIENT_TIMEOUT_MS))
    try:
        b.start(planned, "pn-0")
        client, samples = b.start_client(planned)
        finish_client(client, stop=False, run_s=length_s)
    finally:
        b.stop()
    s = read_sample_records(samples)
    s = s[s["status"] == STATUS_OK]
    if len(s) < 10:
        raise BenchError(f"calibration: only {len(s)} items answered")
    return float(np.quantile(s["service_ns"], quantile))


def ratio_interval(num: list[int], den: list[int]) -> tuple[float, float]:
    """A 95 % bootstrap interval (percentile) of median(num) / median(den), each sample
    resampled on its own: how far the ratio of a few joins' medians can be trusted."""

    def ratio(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        return np.median(x, axis=axis) / np.median(y, axis=axis)

    res = stats.bootstrap(
        (np.asarray(num, float), np.asarray(den, float)),
        ratio,
        vectorized=True,
        paired=False,
        n_resamples=BOOTSTRAP_RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(13),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def bench_balancing(b: Bench, plan: Plan) -> Section:
    low: dict[int, list[int]] = {s: [] for s in plan.balance_slices}
    # Low-load joins by (slices, PNs that gave): a join moves a fair share from every PN
    # above it, so the third join takes from three PNs at 100 and 1,000 slices but from
    # two at 10 (floor(10 / 4) = 2 slices); compared by giver count, the slice count alone
    # differs.
    by_givers: dict[tuple[int, int], list[int]] = {}
    stalled = {"low": 0, "loaded": 0}

    def record(times: dict[int, list[int]], tag: str, joins: list[Join]) -> None:
        for j in joins:
            if j.balancing_ns is None:
                stalled[tag] += 1
            else:
                times[j.slices].append(j.balancing_ns)
                if tag == "low":
                    by_givers.setdefault((j.slices, j.givers), []).append(j.balancing_ns)

    for _ in range(plan.balance_rounds):
        for s in plan.balance_slices:
            record(low, "low", balance_round(b, s, plan.joins, LOW_RATE_PER_S, 1))
    # Under load (not in a smoke run): a share of one PN's capacity, measured here.
    cal_ns = service_ns(b, SMALL_IMAGE_BYTES, LOADED_WORK_REPEAT) if plan.loaded_rounds else 0.0
    loaded_rate = LOADED_FRACTION * 1e9 / cal_ns if cal_ns else 0.0
    loaded: dict[int, list[int]] = {s: [] for s in plan.loaded_slices}
    for _ in range(plan.loaded_rounds):
        for s in plan.loaded_slices:
            joins = balance_round(b, s, plan.joins, loaded_rate, LOADED_WORK_REPEAT)
            record(loaded, "loaded", joins)
    if any(not v for v in (*low.values(), *loaded.values())):
        raise BenchError(f"balancing: a slice count with no completed join ({stalled})")
    rows: list[Row] = []
    metrics: dict[str, float] = {}

    def ms(v: float) -> str:
        return f"{v / 1e6:.2f} ms"

    def spread(v: list[int]) -> str:
        return f"({min(v) / 1e6:.2f}-{max(v) / 1e6:.2f}, n={len(v)})"

    def add(label: str, tag: str, times: dict[int, list[int]], info: bool) -> None:
        lo, hi = min(times), max(times)
        t_lo = median(times[lo])
        # Beside the fixed figure, as information: the goal is the growth below,
        # a ratio of two times measured here.
        ratio_lo = t_lo / (BALANCE_INFO_10_MS * 1e6)
        rows.append(
            Row(
                f"1. balancing, {lo} slices, {label}",
                ms(t_lo),
                spread(times[lo]),
                ratio_lo,
                f"(info: / {BALANCE_INFO_10_MS:.0f} ms)",
                None,
            )
        )
        for s in sorted(times)[1:]:
            t = median(times[s])
            growth = t / t_lo
            is_goal = s == hi and not info
            rows.append(
                Row(
                    f"   {s} slices / {lo} slices",
                    ms(t),
                    spread(times[s]),
                    growth,
                    f"<= {BALANCE_GROWTH_TARGET}" if is_goal else "(info)",
                    growth <= BALANCE_GROWTH_TARGET if is_goal else None,
                )
            )
            metrics[f"balancing_{tag}_{s}_over_{lo}"] = growth
            metrics[f"balancing_{tag}_{s}_ms"] = t / 1e6
            if is_goal and min(len(times[s]), len(times[lo])) > 1:
                ci_lo, ci_hi = ratio_interval(times[s], times[lo])
                below = "yes" if ci_hi <= BALANCE_GROWTH_TARGET else "no: more joins needed"
                rows.append(
                    Row(
                        "   its 95% interval (bootstrap); all below the target",
                        f"{ci_lo:.3f}-{ci_hi:.3f}",
                        below,
                        None,
                        "",
                        None,
                    )
                )
                metrics[f"balancing_{tag}_{s}_over_{lo}_ci_low"] = ci_lo
                metrics[f"balancing_{tag}_{s}_over_{lo}_ci_high"] = ci_hi
        metrics[f"balancing_{tag}_{lo}_ms"] = t_lo / 1e6
        metrics[f"balancing_{tag}_{lo}_over_{BALANCE_INFO_10_MS:.0f}ms_info"] = ratio_lo

    add(f"{LOW_RATE_PER_S:.0f}/s", "low", low, info=False)
    lo, hi = min(low), max(low)
    for g in sorted({g for (_, g) in by_givers}):
        a, b = by_givers.get((hi, g)), by_givers.get((lo, g))
        if a and b:
            rows.append(
                Row(
                    f"   joins from {g} PN(s): {hi} / {lo} slices",
                    ms(median(a)),
                    f"{ms(median(b))} (n={len(a)}/{len(b)})",
                    median(a) / median(b),
                    "(info)",
                    None,
                )
            )
            metrics[f"balancing_low_{hi}_over_{lo}_givers_{g}"] = median(a) / median(b)
        else:
            have = hi if a else lo
            n = len(a or b or [])
            rows.append(
                Row(f"   joins from {g} PN(s): only at {have} slices", ms(median(a or b)),
                    f"(n={n})", None, "(info)", None)
            )  # fmt: skip
    if loaded:
        add(f"{loaded_rate:.0f}/s (~{LOADED_FRACTION:.0%} of 1 PN)", "loaded", loaded, info=True)
    n_stalled = stalled["low"] + stalled["loaded"]
    rows.append(
        Row(
            f"   stalled joins (moves never done in {JOIN_TIMEOUT_S:.0f} s), low/loaded",
            f"{stalled['low']}/{stalled['loaded']}",
            "",
            None,
            "0",
            n_stalled == 0,
        )
    )
    metrics["stalled_joins"] = n_stalled
    if loaded:
        rows.append(
            Row(
                f"   loaded: work_repeat {LOADED_WORK_REPEAT}, 1 PN's service",
                f"{cal_ns / 1e6:.2f} ms",
                "",
                None,
                "",
                None,
            )
        )
        metrics["loaded_rate_per_s"] = loaded_rate
    return Section(rows, metrics)


# --- 2. LB overhead on throughput ------------------------------------------------------


# The PN's item workers' thread name (pn/workers.rs): the CPU they get is the CPU items get.
WORKER_THREAD = "pn-worker"


def thread_cpu_ns(nodes: list[Node]) -> dict[tuple[int, int], tuple[bool, int]]:
    """Per thread (pid, tid) of running processes: whether it is an item worker, and its CPU
    time so far in ns (/proc/PID/task/TID/schedstat; a thread gone meanwhile is skipped)."""
    out = {}
    for n in nodes:
        for task in Path(f"/proc/{n.proc.pid}/task").iterdir():
            try:
                worker = (task / "comm").read_text().strip() == WORKER_THREAD
                ran_ns = int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            out[(n.proc.pid, int(task.name))] = (worker, ran_ns)
    return out


def work_share(
    before: dict[tuple[int, int], tuple[bool, int]],
    after: dict[tuple[int, int], tuple[bool, int]],
) -> tuple[float, float]:
    """Between two `thread_cpu_ns` snapshots: the share of the CPU that went to the item
    workers, and the CPU of every other thread (zenoh's, the main loop's) in ns."""
    worker_ns = other_ns = 0
    for key, (worker, ran_ns) in after.items():
        spent = ran_ns - before.get(key, (worker, 0))[1]
        if worker:
            worker_ns += spent
        else:
            other_ns += spent
    return worker_ns / max(1, worker_ns + other_ns), float(other_ns)


def cpu_ns(nodes: list[Node]) -> int:
    """User + system CPU of running processes so far (/proc/PID/stat, every thread)."""
    total_ticks = 0
    for n in nodes:
        stat = Path(f"/proc/{n.proc.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        total_ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total_ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


SIDES = ("lb", "static")
# The two sides' places: the first is started first, with its own cgroups. A control run
# with the same pipeline in both gave the first place 0.8 % more throughput (0.63 to 0.90),
# so the sides swap places every round.
PLACES = ("first", "second")


def pn_cgroups(run: RunCgroups) -> tuple[dict[str, list[Cgroup]] | None, str]:
    """A cgroup per overhead PN of each place: a CPU quota of OVERHEAD_PN_CORES, pn-i of
    both places on core i, so that a saturated PN's throughput is its quota over its CPU
    per item, whatever the clients, the LB and the machine's other processes use of the
    rest. None (and why) where cgroups cannot be set (not root, no cpu or cpuset
    controller)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < OVERHEAD_PNS:
        return None, f"{len(cores)} core(s): a core per PN needs {OVERHEAD_PNS}"
    try:
        made = {
            place: [
                run.make(
                    (place, f"pn-{i}"), Limits(cpu_cores=OVERHEAD_PN_CORES, cpuset=str(cores[i]))
                )
                for i in range(OVERHEAD_PNS)
            ]
            for place in PLACES
        }
    except (HostError, OSError) as e:
        return None, str(e)
    return made, f"{OVERHEAD_PN_CORES} core each, pn-i of both sides on core i"


@dataclass
class Side:
    """One side's pipeline: with the LB (`balance`) or with static slices and no LB."""

    balance: bool
    planned: Planned
    servers: list[Node]
    lb: Node | None = None
    client: Node | None = None
    samples: Path | None = None
    cpu_ns: int = 0
    # The PNs' threads in the steady window: the share of their CPU the item workers got,
    # and the CPU of the others (ns).
    work_share: float = 0.0
    other_ns: float = 0.0


def start_side(
    b: Bench, balance: bool, cgroups: list[Cgroup] | None, rate_per_s: float, duration_s: float
) -> Side:
    """The LB and PNs (the PNs say hello after 1 s without items), or the static PNs (the
    baseline's assignment, by knee.systems.slices); its client is planned, not started."""
    server = {"slices": OVERHEAD_SLICES, "pns": OVERHEAD_PNS, "pns_at_start": OVERHEAD_PNS,
              "balance": balance, "threads": 1, "work_repeat": OVERHEAD_WORK_REPEAT,
              "failure_timeout_ms": OVERHEAD_FAILURE_TIMEOUT_MS}  # fmt: skip
    driver = {"image_bytes": ITEM_IMAGE_BYTES, "retries": 0}
    # Every item waits as long as it takes: the client measures what the PNs serve.
    load = constant_load(rate_per_s, duration_s, OVERHEAD_CLIENT_TIMEOUT_MS)
    side = Side(balance, b.plan(server, driver, load), [])
    cg = cgroups or [None] * OVERHEAD_PNS
    if balance:
        side.lb = b.start(side.planned, "lb")
        side.servers.append(side.lb)
    for i in range(OVERHEAD_PNS):
        side.servers.append(b.start(side.planned, f"pn-{i}", cg[i]))
    return side


def overhead_round(
    b: Bench,
    rate_per_s: float,
    duration_s: float,
    cgroups: dict[str, list[Cgroup]] | None,
    lb_first: bool,
    control: bool = False,
) -> dict[str, tuple[float, float, float, float, float]]:
    """Both sides at once, under the same load on the same cores, the LB's side in the
    first place or the second: per side, replies/s at its client in the steady window
    (OVERHEAD_WARM_S to the end of sending) and in the ring's fill, the CPU its LB and
    PNs spent per reply in the steady window (ns), and in that window the share of its
    PNs' CPU their item workers got and their other threads' CPU (ns/s). `control`: the
    LB's side is the static pipeline too (an A/A run: the method's own error)."""
    order = SIDES if lb_first else SIDES[::-1]
    sides: dict[str, Side] = {}
    try:
        for name, place in zip(order, PLACES, strict=True):
            balance = name == "lb" and not control
            cg = cgroups[place] if cgroups else None
            sides[name] = start_side(b, balance, cg, rate_per_s, duration_s)
        lb = sides["lb"].lb
        servers = [n for side in sides.values() for n in side.servers]
        if lb is None:
            time.sleep(CONTROL_SETTLE_S)
        else:
            wait_for(
                lambda: len(lb.events("handoff")) >= OVERHEAD_SLICES // OVERHEAD_PNS,
                JOIN_TIMEOUT_S,
                "the LB sharing the slices",
                servers,
            )
        for name in order:
            side = sides[name]
            side.client, side.samples = b.start_client(side.planned)
        clients = [s.client for s in sides.values() if s.client is not None]
        wait_for(
            lambda: all(c.events("start") for c in clients), READY_TIMEOUT_S, "clients", clients
        )
        time.sleep(OVERHEAD_WARM_S)
        threads = {}
        for name, side in sides.items():
            side.cpu_ns = -cpu_ns(side.servers)
            threads[name] = thread_cpu_ns(pns_of(side))
        time.sleep(duration_s - OVERHEAD_WARM_S)
        for name, side in sides.items():
            side.cpu_ns += cpu_ns(side.servers)
            side.work_share, side.other_ns = work_share(threads[name], thread_cpu_ns(pns_of(side)))
        for c in clients:
            finish_client(c, stop=True)
    finally:
        b.stop()
    out = {}
    for name, side in sides.items():
        assert side.client is not None and side.samples is not None
        start_ns = int(side.client.events("start")[0]["start_ns"])
        s = read_sample_records(side.samples)
        t = s["received_ns"][s["status"] == STATUS_OK].astype(np.int64) - start_ns
        steady = replies_between(t, OVERHEAD_WARM_S, duration_s)
        fill = replies_between(t, OVERHEAD_FILL_FROM_S, RING_AGE_S)
        if steady == 0 or fill == 0:
            raise BenchError(f"overhead: no reply in a window ({name})")
        window_s = duration_s - OVERHEAD_WARM_S
        out[name] = (
            steady / window_s,
            fill / (RING_AGE_S - OVERHEAD_FILL_FROM_S),
            side.cpu_ns / steady,
            side.work_share,
            side.other_ns / window_s,
        )
    return out


def pns_of(side: Side) -> list[Node]:
    return [n for n in side.servers if n is not side.lb]


def replies_between(t_ns: np.ndarray, lo_s: float, hi_s: float) -> int:
    return int(np.count_nonzero((t_ns >= int(lo_s * 1e9)) & (t_ns < int(hi_s * 1e9))))


def overhead_ratio(
    with_lb: list[float], without: list[float], lb_first: list[bool]
) -> tuple[float, float, float]:
    """The ratio with / without the LB and its 95 % interval, from rounds that ran both
    sides at once with the LB's side first or second in turn (a crossover): the log of each
    round's ratio is fitted as the LB's effect plus or minus the place's, so the place's
    effect (about 0.8 % here) leaves neither the ratio nor its interval."""
    logs = np.log(np.asarray(with_lb) / np.asarray(without))
    place = np.where(lb_first, 1.0, -1.0)
    fit = stats.linregress(place, logs)
    dof = len(logs) - 2
    half = float(stats.t.ppf(0.975, dof) * fit.intercept_stderr) if dof > 0 else np.inf
    a = float(fit.intercept)
    return float(np.exp(a)), float(np.exp(a - half)), float(np.exp(a + half))


def bench_overhead(b: Bench, plan: Plan, control: bool = False) -> Section:
    run = RunCgroups(f"b{uuid.uuid4().hex[:7]}")  # a run id: 8 letters or digits
    try:
        cgroups, limits = pn_cgroups(run)
        return overhead_rounds(b, plan, cgroups, limits, control)
    finally:
        problems = run.remove()
        if problems:
            print(f"overhead: cgroups left: {problems}", file=sys.stderr)


def interval_verdict(ci_lo: float, ci_hi: float) -> tuple[bool | None, str]:
    """PASS when even the interval's low end loses under 0.5 %, MISS when its high end
    loses more, undecided when it straddles 0.995."""
    floor = 1.0 - OVERHEAD_TARGET
    if ci_lo >= floor:
        return True, "yes: the interval is above 0.995"
    if ci_hi < floor:
        return False, "yes: the interval is below 0.995"
    return None, "NO: the interval straddles 0.995 (more rounds, or a quieter machine)"


def overhead_rounds(
    b: Bench,
    plan: Plan,
    cgroups: dict[str, list[Cgroup]] | None,
    limits: str,
    control: bool,
) -> Section:
    cal_ns = service_ns(b, ITEM_IMAGE_BYTES, OVERHEAD_WORK_REPEAT, OVERHEAD_SERVICE_QUANTILE)
    # Each side's PNs get their quota (without cgroups: half a core each, four PNs on two).
    cores_each = OVERHEAD_PN_CORES if cgroups else 0.5
    rate = OVERHEAD_OVERLOAD * OVERHEAD_PNS * cores_each * 1e9 / cal_ns
    keys = ("steady", "fill", "cpu", "work_share", "other")
    got: dict[str, dict[str, list[float]]] = {name: {k: [] for k in keys} for name in SIDES}
    lb_first = [i % 2 == 0 for i in range(plan.overhead_rounds)]
    for i, first in enumerate(lb_first):
        one = overhead_round(b, rate, plan.overhead_duration_s, cgroups, first, control)
        print(
            f"  overhead round {i + 1}/{len(lb_first)} (LB's side {PLACES[0 if first else 1]}):"
            f" {one['lb'][0]:.1f}/s with, {one['static'][0]:.1f}/s without",
            file=sys.stderr,
            flush=True,
        )
        for name in SIDES:
            for key, value in zip(keys, one[name], strict=True):
                got[name][key].append(value)
    with_lb, without = got["lb"]["steady"], got["static"]["steady"]
    ratio, ci_lo, ci_hi = overhead_ratio(with_lb, without, lb_first)
    fill, fill_lo, fill_hi = overhead_ratio(got["lb"]["fill"], got["static"]["fill"], lb_first)
    cpu_with, cpu_without = median(got["lb"]["cpu"]), median(got["static"]["cpu"])
    share, share_lo, share_hi = overhead_ratio(
        got["lb"]["work_share"], got["static"]["work_share"], lb_first
    )
    other_with, other_without = median(got["lb"]["other"]), median(got["static"]["other"])
    noise = max((max(v) - min(v)) / median(v) for v in (with_lb, without))
    saturated = max(without) < 0.95 * rate
    n = len(with_lb)

    def span(v: list[float]) -> str:
        return f"{min(v):.1f}-{max(v):.1f}/s"

    if control:
        # The same static pipeline in both places: the ratio's interval must hold 1.
        holds = ci_lo <= 1.0 <= ci_hi
        rows = [
            Row(
                f"2c. control: static vs static ({rate:.0f}/s offered)",
                f"{median(with_lb):.1f}/s",
                f"{median(without):.1f}/s",
                ratio,
                "interval holds 1",
                holds,
            ),
            Row(f"   its 95% interval ({n} rounds)", f"{ci_lo:.4f}-{ci_hi:.4f}", "", None, "",
                None),
            Row("   PNs' CPU to their item workers: ratio, interval",
                f"{share_lo:.4f}-{share_hi:.4f}", "", share, "(info)", None),
        ]  # fmt: skip
        metrics = {"control_ratio": ratio, "control_ci_low": ci_lo, "control_ci_high": ci_hi}
        return Section(rows, metrics)
    verdict, decided = interval_verdict(ci_lo, ci_hi)
    steady_from = f"{OVERHEAD_WARM_S:.0f}-{plan.overhead_duration_s:.0f} s"
    beat_ms = heartbeat_ms({"heartbeat_ms": 0, "failure_timeout_ms": OVERHEAD_FAILURE_TIMEOUT_MS})
    rows = [
        Row(
            f"2. throughput at saturation, {steady_from} ({rate:.0f}/s offered)",
            f"{median(with_lb):.1f}/s",
            f"{median(without):.1f}/s",
            ratio,
            ">= 0.995",
            verdict,
            undecided=verdict is None,
        ),
        Row("   LB overhead (1 - ratio)", f"{1.0 - ratio:.2%}", "", None, "< 0.5 %", None),
        Row(
            "   its detector (experiments/slices-overhead.toml)",
            f"beats every {beat_ms} ms",
            f"crashed after {OVERHEAD_FAILURE_TIMEOUT_MS} ms",
            None,
            "",
            None,
        ),
        Row(
            f"   ratio's 95% interval ({n} rounds, both sides at once)",
            f"{ci_lo:.4f}-{ci_hi:.4f}",
            decided,
            None,
            "",
            None,
        ),
        Row(
            f"   rings filling, {OVERHEAD_FILL_FROM_S:.1f}-{RING_AGE_S:.0f} s: ratio, interval",
            f"{fill_lo:.4f}-{fill_hi:.4f}",
            "",
            fill,
            "(info)",
            None,
        ),
        Row("   runs (min-max)", span(with_lb), span(without), None, "", None),
        Row("   one side's run-to-run spread", "", "", noise, "(info)", None),
        Row(
            "   LB + PNs CPU per reply (steady window)",
            f"{cpu_with / 1e6:.3f} ms",
            f"{cpu_without / 1e6:.3f} ms",
            cpu_with / cpu_without,
            "(info)",
            None,
        ),
        Row(
            "   PNs' CPU to their item workers: ratio, interval",
            f"{share_lo:.4f}-{share_hi:.4f}",
            f"{median(got['lb']['work_share']):.2%} / {median(got['static']['work_share']):.2%}",
            share,
            "(info)",
            None,
        ),
        Row(
            "   PNs' other threads (zenoh, main loop), CPU",
            f"{other_with / 1e6:.2f} ms/s",
            f"{other_without / 1e6:.2f} ms/s",
            other_with / other_without,
            "(info)",
            None,
        ),
        Row(
            "   PN CPU limits",
            limits if cgroups else "none",
            "" if cgroups else f"({limits}): throughput is what the neighbours leave",
            None,
            "",
            None,
        ),
        Row(
            f"   saturated: 1 PN's fastest service, work_repeat {OVERHEAD_WORK_REPEAT}",
            f"{cal_ns / 1e6:.2f} ms",
            "yes" if saturated else "NO: offered <= served",
            None,
            "",
            None,
        ),
    ]
    metrics = {
        "throughput_ratio_lb_over_static": ratio,
        "throughput_ratio_ci_low": ci_lo,
        "throughput_ratio_ci_high": ci_hi,
        "lb_overhead_fraction": 1.0 - ratio,
        "fill_throughput_ratio": fill,
        "fill_throughput_ratio_ci_low": fill_lo,
        "fill_throughput_ratio_ci_high": fill_hi,
        "throughput_spread_fraction": noise,
        "server_cpu_per_reply_ratio_lb_over_static": cpu_with / cpu_without,
        "pn_work_share_ratio_lb_over_static": share,
        "pn_work_share_ratio_ci_low": share_lo,
        "pn_work_share_ratio_ci_high": share_hi,
        "pn_other_threads_cpu_ms_per_s_lb": other_with / 1e6,
        "pn_other_threads_cpu_ms_per_s_static": other_without / 1e6,
        "overhead_offered_per_s": rate,
        "pn_cpu_limited": 1.0 if cgroups else 0.0,
        "lb_overhead_decided": 0.0 if verdict is None else 1.0,
    }
    return Section(rows, metrics)


# --- 3. RTD at low load against a plain Zenoh ping-pong --------------------------------


def build_pingpong() -> Path:
    cmd = ["cargo", "build", "--release", "--example", "zenoh_pingpong"]
    try:
        proc = subprocess.run(
            cmd, cwd=REPO, capture_output=True, text=True, timeout=1200, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchError(f"building the ping-pong example: {e}") from e
    if proc.returncode != 0:
        raise BenchError(f"building the ping-pong example failed: {proc.stderr[-2000:]}")
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    binary = target / "release" / "examples" / "zenoh_pingpong"
    if not os.access(binary, os.X_OK):
        raise BenchError(f"{binary} not built")
    return binary


def knee_rtd_round(b: Bench, planned: Planned, sender: int, n: int) -> tuple[float, float]:
    """p50 RTD (from the intended send) and p50 from the actual send, in ns."""
    length_s = rtd_length_s(n)
    client, samples = b.start_client(planned, sender=sender)
    finish_client(client, stop=False, run_s=length_s)
    b.nodes.remove(client)  # it ended by itself; the LB and PN go on to the next round
    start_ns = int(client.events("start")[0]["start_ns"])
    s = read_sample_records(samples)
    s = s[(s["status"] == STATUS_OK) & (s["intended_ns"] >= start_ns + RTD_WARM_S * 1e9)]
    if len(s) < n // 2:
        raise BenchError(f"rtd: only {len(s)} of {n} items answered")
    rtd = (s["received_ns"] - s["intended_ns"]).astype(np.int64)
    rtt = (s["received_ns"] - s["sent_ns"]).astype(np.int64)
    return float(np.median(rtd)), float(np.median(rtt))


def rtd_length_s(n: int) -> float:
    """A knee RTD round's length: `n` items at the low rate after the warm-up."""
    return n / LOW_RATE_PER_S + RTD_WARM_S


def pingpong_round(b: Bench, pingpong: Path, prefix: str, pong_addr: str, n: int) -> dict:
    cmd = [
        str(pingpong), "ping", "--prefix", prefix, "--connect", pong_addr,
        "--bytes", str(ITEM_HEADER_BYTES + ITEM_IMAGE_BYTES), "--reply-bytes", str(REPLY_BYTES),
        "--rate-per-s", str(LOW_RATE_PER_S), "--count", str(n),
    ]  # fmt: skip
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=n / LOW_RATE_PER_S + 30, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise BenchError("ping-pong timed out") from e
    done = [e for e in json_lines(proc.stdout) if e.get("event") == "done"]
    if proc.returncode != 0 or not done:
        raise BenchError(f"ping-pong exited {proc.returncode}: {proc.stderr[-500:]}")
    if done[-1]["ok"] < n // 2:
        raise BenchError(f"ping-pong: only {done[-1]['ok']} of {n} answered")
    return done[-1]


def bench_rtd(b: Bench, plan: Plan, pingpong: Path) -> Section:
    n = plan.rtd_items
    knee_rtd: list[float] = []
    knee_rtt: list[float] = []
    pp_rtd: list[float] = []
    pp_rtt: list[float] = []
    try:
        server = {"slices": 10, "pns": 1, "threads": 1, "work_repeat": 1}
        driver = {"image_bytes": ITEM_IMAGE_BYTES, "retries": 2}
        load = constant_load(LOW_RATE_PER_S, rtd_length_s(n), CLIENT_TIMEOUT_MS)
        planned = b.plan(server, driver, load)
        lb = b.start(planned, "lb")
        pn = b.start(planned, "pn-0")
        wait_for(lambda: lb_owns_all(lb), 10.0, "the PN owning the slices", [lb, pn])
        pp_prefix = f"knee/bench/pingpong/{uuid.uuid4().hex}"
        pong = Node(
            [str(pingpong), "pong", "--prefix", pp_prefix, "--reply-bytes", str(REPLY_BYTES)],
            b.work,
            "pong",
            stdin_pipe=True,
        )
        b.nodes.append(pong)
        pong_addr = pong.wait_ready()
        for i in range(plan.rtd_rounds):

            def knee_run(i: int = i) -> None:
                rtd, rtt = knee_rtd_round(b, planned, i + 1, n)
                knee_rtd.append(rtd)
                knee_rtt.append(rtt)

            def pp_run() -> None:
                done = pingpong_round(b, pingpong, pp_prefix, pong_addr, n)
                pp_rtd.append(done["p50_ns"])
                pp_rtt.append(done["p50_from_sent_ns"])

            for run in (knee_run, pp_run) if i % 2 == 0 else (pp_run, knee_run):
                run()
    finally:
        b.stop()
    k, p = median(knee_rtd), median(pp_rtd)
    ks, ps = median(knee_rtt), median(pp_rtt)

    def us(v: float) -> str:
        return f"{v / 1e3:.0f} us"

    rows = [
        Row(
            f"3. p50 RTD @ {LOW_RATE_PER_S:.0f}/s, {ITEM_IMAGE_BYTES} B images",
            us(k),
            us(p),
            k / p,
            f"<= {RTD_TARGET:.0f}",
            k / p <= RTD_TARGET,
        ),
        Row("   p50 from the actual send", us(ks), us(ps), ks / ps, "(info)", None),
    ]
    return Section(rows, {"rtd_p50_ratio_knee_over_pingpong": k / p, "rtt_p50_ratio": ks / ps})


# --- report ----------------------------------------------------------------------------


GOALS = ("balancing", "overhead", "rtd")
# Not run unless asked: the overhead method with the same pipeline on both sides.
CONTROL = "control"


def run_all(plan: Plan, only: tuple[str, ...] = GOALS) -> list[Section]:
    knee = find_knee_node()
    print(f"knee-node: {knee}", flush=True)
    with tempfile.TemporaryDirectory(prefix="knee-slices-bench-") as tmp:
        b = Bench(knee, Path(tmp))
        try:
            sections = []
            for goal, what, step in (
                ("balancing", "balancing time", lambda: bench_balancing(b, plan)),
                ("overhead", "LB overhead", lambda: bench_overhead(b, plan)),
                (CONTROL, "A/A control", lambda: bench_overhead(b, plan, control=True)),
                ("rtd", "RTD vs ping-pong", lambda: bench_rtd(b, plan, build_pingpong())),
            ):
                if goal not in only:
                    continue
                t = time.monotonic()
                sections.append(step())
                print(f"{what}: {time.monotonic() - t:.0f} s", flush=True)
            return sections
        finally:
            b.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_true", help="fewer, shorter rounds (~2 min)")
    speed.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: goal 1 at low load, one round of 10 and 100 slices (figures unjudged)",
    )
    parser.add_argument(
        "--only",
        choices=(*GOALS, CONTROL),
        action="append",
        help="this goal alone (repeatable); control: the overhead method, static on both sides",
    )
    parser.add_argument(
        "--overhead-rounds",
        type=int,
        metavar="N",
        help="goal 2 (and control) rounds instead of the plan's (an even number >= 4: the "
        "sides swap places each round); more rounds narrow an UNDECIDED interval",
    )
    args = parser.parse_args()
    plan = SMOKE if args.smoke else QUICK if args.quick else FULL
    if args.overhead_rounds is not None:
        if args.overhead_rounds < 4 or args.overhead_rounds % 2:
            parser.error(f"--overhead-rounds: an even number >= 4, got {args.overhead_rounds}")
        plan = replace(plan, overhead_rounds=args.overhead_rounds)
    goals = tuple(args.only or (SMOKE_GOALS if args.smoke else GOALS))
    return benchlib.timed_report("slices_goals", lambda: run_all(plan, goals), "medians")


if __name__ == "__main__":
    sys.exit(main())
