"""What sets the knee (docs/explain.md): per load curve, the utilization U of every resource
the run measured against the offered rate, the bottleneck (the resource whose demand per
completion D is largest, so the first to reach U = 1) drawn bold, its bound 1/D against
the measured throughput and capacity, and a table of U and D per resource at each point.

A load curve is an answers group (knee.report.answers: a search's groups, or a sweep's
groups of rates); its bottleneck is knee.resources.bottleneck.explain's. Points outside
every group (closed-loop series: share's designs as peers grow, chat's clients; a single
rate) get the same figure and table per series against the swept value, and a sentence per
point naming its busiest resource. The section is left out when no point measured a
resource's U."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from knee.analysis.answers import RATE_KEY
from knee.report import answers, fmt
from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Marker, Trace
from knee.report.html import Section
from knee.report.kit import Cell, Col, Finding, Html, Row, esc, finding, findings, note, table
from knee.report.kit import plural as plural_of
from knee.report.kit.figure import AxisKind
from knee.resources.bottleneck import folded_label, generator, ranked
from knee.resources.usage import ROW_S
from knee.stats.summary import Bottleneck, GroupAnswers, PointStats, Resource

ID = "what-sets"
TITLE = "What sets the knee"
#: The bottleneck's line, px (the others keep the renderer's default, 2 px in the HTML).
BOLD_PX = 5.0
#: Palette indices (knee.report.figures.PALETTE): the bottleneck, the other resources in
#: turn, the U = 1 line and the next bottleneck (grey), the measured capacity (green).
BOTTLENECK_COLOR = 3
OTHER_COLORS = (0, 1, 2, 4, 5, 6, 8, 9)
GREY = 7
MEASURED_COLOR = 2
#: A bound above this multiple of the highest throughput or capacity measured would flatten
#: the load curve: it starts hidden (one legend click away; left out of the PNG).
OFF_CHART = 10.0
#: The table's row of the curve's bottleneck (the page's style sets it in bold).
BOLD_ROW = "bottleneck"

INTRO = (
    "For each resource the run measured (a node's CPU against its quota or cores, an "
    "emulated link against its rate, a server's workers, a system's named part, the "
    "generator's connections): its utilization U (busy / capacity) and its demand D = U / X "
    "per completed request (X: completions per second). As the load rises the resource with "
    "the largest D reaches U = 1 first, and 1/D bounds the throughput (the utilization law; "
    "docs/explain.md). A worker pool busy computing counts as its node's CPU."
)


@dataclass
class Column:
    """One point of a curve as the figures and the table show it."""

    point: PointStats
    x: Any  # its position on the x axis
    where: str  # "40/s", "8 peers", "p=2000": the column's title and the sentences' "At"


def section(rr: ReportRun) -> Section:
    found = answers.of(rr)
    by_index = {p.get("point"): p for p in rr.points}
    units: list[tuple[str, list[str | Figure]]] = []
    in_groups: set[Any] = set()
    for i, group in enumerate(found.groups if found else []):
        points = [by_index[k] for k in group.get("points") or [] if k in by_index]
        in_groups.update(p.get("point") for p in points)
        bn = answers.bottleneck(group, points)
        measured = [p for p in points if _usage(p)]
        if bn is not None and measured:
            title = str(group.get("label") or f"group {i + 1}")
            units.append((title, group_blocks(f"{i}", group, measured, bn)))
    for j, series in enumerate(rr.series()):
        points = [p for p in rr.points_of(series) if p.get("point") not in in_groups]
        measured = [p for p in points if _usage(p)]
        if measured:
            units.append((series or f"series {j + 1}", series_blocks(f"s{j}", measured)))
    if not units:
        return Section(ID, TITLE, [])
    blocks: list[str | Figure] = [f"<p>{esc(INTRO)}</p>"]
    for title, unit in units:
        if len(units) > 1:
            blocks.append(f"<h3>{esc(title)}</h3>")
        blocks.extend(unit)
    return Section(ID, TITLE, blocks)


def _usage(point: PointStats) -> dict[str, Resource]:
    """A point's resources with a known U."""
    return {k: r for k, r in (point.get("resources") or {}).items() if r.get("u") is not None}


# ------------------------------------------------------------------------- a load curve


