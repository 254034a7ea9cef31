"""`knee compare RUN_A RUN_B`: both runs overlaid, point by point (points match by label),
with the differences B - A and their 95% intervals.

Intervals of a difference (the runs are independent samples):
- percentiles: each run's order-statistic interval at level sqrt(0.95) (exact binomial
  ranks, distribution-free); when both cover, [lo_B - hi_A, hi_B - lo_A] covers the true
  difference, so it does with probability >= 0.95. The percentiles themselves are knee's
  order statistic x_(ceil(n q)) (`knee.stats.quantiles`), as in summary.json.
- mean: the two runs' 95% batch-means intervals (summary.json) combined as independent
  normal estimates: difference +- sqrt(h_A^2 + h_B^2), h the half-widths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from knee.report import compare_answers, data, fmt
from knee.report.figures import Axis, Figure, Trace
from knee.report.html import Section, esc
from knee.report.sections.spectrum import spectrum
from knee.report.traces import by_x, latency_traces, ok_latency, with_ok_latency
from knee.report.writer import Written, write
from knee.stats.intervals import order_statistic_ranks
from knee.stats.quantiles import order_statistic
from knee.stats.summary import PointStats

COMPARE = "compare.html"
#: Each run's percentile interval level, so that both hold together with 95%.
PER_RUN_LEVEL = math.sqrt(0.95)
QUANTILES = (("p50", 0.5), ("p99", 0.99))


@dataclass
class Diff:
    """B - A for one statistic, in ns."""

    a: float | None
    b: float | None
    lo: float | None
    hi: float | None

    @property
    def value(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def verdict(self) -> str:
        if self.lo is None or self.hi is None:
            return "n/a"
        if self.lo > 0:
            return "B higher"
        if self.hi < 0:
            return "B lower"
        return "not significant"


def quantile_diff(a_sorted: np.ndarray, b_sorted: np.ndarray, q: float) -> Diff:
    """Difference of the q-quantiles with its >= 95% distribution-free interval."""
    if not len(a_sorted) or not len(b_sorted):
        return Diff(None, None, None, None)
    qa = order_statistic(a_sorted, q, sorted_values=a_sorted)
    qb = order_statistic(b_sorted, q, sorted_values=b_sorted)
    ra = order_statistic_ranks(len(a_sorted), q, PER_RUN_LEVEL)
    rb = order_statistic_ranks(len(b_sorted), q, PER_RUN_LEVEL)
    if ra is None or rb is None:
        return Diff(qa, qb, None, None)
    lo = float(b_sorted[rb[0] - 1] - a_sorted[ra[1] - 1])
    hi = float(b_sorted[rb[1] - 1] - a_sorted[ra[0] - 1])
    return Diff(qa, qb, lo, hi)


def mean_diff(pa: PointStats, pb: PointStats) -> Diff:
    """Difference of the mean latencies of successful requests."""
    la, lb = ok_latency(pa), ok_latency(pb)
    a, b = (la.get("mean") if la else None), (lb.get("mean") if lb else None)
    ca = (la.get("ci") or {}).get("mean") if la else None
    cb = (lb.get("ci") or {}).get("mean") if lb else None
    if a is None or b is None or not ca or not cb:
        return Diff(a, b, None, None)
    (a_lo, a_hi), (b_lo, b_hi) = ca, cb
    if a_lo is None or a_hi is None or b_lo is None or b_hi is None:
        return Diff(a, b, None, None)
    half = math.hypot((a_hi - a_lo) / 2, (b_hi - b_lo) / 2)
    return Diff(a, b, b - a - half, b - a + half)


#: Labels a NothingMatched message lists per run at most (the rest are counted).
SHOWN_LABELS = 8


class NothingMatched(Exception):
    """Two runs without a point of the same label: there is nothing to compare. ``str(err)``
    says so, then one line per run with its points."""

    def __init__(self, runs: list[tuple[str, Path, list[str]]]) -> None:
        lines = ["nothing to compare: no point of A has the label of a point of B"]
        for tag, path, labels in runs:
            shown = ", ".join(repr(label) for label in labels[:SHOWN_LABELS])
            more = len(labels) - SHOWN_LABELS
            shown += f" and {more} more" if more > 0 else ""
            lines.append(f"{tag} ({path}) has {len(labels)} points: {shown or '(none)'}")
        super().__init__("\n".join(lines))


def build(run_a: Path, run_b: Path, out_dir: Path) -> Written:
    """The comparison page in `out_dir`; NothingMatched, before anything is written, when the
    runs have no point in common and not both have answers (capacity, SLO capacity, knee:
    two searches probe different rates, yet their answers compare)."""
    a, b = data.load(run_a), data.load(run_b)
    answered = compare_answers.section(a, b)
    if not _matched(a, b) and answered is None:
        raise NothingMatched(
            [
                (tag, rr.path, [str(p.get("label")) for p in rr.points])
                for tag, rr in (("A", a), ("B", b))
            ]
        )
    sections = [_what(a, b), *([answered] if answered else []), *_differences(a, b)]
    sections += _overlays(a, b)
    out_dir.mkdir(parents=True, exist_ok=True)
    return write(
        out_dir / COMPARE,
        f"knee compare: {run_a.name} (A) vs {run_b.name} (B)",
        "Points are matched by label; differences are B - A.",
        sections,
    )


def _matched(a: data.ReportRun, b: data.ReportRun) -> list[tuple[PointStats, PointStats]]:
    bl = {p.get("label"): p for p in b.points}
    return [(p, bl[p.get("label")]) for p in a.points if p.get("label") in bl]


def _what(a: data.ReportRun, b: data.ReportRun) -> Section:
    def facts(rr: data.ReportRun) -> list[Any]:
        env, s = rr.run.env, rr.run.summary
        return [
            rr.path.name,
            s.get("experiment"),
            rr.system,
            s.get("preset"),
            s.get("status"),
            len(rr.points),
            env.get("started_utc"),
            env.get("host"),
            env.get("cores"),
            env.get("git_revision"),
        ]

    names = [
        "run",
        "experiment",
        "system",
        "preset",
        "status",
        "points",
        "started (UTC)",
        "host",
        "cores",
        "git revision",
    ]
    rows = "".join(
        f'<tr><th class="l">{esc(n)}</th><td class="l">{esc(x)}</td><td class="l">{esc(y)}'
        "</td></tr>"
        for n, x, y in zip(names, facts(a), facts(b), strict=True)
    )
    matched = {p.get("label") for p, _ in _matched(a, b)}
    only = [
        f"<li>only in {tag}: {esc(p.get('label'))}</li>"
        for tag, rr in (("A", a), ("B", b))
        for p in rr.points
        if p.get("label") not in matched
    ]
    blocks: list[str | Figure] = [
        f'<table><tr><th></th><th class="l">A</th><th class="l">B</th></tr>{rows}</table>',
        f"<p>{len(matched)} points in both runs.</p>",
    ]
    if only:
        blocks.append(f"<ul>{''.join(only)}</ul>")
    return Section("compared", "What was compared", blocks)


def _differences(a: data.ReportRun, b: data.ReportRun) -> list[Section]:
    pairs = _matched(a, b)
    if not pairs:
        return [
            Section(
                "differences",
                "Differences",
                ['<p class="note">The runs have no point with the same label.</p>'],
            )
        ]
    rows, labels = [], []
    diffs: dict[str, list[Diff]] = {"mean": [], **{k: [] for k, _ in QUANTILES}}
    for pa, pb in pairs:
        va, vb = _sorted(a, pa.get("point")), _sorted(b, pb.get("point"))
        row = {"mean": mean_diff(pa, pb)}
        row.update({k: quantile_diff(va, vb, q) for k, q in QUANTILES})
        for k, d in row.items():
            diffs[k].append(d)
        labels.append(str(pa.get("label")))
        rows.append(
            f'<tr><td class="l">{esc(pa.get("label"))}</td><td>{len(va)}</td><td>{len(vb)}'
            f"</td><td>{fmt.num(pa.get('achieved_rate_per_s'))}</td>"
            f"<td>{fmt.num(pb.get('achieved_rate_per_s'))}</td>"
            + "".join(_diff_cells(row[k]) for k in diffs)
            + "</tr>"
        )
    head = (
        '<tr><th class="l">point</th><th>n A</th><th>n B</th><th>rate A/s</th><th>rate B/s</th>'
        + "".join(
            f"<th>{k} A</th><th>{k} B</th><th>B - A [95%]</th><th>verdict</th>" for k in diffs
        )
        + "</tr>"
    )
    fig = Figure(
        "diff-latency",
        "latency difference B - A per point, with 95% intervals",
        Axis("point", "category"),
        Axis("B - A (ms)"),
        [
            Trace(
                "points",
                f"{k} difference",
                labels,
                [_ms(d.value) for d in ds],
                lo=[_ms(d.lo) for d in ds],
                hi=[_ms(d.hi) for d in ds],
                color=i,
            )
            for i, (k, ds) in enumerate(diffs.items())
        ],
        caption="Above zero: B is slower. Percentile intervals: order statistics at level "
        "sqrt(0.95) in each run; mean: the two batch-means intervals combined.",
        height_px=460,
    )
    text = (
        "<p>Latency in ms (successful requests after warm-up). A difference is called only "
        "when its 95% interval excludes zero. Percentiles: distribution-free intervals from "
        "order statistics (each run's at level &radic;0.95, combined as [lo<sub>B</sub> - "
        "hi<sub>A</sub>, hi<sub>B</sub> - lo<sub>A</sub>]); mean: each run's batch-means "
        "interval, combined as independent normal estimates.</p>"
    )
    table = f'<div style="overflow-x:auto"><table>{head}{"".join(rows)}</table></div>'
    return [Section("differences", "Differences", [text, table, fig])]


def _sorted(rr: data.ReportRun, point: Any) -> np.ndarray:
    """A point's latencies of successful requests after warm-up, ascending (read alone)."""
    latency_ns = rr.point_ok(point, ["latency_ns"])["latency_ns"]
    return np.sort(latency_ns.to_numpy(dtype=np.int64))


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def _diff_cells(d: Diff) -> str:
    css = {"B higher": "v-fail", "B lower": "v-pass", "not significant": ""}.get(d.verdict, "v-na")
    ci = f"[{fmt.ms(d.lo)}, {fmt.ms(d.hi)}]" if d.lo is not None else ""
    return (
        f"<td>{fmt.ms(d.a)}</td><td>{fmt.ms(d.b)}</td><td>{fmt.ms(d.value)}"
        f'<span class="ci">{esc(ci)}</span></td><td class="{css}">{esc(d.verdict)}</td>'
    )


