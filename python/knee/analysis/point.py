"""The analysis of one measured point: what summary.json holds for it. The runner measures
(starts the nodes, drives the point, gathers the samples and what it sampled of the
machine) and hands this module a `MeasuredPoint`; `analyse_point` computes the point's
statistics (knee.stats.point_stats), its resources (knee.resources.usage), its SLO
decision (knee.stats.slo) and its interference (knee.stats.interference)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from knee.analysis import http as http_analysis
from knee.resources.usage import Inputs, NodeInfo, point_resources
from knee.stats.interference import add_interference
from knee.stats.point import PointSettings, point_stats
from knee.stats.replies import http_status_counts
from knee.stats.slo import Slo, point_slo
from knee.stats.summary import PointStats, SystemCheck, Target

#: The node name and role of the process tree serving an external target, in timeseries.
TARGET_NODE = "target"
TARGET_ROLE = "target"


@dataclass(frozen=True)
class MeasuredPoint:
    """What the runner hands the analysis of one point: its samples, how it ran, and what
    it saw of the nodes and the machine."""

    run_dir: Path
    index: int
    series: str
    label: str
    swept: dict[str, Any]
    settings: PointSettings  # how point_stats reads the samples
    frame: pd.DataFrame  # the point's samples (knee.results.point_frame)
    recorders: list[str]  # the nodes that recorded samples
    warmup_end_s: float  # the end of the warm-up, in run seconds
    rows: list[dict[str, Any]]  # the run's timeseries so far
    nodes: dict[str, NodeInfo]  # the point's nodes, as knee.resources.usage sees them
    link_bytes_per_s: dict[str, float]  # host -> its emulated link's rate
    part: tuple[str, str, float | None] | None  # the system's part timed by detail_ns
    host_cores: dict[str, float]  # host -> its CPU limit
    timeout_ms: float
    http: bool  # HTTP/1.1 or HTTP/2 (http, grpc): the generators' `done` fields count
    slo: Slo | None
    target: Target | None  # the external target found (knee.hosts.listener)
    check: SystemCheck | None  # the system's checker's verdict (knee.analysis.chaos)
    cut: str | None  # why the point was cut short


def analyse_point(m: MeasuredPoint) -> PointStats:
    """summary.json's entry for one measured point."""
    stats = point_stats(m.frame, m.settings)
    stats.update(
        {
            "point": m.index,
            "series": m.series,
            "label": m.label,
            "swept": m.swept,
            "target_rate_per_s": m.settings.target_rate_per_s,
        }
    )
    if m.target is not None:
        stats["target"] = m.target
    if (codes := http_status_counts(m.frame)) is not None:
        stats["http_statuses"] = codes
    if m.http:  # HTTP/1.1 or HTTP/2, its streams (docs/http2.md)
        stats["http"] = http_analysis.done_fields(m.run_dir, m.index, sorted(m.recorders))
    stats["resources"] = point_resources(_resource_inputs(m, stats))
    if m.check is not None:
        stats["check"] = m.check
    if m.cut is not None:
        stats["cut_short"] = m.cut
    if m.slo is not None:
        stats["slo"] = point_slo(m.frame, m.slo, stats)
    add_interference(stats, m.rows, m.index, m.warmup_end_s)
    return stats


def _h2(stats: PointStats) -> bool:
    http = stats.get("http")
    return http is not None and http["protocol"] == "h2"


def _resource_inputs(m: MeasuredPoint, stats: PointStats) -> Inputs:
    """What knee.resources.usage needs of the point: the runner's nodes, the external
    target's process tree, and the generator's slots: where a due request waits for one
    (the `connections` resource), its connections (HTTP/1.1: one request each), or over
    HTTP/2 its streams, connections x the server's SETTINGS_MAX_CONCURRENT_STREAMS (or the
    client's cap; None: no limit was set, so no such resource)."""
    nodes = dict(m.nodes)
    target = stats.get("target") or {}
    if target.get("found"):
        nodes[TARGET_NODE] = NodeInfo(
            role=TARGET_ROLE,
            label=f"the target {target['name']}",
            cpu_cores=target.get("cpu_cores"),  # its affinity or cgroup quota; None: all
            pool=target.get("workers"),  # prefork workers; their busy time from Server-Timing
        )
    http = stats.get("http")
    h2 = _h2(stats)
    slots = http["streams_limit_total"] if http and h2 else m.settings.connections
    return Inputs(
        point=m.index,
        after_s=m.warmup_end_s,
        rows=m.rows,
        stats=stats,
        nodes=nodes,
        link_bytes_per_s=m.link_bytes_per_s,
        frame=m.frame,
        connections=slots,
        slots="streams" if h2 else "connections",
        timeout_ms=m.timeout_ms,
        part=m.part,
        host_cores=m.host_cores,
    )