def group_blocks(
    key: str, group: GroupAnswers, points: list[PointStats], bn: Bottleneck
) -> list[str | Figure]:
    """A load curve: its bottleneck in a sentence, U against the offered rate, the bound
    against the throughput, the table."""
    top = bn.get("bottleneck")
    first = top.get("resource") if top else None
    cols = [
        Column(p, _rate(p), f"{fmt.num(_rate(p))}/s")
        for p in sorted(points, key=lambda p: (_rate(p), p.get("point") or 0))
    ]
    _distinct_titles(cols)
    names = _names(points, first)
    blocks: list[str | Figure] = [finding(answers.set_by(bn))]
    if bn.get("unseen"):
        blocks.append(note(unseen_note(bn, points)))
    x_axis = Axis("offered rate (requests/s)")
    title = _title(group, "utilization vs offered rate")
    blocks.append(u_figure(f"what-sets-u-{key}", title, x_axis, cols, names, first))
    blocks.append(bound_figure(f"what-sets-bound-{key}", group, cols, bn))
    blocks.append(usage_table(cols, names, first))
    return blocks


def _rate(point: PointStats) -> float:
    return float(point.get("target_rate_per_s") or 0.0)


def _title(group: GroupAnswers, what: str) -> str:
    label = group.get("label")
    return f"{label}: {what}" if label else what


def _distinct_titles(cols: list[Column]) -> None:
    """Columns of the same rate (a search's repeats) are told apart by their point."""
    titles = [c.where for c in cols]
    for c in cols:
        if titles.count(c.where) > 1:
            c.where = f"{c.where} (point {c.point.get('point')})"


def unseen_note(bn: Bottleneck, points: list[PointStats]) -> str:
    top = bn.get("bottleneck")
    bound = top.get("bound_per_s") if top else None
    hi = (bn.get("measured_per_s") or [None, None])[1]
    ratio = bn.get("bound_ratio")
    times = f", {fmt.num(ratio, 2)} times the measured capacity" if ratio else ""
    text = (
        f"Why the run cannot see it: at its demand D, the busiest resource measured would "
        f"allow {answers.rate(bound)}{times} (whose bracket ends at "
        f"{answers.rate(hi)}), so "
        "something this run does not measure stops the throughput first: a lock, the "
        "kernel's accept queue, a remote dependency, or a resource of a machine knee does "
        "not sample."
    )
    if all(_generator(r) for p in points for r in _usage(p).values()):
        text += (
            " Here knee measured only its own load generator: the target's CPU and workers "
            "are not sampled (a target knee did not start)."
        )
    return text


def _generator(r: Resource) -> bool:
    return bool(r.get("generator")) or r.get("role") == "load"


def _names(points: list[PointStats], first: str | None) -> list[str]:
    """Every resource with a U at some point: the bottleneck first, then by their highest U."""
    top: dict[str, float] = {}
    for p in points:
        for name, r in _usage(p).items():
            top[name] = max(top.get(name, 0.0), float(r["u"] or 0.0))
    return sorted(top, key=lambda n: (n != first, -top[n], n))


def label_of(name: str, points: list[PointStats]) -> str:
    """A resource's label; when it changes along the curve (a pool of 1, then 2 workers)
    each one, in order."""
    labels = [str(r["label"]) for p in points if (r := _usage(p).get(name)) and r.get("label")]
    distinct = list(dict.fromkeys(labels))
    return " / ".join(distinct) if distinct else name


def u_figure(
    fig_id: str,
    title: str,
    x_axis: Axis,
    cols: list[Column],
    names: list[str],
    first: str | None,
) -> Figure:
    """U of each resource in `names` against x, `first` (the bottleneck) bold; U = 1 dashed."""
    xs = [c.x for c in cols]
    points = [c.point for c in cols]
    traces: list[Trace] = []
    others = 0
    for name in names:
        rs = [_usage(p).get(name) or {} for p in points]
        cis: list[Sequence[float | None]] = [r.get("u_ci") or [None, None] for r in rs]
        has_ci = any(ci[0] is not None for ci in cis)
        bold = name == first
        label = label_of(name, points)
        if not bold:
            others += 1
        traces.append(
            Trace(
                "line",
                f"{label} (bottleneck)" if bold else label,
                xs,
                [r.get("u") for r in rs],
                lo=[ci[0] for ci in cis] if has_ci else None,
                hi=[ci[1] for ci in cis] if has_ci else None,
                color=BOTTLENECK_COLOR if bold else OTHER_COLORS[(others - 1) % len(OTHER_COLORS)],
                width=BOLD_PX if bold else None,
                hover=[_hover(c, r) for c, r in zip(cols, rs, strict=True)],
            )
        )
    # Across the plot: its two ends, or every category (a category axis draws them in turn).
    numeric = [x for x in xs if isinstance(x, int | float)]
    ends = [min(numeric), max(numeric)] if x_axis.scale != "category" and numeric else xs
    one = [1.0] * len(ends)
    traces.append(Trace("line", "U = 1", ends, one, color=GREY, dash=True, markers=False))
    bold_note = " Bold: the bottleneck named above." if first else ""
    return Figure(
        fig_id,
        title,
        x_axis,
        Axis("utilization U (busy / capacity)"),
        traces,
        caption="Each resource's mean utilization over each point's measured window "
        "(bars: its 95% interval where the samples give one); dashed: U = 1, the resource "
        f"fully busy.{bold_note}",
    )


