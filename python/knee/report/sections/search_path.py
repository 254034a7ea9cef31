"""A search's path (find.json): each probe's rate in the order it ran, as a segment as long
as the probe took, coloured by its decision; and the table of the probes (rate, phase,
length, decision, reason, the brackets after it). A run that is not a search has no such
section (an empty one is left out of the page)."""

from __future__ import annotations

from knee.report import answers, fmt
from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Trace
from knee.report.html import Section
from knee.report.kit import Cell, Col, table, verdict
from knee.report.types import Probe

#: Decision colours (indices into knee.report.figures.PALETTE).
DECISION_COLORS = {"stable": 2, "unstable": 3, "undecided": 7}


def section(rr: ReportRun) -> Section:
    probes = rr.find_probes
    if not probes:
        return Section("search-path", "Search path", [])
    return Section("search-path", "Search path", [path_figure(probes), probe_table(probes)])


def path_figure(probes: list[Probe]) -> Figure:
    """Rate against time into the search: one segment per probe, from its start to its end."""
    ends = _cumulative([float(p.get("wall_s") or p.get("duration_s") or 0.0) for p in probes])
    starts = [0.0, *ends[:-1]]
    traces: list[Trace] = []
    for decision, color in DECISION_COLORS.items():
        x: list[float | None] = []
        y: list[float | None] = []
        hover: list[str] = []
        for i, p in enumerate(probes):
            if _decision(p) != decision:
                continue
            rate = float(p.get("rate_per_s") or 0.0)
            x += [starts[i], ends[i], None]
            y += [rate, rate, None]
            text = f"probe {i + 1} ({p.get('phase')}): {fmt.num(rate)}/s, {decision}"
            hover += [text, text, ""]
        if x:
            traces.append(Trace("line", decision, x, y, color=color, hover=hover))
    return Figure(
        "search-path",
        "the search path: each probe's rate over the search",
        Axis("time into the search (s)"),
        Axis("offered rate (requests/s)"),
        traces,
        caption="Each segment is a probe, as long as it took (a probe cut short for its "
        "growing backlog is short); green: stable, red: not stable, grey: undecided.",
    )


def _cumulative(values: list[float]) -> list[float]:
    out, total = [], 0.0
    for v in values:
        total += v
        out.append(total)
    return out


def _decision(probe: Probe) -> str:
    return str((probe.get("decision") or {}).get("capacity") or "undecided")


def _brackets(probe: Probe) -> str:
    got = probe.get("brackets") or {}
    return "; ".join(f"{name} {answers.bracket(b)}" for name, b in got.items()) or "-"


def probe_table(probes: list[Probe]) -> str:
    rows = []
    for i, p in enumerate(probes):
        d = p.get("decision") or {}
        length = fmt.num(p.get("duration_s"))
        if p.get("cut_short"):
            length += f" (cut short after {fmt.num(p.get('wall_s'))} s of wall time)"
        elif p.get("stopped_early"):
            length += f" (stopped early after {fmt.num(p.get('wall_s'))} s: its decision was clear)"
        rows.append(
            [
                i + 1,
                p.get("point"),
                Cell(p.get("group"), tip=""),
                p.get("phase"),
                fmt.num(p.get("rate_per_s")),
                fmt.num(p.get("sent_per_s")),
                fmt.num(p.get("throughput_per_s")),
                length,
                verdict(d.get("capacity")),
                d.get("limit"),
                d.get("slo"),
                d.get("reason"),
                _brackets(p),
            ]
        )
    cols = [
        Col("probe"),
        Col("point"),
        Col("group", left=True),
        Col("phase", left=True),
        Col("rate/s"),
        Col("sent/s"),
        Col("done/s"),
        Col("length s", left=True),
        Col("decision", left=True),
        Col("limit", left=True),
        Col("SLO", left=True),
        Col("reason", left=True),
        Col("brackets after it", left=True),
    ]
    return table(cols, rows, scroll=True, heading="The probes, in the order they ran")
