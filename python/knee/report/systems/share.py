"""The share system's findings (report 002): response time per operation vs nodes for the
central and the distributed index, obtain time and aggregate MB/s vs file size, operations
per second per operation, and the replica fallbacks when an owner was down.

The figures' data, their lines and every number the findings state come from
`knee.analysis.share`; lines are recognised by what the points ran with (design, index,
peers, file size), not by series names, so a user's own share spec gets the figures its data
supports. Every sentence is computed from the run; the source report's numbers appear only in
captions, as what it showed.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from knee.analysis import share as analysis
from knee.models.types import SeriesModels
from knee.report import fmt
from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Trace
from knee.report.html import Section, esc
from knee.report.sections.checker import checker_block

#: Report 002's aggregate MB/s of eight clients by file size (its part 2 table; EC2).
REPORT_MB_PER_S = {
    1024: 10.3,
    10240: 70.0,
    102400: 412.0,
    1048576: 590.6,
    10485760: 550.0,
    104857600: 554.0,
    1073741824: 550.0,
}
#: What report 002 showed per operation (part 1, distributed, 8 nodes; part 3, central).
REPORT_NODES = {
    "register": "37.8 ms to register all 50 files (0.7 ms each) with 8 nodes, about 2 ms "
    "more than with 1; the central index at most 16 ms, growing with each node",
    "search": "0.383 ms with 8 nodes, flat as nodes were added; the central index's grew "
    "with each node",
    "obtain": "0.758 ms for a 1 KB file with 8 nodes, flat as nodes were added; the central "
    "index's grew with each node",
    "unregister": "nothing (knee's addition: the report did not measure unregister)",
}
#: Report 002's operations per second of eight clients (1000 / mean ms x 8).
REPORT_OPS = "register 208 (of all 50 files each), search 20,888, obtain 10,552"


def sections(rr: ReportRun, models: list[SeriesModels]) -> list[Section]:
    title = "Share findings (report 002)"
    intro = (
        "<p>The source report (002) measured a peer-to-peer file-sharing system on eight EC2 "
        "instances: response time per operation as nodes grow with a distributed index "
        "(part 1) and with the central SQLite index of its assignment 1 (part 3), and "
        "obtain time and aggregate throughput as files grow from 1 KB to 1 GB (part 2). "
        "What this run found:</p>"
    )
    if not _has_samples(rr):
        return [Section("share", title, [intro, "<p>This run has no samples.</p>"])]
    labels = {p["point"]: str(p.get("label", p["point"])) for p in rr.points}
    findings: list[str] = []
    blocks: list[str | Figure] = []
    for part in (_nodes, _sizes, _ops, _replicas):
        text, parts = part(rr, labels)
        if text:
            findings.append(text)
        blocks.extend(parts)
    if not findings:
        findings.append("This run has none of the share experiments' sweeps to compare.")
    items = "".join(f'<li class="finding">{f}</li>' for f in findings)
    if (checked := checker_block(rr.points)) is not None:  # share-chaos: obtains verified
        blocks.insert(0, checked)
    return [Section("share", title, [intro, f"<ul>{items}</ul>", *blocks])]


# ------------------------------------------------------------------ shared helpers


def _has_samples(rr: ReportRun) -> bool:
    """Whether any point has a sample with an operation (one column read, a point at a
    time)."""
    for point in rr.sample_points():
        s = rr.point_samples(point, ["op"])
        if len(s) and "op" in s.columns:
            return True
    return False


def _size(n_bytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:g} {unit}"
    return f"{n_bytes:g} B"


def _table(head: list[str], rows: list[list[str]], summary: str) -> str:
    th = "".join(f'<th class="{"l" if i == 0 else ""}">{esc(h)}</th>' for i, h in enumerate(head))
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{"l" if i == 0 else ""}">{c}</td>' for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return (
        f"<details><summary>{esc(summary)}</summary>"
        f'<div style="overflow-x:auto"><table><tr>{th}</tr>{body}</table></div></details>'
    )


def _lines(df: pd.DataFrame, keys: list[str], x: str) -> list[tuple[str, pd.DataFrame]]:
    """The lines of a figure over `x` (`knee.analysis.share.lines`), each named by its
    design, plus whatever tells it from another line of the same design."""
    out = []
    for line in analysis.lines(df, keys, x):
        g, name = line.frame, line.design
        if line.distinct is not None:
            extra = [_describe(k, g[k].iloc[0]) for k in line.distinct]
            name = f"{name}, {', '.join(extra or [str(g['series'].iloc[0])])}"
        out.append((name, g))
    return out


def _describe(key: str, value: Any) -> str:
    if key == "file_bytes":
        return _size(value)
    return f"{value} {key}" if key in ("peers", "files") else f"{key} {value}"


# ------------------------------------------------------------------ response time vs nodes


def _nodes(rr: ReportRun, labels: dict[Any, str]) -> tuple[str, list[str | Figure]]:
    times = analysis.response_time_vs_nodes(rr.run)
    if times.empty:
        return "", []
    figs: list[str | Figure] = []
    growth: list[str] = []
    rows: list[list[str]] = []
    for op in analysis.operations_present(times):
        lines = _lines(
            times[times["operation"] == op], ["design", "index", "files", "file_bytes"], "peers"
        )
        if not lines:
            continue
        traces: list[Trace] = []
        parts = []
        for i, (name, g) in enumerate(lines):
            xs = [int(v) for v in g["peers"]]
            traces.append(Trace("line", f"{name} mean", xs, list(g["mean_ms"]), color=i))
            traces.append(Trace("line", f"{name} p99", xs, list(g["p99_ms"]), color=i, dash=True))
            n = analysis.nodes_summary(g)
            parts.append(
                f"{esc(name)} {fmt.num(n['first_ms'])} &rarr; {fmt.num(n['last_ms'])} ms "
                f"({n['ratio']:.2g}x) from {n['first_peers']} to {n['last_peers']} peers"
                + (
                    f" (all {n['files']} files: {fmt.num(n['all_files_ms'])} ms)"
                    if op == "register"
                    else ""
                )
            )
            for _, r in g.iterrows():
                rows.append(
                    [
                        esc(name),
                        op,
                        str(r["peers"]),
                        str(r["count"]),
                        fmt.num(r["mean_ms"]),
                        fmt.num(r["p50_ms"]),
                        fmt.num(r["p99_ms"]),
                        fmt.num(r["all_files_ms"]) if op == "register" else "-",
                    ]
                )
        growth.append(f"{op}: " + "; ".join(parts))
        figs.append(
            Figure(
                f"share-nodes-{op}",
                f"{op} response time vs nodes",
                Axis("nodes (peers, one client each)"),
                Axis(f"{op} response time", "log", kind="time"),
                traces,
                caption=f"Solid: mean; dashed: p99. Report 002 showed {REPORT_NODES[op]}. "
                f"This run, mean {op} time: " + "; ".join(parts).replace("&rarr;", "->") + ".",
            )
        )
    if not figs:
        return "", []
    text = "<b>Nodes.</b> Mean response time per operation as nodes grow: " + ". ".join(growth)
    text += "." + _design_comparison(times)
    figs.append(
        _table(
            ["design", "operation", "peers", "n", "mean ms", "p50 ms", "p99 ms", "all files ms"],
            rows,
            "response time per operation and point (all files: files per peer x mean "
            "register time, the report's register figure)",
        )
    )
    return text, figs


def _design_comparison(times: pd.DataFrame) -> str:
    """Which design's mean grew more from its fewest to its most peers, per operation."""
    return "".join(
        f" The {esc(c)} index's mean grew more than the distributed index's for {more} of "
        f"{both} operations."
        for c, more, both in analysis.design_growth(times)
    )