def _hover(col: Column, r: Resource) -> str:
    if not r:
        return f"{col.where}: not measured"
    return (
        f"{col.where}: {r.get('label')} U {fmt.pct(r.get('u'))} {fmt.interval(r.get('u_ci'))}, "
        f"D {fmt.duration(r.get('d_ns'))}, bound 1/D {answers.rate(r.get('bound_per_s'))}"
    )


def bound_figure(fig_id: str, group: GroupAnswers, cols: list[Column], bn: Bottleneck) -> Figure:
    """The throughput against the offered rate, the bottleneck's bound 1/D across (its
    interval shaded), the next bottleneck's lighter, the measured capacity's bracket."""
    xs = [c.x for c in cols]
    ends = [min(xs), max(xs)]
    traces: list[Trace] = [
        Trace(
            "line",
            "throughput (completions/s)",
            xs,
            [c.point.get("completion_rate_per_s") for c in cols],
            color=0,
            hover=[
                f"{c.where}: {fmt.num(c.point.get('completion_rate_per_s'))} completions/s"
                for c in cols
            ],
        )
    ]
    m_lo, m_hi = (list(bn.get("measured_per_s") or []) + [None, None])[:2]
    done = [float(v) for c in cols if (v := c.point.get("completion_rate_per_s")) is not None]
    limit = OFF_CHART * max([*done, *(v for v in (m_lo, m_hi) if v is not None), 0.0])
    top, nxt = bn.get("bottleneck"), bn.get("next")
    if top and (b := top.get("bound_per_s")) is not None:
        lo, hi = (list(top.get("bound_ci_per_s") or []) + [None, None])[:2]
        if lo is not None and hi is not None:
            band = _level_band("bound's interval", ends, lo, hi, BOTTLENECK_COLOR)
            band.hidden = hi > limit
            traces.append(band)
        traces.append(
            Trace(
                "line",
                f"bound 1/D of {top.get('label')}: {answers.rate(b)}",
                ends,
                [b, b],
                color=BOTTLENECK_COLOR,
                width=BOLD_PX / 2,
                markers=False,
                hidden=b > limit,
            )
        )
    if nxt and (b2 := nxt.get("bound_per_s")) is not None:
        traces.append(
            Trace(
                "line",
                f"next: 1/D of {nxt.get('label')}: {answers.rate(b2)}",
                ends,
                [b2, b2],
                color=GREY,
                dash=True,
                markers=False,
                hidden=b2 > limit,
            )
        )
    if m_lo is not None and m_hi is not None:
        traces.append(_level_band("measured capacity", ends, m_lo, m_hi, MEASURED_COLOR))
    levels = [v for v in (m_lo, m_hi) if v is not None]
    if levels:
        x: list[float | None] = []
        y: list[float | None] = []
        for v in levels:
            x += [*ends, None]
            y += [v, v, None]
        name = f"measured capacity {answers.bracket([m_lo, m_hi])}/s"
        traces.append(Trace("line", name, x, y, color=MEASURED_COLOR, markers=False))
    markers = []
    if (at := bn.get("at_rate_per_s")) is not None:
        markers.append(Marker(float(at), "D read here", "#555555"))
    return Figure(
        fig_id,
        _title(group, "throughput and the bound 1/D"),
        Axis("offered rate (requests/s)"),
        Axis("completions/s"),
        traces,
        markers,
        caption="Completions per second at each offered rate. Red: the bottleneck's bound "
        "1/D = X/U, read at the highest rate kept up with (dashed vertical line), its 95% "
        "interval shaded; grey dashed: the next bottleneck's bound; green: the measured "
        "capacity's bracket (the highest rate kept up with and the lowest not). Where the "
        "bound lies well above the bracket, something the run does not measure sets the limit. "
        f"A bound (or its interval) more than {OFF_CHART:g} times the highest throughput or "
        "capacity measured is left off the chart: the legend names it, and in the page a "
        "click on it shows it.",
    )


