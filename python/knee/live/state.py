"""What the live page and /metrics show, collected from what the runner already reads: each
recorder's progress lines and samples file (knee.live.samples), the monitor's rows each
second, each point's statistics when it ends, and a search's path.

The runner's thread calls the hooks (knee.live.observer); the server's threads read
`snapshot()` and `metric_nodes()`, copies made under one lock, so a request never sees a
half-updated point. Every list is a ring of fixed size: memory does not grow with the run.
"""

from __future__ import annotations

import copy
import json
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from knee.live.samples import BUCKETS_S, Tail, failure_names, has_held
from knee.live.types import (
    CurrentPoint,
    GroupShown,
    MetricPoint,
    MetricsData,
    MonitorRow,
    NodeCounters,
    PointDone,
    ProgressLine,
    RateShown,
    SearchShown,
    Second,
    Snapshot,
)
from knee.monitor import HOST_ROLE
from knee.report.types import FindDoc
from knee.resources.usage import LINK_ROLE, machine_cores
from knee.runner.display import warnings_of
from knee.stats.summary import Answer, GroupAnswers, PointStats

#: Seconds of per-second history kept for the running point and for the resources (ten
#: minutes: a long point's start scrolls off).
HISTORY_S = 600
#: Finished points kept for the latency-against-load figure (a sweep has tens).
MAX_POINTS = 1000
#: Points whose last counters stay on /metrics after they end (series per node and point).
METRICS_POINTS = 64
#: Resources drawn (nodes, the machine, the target): a run has a handful.
MAX_RESOURCES = 64
#: OK latencies pooled per look across recorders for the moving p50 and p99.
MAX_WINDOW = 200_000
#: A search's probes and groups kept.
MAX_PROBES = 1000

NEVER_LATE_NS = 2**62


@dataclass
class NodeLive:
    """One recorder of the running point: its latest progress line and its samples so far."""

    name: str
    tail: Tail
    line: ProgressLine = field(default_factory=lambda: ProgressLine())
    due: float = 0.0  # sends the schedule's mean rate says were due by the line's t_s
    last_t_s: float = 0.0

    def in_flight(self) -> int:
        return max(0, int(self.line.get("sent", 0)) - int(self.line.get("completed", 0)))

    def behind(self, schedule: str) -> int:
        """Sends due and not yet made: for a constant schedule, its rate times the time; for
        Poisson arrivals, what is beyond three standard deviations of the count (sqrt of
        its mean), so that the arrivals' own spread does not show as a backlog."""
        sent = int(self.line.get("sent", 0))
        slack = 3.0 * math.sqrt(self.due) if schedule == "poisson" else 1.0
        return max(0, math.floor(self.due - slack) - sent)

    def counters(self) -> NodeCounters:
        """What /metrics says of this node: the samples' counts (the progress line's `sent`
        when it is ahead: a request in flight has no record yet)."""
        t = self.tail
        return {
            "node": self.name,
            "sent": max(t.sent, int(self.line.get("sent", 0))),
            "completed": t.records,
            "ok": t.ok,
            "late": t.late,
            "held": t.held_sends,
            "failures": dict(t.failures),
            "buckets": t.buckets.tolist(),
            "latency_sum_s": t.latency_sum_ns / 1e9,
            "in_flight": self.in_flight(),
        }


@dataclass
class PointLive:
    index: int
    label: str
    series: str
    schedule: str
    target_rate_per_s: float | None
    expected_requests: int | None
    started: float  # time.monotonic()
    nodes: dict[str, NodeLive] = field(default_factory=dict)
    seconds: deque[Second] = field(default_factory=lambda: deque(maxlen=HISTORY_S))
    backlog: int = 0