def _overlays(a: data.ReportRun, b: data.ReportRun) -> list[Section]:
    blocks: list[str | Figure] = []
    for series in [s for s in a.series() if s in b.series()]:
        axis = a.axes[series]
        pa, pb = a.points_of(series), b.points_of(series)
        if len(by_x(pa, axis)) > 1:
            traces: list[Trace] = []
            for tag, points, color in (("A", pa, 0), ("B", pb, 1)):
                traces += latency_traces(
                    with_ok_latency(points),
                    axis,
                    tag,
                    color,
                    keys=("mean",),
                    dist="latency_ok_ns",
                    one_color=True,
                )
                traces += latency_traces(points, axis, tag, color, keys=("p99",), one_color=True)
            blocks.append(
                Figure(
                    f"overlay-{series}",
                    f"{series}: latency vs {axis.title}, A and B",
                    Axis(axis.title),
                    Axis("latency (ms)"),
                    traces,
                    caption="Solid: mean of the successful requests; dashed: p99 as in the "
                    "summary (over every request, a failure counting as slower than any "
                    "success: a gap where the p99 is a failure); shaded: 95% intervals.",
                )
            )
        blocks.append(_spectra(series, a, b))
    if not blocks:
        blocks.append('<p class="note">The runs have no series in common.</p>')
    return [Section("overlays", "Overlays", blocks)]


def _spectra(series: str, a: data.ReportRun, b: data.ReportRun) -> Figure:
    traces: list[Trace] = []
    for tag, rr, dash in (("A", a, False), ("B", b, True)):
        for i, p in enumerate(rr.points_of(series)):
            grid, lat = spectrum(_sorted(rr, p.get("point")))
            if len(grid):
                traces.append(
                    Trace(
                        "line",
                        f"{tag} {p.get('label')}",
                        grid.tolist(),
                        lat.tolist(),
                        color=i,
                        dash=dash,
                    )
                )
    return Figure(
        f"overlay-spectrum-{series}",
        f"{series}: percentile spectra, A solid and B dashed",
        Axis("percentile", "logit"),
        Axis("latency (ms)", "log"),
        traces,
    )
