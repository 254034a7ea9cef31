"""`knee compare`'s answers: when both runs have them (a search or a sweep of rates), the
capacity, the SLO capacity and the knee of A beside B's, group by group (matched by
label), with the interval of the difference B - A.

The answers' intervals are brackets, not confidence intervals, so the difference is the
bracket difference [lo_B - hi_A, hi_B - lo_A]: every difference between a rate inside A's
bracket and one inside B's lies in it. An open end of either bracket leaves that side of
the difference unbounded.
"""

from __future__ import annotations

from typing import Any, Literal

from knee.report import answers
from knee.report.data import ReportRun
from knee.report.figures import Figure
from knee.report.html import Section
from knee.report.kit import Col, Html, note, table
from knee.stats.summary import GroupAnswers

AnswerKey = Literal["capacity", "slo_capacity", "knee"]
#: The answers compared: (title, key in a group dict).
ANSWERS: tuple[tuple[str, AnswerKey], ...] = (
    ("capacity", "capacity"),
    ("SLO capacity", "slo_capacity"),
    ("knee", "knee"),
)


def section(a: ReportRun, b: ReportRun) -> Section | None:
    """The answers side by side, or None when either run has none."""
    got_a, got_b = answers.of(a), answers.of(b)
    if got_a is None or got_b is None:
        return None
    by_label = {g.get("label"): g for g in got_b.groups}
    pairs = [(g, by_label[g.get("label")]) for g in got_a.groups if g.get("label") in by_label]
    if not pairs and len(got_a.groups) == 1 and len(got_b.groups) == 1:
        pairs = [(got_a.groups[0], got_b.groups[0])]  # one group each: compare them
    blocks: list[str | Figure] = [
        Html(
            "<p>Each answer's interval is a bracket (the highest rate shown good, the lowest "
            "shown not to be). The difference B - A is the <b>bracket difference</b> "
            "[lo<sub>B</sub> - hi<sub>A</sub>, hi<sub>B</sub> - lo<sub>A</sub>]: it holds "
            "every difference of a rate in A's bracket and one in B's; an open end leaves "
            "that side unbounded. It is not a confidence interval.</p>"
        )
    ]
    if not pairs:
        blocks.append(note("The runs' answers have no group of the same label."))
    rows = [row for ga, gb in pairs for row in rows_of(ga, gb, got_a.slo, got_b.slo)]
    if rows:
        cols = [Col("group", left=True), Col("answer", left=True)]
        cols += [Col("A", left=True), Col("B", left=True), Col("B - A (bracket difference)")]
        blocks.append(table([*cols, Col("verdict", left=True)], rows))
    return Section("answers", "Capacity, SLO capacity and knee: A and B", blocks)


def rows_of(
    ga: GroupAnswers, gb: GroupAnswers, slo_a: str | None, slo_b: str | None
) -> list[list[Any]]:
    out = []
    label = ga.get("label") if ga.get("label") == gb.get("label") else "A / B"
    for title, key in ANSWERS:
        va, vb = ga.get(key), gb.get(key)
        if va is None and vb is None:
            continue
        if key == "slo_capacity":
            shown = " / ".join(dict.fromkeys(x or "none" for x in (slo_a, slo_b)))
            title = f"SLO capacity ({shown})"
        d = answers.difference(
            va.get("interval_per_s") if va else None, vb.get("interval_per_s") if vb else None
        )
        out.append(
            [
                label,
                title,
                _text(key, ga),
                _text(key, gb),
                answers.signed_bracket(d),
                _verdict(d),
            ]
        )
    return out


def _text(key: AnswerKey, group: GroupAnswers) -> str:
    if key == "knee":
        return answers.knee_stated(group.get("knee"))
    return answers.stated(group.get(key), answers.stopped_of(group))


def _verdict(d: tuple[float | None, float | None]) -> str:
    lo, hi = d
    if lo is not None and lo > 0:
        return "B higher"
    if hi is not None and hi < 0:
        return "B lower"
    return "the brackets overlap"
