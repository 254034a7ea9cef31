"""Queueing models fitted to a run's points and compared with them (docs/statistics.md).

`analyze(points, settings, cores)` returns one entry per series a model applies to:
Poisson open-loop series (x = the achieved arrival rate) and closed-loop series that vary
the number of clients (x = clients). Within a series, points are grouped by their other
swept settings. The service time is fitted once per group of settings that leave the work
of a request unchanged (the thread count does not), pooled over its stable points; each
thread count then gets its models, its primary model chosen from the fitted cs2, and a knee
measured from the data beside the models' knee. Unstable points (over capacity) are fitted
by no model: they are compared with a detail that says so and never flagged.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

from knee.models.closed_loop import ClosedModel
from knee.models.fit import (
    SERVERS_KEY,
    Fit,
    Settings,
    cache_setting,
    fit_service,
    ok_latency,
    servers,
    setting,
    settings_of,
    unstable,
)
from knee.models.measured import measured_knee
from knee.models.open_loop import CS2_CONSTANT, OpenModel, open_models, primary_kind

#: A point is flagged when the predicted mean is outside the measured mean's 95% interval
#: and differs from the measured mean by more than this fraction of it.
FLAG_TOLERANCE = 0.10

Model = OpenModel | ClosedModel


def analyze(
    points: list[dict[str, Any]],
    settings: dict[str, Any] | Settings,
    cores: int | None,
) -> list[dict[str, Any]]:
    """`settings`: how to read a point's settings (`knee.models.fit.settings_of`): the run
    directory's records, as the report passes them, or a resolved spec."""
    lookup = settings_of(settings)
    by_series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in points:
        by_series[p["series"]].append(p)
    out = []
    for series, pts in by_series.items():
        entry = _series(series, pts, lookup, cores)
        if entry is not None:
            out.append(entry)
    return out


def _x_of(point: dict[str, Any], spec: Settings, closed: bool) -> float | None:
    """The swept load: clients (closed loop) or the offered (target) rate."""
    if closed:
        return float(setting(point, spec, "load.clients") or 1)
    target = point.get("target_rate_per_s")
    return float(target) if target else None


def _measured_x(point: dict[str, Any], spec: Settings, closed: bool) -> float:
    """Where a point lies on the models' axis: its clients, or the rate requests were
    really sent at (the offered rate in runs without an achieved rate)."""
    x = _x_of(point, spec, closed) or 0.0
    return x if closed else float(point.get("achieved_rate_per_s") or x)


def _fit_set(stable: list[dict[str, Any]], spec: Settings) -> list[dict[str, Any]]:
    """The stable points a fit group is fitted on: those of its fewest threads that has any.
    More threads than cores stretch each request's service time by waiting for a core, so
    the fewest threads measure the work itself."""
    if not stable:
        return []
    fewest = min(servers(p, spec) for p in stable)
    return [p for p in stable if servers(p, spec) == fewest]


