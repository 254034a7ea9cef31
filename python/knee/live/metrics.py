"""/metrics: the live state in the Prometheus text exposition format (version 0.0.4).

Written here rather than with prometheus_client: the exposition is a few lines of text, and
knee would otherwise need a runtime dependency and a registry of collectors for values it
already holds. The tests parse it with prometheus_client's own parser.

Latency is a histogram with fixed classic buckets (knee.live.samples.BUCKETS_S) over every
OK reply of a point and node, never percentiles: histograms of several nodes or points
add up, percentiles do not.
"""

from __future__ import annotations

import math
from typing import Literal

from knee.live.types import MetricsData, NodeCounters

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Each counter per node: (name, help, the node's key in LiveState.metric_nodes())
_COUNTERS: tuple[tuple[str, str, Literal["sent", "completed", "late", "held"]], ...] = (
    ("knee_requests_sent_total", "requests written to the wire", "sent"),
    ("knee_requests_completed_total", "requests over (ok or failed)", "completed"),
    ("knee_sends_late_total", "sends further than load.late_ms behind their intended time", "late"),
    ("knee_sends_held_total", "sends held waiting for an HTTP/2 stream or window", "held"),
)
LATENCY = "knee_request_latency_seconds"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


#: A sample's labels: names and values.
Labels = dict[str, str | int]


def _labels(labels: Labels) -> str:
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def exposition(data: MetricsData) -> str:
    """The text of /metrics from LiveState.metric_nodes()'s data."""
    lines: list[str] = []
    experiment = data["experiment"]
    nodes: list[tuple[Labels, NodeCounters]] = [
        ({"experiment": experiment, "point": p["point"], "series": p["series"]}, n)
        for p in data["points"]
        for n in p["nodes"]
    ]

    def family(name: str, kind: str, help_text: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")

    for name, help_text, key in _COUNTERS:
        family(name, "counter", help_text)
        for base, n in nodes:
            lines.append(f"{name}{_labels({**base, 'node': n['node']})} {_number(n[key])}")
    name = "knee_requests_failed_total"
    family(name, "counter", "requests that did not end OK, by reason")
    for base, n in nodes:
        for reason, count in sorted(n["failures"].items()):
            labels = _labels({**base, "node": n["node"], "reason": reason})
            lines.append(f"{name}{labels} {_number(count)}")
    family(LATENCY, "histogram", "latency of OK replies from their intended send time")
    bounds = [*data["buckets_s"], math.inf]
    for base, n in nodes:
        cumulative = 0
        for le, count in zip(bounds, n["buckets"], strict=True):
            cumulative += count
            labels = _labels({**base, "node": n["node"], "le": _number(float(le))})
            lines.append(f"{LATENCY}_bucket{labels} {cumulative}")
        labels = _labels({**base, "node": n["node"]})
        lines.append(f"{LATENCY}_sum{labels} {_number(float(n['latency_sum_s']))}")
        lines.append(f"{LATENCY}_count{labels} {cumulative}")
    name = "knee_requests_in_flight"
    family(name, "gauge", "requests sent and not over (the node's progress line)")
    for base, n in nodes:
        lines.append(f"{name}{_labels({**base, 'node': n['node']})} {_number(n['in_flight'])}")
    name = "knee_backlog_requests"
    family(name, "gauge", "requests in flight plus sends due by the schedule and not yet made")
    for p in data["points"]:
        point: Labels = {"experiment": experiment, "point": p["point"], "series": p["series"]}
        lines.append(f"{name}{_labels(point)} {_number(p['backlog'])}")
    name = "knee_resource_utilization"
    family(name, "gauge", "U of each resource over the last second (busy / capacity)")
    for resource, u in sorted(data["resources"].items()):
        labels = _labels({"experiment": experiment, "resource": resource})
        lines.append(f"{name}{labels} {_number(float(u))}")
    return "\n".join(lines) + "\n"
