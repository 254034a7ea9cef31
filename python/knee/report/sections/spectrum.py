"""The percentile spectrum: latency at every percentile, on a logit axis so that the tail
(99%, 99.9%, ...) gets as much room as the body."""

from __future__ import annotations

import numpy as np

from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Trace
from knee.report.html import Section
from knee.report.kit import note
from knee.stats.quantiles import order_statistic

#: Percentiles drawn per point: evenly spaced in logit from 1% up to 1 - 1/n.
GRID_POINTS = 60


def percentile_grid(n: int) -> np.ndarray:
    """Percentiles (fractions, with 8 decimals) worth drawing for n samples: none beyond
    1 - 1/n, where the sample says nothing more (the last is rounded down, so that its order
    statistic is x_(n-1), not the maximum)."""
    if n < 2:
        return np.array([0.5]) if n == 1 else np.array([])
    top = 1.0 - 1.0 / n
    lo, hi = np.log(0.01 / 0.99), np.log(top / (1.0 - top))
    grid = 1.0 / (1.0 + np.exp(-np.linspace(lo, hi, GRID_POINTS)))
    return np.unique(np.minimum(np.round(grid, 8), np.floor(top * 1e8) / 1e8))


def spectrum(latency_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(percentiles, latency in ms at each: knee's order statistic x_(ceil(n q)))."""
    grid = percentile_grid(len(latency_ns))
    if not len(grid):
        return grid, grid
    return grid, order_statistic(latency_ns, grid) / 1e6


def section(rr: ReportRun) -> Section:
    blocks: list[str | Figure] = [
        "<p>Latency at each percentile (successful requests after warm-up; each the order "
        "statistic x<sub>(&lceil;nq&rceil;)</sub>, a measured latency). The x axis is "
        "logit-scaled: 50, 90, 99, 99.9 are equally spaced, so the tail is as readable as "
        "the median. A curve stops at 1 - 1/n: beyond it the sample has nothing to say.</p>"
    ]
    for series in rr.series():
        traces: list[Trace] = []
        for i, p in enumerate(rr.points_of(series)):
            # One point's latencies at a time: a run of any size fits in memory.
            values = rr.point_ok(p.get("point"), ["latency_ns"])["latency_ns"].to_numpy()
            grid, lat_ms = spectrum(values)
            if not len(grid):
                continue
            traces.append(
                Trace(
                    "line",
                    str(p.get("label")),
                    grid.tolist(),
                    lat_ms.tolist(),
                    color=i,
                    hover=[
                        f"p{100 * q:.4g}: {v:.4g} ms" for q, v in zip(grid, lat_ms, strict=True)
                    ],
                )
            )
        if traces:
            blocks.append(
                Figure(
                    f"spectrum-{series}",
                    f"{series}: percentile spectrum",
                    Axis("percentile", "logit"),
                    Axis("latency", "log", kind="time"),
                    traces,
                )
            )
    if len(blocks) == 1:
        blocks.append(note("No successful post-warm-up requests to plot."))
    return Section("spectrum", "Percentile spectrum", blocks)
