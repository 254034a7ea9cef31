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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from knee.config_values import ConfigTable, TomlTable
from knee.models.closed_loop import ClosedModel
from knee.models.fit import (
    SERVERS_KEY,
    Fit,
    Settings,
    cache_setting,
    declared_servers,
    fit_service,
    ok_latency,
    servers,
    setting,
    settings_of,
    unstable,
)
from knee.models.measured import measured_knee
from knee.models.open_loop import CS2_CONSTANT, OpenModel, open_models, primary_kind
from knee.models.servers import ServersEstimate, Throughput, estimate_servers
from knee.models.types import Model, ModelGroup, ModelPoint, SeriesModels
from knee.stats.summary import MeasuredKnee, ModelKnee

#: A point is flagged when the predicted mean is outside the measured mean's 95% interval
#: and differs from the measured mean by more than this fraction of it.
FLAG_TOLERANCE = 0.10

QueueModel = OpenModel | ClosedModel


def analyze(
    points: Sequence[Mapping[str, Any]],
    settings: TomlTable | Settings,
    cores: int | None,
) -> list[SeriesModels]:
    """`settings`: how to read a point's settings (`knee.models.fit.settings_of`): the run
    directory's records, as the report passes them, or a resolved spec."""
    lookup = settings_of(settings)
    by_series: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for p in points:
        by_series[p["series"]].append(p)
    out: list[SeriesModels] = []
    for series, pts in by_series.items():
        entry = _series(series, pts, lookup, cores)
        if entry is not None:
            out.append(entry)
    return out


def _x_of(point: Mapping[str, Any], spec: Settings, closed: bool) -> float | None:
    """The swept load: clients (closed loop) or the offered (target) rate."""
    if closed:
        return float(setting(point, spec, "load.clients") or 1)
    target = point.get("target_rate_per_s")
    return float(target) if target else None


def _measured_x(point: Mapping[str, Any], spec: Settings, closed: bool) -> float:
    """Where a point lies on the models' axis: its clients, or the rate requests were
    really sent at (the offered rate in runs without an achieved rate)."""
    x = _x_of(point, spec, closed) or 0.0
    return x if closed else float(point.get("achieved_rate_per_s") or x)


def _fit_set(stable: list[Mapping[str, Any]], spec: Settings) -> list[Mapping[str, Any]]:
    """The stable points a fit group is fitted on: those of its fewest threads that has any.
    More threads than cores stretch each request's service time by waiting for a core, so
    the fewest threads measure the work itself."""
    if not stable:
        return []
    fewest = min(servers(p, spec) for p in stable)
    return [p for p in stable if servers(p, spec) == fewest]