def _level_band(name: str, ends: list[Any], lo: float, hi: float, color: int) -> Trace:
    return Trace("band", name, ends, lo=[lo, lo], hi=[hi, hi], color=color, legend=False)


# ---------------------------------------------------------------------- the table


def usage_table(cols: list[Column], names: list[str], first: str | None) -> Html:
    """Rows: each resource (U and D at each point), then the generator's own share."""
    points = [c.point for c in cols]
    rows: list[Row] = []
    for name in names:
        cells: list[Any] = [label_of(name, points), _capacity(name, points)]
        cells += [_cell(_usage(p).get(name)) for p in points]
        rows.append(Row(cells, BOLD_ROW if name == first else ""))
    gens = [generator(p) for p in points]  # summary.json's points
    open_loop = any(p.get("target_rate_per_s") for p in points)
    said: list[str] = []
    for key, what, shown, meaning in GENERATOR_ROWS:
        values = [g.get(key) for g in gens]
        if any(v is not None for v in values) and (open_loop or key != "late_send_share"):
            rows.append(Row([what, "", *(shown(v) for v in values)]))
            said.append(meaning)
    head = [Col("resource", left=True), Col("capacity", left=True)]
    head += [Col(c.where, tip=str(c.point.get("label") or "")) for c in cols]
    bold = "; bold: the bottleneck" if first else ""
    caption = (
        "Each cell: U · D, the resource's utilization and its demand per completed request "
        f"(D = U / X) at that point; hover for U's interval and the bound 1/D{bold}."
    )
    if said:
        caption += f" Below, the load generator's own share: {', '.join(said)}."
    return Html(f'{table(head, rows, scroll=True)}<p class="caption">{esc(caption)}</p>')


def _cell(r: Resource | None) -> Cell:
    if not r:
        return Cell("-")
    tip = (
        f"U {fmt.pct(r.get('u'))} {fmt.interval(r.get('u_ci'))}; D = U/X "
        f"{fmt.duration(r.get('d_ns'))}; bound 1/D {answers.rate(r.get('bound_per_s'))} "
        f"{fmt.interval(r.get('bound_ci_per_s'))}"
    )
    return Cell(f"{fmt.pct(r.get('u'))} · {fmt.duration(r.get('d_ns'))}", tip=tip.strip())


def _capacity(name: str, points: list[PointStats]) -> str:
    """The resource's capacity ("2 cores", "1 worker", "12.5 MB/s"), each one when it
    changes along the curve."""
    shown = [capacity_text(r) for p in points if (r := _usage(p).get(name))]
    return " / ".join(dict.fromkeys(s for s in shown if s))


def capacity_text(r: Resource) -> str:
    capacity, unit = r.get("capacity"), str(r.get("capacity_unit") or "")
    if capacity is None:
        return ""
    if unit == "bytes/s":
        return fmt.bytes_rate(float(capacity))
    if float(capacity) == 1 and unit.endswith("s"):
        unit = unit[:-1]
    return f"{fmt.num(capacity)} {unit}".strip()


def _share(v: Any) -> str:
    return fmt.pct(v) if v is not None else "-"


def _core(v: Any) -> str:
    return f"{fmt.num(v, 2)}% of a core" if v is not None else "-"


#: The generator's rows: its key in knee.resources.bottleneck.generator, the row's title,
#: how a value is shown, what the caption says of it.
GENERATOR_ROWS = (
    ("cpu_percent", "the generator: CPU (busiest generator node)", _core, "its CPU"),
    ("late_send_share", "the generator: sends later than due", _share, "its late sends"),
    (
        "all_connections_busy_share",
        "the generator: time with every connection busy",
        _share,
        "the time every connection was busy (a due request then waits for one)",
    ),
)


# --------------------------------------------------------------- points outside a curve


def series_blocks(key: str, points: list[PointStats]) -> list[str | Figure]:
    """A series outside every load curve (closed loop, one rate): its busiest resource at
    each point in a sentence, U against the swept value, the table."""
    cols, x_axis = series_columns(points)
    lines: list[Finding] = []
    for c in cols:
        if (line := busiest(c)) is not None:
            lines.append(Finding("", line))
    blocks: list[str | Figure] = [findings(lines, "No point measured a resource's U.")]
    names = _names([c.point for c in cols], None)
    if len(cols) >= 2:
        title = f"{points[0].get('series') or 'series'}: utilization vs {x_axis.title}"
        blocks.append(u_figure(f"what-sets-u-{key}", title, x_axis, cols, names, None))
    blocks.append(usage_table(cols, names, None))
    return blocks


