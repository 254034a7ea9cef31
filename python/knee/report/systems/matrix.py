"""The matrix system's findings (report 004): response time vs difficulty, flat then
exploding as the rate nears capacity with the M/M/1 and M/M/c predictions overlaid, the
cache's effect, and where adding threads stops helping on this machine, and why.

Series are recognised by what they sweep and how their server is set, not by name, so a
user's own matrix spec gets the findings its data supports; every sentence is computed from
the run.

Means are of the successful requests (`latency_ok_ns`, or `latency_ns` in a summary that
has only that); percentiles are the summary's (`latency_ns`: over every request, a failure
counting as slower than any success, null where a percentile lands on a failure).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from knee.report import fmt
from knee.report.data import ReportRun, SeriesAxis
from knee.report.figures import Axis, Figure, Trace
from knee.report.html import Section, esc
from knee.report.sections.load_curve import plot_axis
from knee.report.traces import by_x, latency_traces, model_traces, stat, to_ms

#: A point whose mean latency exceeds this multiple of the lowest-load mean is past the
#: measured knee.
KNEE_FACTOR = 2.0
#: A thread count "helps" when it raises capacity by more than this fraction.
HELPS = 0.10
#: Server CPU below this share of what its threads could use, while saturated, means
#: other processes took the cores.
CONTENDED = 0.85
#: Model predictions are drawn up to this multiple of the largest measured mean.
MODEL_CAP = 3.0


@dataclass
class PointFacts:
    """What the findings need per point, from summary.json."""

    hit_ratio: float | None  # the whole point's (`cache`; None without a cache)
    hit_ratio_steady: float | None  # once the cache filled (the point's second half)
    service_mean_ns: float | None


def _ok(point: dict[str, Any]) -> dict[str, Any]:
    """The latency distribution of a point's successful requests."""
    return point.get("latency_ok_ns") or point.get("latency_ns") or {}


def _ok_mean(point: dict[str, Any]) -> float | None:
    """Mean latency of a point's successful requests, in ms."""
    return to_ms(_ok(point).get("mean"))


def _measured(
    points: list[dict[str, Any]],
    axis: SeriesAxis,
    name: str,
    color: int,
    percentiles: tuple[str, ...] = (),
    one_color: bool = False,
) -> list[Trace]:
    """The mean of the successful requests and the summary's percentiles (gaps where null)."""
    ok = [{**p, "latency_ok_ns": _ok(p)} for p in points]
    out = latency_traces(
        ok, axis, name, color, keys=("mean",), dist="latency_ok_ns", one_color=one_color
    )
    if percentiles:
        start = color if one_color else color + 1
        out += latency_traces(points, axis, name, start, keys=percentiles, one_color=one_color)
    return out


def sections(rr: ReportRun, models: list[dict[str, Any]]) -> list[Section]:
    facts = _facts(rr.points)
    findings: list[str] = []
    blocks: list[str | Figure] = []
    for part in (_difficulty, _load, _cache, _threads):
        text, figs = part(rr, facts)
        if text:
            findings.append(text)
        blocks.extend(figs)
    blocks.extend(_resources(rr))
    intro = (
        "<p>The source report (004) measured a Java server computing M<sup>P</sup> for a "
        "50x50 matrix: response time vs P, vs a Poisson request rate with an M/M/1 model, "
        "with a 200-entry FIFO cache, and with thread pools of 2-16. What this run "
        "found:</p>"
    )
    if not findings:
        findings.append("This run has none of the matrix experiment's series to compare.")
    items = "".join(f'<li class="finding">{f}</li>' for f in findings)
    return [
        Section("matrix", "Matrix findings (report 004)", [intro, f"<ul>{items}</ul>", *blocks])
    ]


def _facts(points: list[dict[str, Any]]) -> dict[Any, PointFacts]:
    """Hit ratios (summary.json `cache`, knee.stats.cache) and mean service time per point."""
    out = {}
    for p in points:
        cache = p.get("cache") or {}
        out[p.get("point")] = PointFacts(
            cache.get("hit_ratio"),
            cache.get("hit_ratio_steady"),
            (p.get("service_ns") or {}).get("mean"),
        )
    return out


