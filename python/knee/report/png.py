"""Renders a `Figure` to a PNG with matplotlib (for papers; the HTML has the same figure
interactive)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import LogFormatterSciNotation, MaxNLocator

from knee.report.figures import LOGIT_TICKS, Axis, Figure, Trace, color
from knee.report.kit import axes as kit_axes

#: Plotly marker symbols in matplotlib's terms.
_SYMBOLS = {"circle": "o", "x": "x", "triangle-up": "^", "square": "s", "diamond": "D"}
#: Plotly's "-open" variants: the same marker with an unfilled face.
_OPEN = "-open"
#: A trace's width is given in px (Plotly's unit); matplotlib's is points (1/72 inch), and
#: Plotly's px is 1/96 inch.
PT_PER_PX = 72 / 96
#: PNG size: 8 inches wide at this resolution.
DPI = 120
WIDTH_IN = 8.0
#: More legend entries than this do not fit beside the plot (the axes collapse): the PNG then
#: has no legend, and the HTML's interactive legend names the lines.
LEGEND_MAX = 16
#: Log-axis labels within this many decades of 1 are written as numbers ("600", "0.05"),
#: beyond as powers of ten.
PLAIN_DECADES = 4


class PlainLogFormatter(LogFormatterSciNotation):
    """Labels on a log axis as numbers, where matplotlib writes "6×10²" between decades;
    which ticks get a label stays matplotlib's choice."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        label = super().__call__(x, pos)
        if label and x > 0 and abs(math.log10(x)) < PLAIN_DECADES:
            return f"$\\mathdefault{{{x:g}}}$"
        return label


def write_png(fig: Figure, path: Path) -> None:
    """One PNG of `fig` (its hidden traces left out)."""
    render(fig).savefig(path, pil_kwargs={"compress_level": 3})


def render(fig: Figure) -> MplFigure:
    """`fig` drawn by matplotlib, its hidden traces left out. Uses matplotlib's object API,
    not pyplot: no global state, nothing opens a window."""
    fig = kit_axes.for_display(fig)
    count = {w: kit_axes.integer_ticks(fig, w) for w in ("x", "y")}
    # Constrained layout: one draw per PNG (bbox_inches="tight" would draw twice).
    size_in = (WIDTH_IN, max(3.0, fig.height_px / 100))
    mfig = MplFigure(figsize=size_in, dpi=DPI, layout="constrained")
    FigureCanvasAgg(mfig)
    ax = mfig.add_subplot()
    traces = [t for t in fig.traces if not t.hidden]
    categories = _categories(traces) if fig.x.scale == "category" else []
    grouped = [t for t in traces if t.kind in ("bar", "box")]
    bottoms: dict[Any, float] = {}
    for t in traces:
        slot = grouped.index(t) if t in grouped and not fig.stacked else 0
        slots = 1 if fig.stacked else max(1, len(grouped))
        _draw(ax, t, categories, slot, slots, bottoms, fig.stacked)
    for m in fig.markers:
        ax.axvline(m.x, color=m.color, linestyle="--" if m.dash else "-", linewidth=0.8)
        ax.annotate(
            m.label,
            (m.x, 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="right",
            fontsize=7,
            color=m.color,
        )
    _axis(ax, _drawable(fig.x, traces, "x"), "x", categories, count["x"])
    if fig.x.scale == "logit":
        _logit_limits(ax, traces)
    _axis(ax, _drawable(fig.y, traces, "y"), "y", [], count["y"])
    ax.set_title(fig.title, fontsize=11)
    ax.grid(True, alpha=0.3)
    named = sum(t.legend and t.kind not in ("heatmap", "band") for t in traces)
    if 0 < named <= LEGEND_MAX:
        ax.legend(fontsize=7, loc="best")
    return mfig


def _drawable(axis: Axis, traces: list[Trace], which: str) -> Axis:
    """A log axis with no positive value to show (every request of the run failed: no
    latency, no throughput) is drawn linear: matplotlib refuses to log-scale it, and an
    empty figure must not fail the report."""
    if axis.scale != "log":
        return axis
    for t in traces:
        for values in (getattr(t, which), t.lo, t.hi) if which == "y" else (t.x,):
            v = _values([x if isinstance(x, int | float) else None for x in values or []])
            if np.any(np.isfinite(v) & (v > 0)):
                return axis
    return dataclasses.replace(axis, scale="linear")


def _categories(traces: list[Trace]) -> list[Any]:
    seen: dict[Any, None] = {}
    for t in traces:
        for x in t.x:
            seen.setdefault(x, None)
    return list(seen)


def _positions(t: Trace, categories: list[Any], slot: int, slots: int) -> tuple[np.ndarray, float]:
    width = 0.8 / slots
    base = np.array([categories.index(x) for x in t.x], dtype=float)
    return base - 0.4 + width * (slot + 0.5), width


def _values(v: list[Any] | None) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in (v or [])], dtype=float)


