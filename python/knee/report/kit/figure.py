"""A figure as data: traces, axes, vertical markers (rendered by `knee.report.figures` to
Plotly and by `knee.report.png` to a PNG). It imports nothing of the report, so the axis
decisions (`knee.report.kit.axes`) can read a figure without importing a renderer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

AxisKind = Literal["value", "count", "time"]


class Box(TypedDict):
    """One box of a box trace: its whiskers (lo, hi), quartiles and mean, and the values
    beyond the whiskers drawn as points."""

    lo: float
    q1: float
    median: float
    q3: float
    hi: float
    mean: float
    outliers: NotRequired[list[float]]


TimeUnit = Literal["ns", "µs", "ms", "s"]

#: Colours by index, shared by both renderers (matplotlib's tab10).
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)

Scale = Literal["linear", "log", "logit", "category"]
TraceKind = Literal["line", "points", "band", "bar", "box", "heatmap"]

#: Percentiles labelled on a logit axis.
LOGIT_TICKS = (0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999)


def color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


@dataclass
class Axis:
    """An axis: its title, scale, and what it measures (`knee.report.kit.axes`): "count"
    gets whole-number ticks; "time" is drawn in the unit that fits its values (the title
    then names no unit: the renderers add it), which are given in `time_unit`."""

    title: str
    scale: Scale = "linear"
    kind: AxisKind = "value"
    time_unit: TimeUnit = "ms"


@dataclass
class Trace:
    """One series of a figure.

    line/points: `x`, `y`, optional error bars `lo`/`hi` (absolute values). band: the area
    between `lo` and `hi` over `x` (a confidence band). bar: `y` per category `x`. box: one
    box per category `x` from precomputed `boxes` ({"q1", "median", "q3", "lo", "hi",
    "mean"}, optionally "outliers": values beyond the whiskers, drawn as points). heatmap:
    `z[row][col]` over categories `x` (columns) and `y` (rows).
    `hidden` traces start switched off in the HTML legend and are left out of the PNG.
    """

    kind: TraceKind
    name: str
    x: list[Any] = field(default_factory=list)
    y: list[Any] = field(default_factory=list)
    lo: list[float | None] | None = None
    hi: list[float | None] | None = None
    color: int = 0
    dash: bool = False
    symbol: str = "circle"
    markers: bool = True  # line: draw a marker at each point
    width: float | None = None  # line: its width in px (None: the renderer's default)
    legend: bool = True
    hidden: bool = False
    hover: list[str] | None = None
    boxes: list[Box] | None = None
    z: list[list[float | None]] | None = None
    z_title: str = ""


@dataclass
class Marker:
    """A vertical line across the plot: an event, a knee, a capacity."""

    x: float
    label: str
    color: str = "#555555"
    dash: bool = True


@dataclass
class Figure:
    id: str  # unique in a report: the PNG is figures/<id>.png
    title: str
    x: Axis
    y: Axis
    traces: list[Trace]
    markers: list[Marker] = field(default_factory=list)
    caption: str = ""
    stacked: bool = False  # bars stack instead of standing side by side
    height_px: int = 420