def _find(rr: ReportRun, pred: Any) -> str | None:
    """The first series whose points all satisfy pred(point)."""
    for s in rr.series():
        pts = rr.points_of(s)
        if pts and all(pred(p) for p in pts):
            return s
    return None


def _rate_swept(p: dict[str, Any]) -> bool:
    return "load.rate_per_s" in (p.get("swept") or {})


def _baseline(rr: ReportRun) -> str | None:
    """Open loop over the rate, one server thread, no cache: the M/M/1 experiment."""
    return _find(
        rr,
        lambda p: (
            _rate_swept(p)
            and "server.threads" not in (p.get("swept") or {})
            and rr.setting(p, "server.threads") == 1
            and not rr.setting(p, "server.cache")
        ),
    )


# ------------------------------------------------------------------ difficulty (#1)


def _difficulty(rr: ReportRun, facts: dict[Any, PointFacts]) -> tuple[str, list[Figure]]:
    series = _find(rr, lambda p: "driver.p" in (p.get("swept") or {}))
    if series is None:
        return "", []
    axis = SeriesAxis(series, "driver.p", "P (matrix power)", [])
    pts = by_x(rr.points_of(series), axis)
    traces = _measured(pts, axis, "response", 0)
    traces += latency_traces(pts, axis, "server (compute)", 1, keys=("mean",), dist="server_ns")
    traces += latency_traces(
        pts, axis, "network + middleware", 2, keys=("mean",), dist="network_ns"
    )
    fig = Figure(
        "matrix-difficulty",
        "response time vs difficulty P, split into compute and network",
        Axis("P"),
        Axis("mean time (ms)"),
        traces,
        caption="One request at a time (closed loop, one client, no think time).",
    )
    ps = np.array([axis.x(p) for p in pts], dtype=float)
    server = np.array([stat(p, "server_ns", "mean") or np.nan for p in pts])
    network = np.array([stat(p, "network_ns", "mean") or np.nan for p in pts])
    if len(pts) < 2 or np.isnan(server).any():
        return "", [fig]
    slope, icpt = np.polyfit(ps, server, 1)
    share = server[-1] / (server[-1] + network[-1])
    text = (
        f"<b>Difficulty.</b> Compute time grows linearly with P: {slope * 1000:.3g} ms per "
        f"1000 P (least squares, intercept {icpt:.2g} ms), while network and middleware "
        f"time stays between {np.nanmin(network):.2g} and {np.nanmax(network):.2g} ms. At "
        f"P={ps[-1]:g}, compute is {share:.1%} of the response time: as in the report, the "
        "difficulty, not the network, drives response time."
    )
    return text, [fig]


# ------------------------------------------------------------------ rate and M/M/1 (#2)


def _load(rr: ReportRun, facts: dict[Any, PointFacts]) -> tuple[str, list[Figure]]:
    series = _baseline(rr)
    if series is None:
        return "", []
    axis = plot_axis(rr.axes[series])  # the achieved arrival rate, where the models put points
    pts = by_x(rr.points_of(series), axis)
    model = rr.model_for(series)
    traces = _measured(pts, axis, "measured", 0, ("p50", "p99"))
    markers = []
    worst = max((_ok_mean(p) or 0.0) for p in pts)
    if model is not None:
        x_max = max(axis.x(p) for p in pts)
        extra, markers = model_traces(model, x_max, MODEL_CAP * worst or None)
        traces += extra
    fig = Figure(
        "matrix-load",
        "one thread: response time vs Poisson rate, with the fitted queueing model and the "
        "report's M/M/1",
        Axis("achieved arrival rate (requests/s)"),
        Axis("latency (ms)"),
        traces,
        markers,
        caption="Measured mean (successful requests), p50 and p99 (every request, a failure "
        "counting as slower than any success: a gap where the percentile is a failure) with "
        "95% bands; the dashed model lines are predictions from the service time measured "
        "over the stable points (docs/statistics.md, Models).",
    )
    means = [_ok_mean(p) for p in pts]
    if len(pts) < 2 or means[0] is None or means[-1] is None:
        return "", [fig]
    rates = [axis.x(p) for p in pts]
    past = next(
        (i for i, m in enumerate(means) if m is not None and m > KNEE_FACTOR * means[0]), None
    )
    text = (
        f"<b>Rate.</b> Mean response time is {means[0]:.3g} ms at {rates[0]:g} req/s and "
        f"{means[-1]:.3g} ms at {rates[-1]:g} req/s ({means[-1] / means[0]:.0f}x)."
    )
    if past is None:
        text += f" It stays within {KNEE_FACTOR:g}x of the low-load mean over the whole sweep."
    else:
        before = f"up to {rates[past - 1]:g} req/s" if past > 0 else "at no measured rate"
        text += (
            f" It stays flat {before} and explodes beyond: at {rates[past]:g} req/s it is "
            f"already {means[past] / means[0]:.1f}x the low-load mean."
        )
    text += _model_sentence(model, rates[-1])
    text += _contention_sentence(rr, pts, facts)
    return text, [fig]