def _series(
    series: str, points: list[dict[str, Any]], spec: Settings, cores: int | None
) -> dict[str, Any] | None:
    schedule = setting(points[0], spec, "load.schedule")
    if schedule not in ("poisson", "closed"):
        return None  # constant and stepped arrivals fit none of these models
    closed = schedule == "closed"
    x_key = "load.clients" if closed else "load.rate_per_s"
    usable = [
        p
        for p in points
        if setting(p, spec, "load.schedule") == schedule
        and ok_latency(p).get("n")
        and _x_of(p, spec, closed) is not None
    ]
    # Fit groups: the same work per request (threads excluded); model groups add threads.
    fit_groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    settings: dict[str, dict[str, Any]] = {}
    for p in usable:
        others = {k: v for k, v in p["swept"].items() if k not in (x_key, SERVERS_KEY)}
        key = json.dumps(others, sort_keys=True)  # swept values may be lists
        fit_groups[key].append(p)
        settings[key] = others
    pool_series = any(servers(p, spec) > 1 for p in usable)
    models: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    notes: list[str] = []
    for key, members in fit_groups.items():
        fitted = _fit_set([p for p in members if not unstable(p)], spec)
        fitted.sort(key=lambda p: _x_of(p, spec, closed) or 0.0)
        fit = fit_service(
            fitted,
            [_measured_x(p, spec, closed) for p in fitted],
            cache_entries=max((cache_setting(p, spec) for p in fitted), default=0),
        )
        by_threads: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for p in members:
            by_threads[servers(p, spec)].append(p)
        for threads, group in sorted(by_threads.items()):
            group.sort(key=lambda p: _x_of(p, spec, closed) or 0.0)
            xs = [_x_of(p, spec, closed) or 0.0 for p in group]
            if closed and len(set(xs)) < 2:
                continue  # one population: the fit predicts only itself
            where = settings[key] | ({SERVERS_KEY: threads} if pool_series else {})
            knee = measured_knee(group, lambda p: _measured_x(p, spec, closed))
            summary: dict[str, Any] = {
                "group": where,
                "servers": threads,
                "primary": None,
                "fit": None if fit is None else fit.to_json(),
                "fit_points": [] if fit is None else list(fit.points),
                "unstable_points": [p["point"] for p in group if unstable(p)],
                "measured_knee": knee,
            }
            groups.append(summary)
            if fit is None:
                notes.append(_no_fit_note(group, closed, where))
                continue
            if closed:
                think_s = float(setting(group[0], spec, "load.think_ms") or 0) / 1e3
                built: list[Model] = [ClosedModel(threads, fit, think_s, int(max(xs)))]
                if cores is not None and cores < threads:
                    built.append(ClosedModel(cores, fit, think_s, int(max(xs)), "cores"))
                primary = "MVA"
            else:
                built = list(open_models(fit, threads, cores))
                primary = primary_kind(fit, threads)
            summary["primary"] = primary
            entries = [
                _model_entry(m, group, spec, closed, where, m.kind == primary) for m in built
            ]
            models += entries
            notes.append(_group_note(fit, threads, cores, group, entries, closed, where, knee))
    if not models:
        return None
    kinds = Counter(g["primary"] for g in groups if g["primary"])
    # The kind of most groups; a tie goes to M/M/c, the model of a pool series.
    series_primary = max(kinds, key=lambda k: (kinds[k], k == "M/M/c"))
    return {
        "series": series,
        "x": "clients" if closed else "rate_per_s",
        "cores": cores,
        "models": models,
        "groups": groups,
        # For readers of one kind per series; each model's "primary" says it exactly.
        "primary": series_primary,
        "note": " ".join(notes),
    }


def _label(model: Model, threads: int) -> str:
    name = model.kind if model.kind != "M/M/c" else f"M/M/{model.servers}"
    if model.kind == "M/M/1":
        name += " (source report's reference)"
    if model.limited_by == "cores":
        return f"{name} ({threads} threads on {model.servers} cores)"
    return name if threads == 1 else f"{name} ({threads} threads)"


def _model_entry(
    model: Model,
    group: list[dict[str, Any]],
    spec: Settings,
    closed: bool,
    where: dict[str, Any],
    primary: bool,
) -> dict[str, Any]:
    threads = servers(group[0], spec)
    xs = [_measured_x(p, spec, closed) for p in group]
    knee = model.knee_x()
    return {
        "kind": model.kind,
        "servers": model.servers,
        "label": _label(model, threads),
        "primary": primary,
        "reference": model.kind == "M/M/1",
        "limited_by": model.limited_by,
        "group": where,
        "service_mean_ns": model.fit.service_s * 1e9,
        "service_cs2": model.fit.cs2,
        "delay_ns": model.fit.delay_s * 1e9,
        "fit_points": list(model.fit.points),
        "capacity_per_s": model.capacity_per_s,
        "knee_x": knee,
        "curve": model.curve(max(xs + ([knee] if closed else []))),
        "points": [_compare(model, p, spec, closed) for p in group],
    }


