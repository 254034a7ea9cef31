"""The "magic 1%": the slowest 1% of requests against the rest, what they are made of
(server vs network time) and whether they come in clusters."""

from __future__ import annotations

from typing import Any

from knee.report import fmt
from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Trace
from knee.report.html import Section, esc

TITLE = "The slowest 1%"


def section(rr: ReportRun) -> Section:
    points = [p for p in rr.points if isinstance(p.get("top1"), dict)]
    if not points:
        return Section(
            "top1",
            TITLE,
            [
                '<p class="note">This run\'s summary has no top-1% '
                "analysis (summary.json points[].top1).</p>"
            ],
        )
    cats: list[str] = []
    shares: dict[str, list[float | None]] = {"server_share": [], "network_share": []}
    hover: list[str] = []
    for p in points:
        for part, label in (("rest", "rest 99%"), ("top", "top 1%")):
            entry = p["top1"].get(part) or {}
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


def _table(points: list[dict[str, Any]]) -> str:
    rows = []
    for p in points:
        t = p["top1"]
        with_, without = t.get("with") or {}, t.get("without") or {}
        cl = t.get("clustering") or {}
        rows.append(
            f'<tr><td class="l">{esc(p.get("label"))}</td><td>{fmt.ms(t.get("threshold_ns"))}'
            f"</td><td>{esc(t.get('count', '-'))}</td>"
            f"<td>{fmt.ms(with_.get('mean'))}</td><td>{fmt.ms(without.get('mean'))}</td>"
            f"<td>{fmt.ms(with_.get('p99'))}</td><td>{fmt.ms(without.get('p99'))}</td>"
            f"<td>{fmt.pct((t.get('top') or {}).get('server_share'))}</td>"
            f"<td>{fmt.pct((t.get('rest') or {}).get('server_share'))}</td>"
            f'<td class="l">{esc(cl.get("verdict", "-"))}</td>'
            f"<td>{fmt.num(cl.get('index_of_dispersion'))}</td>"
            f"<td>{esc(cl.get('longest_run', '-'))}</td>"
            f'<td class="l">{esc(cl.get("detail", ""))}</td></tr>'
        )
    return (
        '<table><tr><th class="l">point</th><th>threshold (ms)</th><th>top-1% n</th>'
        "<th>mean with</th><th>mean without</th><th>p99 with</th><th>p99 without</th>"
        '<th>server share top</th><th>server share rest</th><th class="l">clustering</th>'
        '<th>dispersion index</th><th>longest run</th><th class="l">detail</th></tr>'
        + "".join(rows)
        + "</table>"
    )
