"""Latency vs offered load, per series: mean, p50 and p99 with 95% bands, the model's
prediction overlaid, the knee and the capacity marked; and achieved vs offered rate."""

from __future__ import annotations

from typing import Any

from knee.report import fmt
from knee.report.data import ReportRun, SeriesAxis
from knee.report.figures import Axis, Figure, Trace
from knee.report.html import Section, esc
from knee.report.traces import by_x, latency_traces, model_label, model_traces, stat

#: Model predictions are drawn up to this multiple of the largest measured p99.
MODEL_CAP = 3.0


def section(rr: ReportRun) -> Section:
    blocks: list[str | Figure] = []
    if rr.models_error:
        blocks.append(f'<p class="note">No model overlay: {esc(rr.models_error)}</p>')
    for series in rr.series():
        points = rr.points_of(series)
        axis = rr.axes[series]
        model = rr.model_for(series)
        if len({axis.x(p) for p in by_x(points, axis)}) >= 2:
            blocks.extend(series_blocks(series, points, axis, model))
        elif model is not None:  # one offered load: no curve, but the fit still tells
            blocks.extend([f"<h3>{esc(series)}</h3>", _model_text(model, _labels(points))])
    if not blocks:
        blocks.append('<p class="note">No series has two or more loads to plot against.</p>')
    return Section("load", "Latency vs offered load", blocks)


def series_blocks(
    series: str, points: list[dict[str, Any]], axis: SeriesAxis, model: dict[str, Any] | None
) -> list[str | Figure]:
    groups = _groups(points, axis)
    traces: list[Trace] = []
    for i, (group, members) in enumerate(groups.items()):
        if len(groups) == 1:
            traces.extend(latency_traces(members, axis, group, color=0))
        else:  # one colour per group; p99 dashed
            traces.extend(
                latency_traces(members, axis, group, i, keys=("mean", "p99"), one_color=True)
            )
    markers = []
    if model is not None:
        worst = max((stat(p, "latency_ns", "p99") or 0.0) for p in points)
        x_max = max(axis.x(p) for p in by_x(points, axis))
        extra, markers = model_traces(model, x_max, MODEL_CAP * worst if worst else None)
        traces.extend(extra)
    fig = Figure(
        f"load-{series}",
        f"{series}: latency vs {axis.title}",
        Axis(axis.title),
        Axis("latency (ms)"),
        traces,
        markers,
        caption=_caption(axis, model),
    )
    blocks: list[str | Figure] = [fig]
    if model is not None:
        blocks.append(_model_text(model, _labels(points)))
    if axis.key == "target_rate_per_s":
        blocks.append(_rate_figure(series, groups, axis))
    return blocks


def _groups(points: list[dict[str, Any]], axis: SeriesAxis) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        groups.setdefault(axis.group(p), []).append(p)
    return groups


def _caption(axis: SeriesAxis, model: dict[str, Any] | None) -> str:
    text = (
        "Latency from the intended send time (successful requests after warm-up); shaded: "
        "95% distribution-free confidence intervals."
    )
    if model is not None:
        text += (
            f" Dashed red-family lines: the {model.get('primary')} prediction (click the "
            "legend for the other models); vertical lines: the knee and the capacity."
        )
    return text


def _labels(points: list[dict[str, Any]]) -> dict[Any, str]:
    return {p.get("point"): str(p.get("label")) for p in points}


def _model_text(model: dict[str, Any], labels: dict[Any, str]) -> str:
    rows = []
    models = model.get("models") or []
    groups = len({str(m.get("group")) for m in models})
    for m in models:
        rows.append(
            f'<tr><td class="l">{esc(model_label(m, groups))}</td><td>{esc(m.get("servers"))}</td>'
            f"<td>{fmt.ms(m.get('service_mean_ns'))}</td><td>{fmt.num(m.get('service_cs2'))}"
            f"</td><td>{fmt.num(m.get('capacity_per_s'))}</td><td>{fmt.num(m.get('knee_x'))}"
            f"</td><td>{sum(bool(p.get('flag')) for p in m.get('points') or [])} of "
            f"{len(m.get('points') or [])}</td></tr>"
        )
    flagged = [
        f"<li>{esc(labels.get(p.get('point'), p.get('point')))}: {esc(p.get('detail', ''))}</li>"
        for m in model.get("models") or []
        if m.get("kind") == model.get("primary")
        for p in m.get("points") or []
        if p.get("flag")
    ]
    return (
        f'<p class="finding">{esc(model.get("note", ""))}</p>'
        '<table><tr><th class="l">model</th><th>servers</th><th>service mean (ms)</th>'
        "<th>service cs²</th><th>capacity (req/s)</th><th>knee</th><th>points off the model"
        "</th></tr>"
        + "".join(rows)
        + "</table>"
        + (
            f"<p>Off the {esc(model.get('primary'))} model beyond the 95% interval:</p>"
            f"<ul>{''.join(flagged)}</ul>"
            if flagged
            else ""
        )
    )


def _rate_figure(series: str, groups: dict[str, list[dict[str, Any]]], axis: SeriesAxis) -> Figure:
    traces: list[Trace] = []
    top = 0.0
    for i, (group, members) in enumerate(groups.items()):
        pts = by_x(members, axis)
        xs = [axis.x(p) for p in pts]
        top = max([top, *xs])
        ci = [p.get("achieved_rate_ci_per_s") or [None, None] for p in pts]
        traces.append(
            Trace(
                "line",
                f"{group} achieved".strip(),
                xs,
                [p.get("achieved_rate_per_s") for p in pts],
                lo=[c[0] for c in ci],
                hi=[c[1] for c in ci],
                color=i,
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
            )
        )
    traces.append(Trace("line", "target", [0, top], [0, top], color=7, dash=True))
    return Figure(
        f"rate-{series}",
        f"{series}: achieved rate and throughput vs offered load",
        Axis(axis.title),
        Axis("requests/s"),
        traces,
        caption="Achieved send rate (with its 95% interval where computed) and successful "
        "replies per second; the dashed grey line is the target. Throughput below the target "
        "means the system could not keep up.",
        height_px=360,
    )
