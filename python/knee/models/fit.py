"""What a model needs from the measurements: each point's settings (read from the resolved
spec and the point's swept values) and the service time fitted at the lowest load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The setting that is the number of servers (matrix: the worker pool).
SERVERS_KEY = "server.threads"


def setting(point: dict[str, Any], spec: dict[str, Any], dotted: str) -> Any:
    """A point's value of "section.key": swept, else its series' override, else the spec's
    top-level section (the resolved spec has every default filled in)."""
    swept = point.get("swept") or {}
    if dotted in swept:
        return swept[dotted]
    section, _, key = dotted.partition(".")
    series = (spec.get("series") or {}).get(point.get("series", ""), {})
    if key in (series.get(section) or {}):
        return series[section][key]
    return (spec.get(section) or {}).get(key)


def servers(point: dict[str, Any], spec: dict[str, Any]) -> int:
    value = setting(point, spec, SERVERS_KEY)
    return int(value) if value else 1


@dataclass(frozen=True)
class Fit:
    """Service time at the lowest-load point, where requests hardly queue.

    `delay_s` is the mean time a request spends outside the server (network, middleware,
    client lateness: latency minus server residence) there; models add it to the server's
    sojourn time as a fixed delay to predict the latency the client measures.
    """

    point: int
    x: float
    service_s: float
    cs2: float
    delay_s: float


def fit_service(point: dict[str, Any], x: float) -> Fit | None:
    """The fit from one point's `service_ns` (mean and squared coefficient of variation)
    and latency/server means; None when the point has no service times."""
    service = point.get("service_ns") or {}
    mean_ns = service.get("mean")
    if not mean_ns or mean_ns <= 0:
        return None
    std_ns = service.get("std") or 0.0
    latency_ns = (point.get("latency_ns") or {}).get("mean")
    server_ns = (point.get("server_ns") or {}).get("mean")
    delay_ns = max(0.0, latency_ns - server_ns) if latency_ns and server_ns else 0.0
    return Fit(
        point=int(point["point"]),
        x=float(x),
        service_s=mean_ns / 1e9,
        cs2=(std_ns / mean_ns) ** 2,
        delay_s=delay_ns / 1e9,
    )
