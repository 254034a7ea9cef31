"""The answer, first (DESIGN.md, "Every report opens with the answer"): per group of rate
points, the capacity, the SLO capacity and the knee, each with its interval, a one-line
verdict, and what sets the capacity (the bottleneck's "set by ..." line, when the run
measured its resources: knee.report.sections.what_sets shows why); a figure of latency
(p50 and p99 with their intervals) against the offered rate with the three answers marked.
A system whose experiments are not rate sweeps states its own findings here
(`headline(rr)` in knee.report.systems.<system>); any other run gets one line on what it
measured. A search's path follows (knee.report.sections.search_path)."""

from __future__ import annotations

import importlib
from typing import Any

from knee.report import answers, fmt
from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Marker, Trace
from knee.report.html import Section
from knee.report.kit import Col, Html, esc, finding, note, table
from knee.report.traces import ci, stability, stat
from knee.report.types import StatName
from knee.stats.summary import GroupAnswers, PointStats

CAPACITY_COLOR = "#d62728"
SLO_COLOR = "#9467bd"
KNEE_COLOR = "#2ca02c"


def section(rr: ReportRun) -> Section:
    found = answers.of(rr)
    blocks: list[str | Figure] = []
    if found is None:
        lines = system_headline(rr) or [measured_line(rr)]
        blocks.extend(finding(line) for line in lines)
        return Section("headline", "The answer", blocks)
    searched = found.kind == "search"
    by_index = {p.get("point"): p for p in rr.points}
    for i, group in enumerate(found.groups):
        if len(found.groups) > 1:
            blocks.append(f"<h3>{esc(group.get('label') or f'group {i + 1}')}</h3>")
        blocks.append(finding(answers.verdict(group, found.slo)))
        points = [by_index[k] for k in group.get("points") or [] if k in by_index]
        if (bn := answers.bottleneck(group, points)) is not None:
            blocks.append(finding(answers.set_by(bn)))
        if answers.generator_limited(group):
            blocks.append(note(generator_note(group)))
        if group.get("model_error"):
            blocks.append(note(model_note(group)))
        if line := answers.search_line(group):
            blocks.append(f"<p>{esc(line)}</p>")
        blocks.append(answers_table(group, found.slo))
        if points:
            blocks.append(latency_figure(f"headline-latency-{i}", group, points, rr.slo))
    if searched and found.find and found.find.get("error"):
        blocks.append(note(f"The search stopped at once: {found.find['error']}."))
    elif not found.groups:
        blocks.append(note("The search has no answer yet: no group finished a probe."))
    blocks.extend(finding(line) for line in system_headline(rr) or [])
    what = "a search for capacity (knee find)" if searched else "a sweep of offered rates"
    blocks.append(
        f'<p class="caption">From {esc(what)}. Each interval is a bracket: the highest rate '
        "shown good and the lowest shown not to be (each verdict a test at 1%); an open end "
        "is a side the run did not reach.</p>"
    )
    return Section("headline", "The answer", blocks)


def model_note(group: GroupAnswers) -> str:
    """A model fit that raised (knee.find.run.primary_model): said, not dropped."""
    return (
        f"The queueing model could not be fitted ({group['model_error']}): the knee is the "
        "measured one, and no model's capacity or knee is shown for this group."
    )


def generator_note(group: GroupAnswers) -> str:
    cap = group.get("capacity")
    search = group.get("search")
    detail = (search.get("detail") if search else None) or (cap.get("detail", "") if cap else "")
    return (
        "The load generator was the limit, not the target: the rates above were not offered "
        "as asked, so this is not the target's capacity. Give the generator more "
        f"load.generators or connections. ({detail})"
    )


def answers_table(group: GroupAnswers, slo: str | None) -> Html:
    cap, knee = group.get("capacity"), group.get("knee")
    stopped = answers.stopped_of(group)
    rows: list[list[Any]] = [
        [
            "capacity",
            answers.stated(cap, stopped),
            cap.get("limited_by") if cap else None,
            cap.get("detail") if cap else None,
        ]
    ]
    if slo:
        sc = group.get("slo_capacity")
        rows.append(
            [
                f"SLO capacity ({slo})",
                answers.stated(sc, stopped),
                None,
                sc.get("detail") if sc else None,
            ]
        )
    rows.append(["knee", answers.knee_stated(knee), None, knee.get("why") if knee else None])
    sat = group.get("saturated_throughput")
    if sat:
        rows.append(
            [
                "saturated throughput",
                f"{answers.rate(sat.get('per_s'))} {fmt.interval(sat.get('ci_per_s'))}",
                None,
                "OK completions per second over capacity, pooled (Poisson 95% interval)",
            ]
        )
    cols = [Col("answer", left=True), Col("rate/s [interval]", left=True)]
    return table([*cols, Col("limit", left=True), Col("how", left=True)], rows)


def _ms_pair(point: PointStats, key: StatName) -> tuple[float | None, float | None]:
    return ci(point, "latency_ns", key)


