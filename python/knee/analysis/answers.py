"""The three answers of a load curve (docs/find.md, "The answers"): the sustainable
capacity, the SLO capacity and the knee, each with its interval. `knee find` computes them
from its probes; every report computes them the same way from a sweep's points.

- **capacity**: the highest rate shown stable. Its interval is the bracket from it to the
  lowest rate shown not stable: the truth lies between (each probe's verdict is a test at
  1%, and the answer was repeated with fresh probes). A sweep's bracket is as wide as its
  grid. Beside it, the *saturated throughput*: what the target completed while over
  capacity (pooled over those probes, with its Poisson 95% interval), a second estimate.
- **SLO capacity**: the highest rate shown stable with the SLO met at one-sided 99%
  confidence (knee.stats.slo, MLPerf LoadGen's rule), and the bracket to the lowest rate
  shown not to meet it.
- **the knee**: where latency bends. Two estimates: Kleinrock's power (throughput / mean
  latency) measured at each stable point (knee.models.measured, with the rates whose
  power cannot be told apart as its interval), and the fitted model's maximum of power.
  The answer is the measured one when its best point lies inside the rates measured (no
  model's assumption); when it lies at an edge (the maximum may be beyond) the model's,
  if a model fits; else the measured one, marked at the edge.
"""

from __future__ import annotations

import json
from typing import Any

from knee.models.measured import measured_knee
from knee.resources.bottleneck import explain
from knee.stats.decision import decide
from knee.stats.intervals import poisson_count_ci
from knee.stats.summary import (
    Answer,
    GroupAnswers,
    Interference,
    Knee,
    MeasuredKnee,
    ModelKnee,
    PointStats,
    SaturatedThroughput,
)

RATE_KEY = "load.rate_per_s"


def _rate(point: PointStats) -> float:
    return float(point.get("target_rate_per_s") or 0.0)


def group_key(point: PointStats) -> str:
    """The group a rate point belongs to: its series and every swept value but the rate."""
    return key_of(point.get("series"), point.get("swept") or {})


def key_of(series: str | None, swept: dict[str, Any]) -> str:
    """A group's key: its series and every swept value but the rate (a spec's values that
    JSON cannot write, as text)."""
    others = {k: v for k, v in swept.items() if k != RATE_KEY}
    return json.dumps([series, others], sort_keys=True, default=str)


def group_label(point: PointStats) -> str:
    others = {k: v for k, v in (point.get("swept") or {}).items() if k != RATE_KEY}
    shown = " ".join(f"{k.partition('.')[2]}={v}" for k, v in others.items())
    return " ".join(x for x in (str(point.get("series") or ""), shown) if x)


def _good(point: PointStats, answer: str) -> bool:
    return decide(point).good_for(answer)


def bracket(points: list[PointStats], answer: str) -> tuple[float | None, float | None]:
    """(highest rate shown good below the lowest shown bad, lowest shown bad) over points
    of one group, for "capacity" or "slo"."""
    bad = [_rate(p) for p in points if not _good(p, answer)]
    hi = min(bad) if bad else None
    good = [_rate(p) for p in points if _good(p, answer) and (hi is None or _rate(p) < hi)]
    return (max(good) if good else None), hi


def saturated_throughput(points: list[PointStats]) -> SaturatedThroughput | None:
    """OK completions per second while over capacity (unstable points not cut short and
    not failing), pooled, with Garwood's 95% interval; None without such a point."""
    over = [
        p
        for p in points
        if decide(p).capacity == "unstable"
        and decide(p).limit == "target"
        and not p.get("cut_short")
        and p.get("window_s")
    ]
    count = sum(int(p.get("ok_in_window") or 0) for p in over)
    window_s = sum(float(p.get("window_s") or 0.0) for p in over)
    if not over or window_s <= 0:
        return None
    lo, hi = poisson_count_ci(count)
    return {
        "per_s": count / window_s,
        "ci_per_s": [lo / window_s, hi / window_s],
        "points": [p["point"] for p in over],
    }


def _answer(lo: float | None, hi: float | None, what: str, limit: str | None) -> Answer:
    if lo is None and hi is None:
        detail = f"no point measured for the {what}"
    elif lo is None:
        detail = f"not shown at any rate measured: the {what} is below {hi:.4g}/s"
    elif hi is None:
        detail = f"at least {lo:.4g}/s: no higher rate was shown over it"
    else:
        detail = f"{lo:.4g}/s, between {lo:.4g} and {hi:.4g}/s (+{hi / lo - 1:.1%})"
    closed = lo is not None and hi is not None
    return {
        "rate_per_s": lo,
        "interval_per_s": [lo, hi],
        # A sweep's closed bracket is decided; a search's answer may be made "partial" by
        # the search (knee.find.run: stopped before its hold held).
        "state": "decided" if closed else "undecided",
        "decided": closed,
        "limited_by": limit,
        "detail": detail,
    }


