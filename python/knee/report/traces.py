"""Trace builders shared by the sections, the matrix findings and `knee compare`."""

from __future__ import annotations

from typing import Any, Literal

from knee.models.types import Model, SeriesModels
from knee.report.data import SeriesAxis
from knee.report.figures import Marker, Trace
from knee.report.types import DistName, StatName
from knee.stats.summary import Distribution, PointStats


def to_ms(ns: Any) -> float | None:
    return None if ns is None else float(ns) / 1e6


def _source(point: PointStats, dist: DistName, key: StatName) -> Distribution | None:
    """The distribution a statistic is read from. The headline latency has no mean when a
    request failed (docs/statistics.md): a latency mean is always the OK replies' mean."""
    if dist == "latency_ns" and key in ("mean", "std") and point.get("latency_ok_ns"):
        return point["latency_ok_ns"]
    return point.get(dist)


def stability(point: PointStats, key: Literal["verdict", "detail"]) -> str | None:
    """The point's stability verdict ("stable", "unstable", "n/a") or its detail."""
    found = point.get("stability")
    return found.get(key) if found else None


def stat_ns(point: PointStats, dist: DistName, key: StatName) -> float | None:
    """A statistic of one of the point's distributions as written, in ns (None: none)."""
    source = point.get(dist)
    return source.get(key) if source else None


def stat(point: PointStats, dist: DistName, key: StatName) -> float | None:
    source = _source(point, dist, key)
    return to_ms(source.get(key)) if source else None


def ci(point: PointStats, dist: DistName, key: StatName) -> tuple[float | None, float | None]:
    source = _source(point, dist, key)
    pair = (source.get("ci") or {}).get(key) if source else None
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        return None, None
    return to_ms(pair[0]), to_ms(pair[1])


def ok_latency(point: PointStats) -> Distribution | None:
    """A point's latency distribution over its successful requests: `latency_ok_ns`, or
    `latency_ns` in a summary that has only that (written when it held OK requests only)."""
    return point.get("latency_ok_ns") or point.get("latency_ns") or None


def with_ok_latency(points: list[PointStats]) -> list[PointStats]:
    """The points, each with `latency_ok_ns` filled in as `ok_latency` reads it."""
    return [p | {"latency_ok_ns": ok} if (ok := ok_latency(p)) else p for p in points]


def by_x(points: list[PointStats], axis: SeriesAxis) -> list[PointStats]:
    """The points that have an x value, in increasing x."""
    return sorted((p for p in points if isinstance(axis.x(p), int | float)), key=axis.x)


def latency_traces(
    points: list[PointStats],
    axis: SeriesAxis,
    name: str,
    color: int,
    keys: tuple[StatName, ...] = ("mean", "p50", "p99"),
    dist: DistName = "latency_ns",
    one_color: bool = False,
) -> list[Trace]:
    """For each statistic: its line and, where intervals exist, a 95% band around it. The
    statistics get successive colours, or all `color` (told apart by dashes)."""
    pts = by_x(points, axis)
    xs = [axis.x(p) for p in pts]
    out: list[Trace] = []
    for i, key in enumerate(keys):
        c = color if one_color else color + i
        label = f"{name} {key}".strip()
        lows, highs = zip(*(ci(p, dist, key) for p in pts), strict=True) if pts else ((), ())
        if any(v is not None for v in lows):
            out.append(
                Trace("band", label, xs, lo=list(lows), hi=list(highs), color=c, legend=False)
            )
        out.append(
            Trace(
                "line",
                label,
                xs,
                [stat(p, dist, key) for p in pts],
                color=c,
                dash=key != "mean",
                hover=[f"{p.get('label')}: {key} {stat(p, dist, key)} ms" for p in pts],
            )
        )
    return out


#: Model curves are drawn up to this multiple of the largest measured x (a capacity far
#: beyond the measurements would squash them), markers only within that range.
X_SPAN = 1.25
#: Colour of the knee measured from the data.
MEASURED_KNEE_COLOR = "#2ca02c"