def _primary(model: dict[str, Any] | None) -> dict[str, Any] | None:
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


def _model_sentence(model: dict[str, Any] | None, top_rate: float) -> str:
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


def _contention_sentence(
    rr: ReportRun, pts: list[dict[str, Any]], facts: dict[Any, PointFacts]
) -> str:
    """The same work taking very different compute times on one thread means the CPU was
    shared with other processes: the fitted service time, and the model, are then only as
    good as the quietest moment."""
    times = [
        (facts[p["point"]].service_mean_ns, p.get("target_rate_per_s"))
        for p in pts
        if p.get("point") in facts and facts[p["point"]].service_mean_ns
    ]
    if len(times) < 2:
        return ""
    (low, low_rate), (high, high_rate) = min(times), max(times)
    if high < 1.3 * low:
        return ""
    return (
        f" The same work took {fmt.ms(low)} ms of compute per request at {low_rate:g} req/s "
        f"but {fmt.ms(high)} ms at {high_rate:g} req/s ({high / low:.2g}x): the server "
        f"shared this machine's {rr.cores or '?'} cores with other processes, so capacity "
        "and model fit vary with what else ran."
    )


# ------------------------------------------------------------------ cache (#3)


def _cache(rr: ReportRun, facts: dict[Any, PointFacts]) -> tuple[str, list[Figure]]:
    cached = _find(rr, lambda p: _rate_swept(p) and bool(rr.setting(p, "server.cache")))
    base = _baseline(rr)
    if cached is None:
        return "", []
    traces: list[Trace] = []
    names = [s for s in (base, cached) if s is not None]
    for i, s in enumerate(names):
        label = f"{s} (cache {rr.setting(rr.points_of(s)[0], 'server.cache') or 'off'})"
        traces += _measured(rr.points_of(s), rr.axes[s], label, i, ("p99",), one_color=True)
    cpts = by_x(rr.points_of(cached), rr.axes[cached])
    hits = [facts[p["point"]].hit_ratio for p in cpts if p.get("point") in facts]
    steady = [facts[p["point"]].hit_ratio_steady for p in cpts if p.get("point") in facts]
    fig = Figure(
        "matrix-cache",
        "response time vs rate, without and with the result cache",
        Axis("offered load (requests/s)"),
        Axis("latency (ms)"),
        traces,
        caption="Solid: mean of the successful requests; dashed: p99 over every request (a gap "
        "where it is a failure); shaded: 95% intervals.",
    )
    size = rr.setting(cpts[0], "server.cache") if cpts else "?"
    hit = _mean_of(hits)
    text = f"<b>Cache.</b> The {size}-entry FIFO cache answered {fmt.pct(hit)} of requests"
    warm = _mean_of(steady)
    text += f" ({fmt.pct(warm)} once full: every point starts with it empty)." if warm else "."
    if base is not None:
        text += _cache_comparison(rr, base, cached, facts)
    return text, [fig]