def _compare(model: Model, point: dict[str, Any], spec: Settings, closed: bool) -> dict[str, Any]:
    """A measured point against the model, at the point's own achieved arrival rate (open
    loop) or population (closed loop). An unstable point is compared but never flagged."""
    at = _measured_x(point, spec, closed)
    latency = ok_latency(point)
    measured = float(latency["mean"])
    ci = (latency.get("ci") or {}).get("mean")
    predicted = model.latency_ns(at)
    p99 = model.latency_ns(at, 0.99) if model.has_quantiles else None
    stable = not unstable(point)
    flag = False
    if predicted is None:
        rho = at / model.capacity_per_s
        detail = (
            f"beyond capacity (utilization {rho:.2f}): no steady state; the measured mean "
            "grows with the length of the run"
        )
    else:
        rel = predicted / measured - 1
        inside = ci is not None and ci[0] <= predicted <= ci[1]
        flag = stable and not inside and abs(rel) > FLAG_TOLERANCE
        where = "inside" if inside else ("outside" if ci is not None else "no interval for")
        detail = (
            f"model {predicted / 1e6:.3g} ms vs measured {measured / 1e6:.3g} ms "
            f"({rel:+.0%}, {where} the measured 95% interval)"
        )
    if not stable:
        why = (point.get("stability") or {}).get("detail") or "unstable"
        detail = f"unstable, not fitted and not flagged ({why}); {detail}"
    return {
        "point": point["point"],
        "x": at,
        "target_x": None if closed else point.get("target_rate_per_s"),
        "stable": stable,
        "measured_mean_ns": measured,
        "measured_ci": ci,
        "predicted_mean_ns": predicted,
        "predicted_p99_ns": p99,
        "flag": flag,
        "detail": detail,
    }


def _head(where: dict[str, Any]) -> str:
    return ", ".join(f"{k.partition('.')[2]}={v}" for k, v in where.items()) or "all points"


def _no_fit_note(group: list[dict[str, Any]], closed: bool, where: dict[str, Any]) -> str:
    why = (
        "every point is unstable (over capacity), and no model is fitted to an unstable point"
        if all(unstable(p) for p in group)
        else "no stable point has service times"
    )
    return f"[{_head(where)}] no model: {why}."


def _primary_reason(kind: str, fit: Fit, threads: int) -> str:
    if kind == "MVA":
        return "Primary model: MVA (a closed loop)."
    if kind == "M/M/c":
        return (
            f"Primary model: M/M/{threads} (a pool of {threads} threads; it takes service as "
            f"exponential, cs2 1, against the measured {fit.cs2:.2g})."
        )
    if kind == "M/D/1":
        return (
            f"Primary model: M/D/1 (cs2 {fit.cs2:.2g} < {CS2_CONSTANT:g}: service is nearly "
            "constant, and waits are about half M/M/1's); M/M/1 is drawn as the source "
            "report's reference."
        )
    return (
        f"Primary model: M/G/1 (Pollaczek-Khinchine with the measured cs2 {fit.cs2:.2g}); "
        "M/M/1 is drawn as the source report's reference."
    )


def _fit_sentence(fit: Fit, closed: bool) -> str:
    unit = "clients" if closed else "req/s"
    lo, hi = min(fit.xs), max(fit.xs)
    span = f"{lo:.3g}" if lo == hi else f"{lo:.3g}-{hi:.3g}"
    count = len(fit.points)
    return (
        f"service time {fit.service_s * 1e3:.3g} ms (cs2 {fit.cs2:.2g}), pooled over "
        f"{count} stable point{'s' if count > 1 else ''} ({span} {unit}, {fit.n} requests "
        f"weighted by count), plus {fit.delay_s * 1e3:.2g} ms outside the server."
    )