def _between_neighbours(points: list[PointStats], power: MeasuredKnee) -> list[float]:
    """The measured knee's interval widened to the stable rates next to it: between two
    measured rates the power is not known, and its maximum may lie anywhere up to them."""
    stable = sorted({_rate(p) for p in points if decide(p).capacity == "stable"})
    x = power["x"]
    below = [r for r in stable if r < x]
    above = [r for r in stable if r > x]
    lo, hi = power["interval_x"]
    return [min(lo, below[-1]) if below else lo, max(hi, above[0]) if above else hi]


def knee(points: list[PointStats], model: ModelKnee | None) -> Knee | None:
    """The knee of one group (see the module's docstring for which estimate is used)."""
    # On the offered rate, the axis of every answer (and of the report's figure).
    power = measured_knee(points, _rate)
    model_x = model["x"] if model is not None else None
    fits = bool(model is not None and model["fits"])
    interval: list[float] | None

    if power is not None and power["edge"] is None:
        method, x, interval = "power", power["x"], _between_neighbours(points, power)
        why = (
            "the highest measured power lies inside the rates measured; its interval runs to "
            "the stable rates measured on either side (power rises to its maximum and falls "
            "after it, so the maximum lies between them) and over the rates whose power "
            "cannot be told apart from it"
        )
    elif model is not None and model_x and fits:
        method, x, interval = "model", model_x, model["interval"]
        why = (
            "the measured power is highest at the "
            + (f"{power['edge']} rate measured" if power else "few stable points measured")
            + f"; the {model['label']} model's maximum of power is used"
        )
    elif power is not None:
        method, x, interval = "power", power["x"], power["interval_x"]
        why = (
            f"measured power, highest at the {power['edge']} rate measured: the knee may lie beyond"
        )
    else:
        return None
    return {
        "rate_per_s": x,
        "interval_per_s": interval,
        "method": method,
        "why": why,
        "power": power,
        "model": model,
    }


def interference(points: list[PointStats]) -> Interference | None:
    """How many of the points ran while other processes used the machine (the interference
    check warned: knee.stats.interference), with the worst foreign CPU; None when none."""
    busy = [
        c
        for p in points
        for c in p.get("checks") or []
        if c.get("name") == "interference" and c.get("verdict") in ("warn", "fail")
    ]
    if not busy:
        return None
    worst = max(float(c.get("value") or 0.0) for c in busy)
    return {
        "points": len(busy),
        "of": len(points),
        "foreign_cpu_percent_max": worst,
        "detail": (
            f"{len(busy)} of {len(points)} points ran while other processes used the machine "
            f"(up to {worst:.0f}% of a core on average in a point): the verdicts, and so the "
            "answers, may be lower and noisier than on a quiet machine"
        ),
    }


def group_answers(
    points: list[PointStats],
    slo: str | None,
    model: ModelKnee | None = None,
    brackets: dict[str, list[float | None]] | None = None,
) -> GroupAnswers:
    """The answers of one group's points; `brackets` (a search's final ones) replace the
    brackets read from the points."""
    cap = (brackets or {}).get("capacity") or list(bracket(points, "capacity"))
    # A rate probed twice (a search's hold) may be stable once: the limit of the other.
    limits = [lim for p in points if _rate(p) == cap[1] and (lim := decide(p).limit)]
    out: GroupAnswers = {
        "label": group_label(points[0]) if points else "",
        "capacity": _answer(cap[0], cap[1], "capacity", limits[0] if limits else None),
        "saturated_throughput": saturated_throughput(points),
        "slo_capacity": None,
        "knee": knee(points, model),
        "interference": interference(points),
        "points": [p["point"] for p in points],
    }
    out["bottleneck"] = explain(points, out["capacity"], out["saturated_throughput"])
    if slo:
        got = (brackets or {}).get("slo") or list(bracket(points, "slo"))
        slo_capacity = _answer(got[0], got[1], f"SLO {slo} capacity", None)
        slo_capacity["slo"] = slo
        out["slo_capacity"] = slo_capacity
    return out


def from_points(points: list[PointStats], slo: str | None) -> list[GroupAnswers]:
    """Answers per group of a run's open-loop rate points (a sweep), in order of first
    appearance; groups of fewer than two rates have none."""
    groups: dict[str, list[PointStats]] = {}
    for p in points:
        if p.get("target_rate_per_s") and RATE_KEY in (p.get("swept") or {}):
            groups.setdefault(group_key(p), []).append(p)
    return [group_answers(g, slo) for g in groups.values() if len({_rate(p) for p in g}) >= 2]
