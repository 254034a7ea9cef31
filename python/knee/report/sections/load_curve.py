"""Latency vs load, per series: mean (OK requests), p50 and p99 (every request) with 95%
bands against the achieved arrival rate (the offered rate in the hover text), unstable
points drawn apart (open circles, never joined to the curve), the models overlaid (each
group's primary model and the source report's M/M/1 reference shown, the others one click
away), the models' knee and capacity and the knee measured from the data marked; and
achieved vs offered rate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from knee.models.types import ModelGroup, ModelPoint, SeriesModels
from knee.report import fmt
from knee.report.data import ReportRun, SeriesAxis
from knee.report.figures import Axis, Figure, Marker, Trace
from knee.report.html import Section
from knee.report.kit import Col, esc, finding, note, table
from knee.report.kit.figure import Scale
from knee.report.traces import (
    by_x,
    group_text,
    is_primary,
    latency_traces,
    model_label,
    model_traces,
    stability,
    stat,
)
from knee.report.types import DistName
from knee.stats.summary import PointStats

#: Model predictions are drawn up to this multiple of the largest measured p99 of the
#: stable points.
MODEL_CAP = 3.0
#: The latency axis turns logarithmic when an unstable point's mean exceeds the stable
#: points' largest p99 by this factor (a growing queue would flatten the curve).
LOG_AXIS_FACTOR = 10.0


@dataclass
class AchievedAxis(SeriesAxis):
    """A rate series plotted against the rate requests were really sent at (the offered
    rate where a point has no achieved rate)."""

    def x(self, point: PointStats) -> Any:
        achieved = point.get("achieved_rate_per_s")
        return achieved if achieved else point.get("target_rate_per_s")


def _unstable(point: PointStats) -> bool:
    return stability(point, "verdict") == "unstable"


def section(rr: ReportRun) -> Section:
    blocks: list[str | Figure] = []
    if rr.models_error:
        blocks.append(note(f"No model overlay: {rr.models_error}"))
    for series in rr.series():
        points = rr.points_of(series)
        axis = rr.axes[series]
        model = rr.model_for(series)
        if len({axis.x(p) for p in by_x(points, axis)}) >= 2:
            blocks.extend(series_blocks(series, points, axis, model))
        elif model is not None:  # one offered load: no curve, but the fit still tells
            blocks.extend([f"<h3>{esc(series)}</h3>", _model_text(model, _labels(points))])
    if not blocks:
        blocks.append(note("No series has two or more loads to plot against."))
    return Section("load", "Latency vs load", blocks)


def plot_axis(axis: SeriesAxis) -> SeriesAxis:
    """The x axis the load curves use: the achieved arrival rate for a rate series."""
    if axis.key != "target_rate_per_s":
        return axis
    return AchievedAxis(axis.series, axis.key, "achieved arrival rate (requests/s)", axis.factors)


def _x_axis(axis: SeriesAxis) -> Axis:
    """The x axis of a series' figures: clients are a count (whole-number ticks)."""
    return Axis(axis.title, kind="count" if axis.key == "load.clients" else "value")


def _hover_label(point: PointStats, rate_axis: bool) -> PointStats:
    """A copy of the point whose label also names its offered and achieved rates."""
    if not rate_axis:
        return point
    target, achieved = point.get("target_rate_per_s"), point.get("achieved_rate_per_s")
    text = f"offered {fmt.num(target)}/s, achieved {fmt.num(achieved)}/s"
    return point | {"label": f"{point.get('label')} ({text})"}


