"""Figures as data, and their Plotly rendering.

Every figure of a report is defined once as a `Figure` (traces, axes, vertical markers;
`knee.report.kit.figure`) and rendered twice: to an interactive Plotly chart in the HTML
(`plotly_spec`, here) and to a PNG for papers (`knee.report.png`). Values are plain lists;
None is a gap.
"""

from __future__ import annotations

import math
from typing import Any

from knee.report import plotly_json as plotly
from knee.report.kit import axes as kit_axes
from knee.report.kit.figure import (
    LOGIT_TICKS,
    PALETTE,
    Axis,
    Figure,
    Marker,
    Scale,
    Trace,
    TraceKind,
    color,
)

# The figure's data lives in the kit (knee.report.kit.figure), which the axis decisions read;
# it is named here too, where every section takes it from.
__all__ = [
    "LOGIT_TICKS",
    "PALETTE",
    "Axis",
    "Figure",
    "Marker",
    "Scale",
    "Trace",
    "TraceKind",
    "clean",
    "color",
    "logit",
    "plotly_spec",
]


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def clean(values: list[Any] | None) -> list[Any] | None:
    """JSON-safe values: NaN and infinities become None (a gap)."""
    if values is None:
        return None
    out: list[Any] = []
    for v in values:
        if isinstance(v, float) and not math.isfinite(v):
            out.append(None)
        else:
            out.append(v)
    return out


def plotly_spec(fig: Figure) -> plotly.Spec:
    """`{"data", "layout", "config"}` for Plotly.newPlot. A time axis's unit is also in
    `layout.meta.units` (e.g. {"y": "µs"}), for whoever reads the numbers back."""
    fig = kit_axes.for_display(fig)
    data: list[plotly.Trace] = []
    for t in fig.traces:
        data.extend(_plotly_traces(t, fig.x.scale))
    layout: plotly.Layout = {
        "title": {"text": fig.title, "font": {"size": 15}},
        "height": fig.height_px,
        "margin": {"l": 70, "r": 30, "t": 60, "b": 60},
        "hovermode": "closest",
        "xaxis": _plotly_axis(fig, "x"),
        "yaxis": _plotly_axis(fig, "y"),
        "legend": {"orientation": "v"},
        "barmode": "stack" if fig.stacked else "group",
        "boxmode": "group",
        "shapes": [_plotly_marker(m, fig.x.scale) for m in fig.markers],
        "annotations": [_plotly_marker_label(m, fig.x.scale) for m in fig.markers],
    }
    units: dict[str, str] = {
        w: a.time_unit for w, a in (("x", fig.x), ("y", fig.y)) if a.kind == "time"
    }
    if units:
        layout["meta"] = {"units": units}
    return {"data": data, "layout": layout, "config": {"responsive": True, "displaylogo": False}}


def _x_values(xs: list[Any], scale: Scale) -> list[Any]:
    if scale != "logit":
        return clean(list(xs)) or []
    return [logit(p) if p is not None and 0.0 < p < 1.0 else None for p in xs]


def _plotly_axis(fig: Figure, which: kit_axes.Which) -> plotly.Axis:
    axis = fig.x if which == "x" else fig.y
    out: plotly.Axis = {"title": {"text": axis.title}, "zeroline": False, "automargin": True}
    if axis.scale == "linear" and kit_axes.integer_ticks(fig, which):
        # Plotly has no "integers only": a fixed whole step from 0 does it (zoom keeps it).
        step = kit_axes.integer_step(kit_axes.axis_values(fig, which))
        out.update({"tick0": 0, "dtick": step})
    if axis.scale == "log":
        out["type"] = "log"
    elif axis.scale == "category":
        out["type"] = "category"
    elif axis.scale == "logit":
        # Plotly has no logit axis: values are logit(p), ticks name the percentiles.
        out["tickvals"] = [logit(p) for p in LOGIT_TICKS]
        out["ticktext"] = [_percent(p) for p in LOGIT_TICKS]
    return out


def _percent(p: float) -> str:
    return f"{100 * p:.5g}"


