"""Axis decisions, made once for both renderers (`knee.report.figures.plotly_spec` for the
HTML, `knee.report.png` for the PNGs), so the interactive chart and the paper figure read
the same:

- a count axis (nodes, clients, threads) has ticks at whole numbers only. An axis is a count
  when declared `Axis(..., kind="count")`, or when it is a plain value axis and every value
  drawn on it was given as an integer (Python or numpy int: counts come as ints, measured
  quantities as floats);
- a time axis (`Axis(..., kind="time")`, its values in `Axis.time_unit`, ms unless told) is
  drawn in the unit in which the largest value drawn reads 1 to 999: ns, µs, ms or s. The
  values are scaled and the title gets the unit, so a log axis of 0.6 ms values reads
  "600 µs", not "6×10⁻¹ ms".

`for_display(fig)` applies the time decision (a scaled copy of the figure);
`integer_ticks` and `integer_step` the count one. It reads a figure as data
(`knee.report.kit.figure`) and imports no renderer, so both renderers can import it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Literal

import numpy as np

from knee.report.kit.figure import Axis, AxisKind, Box, Figure, TimeUnit, Trace

__all__ = ["AxisKind", "TimeUnit"]  # named here too: the kit's axis vocabulary

Which = Literal["x", "y"]

#: Nanoseconds in each unit a time axis can be drawn in, smallest first.
NS_PER_UNIT: dict[TimeUnit, float] = {"ns": 1.0, "µs": 1e3, "ms": 1e6, "s": 1e9}
#: A count axis over a wide span gets at most about this many ticks (a step of 1, 2 or 5
#: times a power of ten); the step never goes below 1.
MAX_COUNT_TICKS = 8
#: Box statistics drawn on the value axis.
BOX_KEYS = ("lo", "q1", "median", "q3", "hi", "mean")
#: Scales whose positions are numbers a unit or a tick step applies to.
NUMERIC_SCALES = ("linear", "log")


def time_unit(values: Any, given: TimeUnit = "ms") -> TimeUnit:
    """The unit in which the largest finite positive value reads 1 to 999 (ns below 1 ns,
    s from 1000 s up); `given` when there is no such value."""
    v = _numbers(values)
    v = v[np.isfinite(v) & (v > 0)]
    if not len(v):
        return given
    top_ns = float(v.max()) * NS_PER_UNIT[given]
    fits = [u for u, ns in NS_PER_UNIT.items() if top_ns >= ns]
    return fits[-1] if fits else "ns"


def integer_step(values: Any) -> int:
    """The step between whole-number ticks over the span of `values`: 1, 2 or 5 times a
    power of ten, at least 1, giving at most about MAX_COUNT_TICKS ticks."""
    v = _numbers(values)
    v = v[np.isfinite(v)]
    span = float(v.max() - v.min()) if len(v) else 0.0
    raw = span / MAX_COUNT_TICKS
    if raw <= 1:
        return 1
    power = 10 ** math.floor(math.log10(raw))
    return int(next(m * power for m in (1, 2, 5, 10) if m * power >= raw))


def integral(values: list[Any]) -> bool:
    """Every value given as an integer (None, a gap, aside), and at least one value."""
    known = [v for v in values if v is not None]
    return bool(known) and all(
        isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_) for v in known
    )


def integer_ticks(fig: Figure, which: Which) -> bool:
    """Whether an axis of `fig` gets whole-number ticks only (see the module's doc)."""
    axis = fig.x if which == "x" else fig.y
    if axis.scale not in NUMERIC_SCALES:
        return False
    if axis.kind == "count":
        return True
    return axis.kind == "value" and integral(axis_values(fig, which))


def axis_values(fig: Figure, which: Which, shown_only: bool = False) -> list[Any]:
    """Every value `fig` draws along an axis (hidden traces too, unless `shown_only`): x of
    lines, points, bands and bars; y, error bars, band edges, bars and box statistics."""
    out: list[Any] = []
    for t in fig.traces:
        if t.kind == "heatmap" or (shown_only and t.hidden):
            continue
        if which == "x":
            if t.kind != "box":
                out.extend(t.x)
            continue
        if t.kind in ("line", "points", "bar"):
            out.extend(t.y)
        out.extend([*(t.lo or []), *(t.hi or [])])
        for b in t.boxes or []:
            out.extend([*(b.get(k) for k in BOX_KEYS), *(b.get("outliers") or [])])
    return out


def for_display(fig: Figure) -> Figure:
    """`fig` as drawn: each time axis in the unit its shown values fit (values scaled, unit
    in the title and in `Axis.time_unit`); `fig` itself when it has no time axis."""
    scale = {"x": 1.0, "y": 1.0}
    axes: dict[str, Axis] = {"x": fig.x, "y": fig.y}
    for which in ("x", "y"):
        axis = axes[which]
        if axis.kind != "time" or axis.scale not in NUMERIC_SCALES:
            continue
        unit = time_unit(axis_values(fig, which, shown_only=True), axis.time_unit)
        scale[which] = NS_PER_UNIT[axis.time_unit] / NS_PER_UNIT[unit]
        axes[which] = replace(axis, title=f"{axis.title} ({unit})", time_unit=unit)
    if axes["x"] is fig.x and axes["y"] is fig.y:
        return fig
    fx, fy = scale["x"], scale["y"]
    return replace(
        fig,
        x=axes["x"],
        y=axes["y"],
        traces=[_scaled(t, fx, fy) for t in fig.traces],
        markers=[replace(m, x=m.x * fx) for m in fig.markers] if fx != 1.0 else fig.markers,
    )


def _scaled(t: Trace, fx: float, fy: float) -> Trace:
    if t.kind == "heatmap" or (fx == 1.0 and fy == 1.0):
        return t
    return replace(
        t,
        x=t.x if t.kind == "box" else _times(t.x, fx),
        y=_times(t.y, fy) if t.kind in ("line", "points", "bar") else t.y,
        lo=None if t.lo is None else _times(t.lo, fy),
        hi=None if t.hi is None else _times(t.hi, fy),
        boxes=None if t.boxes is None else [_box_times(b, fy) for b in t.boxes],
    )


def _times(values: list[Any], factor: float) -> list[Any]:
    if factor == 1.0:
        return values
    return [v * factor if _is_number(v) else v for v in values]


def _box_times(box: Box, factor: float) -> Box:
    out = Box(
        lo=box["lo"] * factor,
        q1=box["q1"] * factor,
        median=box["median"] * factor,
        q3=box["q3"] * factor,
        hi=box["hi"] * factor,
        mean=box["mean"] * factor,
    )
    if "outliers" in box:
        out["outliers"] = [v * factor for v in box["outliers"]]
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float | np.number) and not isinstance(v, bool | np.bool_)


def _numbers(values: Any) -> np.ndarray:
    """The numbers among `values` as floats (None, a gap, and categories left out)."""
    return np.asarray([v for v in values if _is_number(v)], dtype=float)
