"""Box plots per point (latency, server and network time) and per service."""

from __future__ import annotations

from knee.report.boxes import box_stats
from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Trace
from knee.report.html import Section
from knee.report.kit import note

PARTS = (("latency_ns", "latency"), ("server_ns", "server"), ("network_ns", "network"))


def section(rr: ReportRun) -> Section:
    if rr.ok.empty:
        return Section(
            "boxes",
            "Distributions per point and per service",
            [note("No successful post-warm-up requests.")],
        )
    labels = {p.get("point"): str(p.get("label")) for p in rr.points}
    order = [p.get("point") for p in rr.points]
    traces = []
    for i, (column, name) in enumerate(PARTS):
        stats = box_stats(rr.ok, ["point"], column)
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
    services = sorted(rr.ok["service"].unique().tolist()) if "service" in rr.ok else []
    if len(services) > 1:
        stats = box_stats(rr.ok, ["point", "service"], "latency_ns")
        svc_traces = []
        for i, svc in enumerate(services):
            keys = [k for k in order if (k, svc) in stats]
            svc_traces.append(
                Trace(
                    "box",
                    f"service {svc}",
                    [labels[k] for k in keys],
                    boxes=[stats[(k, svc)] for k in keys],
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
    return Section("boxes", "Distributions per point and per service", blocks)