# ------------------------------------------------------------------ obtain vs file size


def _sizes(rr: ReportRun, labels: dict[Any, str]) -> tuple[str, list[str | Figure]]:
    sizes = analysis.obtain_vs_file_size(rr.run)
    lines = _lines(sizes, ["design", "index", "peers"], "file_bytes")
    if not lines:
        return "", []
    time_traces: list[Trace] = []
    rate_traces: list[Trace] = []
    rows: list[list[str]] = []
    said: list[str] = []
    for i, (name, g) in enumerate(lines):
        xs = [float(v) for v in g["file_bytes"]]
        time_traces.append(Trace("line", f"{name} mean", xs, list(g["mean_ms"]), color=i))
        time_traces.append(Trace("line", f"{name} p99", xs, list(g["p99_ms"]), color=i, dash=True))
        rate_traces.append(
            Trace("line", f"{name} measured", xs, list(g["aggregate_mb_per_s"]), color=i)
        )
        rate_traces.append(
            Trace(
                "line",
                f"{name} report's estimate (size / mean x clients)",
                xs,
                list(g["report_estimate_mb_per_s"]),
                color=i,
                dash=True,
            )
        )
        said.append(_size_sentence(name, g))
        for _, r in g.iterrows():
            rows.append(
                [
                    esc(name),
                    _size(r["file_bytes"]),
                    str(r["count"]),
                    fmt.num(r["mean_ms"]),
                    fmt.num(r["p99_ms"]),
                    fmt.num(r["per_client_mb_per_s"]),
                    fmt.num(r["report_estimate_mb_per_s"]),
                    fmt.num(r["aggregate_mb_per_s"]),
                    fmt.num(REPORT_MB_PER_S.get(int(r["file_bytes"]))),
                ]
            )
    ref = sorted(REPORT_MB_PER_S.items())
    rate_traces.append(
        Trace(
            "points",
            "report 002 (8 EC2 clients)",
            [float(k) for k, _ in ref],
            [v for _, v in ref],
            color=len(lines),
            symbol="diamond",
        )
    )
    peaks = [(name, analysis.size_summary(g)) for name, g in lines]
    measured = "; ".join(
        f"{esc(name)}: peak {fmt.num(s['peak_mb_per_s'])} MB/s at {_size(s['peak_bytes'])}"
        for name, s in peaks
    )
    figs: list[str | Figure] = [
        Figure(
            "share-sizes-obtain",
            "obtain time vs file size",
            Axis("file size (bytes)", "log"),
            Axis("obtain time (ms)", "log"),
            time_traces,
            caption="Solid: mean; dashed: p99 (search, then download and checksum). Report "
            "002 showed 0.758 ms at 1 KB growing almost linearly from 1 MB to 1 GB. This "
            "run: " + " ".join(s.replace("&rarr;", "->") for s in said),
        ),
        Figure(
            "share-sizes-throughput",
            "aggregate obtain throughput vs file size",
            Axis("file size (bytes)", "log"),
            Axis("MB/s (all clients)", "log"),
            rate_traces,
            caption="Solid: bytes obtained over the span the obtains took (measured); dashed: "
            "the report's estimate, file size / mean obtain time x clients; diamonds: report "
            "002's table for eight clients (10.3 MB/s at 1 KB, about 550-590 MB/s from 1 MB "
            f"on). This run: {measured}.",
        ),
        _table(
            [
                "design",
                "file size",
                "obtains",
                "mean ms",
                "p99 ms",
                "MB/s per client",
                "report's estimate MB/s",
                "measured MB/s",
                "report 002 MB/s",
            ],
            rows,
            "obtain time and throughput per file size",
        ),
    ]
    return "<b>File size.</b> " + " ".join(said), figs


