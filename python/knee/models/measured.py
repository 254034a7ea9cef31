"""The knee measured from the data, beside the models' (docs/statistics.md, "Measured
knee"): the stable point with the highest measured power, throughput / mean OK latency,
and the loads whose power cannot be told apart from it."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from knee.models.fit import ok_latency, unstable
from knee.stats.intervals import poisson_count_ci
from knee.stats.summary import MeasuredKnee

#: A point: summary.json's (knee.stats.summary.PointStats) or a model's row.
P = TypeVar("P", bound=Mapping[str, Any])


@dataclass(frozen=True)
class Power:
    """Kleinrock's power of one point (1/s^2) and its interval (inf: unbounded above)."""

    value: float
    lo: float
    hi: float


def power(point: Mapping[str, Any]) -> Power | None:
    """throughput / mean OK latency, with the interval [T_lo / L_hi, T_hi / L_lo] from the
    mean's 95% interval (batch means) and the throughput's: Garwood's exact Poisson interval
    for the OK replies counted in the window (`ok_in_window`, else the OK count), scaled to
    the throughput. Two 95% intervals combined this way cover with at least 90% (Bonferroni).
    Without a latency interval the interval is the value itself. None without throughput
    or latency."""
    latency = ok_latency(point)
    mean_ns, throughput = latency.get("mean"), point.get("throughput_per_s")
    if not mean_ns or mean_ns <= 0 or not throughput or throughput <= 0:
        return None
    value = throughput / (mean_ns / 1e9)
    ci = (latency.get("ci") or {}).get("mean")
    count = point.get("ok_in_window") or latency.get("n")
    if not ci or not count:
        return Power(value, value, value)
    low_count, high_count = poisson_count_ci(int(count))
    t_lo, t_hi = throughput * low_count / count, throughput * high_count / count
    lo = t_lo / (ci[1] / 1e9) if ci[1] > 0 else 0.0
    hi = t_hi / (ci[0] / 1e9) if ci[0] > 0 else math.inf
    return Power(value, lo, hi)


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def measured_knee(points: Sequence[P], x_of: Callable[[P], float]) -> MeasuredKnee | None:
    """Over the stable points of one group (unstable ones are left out: their mean depends
    on the run's length), the point of highest power, and `interval_x`: the span of the
    loads x whose power interval overlaps the best point's. `edge` says when the best point
    is the highest or lowest load measured (the knee may lie beyond). None below two stable
    points with a power."""
    scored = [(p, x_of(p), pw) for p in points if not unstable(p) and (pw := power(p))]
    if len(scored) < 2:
        return None
    best, best_x, best_power = max(scored, key=lambda s: s[2].value)
    close = [(p, x) for p, x, pw in scored if pw.hi >= best_power.lo and pw.lo <= best_power.hi]
    xs = [x for _, x, _ in scored]
    edge = "highest" if best_x == max(xs) else "lowest" if best_x == min(xs) else None
    return {
        "x": best_x,
        "point": best["point"],
        "target_x": best.get("target_rate_per_s"),
        "power_per_s2": best_power.value,
        "power_ci_per_s2": [_finite(best_power.lo), _finite(best_power.hi)],
        "interval_x": [min(x for _, x in close), max(x for _, x in close)],
        "interval_points": sorted(p["point"] for p, _ in close),
        "edge": edge,
        "excluded_unstable": [p["point"] for p in points if unstable(p)],
    }