def _mean_of(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def _cache_comparison(rr: ReportRun, base: str, cached: str, facts: dict[Any, PointFacts]) -> str:
    def by_rate(s: str) -> dict[float, dict[str, Any]]:
        return {
            p["target_rate_per_s"]: p
            for p in rr.points_of(s)
            if p.get("target_rate_per_s") is not None
        }

    b, c = by_rate(base), by_rate(cached)
    common = sorted(set(b) & set(c))
    if not common:
        return " The run has no rate measured both with and without the cache."
    parts = [
        f"{r:g} req/s: {fmt.ms(_ok(b[r]).get('mean'))} ms without, "
        f"{fmt.ms(_ok(c[r]).get('mean'))} ms with"
        for r in common
    ]
    text = " Mean response time at " + "; ".join(parts) + "."
    sb = [facts[p["point"]].service_mean_ns for p in b.values() if p["point"] in facts]
    sc = [facts[p["point"]].service_mean_ns for p in c.values() if p["point"] in facts]
    if sb and sc and all(sb) and all(sc):
        gain = float(np.mean(sb) / np.mean(sc))
        text += (
            f" Mean compute time per request is {fmt.ms(np.mean(sb))} ms without the cache and "
            f"{fmt.ms(np.mean(sc))} ms with it"
        )
        text += (
            f", so one thread's capacity grows about {gain:.2g}x: the cache moves the knee to "
            "higher rates, as in the report."
            if gain > 1 + HELPS
            else ": no capacity gain measurable in this run."
        )
    return text


# ------------------------------------------------------------------ threads (task 2.2)


def _threads(rr: ReportRun, facts: dict[Any, PointFacts]) -> tuple[str, list[Figure]]:
    series = _find(rr, lambda p: "server.threads" in (p.get("swept") or {}))
    if series is None:
        return "", []
    pts = rr.points_of(series)
    axis = rr.axes[series]
    figs: list[Figure] = []
    by_threads: dict[int, list[dict[str, Any]]] = {}
    for p in pts:
        by_threads.setdefault(int(p["swept"]["server.threads"]), []).append(p)
    if axis.key == "target_rate_per_s" and any(len(v) > 1 for v in by_threads.values()):
        traces: list[Trace] = []
        axis = plot_axis(axis)  # the achieved arrival rate, where the models put points
        for i, (t, members) in enumerate(sorted(by_threads.items())):
            traces += _measured(members, axis, f"{t} threads", i)
        model = rr.model_for(series)
        markers = []
        if model is not None:
            worst = max((_ok_mean(p) or 0.0) for p in pts)
            x_max = max(axis.x(p) for p in by_x(pts, axis))
            extra, markers = model_traces(model, x_max, MODEL_CAP * worst or None)
            traces += extra
        figs.append(
            Figure(
                "matrix-threads-load",
                "response time vs rate per thread count, with the M/M/c predictions",
                Axis("achieved arrival rate (requests/s)"),
                Axis("mean latency (ms)"),
                traces,
                markers,
            )
        )
    rows = []
    for t, members in sorted(by_threads.items()):
        top = max(members, key=lambda p: p.get("target_rate_per_s") or 0)
        f = facts.get(top.get("point"))
        service = f.service_mean_ns if f else None
        cpu = ((top.get("resources") or {}).get("server") or {}).get("cpu_percent")
        rows.append(
            {
                "threads": t,
                "capacity": t / (service / 1e9) if service else None,
                "completion": top.get("throughput_per_s"),
                "service_ms": to_ms(service),
                "cpu": cpu,
                "latency_ms": _ok_mean(top),
                "rate": top.get("target_rate_per_s"),
            }
        )
    cats = [str(r["threads"]) for r in rows]
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
                    [r["capacity"] for r in rows],
                    color=0,
                ),
                Trace(
                    "bar",
                    "completed replies/s (measured)",
                    cats,
                    [r["completion"] for r in rows],
                    color=1,
                ),
                Trace(
                    "bar",
                    "M/M/c capacity (fitted service time)",
                    cats,
                    [_model_capacity(rr.model_for(series), r["threads"]) for r in rows],
                    color=2,
                ),
                Trace(
                    "line", "server CPU % (100 = one core)", cats, [r["cpu"] for r in rows], color=3
                ),
            ],
            caption="At each thread count's highest offered rate: capacity estimated from the "
            "mean compute time the threads got, the measured throughput (ok replies completed "
            "inside the point's window), the M/M/c model's capacity (threads / the service time "
            "fitted over the stable points: what the pool would give with a core per thread) "
            "and the server's CPU.",
        )
    )
    return _threads_text(rr, rows), figs


