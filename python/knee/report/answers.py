"""The three answers of a run as the report states them: capacity, SLO capacity and the
knee, each with its interval (knee.analysis.answers computes them; here they are read and put
in words).

A search (`knee find`) has them in summary.json's `find`; a rate sweep in its `answers`
(computed by `knee run` with `knee.analysis.answers.from_points`: the same group dicts without
the search's hold and path; a run written before that gets them computed here). Each
interval is a bracket [lo, hi]: lo the highest rate shown good, hi the lowest shown bad;
None at an end means the runs did not reach it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from knee.analysis.answers import from_points
from knee.report import fmt
from knee.report.data import ReportRun
from knee.report.kit import Html, esc
from knee.report.types import bottleneck_read
from knee.resources.bottleneck import explain
from knee.stats import summary
from knee.stats.summary import Answer, Bottleneck, GroupAnswers, Knee, PointStats

#: Why a search stopped, in words (knee.find.search.Outcome.stopped).
STOPPED = {
    "done": "the bracket is within the tolerance and the hold at the answer passed",
    "budget": "the time budget ran out",
    "generator": "the load generator was the limit",
    "max_rate": "the highest rate allowed was reached",
    "min_rate": "the lowest rate allowed was already over the limit",
    "hold": "the hold at the answer kept failing",
}
#: What sets the capacity, by who was the limit at the bracket's upper end.
LIMITS = {
    "target": "set where latency grows without bound (the target stops keeping up)",
    "errors": "set where requests start to fail",
    "generator": "the load generator was the limit, so this is not the target's capacity",
}
KNEE_METHODS = {"power": "Kleinrock's power, measured", "model": "the fitted model's power"}


@dataclass
class RunAnswers:
    kind: str  # "search" or "sweep"
    slo: str | None
    groups: list[GroupAnswers]
    find: summary.RunAnswers | None  # summary.json's `find` for a search


def of(rr: ReportRun) -> RunAnswers | None:
    """The run's answers, or None when it is neither a search nor a sweep of rates."""
    if rr.find is not None:
        return RunAnswers("search", rr.find.get("slo"), list(rr.find.get("groups") or []), rr.find)
    doc = rr.run.summary.get("answers")
    if doc is not None:  # a sweep's, written by `knee run`
        groups = list(doc.get("groups") or [])
        return RunAnswers("sweep", doc.get("slo"), groups, None) if groups else None
    # A run written before `answers` was: its points as summary.json holds them.
    found = from_points(rr.points, rr.slo)
    return RunAnswers("sweep", rr.slo, found, None) if found else None


def rate(value: float | None) -> str:
    return "?" if value is None else f"{fmt.num(value)}/s"


def bracket(interval: Any) -> str:
    """[lo, hi] with an open end shown as such."""
    lo, hi = (list(interval) + [None, None])[:2] if interval else (None, None)
    left = fmt.num(lo) if lo is not None else "below any rate measured"
    right = fmt.num(hi) if hi is not None else "not reached"
    return f"[{left}, {right}]"


def _ends(answer: Answer | None) -> tuple[float | None, float | None]:
    interval = (answer.get("interval_per_s") if answer else None) or []
    lo, hi = ([*interval] + [None, None])[:2]
    return lo, hi


def stated(answer: Answer | None, stopped: str | None = None) -> str:
    """One answer (capacity or SLO capacity) with its interval, in words. `stopped`: why
    the search ended, for an answer a search left undecided (None for a sweep)."""
    if not answer:
        return "not measured"
    lo, hi = _ends(answer)
    if lo is None and hi is None:
        return "no point decided"
    if answer.get("state") == "partial" and lo is not None and hi is not None:
        why = (
            "within the budget"
            if stopped == "budget"
            else f"({STOPPED.get(str(stopped), stopped)})"
        )
        return (
            f"partial: the search stopped {why} before the hold at {rate(lo)}; the bracket "
            f"reached is [{fmt.num(lo)}, {fmt.num(hi)}]/s"
        )
    # A search written before answers had a state: `decided` false on a closed bracket.
    undecided = stopped is not None and not answer.get("decided") and "state" not in answer
    if undecided and lo is not None and hi is not None:
        why = (
            "within the budget"
            if stopped == "budget"
            else f"({STOPPED.get(str(stopped), stopped)})"
        )
        return f"not decided {why}: the bracket reached is [{fmt.num(lo)}, {fmt.num(hi)}]/s"
    if lo is None:
        return f"below {rate(hi)} (no rate measured was shown good)"
    if hi is None:
        return f"at least {rate(lo)} (no higher rate was shown over it)"
    return f"{rate(lo)} [{fmt.num(lo)}, {fmt.num(hi)}]"