def _draw(
    ax: Any,
    t: Trace,
    categories: list[Any],
    slot: int,
    slots: int,
    bottoms: dict[Any, float],
    stacked: bool,
) -> None:
    c = color(t.color)
    label = t.name if t.legend else None
    if t.kind in ("line", "points"):
        x = np.arange(len(t.x)) if categories else _values(t.x)
        y = _values(t.y)
        style = "--" if t.dash else "-"
        ax.plot(
            x,
            y,
            linestyle=style if t.kind == "line" else "none",
            marker=(
                _SYMBOLS.get(t.symbol.removesuffix(_OPEN), "o")
                if t.markers or t.kind == "points"
                else None
            ),
            markerfacecolor="none" if t.symbol.endswith(_OPEN) else None,
            ms=3,
            color=c,
            label=label,
            linewidth=t.width * PT_PER_PX if t.width is not None else None,
        )
        if t.lo is not None and t.hi is not None:
            lo, hi = _values(t.lo), _values(t.hi)
            err = np.vstack([np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)])
            ax.errorbar(x, y, yerr=np.nan_to_num(err), fmt="none", ecolor=c, lw=0.8)
    elif t.kind == "band":
        ax.fill_between(_values(t.x), _values(t.lo), _values(t.hi), color=c, alpha=0.18, lw=0)
    elif t.kind == "bar":
        pos, width = _positions(t, categories, slot, slots)
        y = np.nan_to_num(_values(t.y))
        bottom = np.array([bottoms.get(x, 0.0) for x in t.x]) if stacked else 0.0
        ax.bar(pos, y, width=width, bottom=bottom, color=c, label=label)
        if stacked:
            for x, v in zip(t.x, y, strict=True):
                bottoms[x] = bottoms.get(x, 0.0) + float(v)
    elif t.kind == "box":
        pos, width = _positions(t, categories, slot, slots)
        stats = [
            {
                "med": b["median"],
                "q1": b["q1"],
                "q3": b["q3"],
                "whislo": b["lo"],
                "whishi": b["hi"],
                "mean": b["mean"],
                "fliers": list(b.get("outliers") or []),
            }
            for b in (t.boxes or [])
        ]
        ax.bxp(
            stats,
            positions=pos,
            widths=width * 0.9,
            showmeans=True,
            patch_artist=True,
            boxprops={"facecolor": c, "alpha": 0.5},
            medianprops={"color": "black"},
            meanprops={"marker": "^", "markerfacecolor": "white", "markeredgecolor": c},
            flierprops={"marker": "o", "markersize": 2, "markeredgecolor": c, "alpha": 0.6},
            manage_ticks=False,
        )
        ax.plot([], [], "s", color=c, label=label)  # a legend entry for the boxes
    elif t.kind == "heatmap":
        z = np.array([_values(row) for row in (t.z or [])])
        im = ax.imshow(z, aspect="auto", origin="lower", cmap="viridis")
        ax.set_xticks(range(len(t.x)), [str(v) for v in t.x])
        ax.set_yticks(range(len(t.y)), [str(v) for v in t.y])
        for (i, j), v in np.ndenumerate(z):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=7, color="white")
        ax.figure.colorbar(im, ax=ax, label=t.z_title)


def _logit_limits(ax: Any, traces: list[Trace]) -> None:
    """Fixed ticks would stretch a logit axis to 99.999%: keep it to the data."""
    xs = np.concatenate([_values(t.x) for t in traces]) if traces else np.array([])
    xs = xs[(xs > 0) & (xs < 1)]
    if len(xs):
        ax.set_xlim(xs.min(), xs.max())


def _axis(ax: Any, axis: Axis, which: str, categories: list[Any], count: bool) -> None:
    getattr(ax, f"set_{which}label")(axis.title)
    ticks = getattr(ax, f"{which}axis")
    if axis.scale == "linear" and count:
        ticks.set_major_locator(MaxNLocator(integer=True))
    if axis.scale == "log":
        getattr(ax, f"set_{which}scale")("log")
        ticks.set_major_formatter(PlainLogFormatter())
        ticks.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False))
    elif axis.scale == "logit":
        getattr(ax, f"set_{which}scale")("logit")
        getattr(ax, f"set_{which}ticks")(list(LOGIT_TICKS), [f"{100 * p:.5g}" for p in LOGIT_TICKS])
    elif axis.scale == "category" and categories:
        ax.set_xticks(range(len(categories)), [str(c) for c in categories], rotation=30, ha="right")