def latency_figure(
    fig_id: str, group: GroupAnswers, points: list[PointStats], slo: str | None
) -> Figure:
    """p50 and p99 (with their 95% intervals) against the offered rate; the capacity's
    bracket, the SLO capacity and the knee marked; the SLO's limit drawn across."""
    pts = sorted(points, key=lambda p: float(p.get("target_rate_per_s") or 0.0))
    xs = [float(p.get("target_rate_per_s") or 0.0) for p in pts]
    traces: list[Trace] = []
    keys: tuple[StatName, ...] = ("p50", "p99")
    for c, key in enumerate(keys):
        pairs = [_ms_pair(p, key) for p in pts]
        traces.append(
            Trace(
                "points",
                key,
                xs,
                [stat(p, "latency_ns", key) for p in pts],
                lo=[lo for lo, _ in pairs],
                hi=[hi for _, hi in pairs],
                color=c,
                hover=[
                    f"{p.get('label')}: {key} {fmt.num(stat(p, 'latency_ns', key))} ms "
                    f"{fmt.interval([lo, hi])}"
                    for p, (lo, hi) in zip(pts, pairs, strict=True)
                ],
            )
        )
    ys = [v for t in traces for v in [*t.y, *(t.hi or [])] if isinstance(v, int | float)]
    top, bottom = (max(ys), min(ys)) if ys else (1.0, 0.0)
    markers = _markers(group, traces, bottom, top, slo)
    limit_ms = _slo_limit_ms(points)
    if limit_ms is not None and xs:
        traces.append(
            Trace(
                "line",
                f"SLO limit {slo or ''}".strip(),
                [min(xs), max(xs)],
                [limit_ms, limit_ms],
                color=4,
                dash=True,
                markers=False,
            )
        )
    return Figure(
        fig_id,
        f"{group.get('label') or 'latency'}: latency vs offered rate, with the answers",
        Axis("offered rate (requests/s)"),
        Axis("latency", kind="time", time_unit="ms"),
        traces,
        markers,
        caption="p50 and p99 over every request of each point (a failure counts as slower "
        "than any success: no mark where the percentile is a failure), with their 95% "
        "intervals. Shaded: the capacity's bracket (red) and the knee's interval (green); "
        "lines: the capacity, the SLO capacity and the knee.",
    )


def _band(name: str, interval: Any, bottom: float, top: float, color: int) -> Trace | None:
    lo, hi = (list(interval or []) + [None, None])[:2]
    if lo is None or hi is None or hi <= lo:
        return None
    return Trace("band", name, [lo, hi], lo=[bottom, bottom], hi=[top, top], color=color)


def _markers(
    group: GroupAnswers, traces: list[Trace], bottom: float, top: float, slo: str | None
) -> list[Marker]:
    markers: list[Marker] = []
    cap, sc, knee = group.get("capacity"), group.get("slo_capacity"), group.get("knee")
    if cap and (rate := cap.get("rate_per_s")) is not None:
        markers.append(Marker(rate, "capacity", CAPACITY_COLOR, dash=False))
        band = _band("capacity bracket", cap.get("interval_per_s"), bottom, top, 3)
        if band:
            traces.insert(0, band)
    if sc and (rate := sc.get("rate_per_s")) is not None:
        markers.append(Marker(rate, f"SLO capacity ({slo or ''})", SLO_COLOR))
    if knee and knee.get("rate_per_s") is not None:
        markers.append(Marker(float(knee["rate_per_s"]), "knee", KNEE_COLOR))
        band = _band("knee interval", knee.get("interval_per_s"), bottom, top, 2)
        if band:
            traces.insert(0, band)
    return markers


def _slo_limit_ms(points: list[PointStats]) -> float | None:
    limits = [s.get("limit_ns") for p in points if (s := p.get("slo"))]
    known = [float(v) for v in limits if isinstance(v, int | float)]
    return known[0] / 1e6 if known else None


def system_headline(rr: ReportRun) -> list[str] | None:
    """The system's own headline (`headline(rr)` in knee.report.systems.<system>), if any."""
    if not rr.system.isidentifier():
        return None
    try:
        module = importlib.import_module(f"knee.report.systems.{rr.system}")
    except ModuleNotFoundError as e:
        if e.name != f"knee.report.systems.{rr.system}":
            raise
        return None
    hook = getattr(module, "headline", None)
    return hook(rr) if hook is not None else None


def measured_line(rr: ReportRun) -> str:
    """What the run measured, in one line, when no answer applies."""
    if not rr.points:
        return "The run has no measured point."
    rates = [float(r) for p in rr.points if (r := p.get("target_rate_per_s"))]
    verdicts = [str(stability(p, "verdict") or "undecided") for p in rr.points]
    counts = ", ".join(f"{verdicts.count(v)} {v}" for v in dict.fromkeys(verdicts))
    load = (
        f"offered rates {fmt.num(min(rates))} to {fmt.num(max(rates))}/s"
        if rates
        else "closed-loop load"
    )
    return (
        f"This run measured {len(rr.points)} point{'s' if len(rr.points) != 1 else ''} "
        f"({load}); stability: {counts}. No capacity is stated: it takes two or more "
        "offered rates of one configuration (a sweep) or a search (knee find)."
    )