def _series(
    series: str, points: Sequence[Mapping[str, Any]], spec: Settings, cores: int | None
) -> SeriesModels | None:
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
    fit_groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    settings: dict[str, ConfigTable] = {}
    for p in usable:
        others = {k: v for k, v in p["swept"].items() if k not in (x_key, SERVERS_KEY)}
        key = json.dumps(others, sort_keys=True)  # swept values may be lists
        fit_groups[key].append(p)
        settings[key] = others
    pool_series = any(servers(p, spec) > 1 for p in usable)
    models: list[Model] = []
    groups: list[ModelGroup] = []
    notes: list[str] = []
    for key, members in fit_groups.items():
        fitted = _fit_set([p for p in members if not unstable(p)], spec)
        fitted.sort(key=lambda p: _x_of(p, spec, closed) or 0.0)
        fit = fit_service(
            fitted,
            [_measured_x(p, spec, closed) for p in fitted],
            cache_entries=max((cache_setting(p, spec) for p in fitted), default=0),
        )
        by_threads: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
        for p in members:
            by_threads[servers(p, spec)].append(p)
        for configured, group in sorted(by_threads.items()):
            group.sort(key=lambda p: _x_of(p, spec, closed) or 0.0)
            xs = [_x_of(p, spec, closed) or 0.0 for p in group]
            if closed and len(set(xs)) < 2:
                continue  # one population: the fit predicts only itself
            where = settings[key] | ({SERVERS_KEY: configured} if pool_series else {})
            knee = measured_knee(group, lambda p: _measured_x(p, spec, closed))
            estimate = estimate_servers(group, fit, lambda p: _measured_x(p, spec, closed))
            source = _servers_source(group[0], spec, estimate)
            threads = configured if source == "declared" else estimate.c
            summary: ModelGroup = {
                "group": where,
                "servers": threads,
                "servers_source": source,
                "servers_estimate": estimate.to_json(),
                "primary": None,
                "fits": None,
                "fit": None if fit is None else fit.to_json(),
                "fit_points": [] if fit is None else list(fit.points),
                "unstable_points": [p["point"] for p in group if unstable(p)],
                "measured_knee": knee,
            }
            groups.append(summary)
            if fit is None:
                notes.append(_no_fit_note(group, closed, where, source, estimate))
                continue
            # An estimated c already has the machine's cores in it (it is what the server
            # completed), so only a declared pool gets the cores-limited variant.
            cores_cap = cores if source == "declared" else None
            if closed:
                think_s = float(setting(group[0], spec, "load.think_ms") or 0) / 1e3
                built: list[QueueModel] = [ClosedModel(threads, fit, think_s, int(max(xs)))]
                if cores_cap is not None and cores_cap < threads:
                    built.append(ClosedModel(cores_cap, fit, think_s, int(max(xs)), "cores"))
                primary = "MVA"
            else:
                built = list(open_models(fit, threads, cores_cap))
                primary = primary_kind(fit, threads)
            summary["primary"] = primary
            entries = [
                _model_entry(m, group, spec, closed, where, m.kind == primary, threads, source)
                for m in built
            ]
            models += entries
            verdict = judge_fit(entries, estimate.throughput)
            summary["fits"] = verdict.fits
            notes.append(
                _group_note(
                    fit, threads, cores_cap, group, entries, closed, where, knee, source, estimate
                )
                + " "
                + verdict.sentence
            )
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


def _servers_source(point: Mapping[str, Any], spec: Settings, estimate: ServersEstimate) -> str:
    """ "declared" (the system's `server.threads`), "estimated" (c = X_sat E[S] from the
    data) or "assumed" (1: nothing to estimate it from)."""
    if declared_servers(point, spec) is not None:
        return "declared"
    return "estimated" if estimate.estimated else "assumed"


def _label(model: QueueModel, threads: int, source: str = "declared") -> str:
    name = model.kind if model.kind != "M/M/c" else f"M/M/{model.servers}"
    if model.kind == "M/M/1":
        name += " (source report's reference)"
    if model.limited_by == "cores":
        return f"{name} ({threads} threads on {model.servers} cores)"
    if source == "estimated":
        return f"{name} (c = {threads}, estimated)"
    return name if threads == 1 else f"{name} ({threads} threads)"


def _with_service(model: QueueModel, service_s: float) -> QueueModel:
    return replace(model, fit=replace(model.fit, service_s=service_s))


def _knee_and_capacity_ci(model: QueueModel) -> tuple[list[float] | None, list[float] | None]:
    """The model's knee and capacity at the ends of the fitted service time's 95% interval
    (the knee scales with the service rate; the delay and cs2 are held), or None without
    an interval."""
    ci = model.fit.service_ci_s
    if ci is None or ci[0] <= 0:
        return None, None
    ends = [_with_service(model, s) for s in ci]
    knees = sorted(m.knee_x() for m in ends)
    caps = sorted(m.capacity_per_s for m in ends)
    return knees, caps