def _cache_sentence(fit: Fit) -> str:
    c = fit.cache
    if c is None:
        return ""
    used = [f"{cp.hit_ratio_steady:.2f} at {cp.x:.3g}" for cp in c.points if cp.full]
    cold = [f"{cp.hit_ratio_steady:.2f} at {cp.x:.3g}" for cp in c.points if not cp.full]
    if used:
        which = f"each stable point after its cache had filled: {', '.join(used)}"
        if cold:
            which += f"; left out, never surely full: {', '.join(cold)}"
    else:
        which = (
            f"the second half of each stable point: {', '.join(cold)}; no point surely filled "
            "its cache, so h may be low"
        )
    lo, hi = c.hit_ratio_ci
    text = (
        "The cache starts empty at every point, so a point's hit ratio mixes its cold start "
        f"with the steady state: the fit uses the steady-state hit ratio h = {c.hit_ratio:.2f} "
        f"[{lo:.2f}, {hi:.2f}] ({which}; whole points {c.whole_hit_ratio:.2f}), hits taking "
        f"{c.hit.mean / 1e6:.3g} ms and misses {c.miss.mean / 1e6:.3g} ms: "
        "E[S] = h E[S_hit] + (1 - h) E[S_miss], and cs2 from that mixture."
    )
    lowest = min(c.points, key=lambda cp: cp.x, default=None)
    if lowest is not None and len(c.points) > 1:
        cold_s, _ = c.moments(lowest.hit_ratio_whole)
        steady_s, _ = c.moments(c.hit_ratio)
        text += (
            f" Fitted at the lowest load alone (its whole-point hit ratio "
            f"{lowest.hit_ratio_whole:.2f}), capacity would come out {steady_s / cold_s - 1:+.0%}."
        )
    return text


def _group_note(
    fit: Fit,
    threads: int,
    cores: int | None,
    group: list[dict[str, Any]],
    entries: list[dict[str, Any]],
    closed: bool,
    where: dict[str, Any],
    knee: dict[str, Any] | None,
) -> str:
    """What the fit found for one group, in words."""
    unit = "clients" if closed else "req/s"
    primary = next((e for e in entries if e["primary"]), entries[0])
    capacity = primary["capacity_per_s"]
    lines = [f"[{_head(where)}] {_fit_sentence(fit, closed)}", _cache_sentence(fit)]
    lines.append(_primary_reason(primary["kind"], fit, threads))
    lines.append(
        f"{threads} thread{'s' if threads > 1 else ''} can serve {capacity:.3g} req/s; "
        f"the model's knee (max power) is at {primary['knee_x']:.3g} {unit}"
    )
    if knee is not None:
        lo, hi = knee["interval_x"]
        beyond = {
            "highest": " (the highest stable load measured: the knee may lie beyond)",
            "lowest": " (the lowest load measured)",
        }.get(knee["edge"] or "", "")
        lines[-1] += (
            f", the measured knee (max of throughput / mean latency) at {knee['x']:.3g} {unit}"
            f"{beyond}, powers within the interval from {lo:.3g} to {hi:.3g} {unit}."
        )
    else:
        lines[-1] += "; too few stable points to measure a knee."
    if not closed:
        rates = [float(p.get("achieved_rate_per_s") or 0) for p in group]
        lines.append(f"The measured load reaches utilization {max(rates) / capacity:.2f}.")
    left_out = [p for p in group if unstable(p)]
    if left_out:
        lines.append(
            f"Left out of the fit as unstable (over capacity): "
            f"{', '.join(str(p.get('label') or p['point']) for p in left_out)}."
        )
    if cores is not None and threads > cores:
        capped = next(e for e in entries if e["limited_by"] == "cores")
        cpu = _busiest_cpu(group)
        lines.append(
            f"With {cores} cores, {threads} threads compute at most {cores} requests at once: "
            f"capacity {capped['capacity_per_s']:.3g} req/s, not {capacity:.3g}"
            + (f" (busiest node: {cpu[0]}, {cpu[1]:.0f}% CPU)." if cpu else ".")
        )
    for e in entries:
        compared = sum(p["predicted_mean_ns"] is not None and p["stable"] for p in e["points"])
        flagged = sum(p["flag"] for p in e["points"])
        if compared:
            lines.append(
                f"{e['label']}: {flagged} of {compared} stable points below capacity differ "
                "beyond the interval."
            )
        else:
            lines.append(f"{e['label']}: no stable point below capacity.")
    return " ".join(line for line in lines if line)


def _busiest_cpu(group: list[dict[str, Any]]) -> tuple[str, float] | None:
    best: tuple[str, float] | None = None
    for p in group:
        for node, usage in (p.get("resources") or {}).items():
            cpu = (usage or {}).get("cpu_percent")
            if cpu is not None and (best is None or cpu > best[1]):
                best = (node, float(cpu))
    return best
