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
    server: list[float | None] = []
    network: list[float | None] = []
    for p in points:
        for part, label in (("rest", "rest 99%"), ("top", "top 1%")):
            entry = p["top1"].get(part) or {}
            mean = entry.get("mean_ns")
            cats.append(f"{p.get('label')} · {label}")
            server.append(_share_ms(mean, entry.get("server_share")))
            network.append(_share_ms(mean, entry.get("network_share")))
    fig = Figure(
        "top1-breakdown",
        "mean latency of the top 1% vs the rest, split into server and network time",
        Axis("point", "category"),
        Axis("mean latency (ms)"),
        [
            Trace("bar", "server", cats, server, color=0),
            Trace("bar", "network + middleware", cats, network, color=1),
        ],
        caption="Each point has two bars: the 99% of requests below the 99th percentile and "
        "the 1% above it; each bar's mean is split by the mean shares of server and network "
        "time.",
        stacked=True,
        height_px=480,
    )
    return Section("top1", TITLE, [fig, _table(points)])


def _share_ms(mean_ns: Any, share: Any) -> float | None:
    if not isinstance(mean_ns, int | float) or not isinstance(share, int | float):
        return None
    return mean_ns * share / 1e6


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