def _model_entry(
    model: QueueModel,
    group: list[Mapping[str, Any]],
    spec: Settings,
    closed: bool,
    where: ConfigTable,
    primary: bool,
    threads: int,
    source: str,
) -> Model:
    xs = [_measured_x(p, spec, closed) for p in group]
    knee = model.knee_x()
    knee_ci, capacity_ci = _knee_and_capacity_ci(model)
    return {
        "kind": model.kind,
        "servers": model.servers,
        "servers_source": source,
        "label": _label(model, threads, source),
        "primary": primary,
        "reference": model.kind == "M/M/1",
        "limited_by": model.limited_by,
        "group": where,
        "service_mean_ns": model.fit.service_s * 1e9,
        "service_cs2": model.fit.cs2,
        "delay_ns": model.fit.delay_s * 1e9,
        "fit_points": list(model.fit.points),
        "capacity_per_s": model.capacity_per_s,
        "capacity_ci_per_s": capacity_ci,
        "knee_x": knee,
        "knee_ci_x": knee_ci,
        "curve": model.curve(max(xs + ([knee] if closed else []))),
        "points": [_compare(model, p, spec, closed) for p in group],
    }


def _compare(
    model: QueueModel, point: Mapping[str, Any], spec: Settings, closed: bool
) -> ModelPoint:
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


def _head(where: ConfigTable) -> str:
    return ", ".join(f"{k.partition('.')[2]}={v}" for k, v in where.items()) or "all points"


def _no_fit_note(
    group: list[Mapping[str, Any]],
    closed: bool,
    where: ConfigTable,
    source: str,
    estimate: ServersEstimate,
) -> str:
    why = (
        "every point is unstable (over capacity), and no model is fitted to an unstable point"
        if all(unstable(p) for p in group)
        else "no stable point has service times"
    )
    servers_said = _servers_sentence(estimate.c, source, estimate) if source != "declared" else ""
    return " ".join(x for x in (f"[{_head(where)}] no model: {why}.", servers_said) if x)


def _servers_sentence(threads: int, source: str, estimate: ServersEstimate) -> str:
    if source == "estimated":
        return f"Servers: c = {threads}, estimated from the data: {estimate.detail}."
    if source == "assumed":
        return f"Servers: 1, assumed: {estimate.detail}."
    text = f"Servers: {threads}, declared (server.threads)"
    if estimate.value is not None:
        # A cross-check: what the server completed over capacity, in servers' worth.
        text += f"; the data give c = {estimate.value:.2f}"
    return text + "."


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
    group: list[Mapping[str, Any]],
    entries: list[Model],
    closed: bool,
    where: ConfigTable,
    knee: MeasuredKnee | None,
    source: str,
    estimate: ServersEstimate,
) -> str:
    """What the fit found for one group, in words."""
    unit = "clients" if closed else "req/s"
    primary = next((e for e in entries if e["primary"]), entries[0])
    capacity = primary["capacity_per_s"]
    lines = [
        f"[{_head(where)}] {_fit_sentence(fit, closed)}",
        _cache_sentence(fit),
        _servers_sentence(threads, source, estimate),
    ]
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


@dataclass(frozen=True)
class Verdict:
    """Whether a group's primary model explains its points, and the sentence that says
    when it does not."""

    fits: bool
    closest: str | None  # the label of the model that came closest
    sentence: str


