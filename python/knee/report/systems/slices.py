"""The slices system's findings (report 003): the exactly-once checker's verdict, throughput,
CPU per PN and RTD over time with the joins and the rate change marked (Figures 26-28),
Table 2 (before, during and after each balancing) and Table 3 (balancing time vs slices x
rate) beside the report's values, the handoff timeline per slice, and the LB's overhead
against the baseline with its intervals.

Every number comes from `knee.analysis.slices`; the report's own values appear beside ours
as what it measured.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from knee.analysis import chaos
from knee.analysis import slices as analysis
from knee.models.types import SeriesModels
from knee.report import fmt
from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Marker, Trace
from knee.report.html import Section
from knee.report.kit import Col, Html, esc, note, table, verdict

#: Points drawn over time (a sweep of many points gets its first ones; the tables have all).
MAX_TIMELINE_POINTS = 2
#: Handoff rows shown per point (a 1,000-slice point moves hundreds of slices per join).
MAX_HANDOFF_ROWS = 200


def sections(rr: ReportRun, models: list[SeriesModels]) -> list[Section]:
    run = rr.run
    points = rr.sample_points()
    intro = Html(
        "<p>The source report (003) ran an image-processing pipeline on DDS: a client "
        "publishes colour images, processing nodes (PNs) turn them grey and acknowledge, and "
        "a load balancer moves slices (item id mod S) to PNs as they join. It paused each "
        "move for about 400 ms. Here the pipeline runs on Zenoh, and every item's fate is "
        "checked: replied once, or lost, or processed twice.</p>"
    )
    if not points:
        return [Section("slices", "Slices findings (report 003)", [intro, note("No samples.")])]
    labels = {p["point"]: str(p.get("label", p["point"])) for p in rr.points}
    blocks: list[str | Figure] = [intro, _checker(run, points, labels)]
    drawn = 0
    for point in points:
        if drawn >= MAX_TIMELINE_POINTS:
            break
        blocks.extend(_timeline(run, point, labels.get(point, str(point))))
        drawn += 1
    for point in points:
        blocks.extend(_balancing(run, point, labels.get(point, str(point))))
    blocks.extend(_table3(run))
    blocks.extend(_overhead(run))
    return [Section("slices", "Slices findings (report 003)", blocks)]


# ------------------------------------------------------------------ the checker


def _passed(run: Any, point: int) -> bool:
    """The point's verdict by the one checker path (knee.analysis.chaos), as summary.json
    keeps it."""
    v = chaos.point_verdict(run, point)
    return v is not None and v.get("verdict") == "PASS"


def _checker(run: Any, points: list[int], labels: dict[int, str]) -> Html:
    rows = []
    outwaited = []
    for point in points:
        v = analysis.exactly_once(run, point)  # the counts behind the verdict
        if v.late + v.held:
            outwaited.append(labels.get(point, str(point)))
        rows.append(
            [
                labels.get(point, str(point)),
                verdict("pass" if _passed(run, point) else "fail"),
                v.items,
                v.replied,
                v.lost,
                v.repeated,
                v.killed_repeats,
                v.late,
                v.held,
                v.unfinished,
                max(v.wrong, v.bad_checksums),
                v.unknown + v.unlogged_replies,
                ", ".join(f"pn-{k}" for k in v.killed) or "-",
            ]
        )
    cols: list[Col | str] = [
        Col("point", left=True),
        Col(
            "exactly once",
            tip="PASS: no item lost, none processed twice but by a killed PN, no wrong answer",
        ),
        "items",
        "replied",
        Col("lost", tip="the client gave up, and no PN processed or held the item"),
        Col("repeated", tip="processed more than once by PNs that lived (or replied)"),
        Col("by a killed PN", tip="processed again after a killed PN that never replied"),
        Col("late", tip="the client gave up, a PN processed it later (past capacity)"),
        Col("held", tip="the client gave up, still in a PN's queue when the run ended"),
        Col("unfinished", tip="unanswered when the run ended, with publications left"),
        Col("wrong", tip="answered with a grayscale that is not the image's (late ones too)"),
        Col("inconsistent", tip="log records of unpublished ids; replies missing from the log"),
        Col("killed", left=True),
    ]
    return Html(
        "<h3>Exactly once</h3>"
        + table(cols, rows)
        + note(
            "From the client's samples and each PN's log of processed items "
            "(docs/slices.md). The report checked no such thing."
        )
        + (
            note(
                f"Past capacity in {', '.join(outwaited)}: items waited in the PNs' queues "
                "longer than all their publications' timeouts (late: processed after the "
                "client gave up; held: still queued when the run ended). The queues grew "
                "for as long as the point ran, so its RTD depends on the run's length."
            )
            if outwaited
            else ""
        )
    )


# ------------------------------------------------------------------ over time


def _timeline(run: Any, point: int, label: str) -> list[str | Figure]:
    sec = analysis.per_second(run, point)
    if sec.empty:
        return []
    marks = [Marker(m["t_s"], m["what"]) for m in analysis.marks(run, point)]
    t = Axis("time since the client started (s)")
    x = sec["t_s"].tolist()
    tput = Figure(
        f"slices-throughput-p{point}",
        f"Throughput over time ({label})",
        t,
        Axis("replies per second", kind="count"),
        [Trace("line", "throughput", x, sec["throughput_per_s"].tolist(), markers=False)],
        markers=marks,
        caption="Replies received by the client each second. The report (Figure 26): "
        "40 items/s with one PN, up to 245 with five, a dip to 163 at the rate change "
        "and 317 on average after it.",
    )
    rtd = Figure(
        f"slices-rtd-p{point}",
        f"Mean round-trip delay over time ({label})",
        t,
        Axis("mean RTD (s)"),
        [Trace("line", "RTD", x, _none(sec["rtd_mean_s"]), markers=False)],
        markers=marks,
        caption="Mean RTD (from each item's intended send) of the replies of each second. "
        "The report (Figure 28): rising to about 13 s, dropping at each join.",
    )
    cpu = analysis.cpu_per_pn(run, point)
    traces = [
        Trace("line", str(node), g["t_s"].tolist(), g["cpu_percent"].tolist(), color=i,
              markers=False)
        for i, (node, g) in enumerate(cpu.groupby("node", observed=True))
    ]  # fmt: skip
    out: list[str | Figure] = [tput]
    if traces:
        out.append(
            Figure(
                f"slices-cpu-p{point}",
                f"CPU per PN ({label})",
                t,
                Axis("CPU (% of its quota, or of a core)"),
                traces,
                markers=marks,
                caption="Each PN's CPU. The report (Figure 27): above 90% as soon as a PN "
                "is active, all PNs within a few points of each other.",
            )
        )
    out.append(rtd)
    return out


def _none(values: pd.Series) -> list[float | None]:
    return [None if isinstance(v, float) and math.isnan(v) else float(v) for v in values]


# ------------------------------------------------------------------ balancing


def _balancing(run: Any, point: int, label: str) -> list[str | Figure]:
    moves, source = analysis.handoffs(run, point)
    if moves.empty:
        return []
    out: list[str | Figure] = []
    t2 = analysis.table2(run, point)
    if not t2.empty:
        rows = []
        for _, r in t2.iterrows():
            rows.append(
                [
                    int(r["pns"]),
                    fmt.num(r["duration_ms"]),
                    *[_beside(r, f"rtd_{w}_s", 3) for w in ("before", "during", "after")],
                    *[_beside(r, f"tput_{w}", 0) for w in ("before", "during", "after")],
                ]
            )
        cols: list[Col | str] = [
            "PNs", "balancing (ms)", "RTD before (s)", "RTD during (s)", "RTD after (s)",
            "throughput before (/s)", "throughput during (/s)", "throughput after (/s)",
        ]  # fmt: skip

        out.append(
            table(cols, rows, heading=f"Table 2: before, during and after each balancing ({label})")
            + note(
                f"Ours, with the report's value under it. Before and after: "
                f"{analysis.TABLE2_WINDOW_S:g} s either side of the balancing; during: the "
                f"balancing, widened to {analysis.TABLE2_MIN_DURING_S:g} s when shorter. "
                + _source(source)
            )
        )
    shown = moves.sort_values(["slice", "epoch"]).head(MAX_HANDOFF_ROWS)
    rows = [
        [
            int(r["slice"]),
            int(r["epoch"]),
            f"pn-{r['from']} -> pn-{r['to']}",
            str(r["reason"] or "-"),
            _id(r["giver_last_id"]),
            _id(r["taker_first_id"]),
            fmt.num(r["t_start_s"]),
            fmt.num((r["t_done_s"] - r["t_start_s"]) * 1e3),
        ]
        for _, r in shown.iterrows()
    ]
    cols = ["slice", "epoch", Col("move", left=True), Col("reason", left=True),
            "giver's last id", "taker's first id", "at (s)", "took (ms)"]  # fmt: skip
    more = f" (the first {MAX_HANDOFF_ROWS} of {len(moves)})" if len(moves) > len(shown) else ""
    out.append(
        table(cols, rows, details=f"Handoff timeline per slice, {label}{more}")
        + note(_source(source))
    )
    return out


def _beside(r: pd.Series, key: str, digits: int) -> Html:
    ours = r.get(key)
    theirs = r.get(f"report_{key}")
    main = (
        "-"
        if ours is None or (isinstance(ours, float) and math.isnan(ours))
        else (f"{ours:.{digits}f}")
    )
    below = "" if theirs is None or pd.isna(theirs) else f"report {theirs:g}"
    return Html(esc(main) + (f'<span class="ci">{esc(below)}</span>' if below else ""))


def _id(value: Any) -> str:
    return "-" if value is None or pd.isna(value) else str(int(value))


def _source(source: str) -> str:
    if source == "lb":
        return "Times from the LB's handoff lines (t_ns_start to t_ns_done)."
    return (
        "This run kept no LB handoff lines: the moves are read from the PNs' logs (a slice's "
        "epoch changing), and a move's time is from the giver's last item to the taker's "
        "first, an upper bound on the slice's pause."
    )


def _table3(run: Any) -> list[str | Figure]:
    t3 = analysis.table3(run)
    if len(t3) < 2:
        return []
    rows = [
        [
            int(r["slices"]),
            fmt.num(r["mb_per_s"]),
            fmt.num(r["rate_per_s"]),
            int(r["balancings"]),
            fmt.num(r["balancing_ms"]),
            fmt.num(r["balancing_max_ms"]),
            "-" if r["report_ms"] is None or pd.isna(r["report_ms"]) else f"{r['report_ms']:g}",
        ]
        for _, r in t3.sort_values(["mb_per_s", "slices"]).iterrows()
    ]
    cols = ["slices", "MB/s", "items/s", "balancings", "mean (ms)", "largest (ms)",
            "report (ms)"]  # fmt: skip
    return [
        table(cols, rows, heading="Table 3: balancing time by slices and data rate")
        + note(
            "A balancing: every move of one join, from the first start to the last done. "
            + _source(str(t3["source"].iloc[0]))
        )
    ]


def _overhead(run: Any) -> list[str | Figure]:
    o = analysis.overhead(run)
    if o is None:
        return []
    lb, base = o["lb"], o["baseline"]
    rows = [
        [
            name,
            side.items,
            Html(esc(fmt.num(side.throughput_per_s)) + _ci(side.throughput_ci)),
            Html(esc(fmt.num(side.rtd_mean_s)) + _ci(side.rtd_ci)),
        ]
        for name, side in (("with the LB", lb), ("baseline (static, no monitoring)", base))
    ]
    loss, inc = o["throughput_loss"], o["rtd_increase"]
    rows.append(
        [
            "overhead",
            "-",
            Html(esc(fmt.pct(loss["value"])) + _ci(loss["ci"], pct=True)
                 + '<span class="ci">report 1.4%</span>'),
            Html(esc(fmt.pct(inc["value"])) + _ci(inc["ci"], pct=True)
                 + '<span class="ci">report 1.58%</span>'),
        ]
    )  # fmt: skip
    cols: list[Col | str] = [Col("", left=True), "items", "throughput (/s)", "mean RTD (s)"]
    return [
        table(cols, rows, heading="Overhead of load balancing")
        + note(
            "Throughput: replies per whole second between the first and the last reply; "
            "RTD: every replied item. 95% intervals by batch means; the overhead's interval "
            "adds the two sides' half-widths in quadrature. The goal: under 0.5% less "
            "throughput."
        )
    ]


def _ci(ci: list[float] | None, pct: bool = False) -> str:
    if not ci:
        return ""
    text = f"[{fmt.pct(ci[0])}, {fmt.pct(ci[1])}]" if pct else fmt.interval(ci)
    return f'<span class="ci">{esc(text)}</span>'


# ------------------------------------------------------------------ the headline


def headline(rr: ReportRun) -> list[str] | None:
    """The exactly-once verdict over the points and the LB's overhead with its intervals,
    for the report's first section."""
    points = rr.sample_points()
    if not points:
        return None
    verdicts = [analysis.exactly_once(rr.run, p) for p in points]
    passed = sum(_passed(rr.run, p) for p in points)
    out = [
        f"Exactly once: PASS on {passed} of {len(verdicts)} points "
        f"({sum(v.lost for v in verdicts)} items lost, "
        f"{sum(v.repeated for v in verdicts)} processed twice, of "
        f"{sum(v.items for v in verdicts):,} published)."
    ]
    o = analysis.overhead(rr.run)
    if o is not None:
        loss, rtd = o["throughput_loss"], o["rtd_increase"]
        out.append(
            f"The load balancer costs {fmt.pct(loss['value'])} of throughput "
            f"{_pct_interval(loss['ci'])} and adds {fmt.pct(rtd['value'])} to the RTD "
            f"{_pct_interval(rtd['ci'])} against the baseline."
        )
    return out


def _pct_interval(ci: list[float] | None) -> str:
    return f"[{fmt.pct(ci[0])}, {fmt.pct(ci[1])}]" if ci else "(no interval)"
