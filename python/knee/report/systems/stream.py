"""The stream system's findings (report 000): block latency per service as Tukey box plots,
serial and parallel side by side; the report's two tables (frames/s and bits/s; drop rate
serial vs parallel, here with 95 % intervals); throughput vs loss next to the expected time
per block L + p/(1-p) T; and the time to buffer the first frames.

The data of every figure and table, and every number of the findings, comes from
`knee.analysis.stream`; this module only lays it out and says in words what this run
measured, next to what the source report measured (its numbers are kept below as the
reference, never as a claim about this run).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from knee.analysis import stream as analysis
from knee.models.types import SeriesModels
from knee.report import fmt
from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Trace
from knee.report.html import Section, esc
from knee.report.sections.checker import checker_block

#: Report 000, Table 1: frames/s and bits/s per serial service and for the parallel client.
SOURCE_TABLE1 = {
    "draco": (0.03, 28652.0),
    "dobby": (0.03, 29166.0),
    "harry": (0.03, 28966.0),
    "bellatrix": (0.03, 29804.0),
    "parallel - all services": (0.04, 45969.0),
}
#: Report 000, Table 2: drop rate % per service, serial and parallel.
SOURCE_DROPS = {
    "harry": (5.21, 8.75),
    "dobby": (5.1, 6.04),
    "bellatrix": (5.0, 7.92),
    "draco": (5.36, 7.29),
}
PARALLEL = analysis.PARALLEL


def sections(rr: ReportRun, models: list[SeriesModels]) -> list[Section]:
    run = rr.run
    if not rr.points or not _has_samples(rr):
        return [Section("stream", "Stream findings (report 000)", [_note("no samples")])]
    boxes = analysis.block_latency_boxplot(run)
    table1 = analysis.frames_and_bits_table(run)
    buffering = analysis.time_to_buffer(run)
    loss = analysis.loss_sweeps(analysis.throughput_vs_loss(run))
    per_service = analysis.is_per_service(table1)  # one point per serial service (+ parallel)
    drops = analysis.drop_rate_table(run) if per_service else None
    labels = {p["point"]: str(p.get("label", p["point"])) for p in rr.points}

    findings = [
        f
        for f in (
            _latency_text(boxes, per_service),
            _throughput_text(table1),
            _drops_text(drops),
            _loss_text(loss),
            _buffer_text(buffering),
        )
        if f
    ]
    items = "".join(f'<li class="finding">{f}</li>' for f in findings)
    intro = (
        "<p>The source report (000) fetched 10 frames of stream 7 (16x16 RGB blocks of 768 B) "
        "from four mock services with a 1,000 ms timeout, serially from each service and in "
        "parallel from all four, and reported block latency as box plots, frames/s and bits/s "
        "(Table 1) and drop rates (Table 2). What this run found:</p>"
    )
    main: list[str | Figure] = [intro, f"<ul>{items}</ul>"]
    if not boxes.empty:
        main.append(_box_figure(rr, boxes, labels, per_service))
    if (checked := checker_block(rr.points)) is not None:  # counters against samples
        main.append(checked)
    main.append(_table1_html(table1, labels, per_service))
    if drops is not None:
        main.append(_table2_html(drops))
    out = [Section("stream", "Stream findings (report 000)", main)]
    if not loss.empty:
        out.append(Section("stream-loss", "Stream: throughput vs loss", _loss_figures(loss)))
    if not buffering.empty:
        out.append(
            Section("stream-buffering", "Stream: time to buffer", [_buffer_figure(buffering)])
        )
    return out


def _has_samples(rr: ReportRun) -> bool:
    """Whether any point has a sample (one column read, a point at a time)."""
    return any(len(rr.point_samples(p, ["point"])) for p in rr.sample_points())


def _note(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>'


def _range(span: tuple[float, float], unit: str = "", show: Any = fmt.num) -> str:
    lo, hi = span
    return f"{show(lo)}{unit}" if lo == hi else f"{show(lo)}-{show(hi)}{unit}"


def _bits(value: float) -> str:
    return f"{value:,.0f}"


# ------------------------------------------------------------------ block latency


def _box_figure(
    rr: ReportRun, boxes: pd.DataFrame, labels: dict[Any, str], per_service: bool
) -> Figure:
    """One box per service and mode (the report's figures 1 and 2) when each service was
    measured once per mode, else one box per point and service."""
    traces: list[Trace] = []
    groups = ["mode"] if per_service else ["series"]
    many = analysis.boxes_share_point(boxes)
    for i, (key, g) in enumerate(boxes.groupby(groups, sort=False)):
        name = key[0] if isinstance(key, tuple) else key
        if per_service:
            xs = list(g["service_name"])
        else:
            xs = [
                f"{labels.get(p, p)} {s}" if m else labels.get(p, str(p))
                for p, s, m in zip(g["point"], g["service_name"], many[g.index], strict=True)
            ]
        traces.append(
            Trace(
                "box",
                str(name),
                xs,
                boxes=[
                    {
                        "lo": r.whisker_low_ms,
                        "q1": r.q1_ms,
                        "median": r.median_ms,
                        "q3": r.q3_ms,
                        "hi": r.whisker_high_ms,
                        "mean": r.mean_ms,
                        "outliers": [float(v) for v in r.outliers_ms],
                    }
                    for r in g.itertuples()  # one row per box, not per sample
                ],
                color=i,
            )
        )
    timeouts = analysis.timeouts_ms(rr.run)
    return Figure(
        "stream-latency-boxes",
        "block latency per service, serial and parallel (Tukey box plots)"
        if per_service
        else "block latency per point (Tukey box plots)",
        Axis("service" if per_service else "point", "category"),
        Axis("block latency (ms)"),
        traces,
        caption=(
            "Source report (figures 1 and 2): serially, medians 151-158 ms over n = 1,817-1,824 "
            "blocks per service, outliers up to the 1,000 ms timeout; in parallel, medians "
            "209-409 ms, above the serial ones. This run: "
            + _box_summary(boxes)
            + f"; timeout {', '.join(f'{t:g}' for t in timeouts)} ms. Boxes: quartiles; "
            "whiskers: the most extreme block within 1.5 IQR; points: the outliers beyond; "
            "triangle: the mean. Blocks that timed out or came late are not latencies."
        ),
    )


def _box_summary(boxes: pd.DataFrame) -> str:
    parts = []
    for m in analysis.box_summary(boxes):
        top = m["largest_outlier_ms"]
        parts.append(
            f"{m['mode']} medians {_range(m['median_ms'], ' ms')} over n = {_range(m['n'])} "
            f"blocks per box, {m['outliers']} outliers"
            + (f" (largest {fmt.num(top)} ms)" if top is not None else "")
        )
    return "; ".join(parts)


def _latency_text(boxes: pd.DataFrame, per_service: bool) -> str:
    if boxes.empty:
        return "<b>Latency.</b> No block arrived in time, so there is no latency to show."
    text = f"<b>Latency.</b> {esc(_box_summary(boxes))}."
    ratio = analysis.parallel_over_serial_median(boxes) if per_service else None
    if ratio is not None:
        text += (
            f" Per service, the parallel median is {_range(ratio)} times the serial one "
            f"(the source report's was 1.3-2.6 times: 209-409 ms vs 151-158 ms)."
        )
    return text


# ------------------------------------------------------------------ Table 1


def _table1_html(table: pd.DataFrame, labels: dict[Any, str], per_service: bool) -> str:
    head = "<th class='l'>point</th>" + "".join(
        f"<th>{h}</th>"
        for h in ("frames", "elapsed (s)", "frames/s", "goodput bits/s", "wire bits/s")
    )
    if per_service:
        head += "<th>report frames/s</th><th>report bits/s</th>"
    rows = []
    for r in table.itertuples():
        name = r.column if per_service else labels.get(r.point, r.point)
        cells = [
            f"<td class='l'>{esc(name)}</td>",
            f"<td>{r.frames}</td>",
            f"<td>{fmt.num(r.elapsed_s)}</td>",
            f"<td>{fmt.num(r.frames_per_s)}</td>",
            f"<td>{r.goodput_bits_per_s:,.0f}</td>",
            f"<td>{r.wire_bits_per_s:,.0f}</td>",
        ]
        if per_service:
            src = SOURCE_TABLE1.get(str(r.column))
            cells.append(f"<td>{src[0]:g}</td><td>{src[1]:,.0f}</td>" if src else "<td>-</td>" * 2)
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return (
        "<h3>Table 1: frames and bits per second</h3>"
        "<p class='caption'>Goodput counts each 768-byte block received in time once "
        "(6,144 bits, as the report); wire counts every request and reply payload, late and "
        "redundant ones included. The time base is the first request to the last block "
        "resolved (reply or timeout).</p>"
        f"<table><tr>{head}</tr>{''.join(rows)}</table>"
    )


def _throughput_text(table: pd.DataFrame) -> str:
    t = analysis.throughput_summary(table)
    if t is None:
        return ""
    text = (
        f"<b>Throughput.</b> Serially, {_range(t['serial_frames_per_s'], ' frames/s')} and "
        f"{_range(t['serial_goodput_bits_per_s'], ' bits/s', _bits)} of goodput per point"
    )
    par = t["parallel"]
    if par is not None:
        text += (
            f"; in parallel {fmt.num(par['frames_per_s'])} frames/s and "
            f"{par['goodput_bits_per_s']:,.0f} bits/s, {par['gain']:.2g}x the best "
            f"serial service ({esc(par['best_serial'])}). The source report's parallel client "
            "reached 1.5x its best serial one (45,969 vs 29,804 bits/s) with four services"
        )
    return text + "."


# ------------------------------------------------------------------ Table 2


def _table2_html(drops: pd.DataFrame) -> str:
    wide = drops.set_index(["service_name", "mode"])
    rows = []
    for name in dict.fromkeys(drops["service_name"]):
        cells = [f"<td class='l'>{esc(name)}</td>"]
        for mode in ("serial", PARALLEL):
            if (name, mode) in wide.index:
                r = wide.loc[(name, mode)]
                cells.append(
                    f"<td>{r['drop_rate_pct']:.2f}<span class='ci'>[{r['ci_low_pct']:.2f}, "
                    f"{r['ci_high_pct']:.2f}]</span></td><td>{int(r['dropped'])} / "
                    f"{int(r['requests'])}</td><td>{r['late_pct']:.2f}</td>"
                )
            else:
                cells.append("<td>-</td>" * 3)
        src = SOURCE_DROPS.get(str(name))
        cells.append(f"<td>{src[0]:g}</td><td>{src[1]:g}</td>" if src else "<td>-</td>" * 2)
        rows.append(f"<tr>{''.join(cells)}</tr>")
    head = (
        "<tr><th class='l'>service</th><th>serial drop %</th><th>dropped / sent</th>"
        "<th>late %</th><th>parallel drop %</th><th>dropped / sent</th><th>late %</th>"
        "<th>report serial %</th><th>report parallel %</th></tr>"
    )
    return (
        "<h3>Table 2: drop rate, serial vs parallel</h3>"
        "<p class='caption'>A drop is a request without a reply within its timeout; a reply "
        "after it is late, counted apart. Below each rate its 95% Wilson interval.</p>"
        f"<table>{head}{''.join(rows)}</table>"
    )


def _drops_text(drops: pd.DataFrame | None) -> str:
    if drops is None or drops.empty:
        return ""
    d = analysis.drop_summary(drops)
    parts = [
        f"{m['mode']} {_range(m['drop_rate_pct'], '%')} "
        f"(95% intervals from {m['ci_low_pct']:.2f}% to {m['ci_high_pct']:.2f}%)"
        for m in d["modes"]
    ]
    text = "<b>Drops.</b> Drop rates per service: " + "; ".join(parts) + "."
    if d["parallel_above"] is not None:
        above, services = d["parallel_above"]
        text += (
            f" For {above} of {services} services the parallel rate's interval lies above the "
            "serial one's (the source report found parallel higher for all four: 6.04-8.75% "
            "vs 5.0-5.36%)."
        )
    return text


# ------------------------------------------------------------------ loss


def _measured_and_expected(
    series: str,
    xs: list[float],
    ys: tuple[list[float], list[float]],
    expected: str,
    color: int,
    hover: list[str] | None = None,
) -> list[Trace]:
    """A series' measured line and, dashed, what the model expects (`ys`: both, in turn)."""
    measured, predicted = ys
    return [
        Trace("line", f"{series} measured", xs, measured, color=color, hover=hover),
        Trace("line", f"{series} {expected}", xs, predicted, color=color, dash=True, markers=False),
    ]


def _loss_figures(loss: pd.DataFrame) -> list[str | Figure]:
    time_traces: list[Trace] = []
    rate_traces: list[Trace] = []
    for i, (series, g) in enumerate(loss.groupby("series", sort=False)):
        xs = list(g["loss_p"].astype(float))
        hover = [
            f"p={p:g}: measured loss {m:.3f}, {int(r)} retransmissions, delivered {d:.1%}"
            for p, m, r, d in zip(
                g["loss_p"],
                g["measured_loss_p"],
                g["retransmissions"],
                g["delivered_fraction"],
                strict=True,
            )
        ]
        time_traces += _measured_and_expected(
            series,
            xs,
            (list(g["time_per_block_s"] * 1e3), list(g["expected_time_per_block_s"] * 1e3)),
            "L + p/(1-p)·T",
            i,
        )
        rate_traces += _measured_and_expected(
            series,
            xs,
            (list(g["goodput_bits_per_s"] / 1e3), list(g["expected_goodput_bits_per_s"] / 1e3)),
            "expected",
            i,
            hover,
        )
    caption = (
        "The source report only discussed loss (no measurement): with resends, a dropped "
        "block costs the timeout, so loss raises the time per block. This run: "
        + _loss_summary(loss)
        + ". Dashed: L + p/(1-p)·T with L the point's mean latency of blocks received in "
        "time and T the fixed timeout (an adaptive timeout retransmits sooner than T)."
    )
    return [
        Figure(
            "stream-loss-time",
            "time per delivered block vs loss rate, with L + p/(1-p)·T",
            Axis("loss rate p"),
            Axis("time per delivered block (ms)"),
            time_traces,
            caption=caption,
        ),
        Figure(
            "stream-loss-goodput",
            "goodput vs loss rate, with 6,144 bits / (L + p/(1-p)·T)",
            Axis("loss rate p"),
            Axis("goodput (kbit/s)"),
            rate_traces,
            caption="Goodput: blocks received in time, once, x 6,144 bits per second of the "
            "point; dashed: 6,144 bits per expected time per block. " + caption,
        ),
    ]


def _loss_summary(loss: pd.DataFrame) -> str:
    parts = []
    for m in analysis.loss_summary(loss):
        lo, hi = m["measured_over_expected"]
        parts.append(
            f"{m['series']}: {fmt.num(m['low_time_per_block_s'] * 1e3)} ms per block at "
            f"p={m['low_p']:g}, {fmt.num(m['high_time_per_block_s'] * 1e3)} ms at "
            f"p={m['high_p']:g} (delivered {m['high_delivered_fraction']:.1%}), "
            f"measured/expected {fmt.num(lo)}-{fmt.num(hi)}"
        )
    return "; ".join(parts)


def _loss_text(loss: pd.DataFrame) -> str:
    if loss.empty:
        return ""
    return f"<b>Loss.</b> Time per delivered block, {esc(_loss_summary(loss))}."


# ------------------------------------------------------------------ buffering


def _levels() -> list[tuple[float, str]]:
    return [(100 * lv, f"t_{round(lv * 100)}pct_s") for lv in analysis.BUFFER_LEVELS]


def _buffer_figure(buf: pd.DataFrame) -> Figure:
    levels = _levels()
    traces = [
        Trace(
            "line",
            f"{r['label']} ({int(r['frames'])} frames)",
            [x for x, _ in levels],
            [float(r[c]) for _, c in levels],
            color=i,
        )
        for i, (_, r) in enumerate(buf.iterrows())  # one row per point
    ]
    return Figure(
        "stream-buffering",
        f"time to buffer the first {analysis.BUFFER_FRAMES} frames",
        Axis("frames buffered (%)"),
        Axis("time from the first request (s)"),
        traces,
        caption="The source report did not measure buffering (it suggested buffering for a "
        "compressed stream). This run: " + _buffer_summary(buf) + ". A frame is buffered once "
        "each of its blocks arrived or was given up.",
    )


def _buffer_summary(buf: pd.DataFrame) -> str:
    b = analysis.buffer_summary(buf)
    (fastest, soonest_s), (slowest, latest_s) = b["fastest"], b["slowest"]
    return (
        f"all {_range(b['frames'])} frames buffered after {fmt.num(soonest_s)} s "
        f"({fastest}) to {fmt.num(latest_s)} s ({slowest}); half of them after "
        f"{_range(b['half_s'], ' s')}"
    )


def _buffer_text(buf: pd.DataFrame) -> str:
    if buf.empty:
        return ""
    return f"<b>Buffering.</b> Of the first frames of each point, {esc(_buffer_summary(buf))}."


# ------------------------------------------------------------------ the headline


def headline(rr: ReportRun) -> list[str] | None:
    """The stream experiment's answer for the report's first section: throughput serial
    against parallel, and the drop rates with their 95% intervals."""
    if not rr.points or not _has_samples(rr):
        return None
    table1 = analysis.frames_and_bits_table(rr.run)
    out = []
    t = analysis.throughput_summary(table1)
    if t is not None:
        lo, hi = t["serial_goodput_bits_per_s"]
        line = f"Serial goodput {lo:,.0f} to {hi:,.0f} bits/s per point"
        if (par := t["parallel"]) is not None:
            line += (
                f"; parallel {par['goodput_bits_per_s']:,.0f} bits/s, {par['gain']:.2g}x the "
                f"best serial service ({par['best_serial']})"
            )
        out.append(line + ".")
    if analysis.is_per_service(table1):
        drops = analysis.drop_rate_table(rr.run)
        if not drops.empty:
            d = analysis.drop_summary(drops)
            parts = [
                f"{m['mode']} {m['drop_rate_pct'][0]:.2f} to {m['drop_rate_pct'][1]:.2f}% "
                f"(95% intervals within [{m['ci_low_pct']:.2f}, {m['ci_high_pct']:.2f}]%)"
                for m in d["modes"]
            ]
            out.append("Drop rates per service: " + "; ".join(parts) + ".")
    return out or None