def _misfit(e: Model, sat: Throughput | None) -> tuple[bool, float, list[str]]:
    """(fits, error, reasons) of one model entry: it misses when its prediction is off
    (flagged, or no prediction: the point is past the model's capacity) at most stable
    points, or when its capacity and the saturated throughput differ beyond both
    intervals and by more than FLAG_TOLERANCE. error (for "closest"): the mean relative
    error over stable points (1 for a point past capacity) plus the capacity's."""
    stable = [p for p in e["points"] if p["stable"]]
    off = sum(bool(p["flag"]) or p["predicted_mean_ns"] is None for p in stable)
    errors = [
        1.0
        if p["predicted_mean_ns"] is None
        else abs(p["predicted_mean_ns"] / p["measured_mean_ns"] - 1)
        for p in stable
    ]
    error = sum(errors) / len(errors) if errors else 0.0
    reasons = []
    if stable and off > len(stable) / 2:
        reasons.append(
            f"is off beyond the measured interval at {off} of {len(stable)} stable points"
        )
    if sat is not None:
        cap = e["capacity_per_s"]
        lo, hi = e.get("capacity_ci_per_s") or (cap, cap)
        rel = cap / sat.per_s - 1
        error += abs(rel)
        apart = hi < sat.ci_per_s[0] or lo > sat.ci_per_s[1]
        if apart and abs(rel) > FLAG_TOLERANCE:
            reasons.append(
                f"gives capacity {cap:.3g} req/s [{lo:.3g}, {hi:.3g}] where the server "
                f"completed {sat.per_s:.3g}/s [{sat.ci_per_s[0]:.3g}, {sat.ci_per_s[1]:.3g}] "
                f"over capacity (point {sat.point})"
            )
    return not reasons, error, reasons


def judge_fit(entries: list[Model], sat: Throughput | None) -> Verdict:
    """A group's primary model fits unless it misses (`_misfit`); with a cores-limited
    variant beside it, one of the two fitting is enough (the binding limit is either).
    When none fits, the sentence names the model that came closest, so the group's note
    does not present a model that does not fit as the explanation."""
    judged = [(e, *_misfit(e, sat)) for e in entries]
    primaries = [j for j in judged if j[0]["primary"]] or judged[:1]
    if any(ok for _, ok, _, _ in primaries):
        return Verdict(True, None, "")
    first, _, _, reasons = primaries[0]
    closest, closest_ok, _, _ = min(judged, key=lambda j: (not j[1], j[2]))
    if closest is first:
        which = "no other model drawn came closer"
    elif closest_ok:
        which = f"{closest['label']} does fit"
    else:
        which = f"{closest['label']} came closest"
    return Verdict(
        False,
        closest["label"],
        f"No model fits these points: the primary model, {first['label']}, "
        f"{' and '.join(reasons)}; {which}. Its predictions are not offered as the "
        "explanation of these points.",
    )


def model_knee(group: ModelGroup, models: list[Model]) -> ModelKnee | None:
    """The knee of one group's primary model, for other code: `group` is an entry of an
    analyze() result's "groups", `models` that result's "models". Returns

        {"kind", "label", "servers", "servers_source": "declared"|"estimated"|"assumed",
         "x": the model's knee (max power; req/s or clients),
         "interval": [lo, hi] | None   the knee at the ends of the fitted service time's
                                       95% interval (None: the fit has no interval),
         "capacity_per_s", "capacity_interval_per_s": [lo, hi] | None,
         "fits": bool}                 false: no model explains the group (judge_fit)

    or None when the group has no model. When a cores-limited variant is primary beside
    the declared pool, the one of lower capacity (the binding limit) is given."""
    mine = [m for m in models if m["primary"] and m["group"] == group["group"]]
    if not mine:
        return None
    m = min(mine, key=lambda m: m["capacity_per_s"])
    return {
        "kind": m["kind"],
        "label": m["label"],
        "servers": m["servers"],
        "servers_source": group.get("servers_source"),
        "x": m["knee_x"],
        "interval": m.get("knee_ci_x"),
        "capacity_per_s": m["capacity_per_s"],
        "capacity_interval_per_s": m.get("capacity_ci_per_s"),
        "fits": group.get("fits"),
    }


def _busiest_cpu(group: list[Mapping[str, Any]]) -> tuple[str, float] | None:
    best: tuple[str, float] | None = None
    for p in group:
        for node, usage in (p.get("resources") or {}).items():
            cpu = (usage or {}).get("cpu_percent")
            if cpu is not None and (best is None or cpu > best[1]):
                best = (node, float(cpu))
    return best