def series_blocks(
    series: str, points: list[PointStats], axis: SeriesAxis, model: SeriesModels | None
) -> list[str | Figure]:
    groups = _groups(points, axis)
    x_axis = plot_axis(axis)
    rate_axis = axis.key == "target_rate_per_s"
    # Headline percentiles (failures rank above every success); the mean is the OK
    # requests' (knee.report.traces.stat), as the models predict.
    dist: DistName = "latency_ns"
    traces: list[Trace] = []
    for i, (group, members) in enumerate(groups.items()):
        stable = [_hover_label(p, rate_axis) for p in members if not _unstable(p)]
        if len(groups) == 1:
            traces.extend(latency_traces(stable, x_axis, group, color=0, dist=dist))
        else:  # one colour per group; p99 dashed
            traces.extend(
                latency_traces(
                    stable, x_axis, group, i, keys=("mean", "p99"), dist=dist, one_color=True
                )
            )
        traces.extend(_unstable_traces(members, x_axis, group, 0 if len(groups) == 1 else i, dist))
    stable_points = [p for p in points if not _unstable(p)]
    worst = max((stat(p, dist, "p99") or 0.0 for p in stable_points), default=0.0)
    markers: list[Marker] = []
    if model is not None:
        x_max = max(x_axis.x(p) for p in by_x(points, x_axis))
        extra, markers = model_traces(model, x_max, MODEL_CAP * worst if worst else None)
        traces.extend(extra)
    highest = max((stat(p, dist, "mean") or 0.0 for p in points if _unstable(p)), default=0.0)
    scale: Scale = "log" if worst and highest > LOG_AXIS_FACTOR * worst else "linear"
    fig = Figure(
        f"load-{series}",
        f"{series}: latency vs {x_axis.title}",
        _x_axis(x_axis),
        Axis("latency", scale, kind="time"),
        traces,
        markers,
        caption=_caption(x_axis, model, any(_unstable(p) for p in points), scale),
    )
    blocks: list[str | Figure] = [fig]
    if model is not None:
        blocks.append(_model_text(model, _labels(points)))
    if rate_axis:
        blocks.append(_rate_figure(series, groups, axis))
    return blocks


def _unstable_traces(
    members: list[PointStats], axis: SeriesAxis, group: str, color: int, dist: DistName
) -> list[Trace]:
    """Unstable points: their OK mean as open circles, the stability verdict in the hover.
    Their mean depends on how long the point ran, so no line joins them to the curve."""
    pts = by_x([p for p in members if _unstable(p)], axis)
    if not pts:
        return []
    hover = []
    for p in pts:
        detail = stability(p, "detail") or "unstable"
        hover.append(
            f"{_hover_label(p, axis.key == 'target_rate_per_s').get('label')}: mean "
            f"{fmt.num(stat(p, dist, 'mean'))} ms, p99 {fmt.num(stat(p, dist, 'p99'))} ms; "
            f"{detail}"
        )
    return [
        Trace(
            "points",
            f"{group} unstable (not fitted)".strip(),
            [axis.x(p) for p in pts],
            [stat(p, dist, "mean") for p in pts],
            color=color,
            symbol="circle-open",
            hover=hover,
        )
    ]


def _groups(points: list[PointStats], axis: SeriesAxis) -> dict[str, list[PointStats]]:
    groups: dict[str, list[PointStats]] = {}
    for p in points:
        groups.setdefault(axis.group(p), []).append(p)
    return groups


def _caption(axis: SeriesAxis, model: SeriesModels | None, any_unstable: bool, scale: str) -> str:
    text = (
        "Latency after warm-up, from the intended send time: the mean of the successful "
        "requests; p50 and p99 over every request, a failure counting as slower than any "
        "success (a percentile that lands on one is left out). Shaded: 95% confidence "
        "intervals (mean: batch means; percentiles: distribution-free)."
    )
    if isinstance(axis, AchievedAxis):
        text += " x: the rate requests were really sent at (the offered rate is in the hover text)."
    if any_unstable:
        text += (
            " Open circles: unstable points (over capacity: their mean grows with the run's "
            "length), left out of the curves and of every model fit; the hover gives the "
            "verdict."
        )
    if scale == "log":
        text += " The latency axis is logarithmic."
    if model is not None:
        text += (
            " Dashed lines: the primary model of each group (chosen from the measured service "
            "time's variability) and M/M/1, the source report's reference; the other models "
            "are one click away in the legend. Vertical lines: the primary model's knee and "
            "capacity, and in green the knee measured from the data (the highest measured "
            "throughput / mean latency, with the loads whose power is within its interval)."
        )
    return text


def _labels(points: list[PointStats]) -> dict[Any, str]:
    return {p.get("point"): str(p.get("label")) for p in points}


