"""Trace builders shared by the sections, the matrix findings and `knee compare`."""

from __future__ import annotations

from typing import Any

from knee.report.data import SeriesAxis
from knee.report.figures import Marker, Trace


def to_ms(ns: Any) -> float | None:
    return None if ns is None else float(ns) / 1e6


def stat(point: dict[str, Any], dist: str, key: str) -> float | None:
    return to_ms((point.get(dist) or {}).get(key))


def ci(point: dict[str, Any], dist: str, key: str) -> tuple[float | None, float | None]:
    pair = ((point.get(dist) or {}).get("ci") or {}).get(key)
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


def model_traces(
    entry: dict[str, Any], cap_ms: float | None = None, color: int = 3
) -> tuple[list[Trace], list[Marker]]:
    """Each model's predicted mean (the primary one shown, the others one click away), the
    primary model's p99 where it has one, points flagged as off the model, and the primary
    model's knee and capacity as vertical markers. Predictions above `cap_ms` are left out
    (near capacity they tend to infinity and would flatten the measured curve)."""

    def capped(values: list[float | None]) -> list[float | None]:
        if cap_ms is None:
            return values
        return [v if v is None or v <= cap_ms else None for v in values]

    traces: list[Trace] = []
    markers: list[Marker] = []
    primary = entry.get("primary")
    for i, m in enumerate(entry.get("models") or []):
        curve = m.get("curve") or []
        kind = str(m.get("kind"))
        servers = m.get("servers")
        label = f"{kind} model" + (f" (c={servers})" if kind == "M/M/c" and servers else "")
        is_primary = kind == primary
        xs = [c.get("x") for c in curve]
        traces.append(
            Trace(
                "line",
                label,
                xs,
                capped([to_ms(c.get("mean_ns")) for c in curve]),
                color=color + i,
                dash=True,
                hidden=not is_primary,
            )
        )
        if is_primary and any(c.get("p99_ns") is not None for c in curve):
            traces.append(
                Trace(
                    "line",
                    f"{label} p99",
                    xs,
                    capped([to_ms(c.get("p99_ns")) for c in curve]),
                    color=color + i,
                    dash=True,
                    hidden=True,
                )
            )
        if not is_primary:
            continue
        flagged = [p for p in m.get("points") or [] if p.get("flag")]
        if flagged:
            traces.append(
                Trace(
                    "points",
                    "differs from model beyond the 95% interval",
                    [p.get("x") for p in flagged],
                    [to_ms(p.get("measured_mean_ns")) for p in flagged],
                    color=3,
                    symbol="x",
                    hover=[str(p.get("detail", "")) for p in flagged],
                )
            )
        if isinstance(m.get("knee_x"), int | float):
            markers.append(Marker(float(m["knee_x"]), f"knee {m['knee_x']:.3g}", "#d62728"))
        if isinstance(m.get("capacity_per_s"), int | float) and axis_is_rate(entry):
            markers.append(
                Marker(float(m["capacity_per_s"]), f"capacity {m['capacity_per_s']:.3g}/s")
            )
    return traces, markers


def axis_is_rate(entry: dict[str, Any]) -> bool:
    return entry.get("x") == "rate_per_s"