def _size_sentence(name: str, g: pd.DataFrame) -> str:
    s = analysis.size_summary(g)
    before, larger, grew = s["step"]
    return (
        f"{esc(name)} ({s['peers']} peers): mean obtain time {fmt.num(s['first_ms'])} ms "
        f"at {_size(s['first_bytes'])} and {fmt.num(s['last_ms'])} ms at "
        f"{_size(s['last_bytes'])}; measured aggregate {fmt.num(s['first_mb_per_s'])}"
        f" &rarr; {fmt.num(s['last_mb_per_s'])} MB/s."
        f" From {_size(before)} to {_size(s['last_bytes'])} "
        f"({larger:.4g}x larger) the mean grew {grew:.3g}x."
    )


# ------------------------------------------------------------------ operations per second


def _ops(rr: ReportRun, labels: dict[Any, str]) -> tuple[str, list[str | Figure]]:
    rates = analysis.ops_per_second(rr.run)
    if rates.empty:
        return "", []
    # Per design, the point with the most peers and the smallest files (the report's case).
    ops = analysis.operations_present(rates)
    traces = []
    said = []
    for i, d in enumerate(analysis.ops_by_design(rates)):
        r = d["by_operation"]
        name = f"{d['design']}, {d['peers']} peers, {_size(d['file_bytes'])}"
        traces.append(Trace("bar", name, ops, list(r["aggregate_per_s"]), color=i))
        said.append(
            f"{esc(name)}: "
            + ", ".join(
                f"{op} {fmt.num(r.at[op, 'aggregate_per_s'])}/s "
                f"(report's way {fmt.num(r.at[op, 'report_estimate_per_s'])}/s)"
                for op in ops
            )
        )
    rows = [
        [
            esc(labels.get(r["point"], r["point"])),
            r["operation"],
            str(r["clients"]),
            str(r["count"]),
            fmt.num(r["per_client_per_s"]),
            fmt.num(r["report_estimate_per_s"]),
            fmt.num(r["aggregate_per_s"]),
        ]
        for _, r in rates.sort_values(["point", "operation"]).iterrows()
    ]
    fig = Figure(
        "share-ops-per-s",
        "operations per second, all clients together",
        Axis("operation", "category"),
        Axis("operations/s (measured)", "log"),
        traces,
        caption=f"Report 002 (8 clients, 1000 / mean ms x 8): {REPORT_OPS}. Measured here: "
        "operations over the span they took, per design at its largest point. This run: "
        + "; ".join(said)
        + ".",
    )
    text = (
        "<b>Operations per second</b> (measured; in brackets the report's way, 1000 / mean "
        "ms x clients, as if each client had the system to itself): " + "; ".join(said) + "."
    )
    table = _table(
        ["point", "operation", "clients", "n", "per client /s", "report's way /s", "measured /s"],
        rows,
        "operations per second per point and operation",
    )
    return text, [fig, table]


