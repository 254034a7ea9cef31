"""The checker's verdict of each point (summary.json `points[].check`, by
`knee.analysis.chaos.check`, every system's checker path): PASS or FAIL, the counts behind
it and what failed. A system's section adds it; runs without verdicts (older runs, systems
without a checker) get nothing.
"""

from __future__ import annotations

from knee.report.kit import Col, Html, note, table, verdict
from knee.stats.summary import PointStats


def checker_block(points: list[PointStats]) -> Html | None:
    """One row per point with a verdict; None when no point has one."""
    rows = []
    for p in points:
        v = p.get("check")
        if not isinstance(v, dict):
            continue
        counts = ", ".join(f"{k.replace('_', ' ')} {n:,}" for k, n in v.get("counts", {}).items())
        rows.append(
            [
                str(p.get("label", p.get("point"))),
                verdict("pass" if v.get("verdict") == "PASS" else "fail"),
                str(v.get("name", "")),
                counts,
                str(v.get("detail", "")) or "-",
            ]
        )
    if not rows:
        return None
    cols = [
        Col("point", left=True),
        Col("verdict", tip="the checker's verdict on the point (knee.analysis.chaos)"),
        Col("check", left=True),
        Col("counts", left=True),
        Col("what failed", left=True),
    ]
    return Html(
        "<h3>Checker</h3>"
        + table(cols, rows)
        + note("Computed from the run directory as each point ended (summary.json check).")
    )