def _plotly_traces(t: Trace, scale: Scale) -> list[plotly.Trace]:
    c = color(t.color)
    common: plotly.Trace = {"name": t.name, "legendgroup": t.name, "showlegend": t.legend}
    if t.hidden:
        common["visible"] = "legendonly"
    x = _x_values(t.x, scale)
    if t.kind in ("line", "points"):
        tr: plotly.Trace = {
            "type": "scatter",
            "mode": "markers" if t.kind == "points" else "lines+markers" if t.markers else "lines",
            "x": x,
            "y": clean(t.y),
            "line": {"color": c, "dash": "dash" if t.dash else "solid"},
            "marker": {"color": c, "symbol": t.symbol, "size": 7},
            **common,
        }
        if t.width is not None:
            tr["line"]["width"] = t.width
        if t.hover is not None:
            tr["text"] = t.hover
            tr["hovertemplate"] = "%{text}<extra>%{fullData.name}</extra>"
        if t.lo is not None and t.hi is not None:
            tr["error_y"] = {
                "type": "data",
                "symmetric": False,
                "array": [_gap(h, y, +1) for h, y in zip(t.hi, t.y, strict=True)],
                "arrayminus": [_gap(lo, y, -1) for lo, y in zip(t.lo, t.y, strict=True)],
                "color": c,
                "thickness": 1,
            }
        return [tr]
    if t.kind == "band":
        keep = [
            (xi, lo, hi)
            for xi, lo, hi in zip(x, t.lo or [], t.hi or [], strict=True)
            if xi is not None and lo is not None and hi is not None
        ]
        xs = [k[0] for k in keep]
        poly_x = xs + xs[::-1]
        poly_y = [k[2] for k in keep] + [k[1] for k in keep][::-1]
        return [
            {
                "type": "scatter",
                "mode": "lines",
                "x": poly_x,
                "y": clean(poly_y),
                "fill": "toself",
                "fillcolor": _rgba(c, 0.18),
                "line": {"width": 0, "color": c},
                "hoverinfo": "skip",
                **common,
            }
        ]
    if t.kind == "bar":
        tr = {"type": "bar", "x": x, "y": clean(t.y), "marker": {"color": c}, **common}
        if t.hover is not None:
            tr["text"] = t.hover
            tr["hovertemplate"] = "%{text}<extra>%{fullData.name}</extra>"
            tr["textposition"] = "none"
        return [tr]
    if t.kind == "box":
        boxes = t.boxes or []
        outliers: plotly.Trace = {}
        if any(b.get("outliers") for b in boxes):
            # A 2D y (one list per box) only places sample points; the stats stay given.
            outliers = {
                "y": [list(b.get("outliers") or []) for b in boxes],
                "boxpoints": "outliers",
            }
        return [
            {
                "type": "box",
                **outliers,
                "x": x,
                "q1": [b["q1"] for b in boxes],
                "median": [b["median"] for b in boxes],
                "q3": [b["q3"] for b in boxes],
                "lowerfence": [b["lo"] for b in boxes],
                "upperfence": [b["hi"] for b in boxes],
                "mean": [b["mean"] for b in boxes],
                "marker": {"color": c},
                "line": {"color": c},
                **common,
            }
        ]
    if t.kind == "heatmap":
        return [
            {
                "type": "heatmap",
                "x": [str(v) for v in t.x],
                "y": [str(v) for v in t.y],
                "z": [clean(row) for row in (t.z or [])],
                "colorscale": "Viridis",
                "colorbar": {"title": {"text": t.z_title}},
                "texttemplate": "%{z:.3g}",
                "hovertemplate": "%{x} / %{y}: %{z:.4g}<extra></extra>",
                **common,
            }
        ]
    raise ValueError(f"unknown trace kind {t.kind!r}")


def _gap(bound: float | None, y: float | None, sign: int) -> float | None:
    if bound is None or y is None:
        return None
    return max(0.0, sign * (bound - y))


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _marker_x(m: Marker, scale: Scale) -> float:
    return logit(m.x) if scale == "logit" else m.x


def _plotly_marker(m: Marker, scale: Scale) -> plotly.Shape:
    x = _marker_x(m, scale)
    return {
        "type": "line",
        "xref": "x",
        "yref": "paper",
        "x0": x,
        "x1": x,
        "y0": 0,
        "y1": 1,
        "line": {"color": m.color, "width": 1, "dash": "dash" if m.dash else "solid"},
    }


def _plotly_marker_label(m: Marker, scale: Scale) -> plotly.Annotation:
    return {
        "x": _marker_x(m, scale),
        "xref": "x",
        "y": 1,
        "yref": "paper",
        "yanchor": "top",
        "xanchor": "left",
        "text": m.label,
        "showarrow": False,
        "textangle": -90,
        "font": {"size": 10, "color": m.color},
    }
