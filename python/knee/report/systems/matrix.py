"""The matrix system's findings (report 004): response time vs difficulty, flat then
exploding as the rate nears capacity with the M/M/1 and M/M/c predictions overlaid, the
cache's effect, and where adding threads stops helping on this machine, and why.

The numbers come from `knee.analysis.matrix`, which also recognises the series by what they
sweep and how their server is set, not by name (a user's own matrix spec gets the findings
its data supports); this module writes them as sentences and figures. Every sentence is
computed from the run.

Means are of the successful requests (`latency_ok_ns`, or `latency_ns` in a summary that
has only that); percentiles are the summary's (`latency_ns`: over every request, a failure
counting as slower than any success, null where a percentile lands on a failure).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from knee.analysis import matrix as analysis
from knee.models.types import Model, SeriesModels
from knee.report import fmt
from knee.report.data import ReportRun, SeriesAxis
from knee.report.figures import Axis, Figure, Marker, Trace
from knee.report.html import Section
from knee.report.kit import Finding, Html, esc, findings, plural
from knee.report.sections.load_curve import plot_axis
from knee.report.traces import by_x, latency_traces, model_traces, ok_latency, with_ok_latency
from knee.report.types import StatName, points_read
from knee.stats.summary import PointStats

#: Model predictions are drawn up to this multiple of the largest measured mean.
MODEL_CAP = 3.0

Part = tuple[Finding | None, list[Figure]]


def _known(value: Any) -> bool:
    """A number, not NaN (what the analysis' tables hold for a missing value)."""
    return isinstance(value, int | float) and not math.isnan(value)


def _time_figure(
    key: str,
    title: str,
    axes: tuple[str, str],
    traces: list[Trace],
    markers: Sequence[Marker] = (),
    caption: str = "",
) -> Figure:
    """A figure of times (y) against `axes[0]`: "matrix-<key>"."""
    x_title, y_title = axes
    return Figure(
        f"matrix-{key}",
        title,
        Axis(x_title),
        Axis(y_title, kind="time"),
        traces,
        list(markers),
        caption=caption,
    )


def _measured(
    points: list[PointStats],
    axis: SeriesAxis,
    name: str,
    color: int,
    percentiles: tuple[StatName, ...] = (),
    one_color: bool = False,
) -> list[Trace]:
    """The mean of the successful requests and the summary's percentiles (gaps where null)."""
    out = latency_traces(
        with_ok_latency(points),
        axis,
        name,
        color,
        keys=("mean",),
        dist="latency_ok_ns",
        one_color=one_color,
    )
    if percentiles:
        start = color if one_color else color + 1
        out += latency_traces(points, axis, name, start, keys=percentiles, one_color=one_color)
    return out


def sections(rr: ReportRun, models: list[SeriesModels]) -> list[Section]:
    roles = analysis.roles(rr.run)
    found: list[Finding] = []
    blocks: list[str | Figure] = []
    for part in (_difficulty, _load, _cache, _threads):
        finding, figs = part(rr, roles)
        if finding is not None:
            found.append(finding)
        blocks.extend(figs)
    blocks.extend(_resources(rr))
    intro = (
        "<p>The source report (004) measured a Java server computing M<sup>P</sup> for a "
        "50x50 matrix: response time vs P, vs a Poisson request rate with an M/M/1 model, "
        "with a 200-entry FIFO cache, and with thread pools of 2-16. What this run "
        "found:</p>"
    )
    none = "This run has none of the matrix experiment's series to compare."
    return [
        Section("matrix", "Matrix findings (report 004)", [intro, findings(found, none), *blocks])
    ]


# ------------------------------------------------------------------ difficulty (#1)


def _difficulty(rr: ReportRun, roles: analysis.Roles) -> Part:
    series = roles.difficulty
    if series is None:
        return None, []
    axis = SeriesAxis(series, "driver.p", "P (matrix power)", [])
    pts = by_x(rr.points_of(series), axis)
    traces = _measured(pts, axis, "response", 0)
    traces += latency_traces(pts, axis, "server (compute)", 1, keys=("mean",), dist="server_ns")
    traces += latency_traces(
        pts, axis, "network + middleware", 2, keys=("mean",), dist="network_ns"
    )
    fig = _time_figure(
        "difficulty",
        "response time vs difficulty P, split into compute and network",
        ("P", "mean time"),
        traces,
        caption="One request at a time (closed loop, one client, no think time).",
    )
    fit = analysis.difficulty_fit(analysis.difficulty(rr.run, series))
    if fit is None:
        return None, [fig]
    text = (
        f"Compute time grows linearly with P: {fit.ms_per_p * 1000:.3g} ms per 1000 P (least "
        f"squares, intercept {fit.intercept_ms:.2g} ms), while network and middleware time "
        f"stays between {fit.network_min_ms:.2g} and {fit.network_max_ms:.2g} ms. At "
        f"P={fit.top_p:g}, compute is {fit.compute_share:.1%} of the response time: as in the "
        "report, the difficulty, not the network, drives response time."
    )
    return Finding("Difficulty.", Html(text)), [fig]


# ------------------------------------------------------------------ rate and M/M/1 (#2)


def _load(rr: ReportRun, roles: analysis.Roles) -> Part:
    series = roles.rate
    if series is None:
        return None, []
    axis = plot_axis(rr.axes[series])  # the achieved arrival rate, where the models put points
    pts = by_x(rr.points_of(series), axis)
    curve = analysis.rate_curve(rr.run, series)
    model = rr.model_for(series)
    traces = _measured(pts, axis, "measured", 0, ("p50", "p99"))
    markers: list[Marker] = []
    worst = float(curve["mean_ms"].fillna(0.0).max()) if len(curve) else 0.0
    if model is not None:
        x_max = max(axis.x(p) for p in pts)
        extra, markers = model_traces(model, x_max, MODEL_CAP * worst or None)
        traces += extra
    fig = _time_figure(
        "load",
        "one thread: response time vs Poisson rate, with the fitted queueing model and the "
        "report's M/M/1",
        ("achieved arrival rate (requests/s)", "latency"),
        traces,
        markers,
        caption="Measured mean (successful requests), p50 and p99 (every request, a failure "
        "counting as slower than any success: a gap where the percentile is a failure) with "
        "95% bands; the dashed model lines are predictions from the service time measured "
        "over the stable points (docs/statistics.md, Models).",
    )
    means, rates = curve["mean_ms"], curve["rate_per_s"]
    if len(curve) < 2 or not _known(means.iloc[0]) or not _known(means.iloc[-1]):
        return None, [fig]
    first, last = means.iloc[0], means.iloc[-1]
    text = (
        f"Mean response time is {first:.3g} ms at {rates.iloc[0]:g} req/s and "
        f"{last:.3g} ms at {rates.iloc[-1]:g} req/s ({last / first:.0f}x)."
    )
    past = analysis.past_knee(means)
    if past is None:
        text += (
            f" It stays within {analysis.KNEE_FACTOR:g}x of the low-load mean over the whole sweep."
        )
    else:
        before = f"up to {rates.iloc[past - 1]:g} req/s" if past > 0 else "at no measured rate"
        text += (
            f" It stays flat {before} and explodes beyond: at {rates.iloc[past]:g} req/s it "
            f"is already {means.iloc[past] / first:.1f}x the low-load mean."
        )
    text += _model_sentence(model, float(rates.iloc[-1]))
    text += _contention_sentence(rr, analysis.contention(curve))
    return Finding("Rate.", Html(text)), [fig]


def _primary(model: SeriesModels | None) -> Model | None:
    if model is None:
        return None
    return next(
        (
            m
            for m in model.get("models") or []
            if m.get("primary", m.get("kind") == model.get("primary"))
        ),
        None,
    )


def _model_sentence(model: SeriesModels | None, top_rate: float) -> str:
    m = _primary(model)
    if m is None:
        return " (No queueing model was fitted to this run.)"
    cap = m.get("capacity_per_s")
    flagged = sum(bool(p.get("flag")) for p in m.get("points") or [])
    text = (
        f" The {esc(m.get('label') or m.get('kind'))} model, with the service time measured "
        "over the stable points "
        f"({fmt.ms(m.get('service_mean_ns'))} ms), puts the capacity at {fmt.num(cap)} "
        f"req/s and the knee at {fmt.num(m.get('knee_x'))} req/s; "
        f"{flagged} of {len(m.get('points') or [])} points differ from it beyond their 95% "
        "interval."
    )
    if isinstance(cap, int | float) and top_rate >= cap:
        text += (
            f" At {top_rate:g} req/s the offered load exceeds the capacity: the queue grows "
            "for the whole point, which has no steady state, so its latency depends on how "
            "long the point ran."
        )
    return text


def _contention_sentence(rr: ReportRun, c: analysis.Contention | None) -> str:
    if c is None:
        return ""
    return (
        f" The same work took {fmt.ms(c.low_ns)} ms of compute per request at "
        f"{c.low_rate_per_s:g} req/s but {fmt.ms(c.high_ns)} ms at {c.high_rate_per_s:g} req/s "
        f"({c.high_ns / c.low_ns:.2g}x): the server shared this machine's {rr.cores or '?'} "
        "cores with other processes, so capacity and model fit vary with what else ran."
    )


# ------------------------------------------------------------------ cache (#3)


def _cache(rr: ReportRun, roles: analysis.Roles) -> Part:
    cached, base = roles.cache, roles.rate
    if cached is None:
        return None, []
    traces: list[Trace] = []
    names = [s for s in (base, cached) if s is not None]
    for i, s in enumerate(names):
        label = f"{s} (cache {rr.setting(rr.points_of(s)[0], 'server.cache') or 'off'})"
        traces += _measured(rr.points_of(s), rr.axes[s], label, i, ("p99",), one_color=True)
    fig = _time_figure(
        "cache",
        "response time vs rate, without and with the result cache",
        ("offered load (requests/s)", "latency"),
        traces,
        caption="Solid: mean of the successful requests; dashed: p99 over every request (a gap "
        "where it is a failure); shaded: 95% intervals.",
    )
    hits = analysis.cache_hits(rr.run, cached)
    size = "?" if hits.entries is None else hits.entries
    text = f"The {size}-entry FIFO cache answered {fmt.pct(hits.hit_ratio)} of requests"
    warm = hits.hit_ratio_steady
    text += (
        f" ({fmt.pct(warm)} once full: every point starts with it empty)."
        if _known(warm) and warm
        else "."
    )
    if base is not None:
        text += _cache_comparison(rr, base, cached)
    return Finding("Cache.", Html(text)), [fig]


def _cache_comparison(rr: ReportRun, base: str, cached: str) -> str:
    both = analysis.cache_comparison(rr.run, base, cached)
    if both.empty:
        return " The run has no rate measured both with and without the cache."
    parts = [
        f"{r:g} req/s: {fmt.num(without)} ms without, {fmt.num(with_)} ms with"
        for r, without, with_ in both.itertuples(index=False)  # one row per rate
    ]
    text = " Mean response time at " + "; ".join(parts) + "."
    gain = analysis.cache_gain(rr.run, base, cached)
    if gain is not None:
        text += (
            f" Mean compute time per request is {fmt.ms(gain.without_ns)} ms without the cache "
            f"and {fmt.ms(gain.with_ns)} ms with it"
        )
        text += (
            f", so one thread's capacity grows about {gain.gain:.2g}x: the cache moves the "
            "knee to higher rates, as in the report."
            if gain.gain > 1 + analysis.HELPS
            else ": no capacity gain measurable in this run."
        )
    return text


# ------------------------------------------------------------------ threads (task 2.2)


def _threads(rr: ReportRun, roles: analysis.Roles) -> Part:
    series = roles.threads
    if series is None:
        return None, []
    axis = rr.axes[series]
    groups = {t: points_read(v) for t, v in analysis.by_threads(rr.run, series).items()}
    figs: list[Figure] = []
    if axis.key == "target_rate_per_s" and any(len(v) > 1 for v in groups.values()):
        figs.append(_threads_load(rr, series, plot_axis(axis), groups))
    rows = analysis.threads_table(rr.run, series)
    model = rr.model_for(series)
    cats = [str(t) for t in rows["threads"]]
    figs.append(
        Figure(
            "matrix-threads-capacity",
            "capacity vs threads at the highest offered rate",
            Axis("server threads", "category"),
            Axis("requests/s"),
            [
                Trace(
                    "bar",
                    "capacity = threads / mean compute time",
                    cats,
                    rows["capacity_per_s"].tolist(),
                    color=0,
                ),
                Trace(
                    "bar",
                    "completed replies/s (measured)",
                    cats,
                    rows["completion_per_s"].tolist(),
                    color=1,
                ),
                Trace(
                    "bar",
                    "M/M/c capacity (fitted service time)",
                    cats,
                    [_model_capacity(model, int(t)) for t in rows["threads"]],
                    color=2,
                ),
                Trace(
                    "line",
                    "server CPU % (100 = one core)",
                    cats,
                    rows["cpu_percent"].tolist(),
                    color=3,
                ),
            ],
            caption="At each thread count's highest offered rate: capacity estimated from the "
            "mean compute time the threads got, the measured throughput (ok replies completed "
            "inside the point's window), the M/M/c model's capacity (threads / the service time "
            "fitted over the stable points: what the pool would give with a core per thread) "
            "and the server's CPU.",
        )
    )
    return _threads_finding(rr, rows), figs


def _threads_load(
    rr: ReportRun, series: str, axis: SeriesAxis, groups: dict[int, list[PointStats]]
) -> Figure:
    """Response time vs the achieved rate, a line per thread count, with the models."""
    traces: list[Trace] = []
    for i, (t, members) in enumerate(groups.items()):
        traces += _measured(members, axis, plural(t, "thread"), i)
    model = rr.model_for(series)
    markers: list[Marker] = []
    if model is not None:
        pts = rr.points_of(series)
        worst = max((m for p in pts if (m := _ok_mean_ms(p)) is not None), default=0.0)
        x_max = max(axis.x(p) for p in by_x(pts, axis))
        extra, markers = model_traces(model, x_max, MODEL_CAP * worst or None)
        traces += extra
    return _time_figure(
        "threads-load",
        "response time vs rate per thread count, with the M/M/c predictions",
        ("achieved arrival rate (requests/s)", "mean latency"),
        traces,
        markers,
    )


def _model_capacity(model: SeriesModels | None, threads: int) -> float | None:
    """The capacity of the model fitted for this thread count (M/M/c or M/M/1)."""
    for m in model["models"] if model else []:
        if m.get("servers") == threads and m.get("kind") in ("M/M/c", "M/M/1"):
            return m.get("capacity_per_s")
    return None


def _ok_mean_ms(point: PointStats) -> float | None:
    """Mean latency of a point's successful requests, in ms."""
    ok = ok_latency(point)
    mean = ok.get("mean") if ok else None
    return None if mean is None else float(mean) / 1e6


def _threads_finding(rr: ReportRun, rows: pd.DataFrame) -> Finding | None:
    """Measured capacity per pool size, where it stops growing, and the bound the cores set
    (the 1-thread compute time times the cores): threads beyond the cores only share them."""
    caps = rows["capacity_per_s"]
    if len(rows) < 2 or caps.isna().any():
        return None
    first, last = rows.iloc[0], rows.iloc[-1]
    threads = [int(t) for t in rows["threads"]]
    cores = rr.cores
    measured = ", ".join(
        f"{c:.3g} req/s with {plural(t, 'thread')}" for t, c in zip(threads, caps, strict=True)
    )
    text = f"Capacity (threads / mean compute time): {measured}."
    stop = analysis.threads_stop(caps)
    if stop < len(rows) - 1:
        text += (
            f" Adding threads stops helping beyond {plural(threads[stop], 'thread')} "
            f"(no larger pool gains more than {analysis.HELPS:.0%})."
        )
    else:
        text += " Capacity still grew at the largest pool measured."
    if cores and threads[0] == 1 and _known(first["service_ms"]) and first["service_ms"]:
        bound = analysis.core_bound_per_s(cores, first["service_ms"])
        text += (
            f" Why it must stop: this machine has {cores} cores, so at most {cores} requests "
            f"compute at once; with the 1-thread compute time of {first['service_ms']:.3g} ms "
            f"no pool can exceed {bound:.3g} req/s, and threads beyond {cores} only share the "
            f"cores: each request's compute time grows ({first['service_ms']:.3g} ms with 1 "
            f"thread, {last['service_ms']:.3g} ms with {threads[-1]})."
        )
    else:
        text += f" This machine has {cores or '?'} cores."
    cpu = last["cpu_percent"]
    if cores and _known(cpu):
        usable = 100 * min(cores, threads[-1])
        text += f" With {threads[-1]} threads the server used {cpu:.0f}% CPU of {usable}%"
        text += (
            ": other processes took part of the cores, which is why measured capacities vary."
            if analysis.contended(cpu, cores, threads[-1])
            else "."
        )
    text += (
        " In the source report the limit was the server's uplink (the network); here, on "
        "loopback, it is the cores."
    )
    return Finding("Threads.", Html(text))


# ------------------------------------------------------------------ CPU and network


def _resources(rr: ReportRun) -> list[Figure]:
    """Server CPU and network vs offered rate (the report's figures 3 and 7)."""
    table = analysis.server_resources(rr.run).set_index("point")
    cpu: list[Trace] = []
    net: list[Trace] = []
    for s in rr.series():
        axis = rr.axes[s]
        if axis.key != "target_rate_per_s":
            continue
        groups: dict[str, list[PointStats]] = {}
        for p in rr.points_of(s):
            groups.setdefault(axis.group(p), []).append(p)
        for group, members in groups.items():
            pts = by_x(members, axis)
            xs = [axis.x(p) for p in pts]
            rows = table.loc[[p.get("point") for p in pts]]
            name = f"{s} {group}".strip()
            i = len(cpu)
            cpu.append(Trace("line", name, xs, rows["cpu_percent"].tolist(), color=i))
            net.append(Trace("line", name, xs, rows["network_mb_per_s"].tolist(), color=i))
    if not cpu:
        return []
    return [
        Figure(
            "matrix-cpu",
            "server CPU vs offered rate",
            Axis("offered load (requests/s)"),
            Axis("CPU % (100 = one core)"),
            cpu,
            caption="Mean over each point's post-warm-up samples.",
        ),
        Figure(
            "matrix-network",
            "server network (rx + tx) vs offered rate",
            Axis("offered load (requests/s)"),
            Axis("MB/s"),
            net,
            caption="From the server's own byte counters (loopback).",
        ),
    ]
