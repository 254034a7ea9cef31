"""The summary table: one row per point with 95% intervals and the checks' verdicts, then
the checks' details and the per-operation / per-service breakdowns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from knee.report import fmt
from knee.report.data import ReportRun
from knee.report.html import Section
from knee.report.kit import Cell, Col, Html, Row, esc, lines, note, table, verdict
from knee.report.traces import stat_ns
from knee.report.types import StatName
from knee.results import STATUS_NAMES
from knee.stats.summary import Check, Distribution, PointStats

PERCENTILES: tuple[tuple[StatName, str], ...] = (
    ("mean", "mean"),
    ("p50", "p50"),
    ("p90", "p90"),
    ("p99", "p99"),
    ("p999", "p99.9"),
)
CHECKS = ("sender", "poisson", "autocorrelation", "percentile_support", "interference")
CHECK_TITLES = ("sender", "Poisson", "autocorr.", "support", "interference")


def section(rr: ReportRun) -> Section:
    if not rr.points:
        return Section("summary", "Summary", [note("No point was measured.")])
    blocks = [
        "<p>Latency in ms from the intended send time, every request after warm-up: a "
        "timeout, drop or error counts as slower than any success, so a percentile that lands "
        "on one reads &gt; timeout (all failures timed out) or failed. The mean is over "
        "successful requests only (a mean over failures has no value). Grey brackets: 95% "
        "distribution-free confidence interval (order statistics for percentiles); a "
        "percentile marked * has fewer than ~100 samples beyond it, so it is not supported by "
        "the data. <i>sent/s</i>: requests really sent over the span of their send times; "
        "<i>late</i>: sends later than load.late_ms; <i>done/s</i>: successful replies that "
        "completed inside the point's window, with the replies that drained a backlog after "
        "it below. An <i>unstable</i> point (shaded) was not keeping up: its mean and "
        "percentiles depend on how long it ran. Server and network mean in one cell, network "
        "below. Hover a verdict for its detail.</p>",
        _main_table(rr.points),
        _unstable_notes(rr.points),
        _checks_table(rr.points),
        _ok_only_table(rr.points),
        _breakdown(rr.points, "by_op", "operation"),
        _breakdown(rr.points, "by_service", "service"),
    ]
    return Section("summary", "Summary", [b for b in blocks if b])


def _dist_cell(dist: Distribution | None, key: StatName) -> Cell | str:
    failed = (dist.get("failed") or {}).get(key) if dist else None
    if failed is not None:
        text = "> timeout" if failed == "timeout" else "failed"
        return Cell(text, "v-fail", "this percentile lands on a failed request")
    value = dist.get(key) if dist else None
    if not dist or value is None:
        return "-"
    supported = (dist.get("supported") or {}).get(key, True)
    star = "" if supported else "*"
    ci = fmt.ms_interval((dist.get("ci") or {}).get(key))
    tip = "" if supported else "fewer than ~100 samples beyond this percentile"
    return Cell(lines(f"{fmt.ms(value)}{star}", ci), tip=tip)


def _statuses(rates: Mapping[str, float | None]) -> Html:
    """ok's rate, and each other status that happened (every name in STATUS_NAMES)."""
    others = [f"{s} {fmt.pct(rates.get(s))}" for s in STATUS_NAMES if s != "ok" and rates.get(s)]
    return lines(f"ok {fmt.pct(rates.get('ok'))}", *others)


def _checks_by_name(point: PointStats) -> dict[str, Check]:
    return {str(c.get("name")): c for c in point.get("checks") or []}


def _check_cell(check: Check | None) -> Cell:
    if check is None:
        return verdict(None)
    return verdict(check.get("verdict", "n/a"), str(check.get("detail", "")))


def _main_table(points: list[PointStats]) -> Html:
    cols: list[Col | str] = [
        Col("point", left=True),
        "n",
        "target/s",
        "sent/s",
        "late",
        Col("statuses", tip=", ".join(STATUS_NAMES)),
        *(label for _, label in PERCENTILES),
        "max",
        "server / network mean",
        "done/s",
        "stability",
        *CHECK_TITLES,
    ]
    rows = []
    for p in points:
        lat = _with_ok_mean(p)
        checks = _checks_by_name(p)
        stability = p.get("stability")
        drain = d.get("replies") if (d := p.get("drain")) else None
        bytes_per_s = p.get("throughput_bytes_per_s")
        if bytes_per_s is None and "bytes_in_per_s" in p:
            bytes_per_s = (p.get("bytes_in_per_s") or 0) + (p.get("bytes_out_per_s") or 0)
        done_below = fmt.bytes_rate(bytes_per_s) + (f"; {drain} drained after" if drain else "")
        rows.append(
            Row(
                [
                    p.get("label", p.get("point")),
                    p.get("count", "-"),
                    fmt.num(p.get("target_rate_per_s")),
                    lines(
                        fmt.num(p.get("achieved_rate_per_s")),
                        fmt.interval(p.get("achieved_rate_ci_per_s")),
                    ),
                    p.get("late_sends", "-"),
                    _statuses(p.get("status_rates") or {}),
                    *(_dist_cell(lat, key) for key, _ in PERCENTILES),
                    fmt.ms(lat.get("max") if lat else None),
                    lines(
                        fmt.ms(stat_ns(p, "server_ns", "mean")),
                        fmt.ms(stat_ns(p, "network_ns", "mean")),
                    ),
                    lines(f"{fmt.num(p.get('throughput_per_s'))}/s", done_below),
                    verdict(
                        stability.get("verdict", "n/a") if stability else "n/a",
                        str(stability.get("detail", "")) if stability else "",
                    ),
                    *(_check_cell(checks.get(c)) for c in CHECKS),
                ],
                "unstable" if stability and stability.get("verdict") == "unstable" else "",
            )
        )
    return table(cols, rows, scroll=True)