def _model_capacity(model: dict[str, Any] | None, threads: int) -> float | None:
    """The capacity of the model fitted for this thread count (M/M/c or M/M/1)."""
    for m in (model or {}).get("models") or []:
        if m.get("servers") == threads and m.get("kind") in ("M/M/c", "M/M/1"):
            return m.get("capacity_per_s")
    return None


def _threads_word(n: int) -> str:
    return f"{n} thread" if n == 1 else f"{n} threads"


def _threads_text(rr: ReportRun, rows: list[dict[str, Any]]) -> str:
    """Measured capacity per pool size, where it stops growing, and the bound the cores set
    (the 1-thread compute time times the cores): threads beyond the cores only share them."""
    caps = [r["capacity"] for r in rows]
    if len(rows) < 2 or any(c is None for c in caps):
        return ""
    first, last = rows[0], rows[-1]
    cores = rr.cores
    measured = ", ".join(
        f"{r['capacity']:.3g} req/s with {_threads_word(r['threads'])}" for r in rows
    )
    text = f"<b>Threads.</b> Capacity (threads / mean compute time): {measured}."
    stop = next(
        (i for i in range(len(rows)) if all(c <= caps[i] * (1 + HELPS) for c in caps[i + 1 :])),
        len(rows) - 1,
    )
    if stop < len(rows) - 1:
        text += (
            f" Adding threads stops helping beyond {_threads_word(rows[stop]['threads'])} "
            f"(no larger pool gains more than {HELPS:.0%})."
        )
    else:
        text += " Capacity still grew at the largest pool measured."
    if cores and first["threads"] == 1 and first["service_ms"]:
        bound = cores / (first["service_ms"] / 1e3)
        text += (
            f" Why it must stop: this machine has {cores} cores, so at most {cores} requests "
            f"compute at once; with the 1-thread compute time of {first['service_ms']:.3g} ms "
            f"no pool can exceed {bound:.3g} req/s, and threads beyond {cores} only share the "
            f"cores: each request's compute time grows ({first['service_ms']:.3g} ms with 1 "
            f"thread, {last['service_ms']:.3g} ms with {last['threads']})."
        )
    else:
        text += f" This machine has {cores or '?'} cores."
    cpu = last.get("cpu")
    if cores and isinstance(cpu, int | float):
        usable = 100 * min(cores, last["threads"])
        text += f" With {last['threads']} threads the server used {cpu:.0f}% CPU of {usable}%"
        text += (
            ": other processes took part of the cores, which is why measured capacities vary."
            if cpu < CONTENDED * usable
            else "."
        )
    return text + (
        " In the source report the limit was the server's uplink (the network); here, on "
        "loopback, it is the cores."
    )


# ------------------------------------------------------------------ CPU and network


def _resources(rr: ReportRun) -> list[Figure]:
    """Server CPU and network vs offered rate (the report's figures 3 and 7)."""
    cpu: list[Trace] = []
    net: list[Trace] = []
    i = 0
    for s in rr.series():
        axis = rr.axes[s]
        if axis.key != "target_rate_per_s":
            continue
        groups: dict[str, list[dict[str, Any]]] = {}
        for p in rr.points_of(s):
            groups.setdefault(axis.group(p), []).append(p)
        for group, members in groups.items():
            pts = by_x(members, axis)
            xs = [axis.x(p) for p in pts]
            srv = [(p.get("resources") or {}).get("server") or {} for p in pts]
            name = f"{s} {group}".strip()
            cpu.append(Trace("line", name, xs, [r.get("cpu_percent") for r in srv], color=i))
            net.append(Trace("line", name, xs, [_mb(r) for r in srv], color=i))
            i += 1
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


def _mb(r: dict[str, Any]) -> float | None:
    rx, tx = r.get("bytes_rx_per_s"), r.get("bytes_tx_per_s")
    if rx is None or tx is None:
        return None
    return (rx + tx) / 1e6
