"""How many requests a server works on at once (c), where the system does not declare it
(docs/statistics.md, "Servers"): the utilization law at saturation. An over-capacity point
keeps every server busy, so its throughput X_sat is c / E[S], and c = X_sat E[S]."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from knee.models.fit import Fit, ok_latency, unstable
from knee.models.types import ServersEstimateJson
from knee.stats.intervals import poisson_count_ci

#: A point's load on the models' axis.
XOf = Callable[[Mapping[str, Any]], float]


@dataclass(frozen=True)
class Throughput:
    """A point's OK completions per second inside its window, with Garwood's exact Poisson
    interval for the count scaled to the rate."""

    point: int
    per_s: float
    ci_per_s: tuple[float, float]


def throughput(point: Mapping[str, Any]) -> Throughput | None:
    per_s = point.get("throughput_per_s")
    count = point.get("ok_in_window")
    if not per_s or per_s <= 0:
        return None
    if not count:
        return Throughput(int(point["point"]), float(per_s), (float(per_s), float(per_s)))
    lo, hi = poisson_count_ci(int(count))
    return Throughput(int(point["point"]), float(per_s), (per_s * lo / count, per_s * hi / count))


def saturated_throughput(points: Sequence[Mapping[str, Any]]) -> Throughput | None:
    """The highest throughput among the unstable (over-capacity) points: a point only just
    over the edge, or one where overload costs requests (timeouts), completes fewer, so the
    maximum is the best-supported measure of what the servers can complete. None without
    an unstable point."""
    measured = [t for p in points if unstable(p) and (t := throughput(p)) is not None]
    return max(measured, key=lambda t: t.per_s, default=None)


@dataclass(frozen=True)
class ServersEstimate:
    c: int  # used by the models: max(1, round(value)); 1 when nothing could be estimated
    value: float | None  # X_sat E[S], unrounded
    interval: tuple[float, float] | None  # of value, from both factors' 95% intervals
    throughput: Throughput | None
    service_s: float | None
    service_ci_s: tuple[float, float] | None
    service_from: str | None  # "server_ns" | "low_load_latency"
    detail: str

    @property
    def estimated(self) -> bool:
        return self.value is not None

    def to_json(self) -> ServersEstimateJson:
        t = self.throughput
        return {
            "c": self.c,
            "value": self.value,
            "interval": None if self.interval is None else list(self.interval),
            "throughput_per_s": None if t is None else t.per_s,
            "throughput_ci_per_s": None if t is None else list(t.ci_per_s),
            "throughput_point": None if t is None else t.point,
            "service_ns": None if self.service_s is None else self.service_s * 1e9,
            "service_ci_ns": None
            if self.service_ci_s is None
            else [self.service_ci_s[0] * 1e9, self.service_ci_s[1] * 1e9],
            "service_from": self.service_from,
            "detail": self.detail,
        }


def _service(
    points: Sequence[Mapping[str, Any]], fit: Fit | None, x_of: XOf
) -> tuple[float, tuple[float, float] | None, str, str] | None:
    """E[S] (s), its interval, where it came from, and how to say it: the server's own time
    as the fit pooled it (`service_ns`: for http the Server-Timing time), else the mean OK
    latency at the lowest stable load (an upper bound: network and any wait included)."""
    if fit is not None:
        return fit.service_s, fit.service_ci_s, "server_ns", "the server's own time"
    stable = sorted((p for p in points if not unstable(p)), key=x_of)
    for p in stable:
        latency = ok_latency(p)
        if latency.get("mean"):
            ci = (latency.get("ci") or {}).get("mean")
            return (
                float(latency["mean"]) / 1e9,
                None if ci is None else (ci[0] / 1e9, ci[1] / 1e9),
                "low_load_latency",
                f"the mean OK latency at the lowest stable load ({x_of(p):.3g})",
            )
    return None


def estimate_servers(
    points: Sequence[Mapping[str, Any]], fit: Fit | None, x_of: XOf
) -> ServersEstimate:
    """c = X_sat E[S] for one group of open-loop points (`x_of`: a point's load), rounded to
    an integer of at least 1; its interval multiplies the factors' interval ends (two 95%
    intervals: at least 90% together). Without an unstable point, or without a service
    time, c stays 1 ("assumed") and the detail says why."""
    sat = saturated_throughput(points)
    service = _service(points, fit, x_of)
    if sat is None:
        return _assumed(
            "no point was over capacity, so the saturated throughput, and with it the "
            "number of requests served at once, cannot be measured: 1 is assumed",
            None,
        )
    if service is None:
        return _assumed("no stable point gives a service time: 1 server is assumed", sat)
    service_s, service_ci, source, said = service
    value = sat.per_s * service_s
    interval = None
    if service_ci is not None:
        interval = (sat.ci_per_s[0] * service_ci[0], sat.ci_per_s[1] * service_ci[1])
    c = max(1, round(value))
    span = "" if interval is None else f" [{interval[0]:.2f}, {interval[1]:.2f}]"
    detail = (
        f"c = saturated throughput x mean service time = {sat.per_s:.3g}/s (point "
        f"{sat.point}, over capacity) x {service_s * 1e3:.3g} ms ({said}) = {value:.2f}"
        f"{span}, so {c} request{'s' if c > 1 else ''} at once"
    )
    if interval is not None and not _holds_integer(interval):
        detail += (
            " (no whole number lies in its interval: the server does not behave as c equal servers)"
        )
    return ServersEstimate(c, value, interval, sat, service_s, service_ci, source, detail)


def _assumed(detail: str, sat: Throughput | None) -> ServersEstimate:
    return ServersEstimate(
        c=1,
        value=None,
        interval=None,
        throughput=sat,
        service_s=None,
        service_ci_s=None,
        service_from=None,
        detail=detail,
    )


def _holds_integer(interval: tuple[float, float]) -> bool:
    return math.floor(interval[1]) >= max(1.0, math.ceil(interval[0]))