def _knee_row(g: ModelGroup, groups: int) -> str:
    measured = g.get("measured_knee")
    where = esc(group_text(g.get("group") or {})) if groups > 1 else ""
    if not measured:
        return f"<li>Measured knee{where}: too few stable points.</li>"
    lo, hi = measured["interval_x"]
    edge = {
        "highest": " (the highest stable load measured: the knee may lie beyond)",
        "lowest": " (the lowest load measured)",
    }.get(measured.get("edge") or "", "")
    unstable = measured.get("excluded_unstable") or []
    left_out = f"; {len(unstable)} unstable point(s) left out" if unstable else ""
    return (
        f"<li>Measured knee{where}: {fmt.num(measured.get('x'))}{edge}, power "
        f"{fmt.num(measured.get('power_per_s2'))} /s² "
        f"{fmt.interval(measured.get('power_ci_per_s2'))}"
        f"; loads with power within its interval: {fmt.num(lo)} to {fmt.num(hi)}{left_out}.</li>"
    )


def _compared(p: ModelPoint) -> bool:
    """A stable point with a prediction (below capacity): one that can be flagged."""
    return p.get("stable", True) is not False and p.get("predicted_mean_ns") is not None


#: The model table's columns.
MODEL_COLUMNS = (
    Col("model", left=True),
    Col("role", left=True),
    "servers",
    "service mean (ms)",
    "service cs²",
    "capacity (req/s)",
    "knee",
    "stable points below capacity off the model",
    Col("fitted on", left=True),
)


def _model_text(model: SeriesModels, labels: dict[Any, str]) -> str:
    rows = []
    models = model.get("models") or []
    groups = len({str(m.get("group")) for m in models})
    for m in models:
        role = "primary" if is_primary(m, model) else "reference" if m.get("reference") else ""
        fitted = ", ".join(str(labels.get(p, p)) for p in m.get("fit_points") or [])
        points = m.get("points") or []
        rows.append(
            [
                model_label(m, groups),
                role,
                m.get("servers"),
                fmt.ms(m.get("service_mean_ns")),
                fmt.num(m.get("service_cs2")),
                fmt.num(m.get("capacity_per_s")),
                fmt.num(m.get("knee_x")),
                f"{sum(bool(p.get('flag')) for p in points)} of "
                f"{sum(_compared(p) for p in points)}",
                fitted,
            ]
        )
    flagged = [
        f"<li>{esc(labels.get(p.get('point'), p.get('point')))}: {esc(p.get('detail', ''))}</li>"
        for m in models
        if is_primary(m, model)
        for p in m.get("points") or []
        if p.get("flag")
    ]
    knees = "".join(_knee_row(g, groups) for g in model.get("groups") or [])
    return (
        finding(model.get("note", ""))
        + table(MODEL_COLUMNS, rows)
        + (f"<ul>{knees}</ul>" if knees else "")
        + (
            f"<p>Off the primary model beyond the 95% interval:</p><ul>{''.join(flagged)}</ul>"
            if flagged
            else ""
        )
    )


def _rate_figure(series: str, groups: dict[str, list[PointStats]], axis: SeriesAxis) -> Figure:
    traces: list[Trace] = []
    top = 0.0
    for i, (group, members) in enumerate(groups.items()):
        pts = by_x(members, axis)
        xs = [axis.x(p) for p in pts]
        top = max([top, *xs])
        ci: list[Sequence[float | None]] = [
            p.get("achieved_rate_ci_per_s") or [None, None] for p in pts
        ]
        hover = [f"{p.get('label')}: {stability(p, 'detail') or ''}" for p in pts]
        traces.append(
            Trace(
                "line",
                f"{group} achieved".strip(),
                xs,
                [p.get("achieved_rate_per_s") for p in pts],
                lo=[c[0] for c in ci],
                hi=[c[1] for c in ci],
                color=i,
                hover=hover,
            )
        )
        traces.append(
            Trace(
                "line",
                f"{group} ok replies/s".strip(),
                xs,
                [p.get("throughput_per_s") for p in pts],
                color=i,
                dash=True,
                hover=hover,
            )
        )
    traces.append(Trace("line", "target", [0, top], [0, top], color=7, dash=True))
    return Figure(
        f"rate-{series}",
        f"{series}: achieved rate and throughput vs offered load",
        _x_axis(axis),
        Axis("requests/s"),
        traces,
        caption="Achieved send rate (requests really sent over the span of their send times, "
        "with its 95% interval) and throughput (successful replies completed inside the "
        "point's window; replies that drained a backlog after it are left out); the dashed "
        "grey line is the target. Throughput below the send rate means the system could not "
        "keep up.",
        height_px=360,
    )