class LiveState:
    """The run as the page draws it; see the module's doc."""

    def __init__(
        self,
        experiment: str,
        system: str,
        kind: str,
        link_bytes_per_s: dict[str, float] | None = None,
    ) -> None:
        self.experiment, self.system, self.kind = experiment, system, kind
        #: Each emulated host's link rate, each way (its spec's rate_mbit), by host name.
        self.link_bytes_per_s = dict(link_bytes_per_s or {})
        self._link_last: dict[str, tuple[float, float, float]] = {}  # t_s, rx, tx bytes
        self._lock = threading.Lock()
        self.version = 0  # bumped on every change: the server's caches key on it
        self.status = "starting"
        self.run_dir: Path | None = None
        self.report: str | None = None
        self.n_points = 0
        self.current: PointLive | None = None
        self.points: deque[PointDone] = deque(maxlen=MAX_POINTS)
        self.ended: deque[MetricPoint] = deque(maxlen=METRICS_POINTS)  # /metrics' past
        self.resources: dict[str, deque[tuple[float, float]]] = {}
        self.search_doc: SearchShown | None = None
        self._reasons = failure_names(system)
        self._held = has_held(system)
        self._cores = machine_cores()
        self._late_ns = NEVER_LATE_NS

    # ---------------------------------------------------------------- the runner's hooks

    def run_started(self, run_dir: Path, n_points: int) -> None:
        with self._lock:
            self.run_dir, self.n_points, self.status = run_dir, n_points, "running"
            self.version += 1

    def point_started(self, point: Any, expected_requests: int | None) -> None:
        load = point.load
        target = load.get("rate_per_s") if load["schedule"] in ("poisson", "constant") else None
        with self._lock:
            self.current = PointLive(
                index=point.index,
                label=point.label,
                series=point.series,
                schedule=load["schedule"],
                target_rate_per_s=float(target) if target is not None else None,
                expected_requests=expected_requests,
                started=time.monotonic(),
            )
            late_ms = load.get("late_ms")  # None: no send is late (knee-node's rule)
            self._late_ns = NEVER_LATE_NS if late_ms is None else int(float(late_ms) * 1e6)
            self.version += 1

    def node_lines(self, lines: dict[str, ProgressLine]) -> None:
        """Each recorder's newest progress line (about one a second each): its samples
        file is read up to what it flushed before the line."""
        point = self.current
        if point is None or self.run_dir is None:
            return
        with self._lock:  # the tails' counters change: the server's copies wait
            windows = []
            for name, line in lines.items():
                node = point.nodes.get(name)
                if node is None:
                    path = self.run_dir / "raw" / f"p{point.index:03d}-{name}.samples.bin"
                    tail = Tail(path, self._late_ns, self._reasons, self._held)
                    node = point.nodes[name] = NodeLive(name, tail)
                windows.append(node.tail.look()[:MAX_WINDOW])
                t_s = float(line.get("t_s") or 0.0)
                rate = float(line.get("target_rate_per_s") or 0.0)
                node.due += rate * max(0.0, t_s - node.last_t_s)
                node.line, node.last_t_s = line, t_s
            self._second(point, np.concatenate(windows))
            self.version += 1

    def _second(self, point: PointLive, latencies: np.ndarray) -> None:
        """The running point's row for now (one per second: a row under half a second old
        is replaced, as recorders' lines come a few ms apart)."""
        nodes = list(point.nodes.values())
        lines = [n.line for n in nodes]
        in_flight = sum(n.in_flight() for n in nodes)
        point.backlog = in_flight + sum(n.behind(point.schedule) for n in nodes)
        p50 = p99 = None
        if len(latencies):
            p50, p99 = np.quantile(latencies, [0.5, 0.99], method="inverted_cdf").tolist()
        row: Second = {
            "t_s": time.monotonic() - point.started,
            "sent_per_s": sum(float(ln.get("sent_rate_per_s") or 0) for ln in lines),
            "done_per_s": sum(float(ln.get("rate_per_s") or 0) for ln in lines),
            "target_per_s": sum(float(ln.get("target_rate_per_s") or 0) for ln in lines) or None,
            "p50_ms": None if p50 is None else p50 / 1e6,
            "p99_ms": None if p99 is None else p99 / 1e6,
            "p99_so_far_ms": max(float(ln.get("p99_ns") or 0) for ln in lines) / 1e6 or None,
            "in_flight": in_flight,
            "backlog": point.backlog,
            "late": sum(n.tail.late for n in nodes),
            "held": sum(n.tail.held_sends for n in nodes),
        }
        if point.seconds and row["t_s"] - point.seconds[-1]["t_s"] < 0.5:
            point.seconds[-1] = row
        else:
            point.seconds.append(row)

    def sampled(self, rows: list[MonitorRow]) -> None:
        """The monitor's rows of one interval: each node's, the target's and the machine's
        CPU as U (busy cores over the cores it may use)."""
        with self._lock:
            for row in rows:
                role = row.get("role")
                cpu = row.get("cpu_percent")
                if role == LINK_ROLE:
                    found = self._link(row)
                    if found is None:
                        continue
                    name, u = found
                elif cpu is None:
                    continue
                elif role == HOST_ROLE:  # the whole machine, in core-percent as a node's CPU
                    name, u = "machine", float(cpu) / 100 / self._cores
                else:
                    cores = row.get("cpu_quota_cores") or self._cores
                    name, u = str(row.get("node")), float(cpu) / 100 / float(cores)
                ring = self.resources.get(name)
                if ring is None:
                    if len(self.resources) >= MAX_RESOURCES:
                        continue
                    ring = self.resources[name] = deque(maxlen=HISTORY_S)
                ring.append((float(row.get("t_s") or 0.0), u))
            self.version += 1

    def _link(self, row: MonitorRow) -> tuple[str, float] | None:
        """An emulated host's link: the busier direction's bytes since its last row over
        the link's rate (None: its first row, or a link of no known rate)."""
        name = str(row.get("node"))
        rate = self.link_bytes_per_s.get(name.removeprefix("link:"))
        now = (float(row.get("t_s") or 0.0), float(row["bytes_rx"]), float(row["bytes_tx"]))
        before = self._link_last.get(name)
        self._link_last[name] = now
        if not rate or before is None or now[0] <= before[0]:
            return None
        busiest = max(now[1] - before[1], now[2] - before[2])
        return name, max(0.0, busiest) / (now[0] - before[0]) / rate

    def point_finished(self, point: Any, stats: PointStats) -> None:
        current = self.current
        if current is not None:
            with self._lock:
                for node in current.nodes.values():  # the records flushed at the end
                    node.tail.drain()
        latency = stats.get("latency_ns")
        done: PointDone = {
            "index": point.index,
            "label": point.label,
            "series": point.series,
            "target_per_s": stats.get("target_rate_per_s"),
            "sent_per_s": stats.get("achieved_rate_per_s"),
            "done_per_s": stats.get("throughput_per_s"),
            "p50_ms": _ms(latency["p50"] if latency else None),
            "p99_ms": _ms(latency["p99"] if latency else None),
            "verdict": ", ".join(warnings_of(stats))
            or (stats["stability"].get("verdict", "-") if stats.get("stability") else "-"),
        }
        with self._lock:
            self.points.append(done)
            if current is not None:
                self.ended.append(self._metric_point(current))
            self.current = None
            self.version += 1

    def search(self, doc: FindDoc) -> None:
        """`knee find`'s path and answers as find.json has them now."""
        probes = (doc.get("probes") or [])[-MAX_PROBES:]
        answers = doc.get("answers", {})
        kept: SearchShown = {
            "status": doc.get("status"),
            "probes": [
                {
                    "point": p.get("point"),
                    "group": p.get("group"),
                    "rate_per_s": p.get("rate_per_s"),
                    "phase": p.get("phase"),
                    "verdict": p.get("decision", {}).get("capacity"),
                    "slo": p.get("decision", {}).get("slo"),
                    "brackets": p.get("brackets") or {},
                }
                for p in probes
            ],
            "answers": [_answer(g) for g in (answers.get("groups") or [])[-MAX_PROBES:]],
            "slo": answers.get("slo"),
        }
        with self._lock:
            self.search_doc = kept
            self.version += 1

    def report_written(self, path: Path) -> None:
        with self._lock:
            self.report = str(path)
            self.version += 1

    def run_finished(self) -> None:
        with self._lock:
            self.status = "ended"
            self.version += 1

    # ---------------------------------------------------------------- the server's reads

    def snapshot(self) -> tuple[int, Snapshot]:
        """(version, the page's state as JSON-ready data), copied under the lock."""
        with self._lock:
            current: CurrentPoint | None = None
            if (p := self.current) is not None:
                nodes = [n.counters() for n in p.nodes.values()]
                failures: dict[str, int] = {}
                for n in nodes:
                    for reason, count in n["failures"].items():
                        failures[reason] = failures.get(reason, 0) + count
                for n in nodes:
                    del n["buckets"]
                current = {
                    "index": p.index,
                    "label": p.label,
                    "series": p.series,
                    "target_per_s": p.target_rate_per_s,
                    "expected_requests": p.expected_requests,
                    "seconds": list(p.seconds),
                    "nodes": nodes,
                    "failures": failures,
                    "backlog": p.backlog,
                }
            busiest = None
            latest = {name: ring[-1][1] for name, ring in self.resources.items() if ring}
            if latest:
                busiest = max(latest, key=lambda k: latest[k])
            doc: Snapshot = {
                "experiment": self.experiment,
                "system": self.system,
                "kind": self.kind,
                "status": self.status,
                "run_dir": None if self.run_dir is None else str(self.run_dir),
                "report": self.report,
                "n_points": self.n_points,
                "current": current,
                "points": list(self.points),
                "search": copy.deepcopy(self.search_doc),
                "resources": {
                    name: {"t_s": [t for t, _ in ring], "u": [u for _, u in ring]}
                    for name, ring in self.resources.items()
                },
                "busiest": busiest,
                "version": self.version,
            }
            return self.version, doc

    def metric_nodes(self) -> tuple[int, MetricsData]:
        """(version, what /metrics exposes): every node of the running point and of the
        last METRICS_POINTS ended ones, the running point's backlog and each resource's
        latest U."""
        with self._lock:
            points = list(self.ended)
            if self.current is not None:
                points.append(self._metric_point(self.current))
            resources = {name: ring[-1][1] for name, ring in self.resources.items() if ring}
            return self.version, {
                "experiment": self.experiment,
                "points": points,
                "resources": resources,
                "buckets_s": list(BUCKETS_S),
            }

    @staticmethod
    def _metric_point(p: PointLive) -> MetricPoint:
        return {
            "point": p.index,
            "series": p.series,
            "backlog": p.backlog,
            "nodes": [n.counters() for n in p.nodes.values()],
        }

    def state_json(self) -> bytes:
        return json.dumps(self.snapshot()[1], allow_nan=False, default=str).encode()


def _ms(ns: Any) -> float | None:
    return None if ns is None else float(ns) / 1e6


def _answer(group: GroupAnswers) -> GroupShown:
    """One group's answers as the page shows them: each rate, its interval and state (a
    knee has none)."""

    def one(a: Answer | None) -> RateShown | None:
        if not a:
            return None
        return {
            "rate_per_s": a.get("rate_per_s"),
            "interval_per_s": a.get("interval_per_s"),
            "state": a.get("state"),
        }

    knee = group.get("knee")
    return {
        "label": group.get("label"),
        "capacity": one(group.get("capacity")),
        "slo_capacity": one(group.get("slo_capacity")),
        "knee": {
            "rate_per_s": knee.get("rate_per_s"),
            "interval_per_s": knee.get("interval_per_s"),
            "state": None,
        }
        if knee
        else None,
    }
