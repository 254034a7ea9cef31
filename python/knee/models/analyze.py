"""Queueing models fitted to a run's points and compared with them (docs/statistics.md).

`analyze(points, resolved_spec, cores)` returns one entry per series a model applies to:
Poisson open-loop series (x = offered rate) and closed-loop series that vary the number of
clients (x = clients). Within a series, points are grouped by their other swept settings;
the service time is fitted once per group of settings that leave the work of a request
unchanged (the thread count does not), at its lowest-load point.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from knee.models.closed_loop import ClosedModel
from knee.models.fit import SERVERS_KEY, Fit, fit_service, servers, setting
from knee.models.open_loop import OpenModel, open_models

#: A point is flagged when the predicted mean is outside the measured mean's 95% interval
#: and differs from the measured mean by more than this fraction of it.
FLAG_TOLERANCE = 0.10

Model = OpenModel | ClosedModel


def analyze(
    points: list[dict[str, Any]], resolved_spec: dict[str, Any], cores: int | None
) -> list[dict[str, Any]]:
    by_series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in points:
        by_series[p["series"]].append(p)
    out = []
    for series, pts in by_series.items():
        entry = _series(series, pts, resolved_spec, cores)
        if entry is not None:
            out.append(entry)
    return out


def _x_of(point: dict[str, Any], spec: dict[str, Any], closed: bool) -> float | None:
    if closed:
        return float(setting(point, spec, "load.clients") or 1)
    target = point.get("target_rate_per_s")
    return float(target) if target else None


def _series(
    series: str, points: list[dict[str, Any]], spec: dict[str, Any], cores: int | None
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
        and (p.get("latency_ns") or {}).get("n")
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
    notes: list[str] = []
    for key, members in fit_groups.items():
        base = min(members, key=lambda p: (_x_of(p, spec, closed), servers(p, spec)))
        fit = fit_service(base, _x_of(base, spec, closed) or 0.0)
        if fit is None:
            continue
        by_threads: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for p in members:
            by_threads[servers(p, spec)].append(p)
        for threads, group in sorted(by_threads.items()):
            group.sort(key=lambda p: _x_of(p, spec, closed))
            xs = [_x_of(p, spec, closed) or 0.0 for p in group]
            if closed and len(set(xs)) < 2:
                continue  # one population: the fit point predicts only itself
            where = settings[key] | ({SERVERS_KEY: threads} if pool_series else {})
            if closed:
                think_s = float(setting(group[0], spec, "load.think_ms") or 0) / 1e3
                built: list[Model] = [ClosedModel(threads, fit, think_s, int(max(xs)))]
                if cores is not None and cores < threads:
                    built.append(ClosedModel(cores, fit, think_s, int(max(xs)), "cores"))
            else:
                built = list(open_models(fit, threads, cores, pool_series))
            entries = [_model_entry(m, group, spec, closed, where) for m in built]
            models += entries
            notes.append(_group_note(fit, threads, cores, group, entries, closed, where))
    if not models:
        return None
    return {
        "series": series,
        "x": "clients" if closed else "rate_per_s",
        "cores": cores,
        "models": models,
        "primary": "MVA" if closed else ("M/M/c" if pool_series else "M/M/1"),
        "note": " ".join(notes),
    }


def _label(model: Model, threads: int) -> str:
    name = model.kind if model.kind != "M/M/c" else f"M/M/{model.servers}"
    if model.limited_by == "cores":
        return f"{name} ({threads} threads on {model.servers} cores)"
    return name if threads == 1 else f"{name} ({threads} threads)"


def _model_entry(
    model: Model,
    group: list[dict[str, Any]],
    spec: dict[str, Any],
    closed: bool,
    where: dict[str, Any],
) -> dict[str, Any]:
    threads = servers(group[0], spec)
    xs = [_x_of(p, spec, closed) or 0.0 for p in group]
    knee = model.knee_x()
    return {
        "kind": model.kind,
        "servers": model.servers,
        "label": _label(model, threads),
        "limited_by": model.limited_by,
        "group": where,
        "service_mean_ns": model.fit.service_s * 1e9,
        "service_cs2": model.fit.cs2,
        "delay_ns": model.fit.delay_s * 1e9,
        "fit_point": model.fit.point,
        "capacity_per_s": model.capacity_per_s,
        "knee_x": knee,
        "curve": model.curve(max(xs + ([knee] if closed else []))),
        "points": [_compare(model, p, x, closed) for p, x in zip(group, xs, strict=True)],
    }


def _compare(model: Model, point: dict[str, Any], x: float, closed: bool) -> dict[str, Any]:
    """A measured point against the model, at the point's own measured arrival rate (open
    loop) or population (closed loop)."""
    at = x if closed else float(point.get("achieved_rate_per_s") or x)
    latency = point["latency_ns"]
    measured = float(latency["mean"])
    ci = (latency.get("ci") or {}).get("mean")
    predicted = model.latency_ns(at)
    p99 = model.latency_ns(at, 0.99) if model.has_quantiles else None
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
        flag = not inside and abs(rel) > FLAG_TOLERANCE
        where = "inside" if inside else ("outside" if ci is not None else "no interval for")
        detail = (
            f"model {predicted / 1e6:.3g} ms vs measured {measured / 1e6:.3g} ms "
            f"({rel:+.0%}, {where} the measured 95% interval)"
        )
    return {
        "point": point["point"],
        "x": x,
        "measured_mean_ns": measured,
        "measured_ci": ci,
        "predicted_mean_ns": predicted,
        "predicted_p99_ns": p99,
        "flag": flag,
        "detail": detail,
    }


def _group_note(
    fit: Fit,
    threads: int,
    cores: int | None,
    group: list[dict[str, Any]],
    entries: list[dict[str, Any]],
    closed: bool,
    where: dict[str, Any],
) -> str:
    """What the fit found for one group, in words."""
    unit = "clients" if closed else "req/s"
    head = ", ".join(f"{k.partition('.')[2]}={v}" for k, v in where.items())
    services = [f"{p['service_ns']['mean'] / 1e6:.3g}" for p in group if p["point"] != fit.point]
    seen = f" ({', '.join(services)} ms at this group's other points)" if services else ""
    first = entries[0]
    capacity = first["capacity_per_s"]
    lines = [
        f"[{head or 'all points'}] service time {fit.service_s * 1e3:.3g} ms "
        f"(cs2 {fit.cs2:.2f}) at {fit.x:g} {unit}{seen}, plus {fit.delay_s * 1e3:.2g} ms "
        "outside the server:",
        f"{threads} thread{'s' if threads > 1 else ''} can serve {capacity:.3g} req/s, "
        f"knee (max power) at {first['knee_x']:.3g} {unit}.",
    ]
    if not closed:
        rates = [float(p.get("achieved_rate_per_s") or 0) for p in group]
        lines.append(f"The measured load reaches utilization {max(rates) / capacity:.2f}.")
    if cores is not None and threads > cores:
        capped = next(e for e in entries if e["limited_by"] == "cores")
        cpu = _busiest_cpu(group)
        lines.append(
            f"With {cores} cores, {threads} threads compute at most {cores} requests at once: "
            f"capacity {capped['capacity_per_s']:.3g} req/s, not {capacity:.3g}"
            + (f" (busiest node: {cpu[0]}, {cpu[1]:.0f}% CPU)." if cpu else ".")
        )
    for e in entries:
        compared = sum(p["predicted_mean_ns"] is not None for p in e["points"])
        flagged = sum(p["flag"] for p in e["points"])
        if compared:
            lines.append(
                f"{e['label']}: {flagged} of {compared} points below capacity differ beyond "
                "the interval."
            )
        else:
            lines.append(f"{e['label']}: every point is beyond capacity.")
    return " ".join(lines)


def _busiest_cpu(group: list[dict[str, Any]]) -> tuple[str, float] | None:
    best: tuple[str, float] | None = None
    for p in group:
        for node, usage in (p.get("resources") or {}).items():
            cpu = (usage or {}).get("cpu_percent")
            if cpu is not None and (best is None or cpu > best[1]):
                best = (node, float(cpu))
    return best
