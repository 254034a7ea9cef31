"""The "magic 1%": the slowest 1% of requests against the rest, what they are made of
(server vs network time) and whether they come in clusters."""

from __future__ import annotations

from typing import Literal, cast

from knee.report import fmt
from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Trace
from knee.report.html import Section
from knee.report.kit import Col, note, table
from knee.stats.summary import PointStats, Top1

#: The shares of the latency a figure compares.
Share = Literal["server_share", "network_share"]
#: The two parts of a point's OK requests, as the figure names them.
PARTS: tuple[tuple[Literal["rest", "top"], str], ...] = (("rest", "rest 99%"), ("top", "top 1%"))

TITLE = "The slowest 1%"


def section(rr: ReportRun) -> Section:
    points = [p for p in rr.points if isinstance(p.get("top1"), dict)]
    if not points:
        return Section(
            "top1",
            TITLE,
            [note("This run's summary has no top-1% analysis (summary.json points[].top1).")],
        )
    cats: list[str] = []
    shares: dict[Share, list[float | None]] = {"server_share": [], "network_share": []}
    hover: list[str] = []
    for p in points:
        for part, label in PARTS:
            entry = _top1(p).get(part, {})
            cats.append(f"{p.get('label')} · {label}")
            hover.append(f"{label}: mean {fmt.ms(entry.get('mean_ns'))} ms")
            for key, values in shares.items():
                share = entry.get(key)
                values.append(100 * share if isinstance(share, int | float) else None)
    fig = Figure(
        "top1-breakdown",
        "what the top 1% is made of: server vs network share of latency",
        Axis("point", "category"),
        Axis("share of mean latency (%)"),
        [
            Trace("bar", "server", cats, shares["server_share"], color=0, hover=hover),
            Trace(
                "bar", "network + middleware", cats, shares["network_share"], color=1, hover=hover
            ),
        ],
        caption="Each point has two bars: its top 1% (of n successful requests after "
        "warm-up, the floor(n/100) slowest: those ranked above the p99 order statistic) and "
        "the rest, each split into the shares of server and network time (hover for the "
        "mean). The table gives the means with and without the top 1%.",
        stacked=True,
        height_px=480,
    )
    return Section("top1", TITLE, [fig, _table(points)])


#: The table's columns: text left, numbers right.
COLUMNS = (
    Col("point", left=True),
    "threshold (ms)",
    "top-1% n",
    "mean with",
    "mean without",
    "p99 with",
    "p99 without",
    "server share top",
    "server share rest",
    Col("clustering", left=True),
    "dispersion index",
    "longest run",
    Col("detail", left=True),
)


def _top1(point: PointStats) -> Top1:
    """The point's top-1% analysis (a point that has one: the section keeps only those)."""
    return cast(Top1, point.get("top1"))


def _table(points: list[PointStats]) -> str:
    rows = []
    for p in points:
        t = _top1(p)
        with_, without = t.get("with", {}), t.get("without", {})
        cl = t.get("clustering", {})
        rows.append(
            [
                p.get("label"),
                fmt.ms(t.get("threshold_ns")),
                t.get("count", "-"),
                fmt.ms(with_.get("mean")),
                fmt.ms(without.get("mean")),
                fmt.ms(with_.get("p99")),
                fmt.ms(without.get("p99")),
                fmt.pct(t.get("top", {}).get("server_share")),
                fmt.pct(t.get("rest", {}).get("server_share")),
                cl.get("verdict", "-"),
                fmt.num(cl.get("index_of_dispersion")),
                cl.get("longest_run", "-"),
                cl.get("detail", ""),
            ]
        )
    return table(COLUMNS, rows)