def series_columns(points: list[PointStats]) -> tuple[list[Column], Axis]:
    """The series' x: the one swept key other than the rate; else the offered rate; else
    the points by label, in the order they ran."""
    keys = list(dict.fromkeys(k for p in points for k in (p.get("swept") or {}) if k != RATE_KEY))
    values = [(p.get("swept") or {}).get(keys[0]) for p in points] if len(keys) == 1 else []
    numbers = [v for v in values if isinstance(v, int | float)]
    if values and len(numbers) == len(values):
        short = keys[0].partition(".")[2] or keys[0]
        pairs = sorted(zip(numbers, points, strict=True), key=lambda vp: float(vp[0] or 0))
        kind: AxisKind = "count" if all(isinstance(v, int) for v in numbers) else "value"
        cols = [Column(p, v, _where(short, v)) for v, p in pairs]
        return cols, Axis(short, kind=kind)
    if all(p.get("target_rate_per_s") for p in points):
        order = sorted(points, key=_rate)
        cols = [Column(p, _rate(p), f"{fmt.num(_rate(p))}/s") for p in order]
        _distinct_titles(cols)
        return cols, Axis("offered rate (requests/s)")
    cols = []
    for p in points:
        swept = p.get("swept") or {}
        where = " ".join(_setting(k, v) for k, v in swept.items() if k != RATE_KEY)
        if RATE_KEY in swept:
            where = f"{where} {fmt.num(_rate(p))}/s".strip()
        where = where or str(p.get("label") or p.get("point"))
        cols.append(Column(p, where, where))
    _distinct_titles(cols)
    return cols, Axis("point", scale="category")


def _where(short: str, value: Any) -> str:
    """ "8 peers", "1 client", "p=2000"."""
    if isinstance(value, int) and short.endswith("s") and short[:-1].isalpha():
        return plural_of(value, short[:-1])
    return f"{short}={fmt.num(value) if isinstance(value, float) else value}"


def _setting(key: str, value: Any) -> str:
    """ "think_ms=5": a swept setting without its section."""
    short = key.partition(".")[2] or key
    return f"{short}={fmt.num(value) if isinstance(value, float) else value}"


def busiest(col: Column) -> Html | None:
    """ "At 8 peers the busiest resource is the central index's CPU, 97% of its quota";
    nodes the runner has no CPU sample of are named after it (unknown, not idle)."""
    line = _busiest(col)
    unsampled = [
        str(r.get("label") or name).removesuffix("'s CPU")
        for name, r in (col.point.get("resources") or {}).items()
        if r.get("kind") == "cpu" and r.get("cpu_samples") == 0
    ]
    if not unsampled:
        return line
    text = f"no CPU samples: {', '.join(unsampled)} (U unknown, not 0)."
    return Html(f"{line} {esc(text)}" if line else esc(f"At {col.where}, {text}"))


def _busiest(col: Column) -> Html | None:
    order = ranked(col.point.get("resources") or {})
    if not order:
        return None
    (_, r), rest = order[0], order[1:]
    if not r.get("u"):
        window = col.point.get("window_s")
        why = (
            f" (its window, {fmt.num(window)} s, is shorter than the runner's one-second samples)"
            if isinstance(window, int | float) and window < ROW_S
            else ""
        )
        return Html(f"At {esc(col.where)} no resource measured was busy: every U is 0{why}.")
    label = folded_label(r)
    text = f"At {col.where} the busiest resource is {label}, {how_busy(r)}"
    if rest and rest[0][1].get("u"):
        text += f"; next: {folded_label(rest[0][1])}, {how_busy(rest[0][1])}"
    return answers.emphasized(text + ".", label)


def how_busy(r: Mapping[str, Any]) -> str:
    u = float(r.get("u") or 0.0)
    pct = f"{100 * u:.0f}%"
    kind = r.get("kind")
    if kind == "cpu":
        quota = r.get("cpu_percent_of_quota")
        if quota is not None and abs(quota - 100 * u) < 0.5:
            return f"{pct} of its quota"
        if quota is not None:
            return f"{pct} busy ({quota:.0f}% of its quota)"
        cores = r.get("cpu_percent")
        if cores is not None and r.get("capacity") != 1:
            return f"{pct} busy ({cores:.0f}% of a core)"
        return f"{pct} busy"
    if kind == "link":
        return f"{pct} of its rate"
    return f"{pct} busy"
