"""Sweeps over two or three factors: mean and p99 latency as heatmaps over the last two
factors (one heatmap per value of a third)."""

from __future__ import annotations

from typing import Any

from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Trace
from knee.report.html import Section
from knee.report.kit import esc
from knee.report.traces import stat
from knee.report.types import StatName
from knee.stats.summary import PointStats

TITLE = "Factors"


def section(rr: ReportRun) -> Section:
    blocks: list[str | Figure] = []
    for series in rr.series():
        points = rr.points_of(series)
        keys = list(dict.fromkeys(k for p in points for k in (p.get("swept") or {})))
        if len(keys) < 2:
            continue
        if len(keys) > 3:
            blocks.append(
                f"<p>{esc(series)}: {len(keys)} factors; the heatmaps show the last three.</p>"
            )
        # The two factors with the most values span the heatmap; a third splits it.
        counts = {k: len({str((p.get("swept") or {}).get(k)) for p in points}) for k in keys}
        ranked = sorted(keys, key=lambda k: -counts[k])
        rows_key, cols_key = sorted(ranked[:2], key=keys.index)
        outer = [k for k in keys if k not in (rows_key, cols_key)][-1:]
        for value, members in _split(points, outer).items():
            for key, label in STATS:
                blocks.append(_heatmap(series, members, rows_key, cols_key, key, label, value))
    if not blocks:
        blocks.append("<p>No series of this run sweeps more than one factor.</p>")
    return Section("factors", TITLE, blocks)


#: The statistics drawn as heat maps: (key, title).
STATS: tuple[tuple[StatName, str], ...] = (("mean", "mean"), ("p99", "p99"))


def _split(points: list[PointStats], outer: list[str]) -> dict[str, list[PointStats]]:
    out: dict[str, list[PointStats]] = {}
    for p in points:
        swept = p.get("swept") or {}
        name = " ".join(f"{k.partition('.')[2]}={swept.get(k)}" for k in outer)
        out.setdefault(name, []).append(p)
    return out


def _heatmap(
    series: str,
    points: list[PointStats],
    rows_key: str,
    cols_key: str,
    key: StatName,
    label: str,
    outer: str,
) -> Figure:
    rows = sorted({p["swept"][rows_key] for p in points}, key=_order)
    cols = sorted({p["swept"][cols_key] for p in points}, key=_order)
    cell = {
        (p["swept"][rows_key], p["swept"][cols_key]): stat(p, "latency_ns", key) for p in points
    }
    z = [[cell.get((r, c)) for c in cols] for r in rows]
    suffix = f" ({outer})" if outer else ""
    ident = "-".join(filter(None, ["factors", series, key, outer.replace("=", "")]))
    return Figure(
        ident.replace(" ", "-"),
        f"{series}: {label} latency (ms) over {rows_key} x {cols_key}{suffix}",
        Axis(cols_key, "category"),
        Axis(rows_key, "category"),
        [Trace("heatmap", label, cols, rows, z=z, z_title="ms", legend=False)],
        height_px=380,
    )


def _order(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, int | float) else (1, str(value))