def _with_ok_mean(p: PointStats) -> Distribution | None:
    """The headline distribution with the OK replies' mean and its interval (a mean over
    failed requests has no value)."""
    lat, ok = p.get("latency_ns"), p.get("latency_ok_ns")
    if not lat or not ok:
        return lat
    ci = (lat.get("ci") or {}) | {"mean": (ok.get("ci") or {}).get("mean")}
    return lat | {"mean": ok.get("mean"), "ci": ci}


def _unstable_notes(points: list[PointStats]) -> str:
    notes = [
        f"<li><b>{esc(p.get('label'))}</b>: {esc(s.get('detail'))}</li>"
        for p in points
        if (s := p.get("stability")) and s.get("verdict") == "unstable"
    ]
    if not notes:
        return ""
    return (
        note(
            "Unstable points: the system did not keep up, so their means and percentiles grow "
            "with the length of the run; models are not fitted to them."
        )
        + f"<ul>{''.join(notes)}</ul>"
    )


def _ok_only_table(points: list[PointStats]) -> str:
    """The distribution of successful requests alone, labelled as such."""
    if not any(p.get("latency_ok_ns") for p in points):
        return ""
    cols: list[Col | str] = [
        Col("point", left=True),
        "n ok",
        *(label for _, label in PERCENTILES),
        "max",
    ]
    rows = []
    for p in points:
        ok = p.get("latency_ok_ns")
        rows.append(
            [
                p.get("label"),
                ok.get("n", "-") if ok else "-",
                *(_dist_cell(ok, key) for key, _ in PERCENTILES),
                fmt.ms(ok.get("max") if ok else None),
            ]
        )
    return table(
        cols,
        rows,
        details="Successful requests only (OK replies; failures left out, so these "
        "percentiles understate the tail when requests failed)",
    )


def _checks_table(points: list[PointStats]) -> str:
    rows = [
        [
            p.get("label"),
            c.get("name"),
            verdict(c.get("verdict", "n/a")),
            fmt.num(c.get("value")),
            c.get("detail", ""),
        ]
        for p in points
        for c in p.get("checks") or []
    ]
    if not rows:
        return note("This run's summary has no checks.")
    cols: list[Col | str] = [Col("point", left=True), Col("check", left=True), "verdict", "value"]
    return table(
        [*cols, Col("detail", left=True)],
        rows,
        details="Checks in detail (sender: rate sent vs target and late sends; Poisson "
        "inter-arrivals by Anderson-Darling; lag-1 autocorrelation of latency; samples beyond "
        "each percentile; CPU used by other processes on the machine)",
    )


def _breakdown(points: list[PointStats], key: Literal["by_op", "by_service"], what: str) -> str:
    """Per-operation or per-service rows, shown when some point has more than one."""
    if not any(len(p.get(key) or {}) > 1 for p in points):
        return ""
    cols: list[Col | str] = [
        Col("point", left=True),
        Col(what, left=True),
        "n",
        "req/s",
        *STATUS_NAMES,
        *(label for _, label in PERCENTILES),
        "server mean",
        "network mean",
    ]
    rows = []
    for p in points:
        for name, entry in (p.get(key) or {}).items():
            lat = entry.get("latency_ns")
            rates = entry.get("status_rates") or {}
            rows.append(
                [
                    p.get("label"),
                    name,
                    entry.get("count", "-"),
                    fmt.num(entry.get("throughput_per_s")),
                    *(fmt.pct(rates.get(s)) for s in STATUS_NAMES),
                    *(_dist_cell(lat, k) for k, _ in PERCENTILES),
                    fmt.ms((entry.get("server_ns") or {}).get("mean")),
                    fmt.ms((entry.get("network_ns") or {}).get("mean")),
                ]
            )
    return table(cols, rows, heading=f"Per {what}")