def model_label(m: Model, groups: int) -> str:
    """A model's legend name: its label (e.g. "M/M/2 (2 threads)") and, when a series has
    several groups, the settings of its group."""
    label = str(m.get("label") or m.get("kind"))
    group = m.get("group") or {}
    if groups > 1 and group:
        label += group_text(group)
    return label


def is_primary(m: Model, entry: SeriesModels) -> bool:
    flag = m.get("primary")
    return bool(flag) if isinstance(flag, bool) else m.get("kind") == entry.get("primary")


def model_traces(
    entry: SeriesModels, x_max: float, cap_ms: float | None = None, color: int = 3
) -> tuple[list[Trace], list[Marker]]:
    """Each model's predicted mean: the primary model of each group and the source report's
    reference (M/M/1) shown, the others one click away; the primary models' p99 where they
    have one; points flagged as off a primary model; the primary models' knee and capacity
    and each group's measured knee as vertical markers. Curves stop at X_SPAN * x_max, and
    predictions above `cap_ms` are left out (near capacity they tend to infinity and would
    flatten the measured curve)."""
    models = entry.get("models") or []
    groups = len({str(m.get("group")) for m in models})
    x_limit = X_SPAN * x_max
    tagged = sum(is_primary(m, entry) for m in models) > 1
    traces: list[Trace] = []
    markers: list[Marker] = []
    for i, m in enumerate(models):
        primary = is_primary(m, entry)
        label = model_label(m, groups)
        curve = [c for c in m.get("curve") or [] if (c.get("x") or 0) <= x_limit]
        xs = [c.get("x") for c in curve]
        shown = primary or bool(m.get("reference"))
        for key, suffix in (("mean_ns", ""), ("p99_ns", " p99")):
            values = [to_ms(c.get(key)) for c in curve]
            if key == "p99_ns" and (not primary or all(v is None for v in values)):
                continue
            if cap_ms is not None:
                values = [v if v is None or v <= cap_ms else None for v in values]
            traces.append(
                Trace(
                    "line",
                    label + suffix + (" (primary)" if primary and key == "mean_ns" else ""),
                    xs,
                    values,
                    color=color + i,
                    dash=True,
                    hidden=not shown or key == "p99_ns",
                    markers=False,
                )
            )
        if not primary:
            continue
        flagged = [p for p in m.get("points") or [] if p.get("flag")]
        if flagged:
            traces.append(
                Trace(
                    "points",
                    f"off {label} beyond the 95% interval",
                    [p.get("x") for p in flagged],
                    [to_ms(p.get("measured_mean_ns")) for p in flagged],
                    color=3,
                    symbol="x",
                    hover=[str(p.get("detail", "")) for p in flagged],
                )
            )
        tag = f" ({label})" if tagged else ""
        knee, capacity = m.get("knee_x"), m.get("capacity_per_s")
        if isinstance(knee, int | float) and knee <= x_limit:
            markers.append(Marker(float(knee), f"knee {knee:.3g}{tag}", "#d62728"))
        if isinstance(capacity, int | float) and capacity <= x_limit and axis_is_rate(entry):
            markers.append(Marker(float(capacity), f"capacity {capacity:.3g}/s{tag}"))
    for g in entry.get("groups") or []:
        measured = g.get("measured_knee")
        if not measured or not isinstance(measured.get("x"), int | float):
            continue
        lo, hi = measured["interval_x"]
        where = group_text(g.get("group") or {}) if groups > 1 else ""
        span = f" [{lo:.3g}, {hi:.3g}]" if lo is not None and hi is not None else ""
        markers.append(
            Marker(
                float(measured["x"]),
                f"measured knee {measured['x']:.3g}{span}{where}",
                MEASURED_KNEE_COLOR,
                dash=False,
            )
        )
    return traces, markers


def group_text(group: dict[str, Any]) -> str:
    """A group's swept settings (values as swept: any JSON), as " [k=v ...]"."""
    return " [" + " ".join(f"{k.partition('.')[2]}={v}" for k, v in group.items()) + "]"


def axis_is_rate(entry: SeriesModels) -> bool:
    return entry.get("x") == "rate_per_s"
