"""Box plots per point (latency, server and network time) and per service."""

from __future__ import annotations

from typing import Any

import numpy as np

from knee.report.boxes import QUANTILES
from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Trace
from knee.report.html import Section
from knee.report.kit import note
from knee.report.kit.figure import Box
from knee.stats.quantiles import order_statistic

PARTS = (("latency_ns", "latency"), ("server_ns", "server"), ("network_ns", "network"))
TITLE = "Distributions per point and per service"


def box(values_ns: np.ndarray) -> Box:
    """{"lo", "q1", "median", "q3", "hi", "mean"} in ms of one group's values: the same
    order statistics as knee.report.boxes.box_stats, selected instead of sorted for."""
    lo, q1, med, q3, hi = (float(x) / 1e6 for x in order_statistic(values_ns, list(QUANTILES)))
    mean = float(values_ns.mean()) / 1e6
    return {"lo": lo, "q1": q1, "median": med, "q3": q3, "hi": hi, "mean": mean}


def section(rr: ReportRun) -> Section:
    labels = {p.get("point"): str(p.get("label")) for p in rr.points}
    per_point: dict[str, dict[Any, Box]] = {name: {} for _, name in PARTS}
    per_service: dict[tuple[Any, int], Box] = {}
    for p in rr.points:  # one point's successful requests in memory at a time
        point = p.get("point")
        ok = rr.point_ok(point, [c for c, _ in PARTS] + ["service"])
        if ok.empty:
            continue
        services = ok.pop("service").to_numpy() if "service" in ok else np.zeros(len(ok), int)
        present = np.unique(services)
        for column, name in PARTS[::-1]:  # each column freed once done; latency last
            values = ok.pop(column).to_numpy()
            per_point[name][point] = box(values)
        if len(present) == 1:  # the point's latency box is its one service's
            per_service[(point, int(present[0]))] = per_point["latency"][point]
            continue
        for svc in present.tolist():  # a loop over the few services, not over rows
            per_service[(point, int(svc))] = box(values[services == svc])
    if not per_point["latency"]:
        return Section("boxes", TITLE, [note("No successful post-warm-up requests.")])
    order = [p.get("point") for p in rr.points]
    traces = []
    for i, (_, name) in enumerate(PARTS):
        stats = per_point[name]
        keys = [k for k in order if k in stats]
        traces.append(
            Trace("box", name, [labels[k] for k in keys], boxes=[stats[k] for k in keys], color=i)
        )
    blocks: list[str | Figure] = [
        Figure(
            "boxes-points",
            "latency, server and network time per point",
            Axis("point", "category"),
            Axis("time", "log", kind="time"),
            traces,
            caption="Successful requests after warm-up. Boxes: quartiles; whiskers: 1st and "
            "99th percentiles (order statistics, as in the summary); triangle/dashed: mean. "
            "Network = client round trip minus the server's residence.",
            height_px=480,
        )
    ]
    services = sorted({svc for _, svc in per_service})
    if len(services) > 1:
        svc_traces = []
        for i, svc in enumerate(services):
            keys = [k for k in order if (k, svc) in per_service]
            svc_traces.append(
                Trace(
                    "box",
                    f"service {svc}",
                    [labels[k] for k in keys],
                    boxes=[per_service[(k, svc)] for k in keys],
                    color=i,
                )
            )
        blocks.append(
            Figure(
                "boxes-services",
                "latency per service",
                Axis("point", "category"),
                Axis("latency", "log", kind="time"),
                svc_traces,
                height_px=480,
            )
        )
    else:
        blocks.append(
            "<p>One service answered every request in this run, so the per-service view "
            "is the per-point view above.</p>"
        )
    return Section("boxes", TITLE, blocks)