# ------------------------------------------------------------------ replica fallbacks


def _replicas(rr: ReportRun, labels: dict[Any, str]) -> tuple[str, list[str | Figure]]:
    summary = analysis.replica_summary(rr.run)
    if summary is None:
        return "", []
    fb, events = summary["fallbacks"], summary["timeline"]
    timeline = (
        "The timeline: "
        + ", ".join(
            f"{esc(e.get('action'))} {esc(e.get('node'))} at {fmt.num(e.get('at_s'))} s"
            for e in events
        )
        + " (in every point)."
        if events
        else "No node was stopped or killed in this run."
    )
    replica, index_n = summary["replica"], summary["index_operations"]
    drops = summary["drops"]
    text = (
        f"<b>Replica fallbacks.</b> {timeline} In the distributed design {replica} of "
        f"{index_n} index operations ({fmt.pct(replica / index_n if index_n else None)}) "
        f"were answered by the owner's replica, and {drops} operations found their node down."
    )
    if replica:
        by_op = summary["by_operation"]
        text += " By operation: " + ", ".join(f"{op} {n}" for op, n in by_op.items()) + "."
    ops = analysis.operations_present(fb)
    rows = []
    for point, g in fb.groupby("point", sort=True):
        g = g.set_index("operation").reindex(ops)
        rows.append(
            [esc(labels.get(point, point))]
            + [
                f"{int(g.at[op, 'replica'])} / {int(g.at[op, 'count'])}"
                + (f", {int(g.at[op, 'drop'])} down" if g.at[op, "drop"] else "")
                if pd.notna(g.at[op, "count"])
                else "-"
                for op in ops
            ]
        )
    blocks: list[str | Figure] = []
    if replica or drops:
        points = sorted(fb["point"].unique())
        cats = [labels.get(p, str(p)) for p in points]
        traces = []
        for i, (col, what) in enumerate((("replica", "by the replica"), ("drop", "node down"))):
            per = fb.pivot_table(index="point", columns="operation", values=col, aggfunc="sum")
            for j, op in enumerate(ops):
                if op in per.columns and per[op].sum() > 0:
                    ys = [float(per[op].get(p, 0)) for p in points]
                    traces.append(Trace("bar", f"{op}: {what}", cats, ys, color=2 * j + i))
        blocks.append(
            Figure(
                "share-replicas",
                "operations answered by the owner's replica, and operations that found "
                "their node down",
                Axis("point", "category"),
                Axis("operations"),
                traces,
                stacked=True,
                caption="Report 002 did not stop nodes (knee's addition: the distributed "
                "index replicates each entry on the owner's successor). This run: "
                f"{replica} index operations answered by a replica, {drops} operations "
                "found their node down (an obtain from a stopped peer has no replica).",
            )
        )
    blocks.append(
        _table(
            ["point", *ops],
            rows,
            "answered by the replica / operations, per point (distributed design)",
        )
    )
    return text, blocks


# ------------------------------------------------------------------ the headline


def headline(rr: ReportRun) -> list[str] | None:
    """The designs compared as peers grow, for the report's first section (None when the
    run has no nodes sweep)."""
    if not _has_samples(rr):
        return None
    times = analysis.response_time_vs_nodes(rr.run)
    if times.empty:
        return None
    peers = sorted(times["peers"].dropna().unique())
    out = [
        f"The {c} index's mean response time grew more than the distributed index's for "
        f"{more} of {both} operations, from {peers[0]:g} to {peers[-1]:g} peers."
        for c, more, both in analysis.design_growth(times)
    ]
    return out or None
