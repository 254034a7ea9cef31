"""Trace builders shared by the sections, the matrix findings and `knee compare`."""

from __future__ import annotations

from typing import Any

from knee.report.data import SeriesAxis
from knee.report.figures import Marker, Trace


def to_ms(ns: Any) -> float | None:
    return None if ns is None else float(ns) / 1e6


def _source(point: dict[str, Any], dist: str, key: str) -> dict[str, Any]:
    """The distribution a statistic is read from. The headline latency has no mean when a
    request failed (docs/statistics.md): a latency mean is always the OK replies' mean."""
    if dist == "latency_ns" and key in ("mean", "std") and point.get("latency_ok_ns"):
        return point["latency_ok_ns"]
    return point.get(dist) or {}


def stat(point: dict[str, Any], dist: str, key: str) -> float | None:
    return to_ms(_source(point, dist, key).get(key))


def ci(point: dict[str, Any], dist: str, key: str) -> tuple[float | None, float | None]:
    pair = (_source(point, dist, key).get("ci") or {}).get(key)
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        return None, None
    return to_ms(pair[0]), to_ms(pair[1])


def by_x(points: list[dict[str, Any]], axis: SeriesAxis) -> list[dict[str, Any]]:
    """The points that have an x value, in increasing x."""
    return sorted((p for p in points if isinstance(axis.x(p), int | float)), key=axis.x)


def latency_traces(
    points: list[dict[str, Any]],
    axis: SeriesAxis,
    name: str,
    color: int,
    keys: tuple[str, ...] = ("mean", "p50", "p99"),
    dist: str = "latency_ns",
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


def model_label(m: dict[str, Any], groups: int) -> str:
    """A model's legend name: its label (e.g. "M/M/2 (2 threads)") and, when a series has
    several groups, the settings of its group."""
    label = str(m.get("label") or m.get("kind"))
    group = m.get("group") or {}
    if groups > 1 and group:
        label += " [" + " ".join(f"{k.partition('.')[2]}={v}" for k, v in group.items()) + "]"
    return label


def model_traces(
    entry: dict[str, Any], x_max: float, cap_ms: float | None = None, color: int = 3
) -> tuple[list[Trace], list[Marker]]:
    """Each model's predicted mean (the primary ones and the source report's M/M/1 reference
    shown, the others one click away), the primary models' p99 where they have one, points
    flagged as off the model, and the primary models' knee and capacity as vertical
    markers. Curves stop at X_SPAN * x_max and predictions above `cap_ms` are left out (near
    capacity they tend to infinity and would flatten the measured curve)."""
    models = entry.get("models") or []
    primary = entry.get("primary")

    def is_primary_model(m: dict[str, Any]) -> bool:  # older runs name one kind per series
        return bool(m.get("primary", m.get("kind") == primary))

    primaries = [m for m in models if is_primary_model(m)]
    groups = len({str(m.get("group")) for m in models})
    x_limit = X_SPAN * x_max
    traces: list[Trace] = []
    markers: list[Marker] = []
    for i, m in enumerate(models):
        is_primary = is_primary_model(m)
        shown = is_primary or bool(m.get("reference"))
        label = model_label(m, groups)
        curve = [c for c in m.get("curve") or [] if (c.get("x") or 0) <= x_limit]
        xs = [c.get("x") for c in curve]
        for key, suffix, hidden in (("mean_ns", "", not shown), ("p99_ns", " p99", True)):
            values = [to_ms(c.get(key)) for c in curve]
            if key == "p99_ns" and (not is_primary or all(v is None for v in values)):
                continue
            if cap_ms is not None:
                values = [v if v is None or v <= cap_ms else None for v in values]
            traces.append(
                Trace(
                    "line",
                    label + suffix,
                    xs,
                    values,
                    color=color + i,
                    dash=True,
                    hidden=hidden,
                    markers=False,
                )
            )
        if not is_primary:
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
        tag = f" ({label})" if len(primaries) > 1 else ""
        knee, capacity = m.get("knee_x"), m.get("capacity_per_s")
        if isinstance(knee, int | float) and knee <= x_limit:
            markers.append(Marker(float(knee), f"knee {knee:.3g}{tag}", "#d62728"))
        if isinstance(capacity, int | float) and capacity <= x_limit and axis_is_rate(entry):
            markers.append(Marker(float(capacity), f"capacity {capacity:.3g}/s{tag}"))
    return traces, markers


def axis_is_rate(entry: dict[str, Any]) -> bool:
    return entry.get("x") == "rate_per_s"