def knee_stated(knee: Knee | None) -> str:
    if not knee:
        return "not found (too few stable points)"
    power = knee.get("power")
    edge = power.get("edge") if power and knee.get("method") == "power" else None
    where = f"; at the {edge} rate measured, so it may lie beyond" if edge else ""
    how = KNEE_METHODS.get(str(knee.get("method")), str(knee.get("method")))
    return f"{rate(knee.get('rate_per_s'))} {bracket(knee.get('interval_per_s'))} ({how}{where})"


def generator_limited(group: GroupAnswers) -> bool:
    cap = group.get("capacity")
    return stopped_of(group) == "generator" or bool(cap and cap.get("limited_by") == "generator")


def stopped_of(group: GroupAnswers) -> str | None:
    """Why the group's search ended (None for a sweep)."""
    search = group.get("search")
    return search.get("stopped") if search else None


def verdict(group: GroupAnswers, slo: str | None) -> str:
    """The group's answers in one line."""
    cap, stopped = group.get("capacity"), stopped_of(group)
    first = f"Capacity {stated(cap, stopped)}"
    if generator_limited(group):
        first += f": {LIMITS['generator']}"
    elif cap and (limit := LIMITS.get(str(cap.get("limited_by")))) and _ends(cap)[1] is not None:
        first += f", {limit}"
    parts = [first]
    if slo:
        sc = group.get("slo_capacity")
        lo, hi = _ends(sc)
        if lo is None and hi is not None:
            parts.append(f"{slo} is not shown met at any rate measured (it fails by {rate(hi)})")
        else:
            parts.append(f"{slo} holds up to {stated(sc, stopped)}")
    if group.get("knee"):
        parts.append(f"latency bends at {knee_stated(group['knee'])}")
    return "; ".join(parts) + "."


def search_line(group: GroupAnswers) -> str:
    """How the group's search ended, in one line ('' for a sweep)."""
    s = group.get("search")
    if not s:
        return ""
    why = STOPPED.get(str(s.get("stopped")), str(s.get("stopped")))
    text = (
        f"The search ran {s.get('probes')} probes in {fmt.num(s.get('wall_s'))} s "
        f"and stopped: {why}"
    )
    hold = group.get("hold")
    if hold and (probes := hold.get("probes")):
        verdicts = ", ".join(hold.get("verdicts") or [])
        text += f"; the answer was held with {len(probes)} longer probe(s) ({verdicts})"
    return text + "."


def difference(a: Any, b: Any) -> tuple[float | None, float | None]:
    """The bracket difference B - A: [lo_B - hi_A, hi_B - lo_A] (None: unbounded that way).
    It holds every difference of a rate inside A's bracket and one inside B's. A bracket
    with only its upper end ("below hi") is [0, hi]: a rate is not negative."""
    lo_a, hi_a = (list(a or []) + [None, None])[:2]
    lo_b, hi_b = (list(b or []) + [None, None])[:2]
    lo_a = 0.0 if lo_a is None and hi_a is not None else lo_a
    lo_b = 0.0 if lo_b is None and hi_b is not None else lo_b
    low = None if lo_b is None or hi_a is None else lo_b - hi_a
    high = None if hi_b is None or lo_a is None else hi_b - lo_a
    return low, high


def signed_bracket(d: tuple[float | None, float | None]) -> str:
    lo = "-inf" if d[0] is None else f"{d[0]:+.4g}"
    hi = "+inf" if d[1] is None else f"{d[1]:+.4g}"
    return f"[{lo}, {hi}]/s"


def bottleneck(group: GroupAnswers, points: list[PointStats]) -> Bottleneck | None:
    """The group's bottleneck (knee.resources.bottleneck.explain) as summary.json has it, or
    computed from its points for a search written before the answers named one."""
    if "bottleneck" in group:
        return bottleneck_read(group["bottleneck"])
    return bottleneck_read(
        explain(points, group.get("capacity"), group.get("saturated_throughput"))
    )


def set_by(bn: Bottleneck) -> Html:
    """The bottleneck's "set by ..." sentence as a line ("Capacity set by ..."), the
    resource's label in bold."""
    top = bn.get("bottleneck")
    label = top.get("label") if top else None
    return Html(f"Capacity {emphasized(str(bn.get('sentence') or ''), label)}.")


def emphasized(text: str, label: str | None) -> Html:
    """`text` escaped, its first `label` in bold."""
    out = esc(text)
    if label:
        out = out.replace(esc(label), f"<b>{esc(label)}</b>", 1)
    return Html(out)
