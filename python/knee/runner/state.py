"""The runner's state: the run's (nodes, time series, points so far) and the nodes of
the point being run."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knee import results
from knee.hosts import RunHosts
from knee.monitor import Monitor
from knee.run_params import PointParams
from knee.runner.node import Node
from knee.stats.summary import PointStats, SummaryExtra
from knee.systems import NodePlan


@dataclass
class RunState:
    run_dir: Path
    t0_ns: int
    hosts: RunHosts  # where nodes run (knee.hosts)
    events: list[results.RunEvent] = field(default_factory=list)
    timeseries: list[dict[str, Any]] = field(default_factory=list)
    points: list[PointStats] = field(default_factory=list)
    raws: list[results.RawFile] = field(default_factory=list)
    nodes: dict[str, Node] = field(default_factory=dict)
    monitor: Monitor = field(default_factory=Monitor)
    keep_scratch: bool = False
    remote_usage: dict[str, tuple[float, float]] = field(default_factory=dict)  # node: t, cpu_s
    #: The point being run until its files are fetched: a point that fails is not fetched,
    #: and the run's end brings what its remote nodes wrote up to their last flush.
    unfetched: tuple[PointNodes, dict[str, results.RawFile]] | None = None
    #: Top-level keys added to summary.json besides the points (`knee find`: "find").
    extra: SummaryExtra = field(default_factory=lambda: SummaryExtra())

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


@dataclass
class PointNodes:
    """The nodes of the point being run, as the event timeline and the drive loop see them."""

    plans: dict[str, NodePlan]
    where: dict[str, str]  # each node's host
    configs: dict[str, dict[str, Any]]  # as started, placeholders replaced
    addrs: dict[str, str]  # reported by each node's ready line
    recorders: list[str]
    record: PointParams  # what the point runs with, rewritten in points/pNNN.json
    ended: set[str] = field(default_factory=set)  # finished, or stopped by an event
    frozen: set[str] = field(default_factory=set)  # stopped by SIGSTOP (a freeze event)
    started: set[str] = field(default_factory=set)  # started at least once
    outputs: dict[str, list[Path]] = field(default_factory=dict)  # files each node writes
    starts_ns: dict[str, int] = field(default_factory=dict)  # each recorder's schedule start
