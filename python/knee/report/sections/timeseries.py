"""Time series over the whole run: throughput, latency percentiles, CPU and network per
node, with the points' starts and the timeline's events (kill, stop, start) marked."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Marker, Trace
from knee.report.html import Section
from knee.report.kit import note
from knee.stats import seconds
from knee.stats.seconds import BIN_NS, BIN_S

#: Event kinds drawn as markers (the runner's own bookkeeping events are left out).
TIMELINE_KINDS = ("kill", "stop", "start", "freeze", "resume", "run_failed", "run_interrupted")
#: Point starts are labelled when there are at most this many (beyond, lines only).
LABELLED_POINTS = 24


def section(rr: ReportRun) -> Section:
    markers = _markers(rr)
    blocks: list[str | Figure] = [
        "<p>Time since the start of the run. Grey lines: a point starts (pN is the point's "
        "number in the summary table); red: events of the spec's timeline or a failure. "
        "Requests are binned by the second their reply arrived; the per-second p50 and p99 "
        "are order statistics of that second's successful replies, as in the summary.</p>"
    ]
    blocks.extend(_sample_figures(rr, markers))
    ts = rr.run.timeseries
    if not ts.empty and "node" in ts:
        blocks.extend(_node_figures(ts, markers))
    if len(blocks) == 1:
        blocks.append(note("This run has no samples and no time series."))
    return Section("timeseries", "Time series", blocks)


def _markers(rr: ReportRun) -> list[Marker]:
    ev = rr.run.events
    if ev.empty or "kind" not in ev:
        return []
    out: list[Marker] = []
    starts = ev[ev["kind"] == "point_start"]
    labelled = len(starts) <= LABELLED_POINTS
    out.extend(
        Marker(float(t), f"p{int(p)}" if labelled else "", "#aaaaaa", dash=False)
        for t, p in zip(starts["t_s"], starts["point"], strict=True)
    )
    timeline = ev[ev["kind"].isin(TIMELINE_KINDS)]
    out.extend(
        Marker(float(t), f"{k} {n}".strip(), "#d62728")
        for t, k, n in zip(timeline["t_s"], timeline["kind"], timeline["node"], strict=True)
    )
    return out


#: Percentiles of each second's successful replies.
QS = (0.5, 0.99)
#: Replies read again at a time for the seconds met out of order (OrderStatsBySecond.finish).
REVISIT_ROWS = 8_000_000
#: Successful replies, warm-up included: the time line covers the whole run.
OK = (pc.field("status") == "ok") & (pc.field("received_ns") >= 0)


def _reread(rr: ReportRun) -> seconds.Reread:
    """Reads the successful replies of the seconds [first, last] again, a point at a time."""

    def read(first: int, last: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        span = (pc.field("received_ns") >= first * BIN_NS) & (
            pc.field("received_ns") < (last + 1) * BIN_NS
        )
        for _, s in rr.run.iter_points(["received_ns", "latency_ns"], OK & span):
            yield s["received_ns"].to_numpy(), s["latency_ns"].to_numpy()

    return read


def _sample_figures(rr: ReportRun, markers: list[Marker]) -> list[Figure]:
    """Replies per second by status and the per-second percentiles, read a piece of a
    point at a time: counts add up, percentiles come from knee.stats.seconds."""
    replies: dict[str, pd.Series] = {}  # status -> replies per bin of arrival
    lost: pd.Series | None = None  # requests without a reply per bin of intended time
    latency = seconds.OrderStatsBySecond(QS)
    any_samples = False
    for point in rr.sample_points():
        # In pieces: counts add up, OrderStatsBySecond merges the seconds a piece shares with the
        # next, so memory is a piece's whatever the size of the point.
        for s in rr.run.point_batches(point, ["received_ns", "status"]):
            if s.empty:
                continue
            any_samples = True
            received = s["received_ns"].to_numpy()
            done = received >= 0
            bins = seconds.second_of(received[done])
            status = pd.Categorical(s["status"])
            codes = np.asarray(status.codes)[done]
            for code, name in enumerate(status.categories):
                mine = codes == code
                if mine.any():
                    got = seconds.counts(bins[mine])
                    replies[str(name)] = seconds.plus(replies.get(str(name)), got)
        # Requests without a reply are few: their send times are read alone.
        for s in rr.run.point_batches(point, ["intended_ns"], pc.field("received_ns") < 0):
            lost = seconds.plus(lost, seconds.counts(seconds.second_of(s["intended_ns"])))
        for s in rr.run.point_batches(point, ["received_ns", "latency_ns"], OK):
            latency.add(seconds.second_of(s["received_ns"]), s["latency_ns"].to_numpy())
    if not any_samples:
        return []
    # Statuses in name order, every bin from the first to the last (0 where none).
    counts = pd.DataFrame({name: replies[name] for name in sorted(replies)}).fillna(0)
    empty = np.zeros(0, np.int64)
    all_bins = np.arange(counts.index.min(), counts.index.max() + 1) if len(counts) else empty
    counts = counts.reindex(all_bins, fill_value=0).astype(np.int64)
    x = (counts.index.to_numpy() * BIN_S + BIN_S / 2).tolist()
    through = [
        Trace("line", f"{s}/s", x, (counts[s] / BIN_S).tolist(), color=i)
        for i, s in enumerate(counts.columns)
    ]
    # Requests that never got a reply (timeouts, drops) are binned by intended time.
    if lost is not None:
        lc = lost.sort_index()
        through.append(
            Trace(
                "points",
                "no reply (by intended time)/s",
                (lc.index.to_numpy() * BIN_S + BIN_S / 2).tolist(),
                (lc.to_numpy() / BIN_S).tolist(),
                color=3,
                symbol="x",
            )
        )
    ok_per_second = replies.get("ok", pd.Series([], dtype=np.int64))
    q = latency.finish(_reread(rr), ok_per_second, REVISIT_ROWS) / 1e6  # ns to ms
    qx = (q.index.to_numpy() * BIN_S + BIN_S / 2).tolist()
    latency_traces = [
        Trace("points", "p50", qx, q[0.5].tolist(), color=0),
        Trace("points", "p99", qx, q[0.99].tolist(), color=1),
    ]
    return [
        Figure(
            "ts-throughput",
            "replies per second by status",
            Axis("time (s)"),
            Axis("replies/s"),
            through,
            markers,
            height_px=340,
        ),
        Figure(
            "ts-latency",
            "latency percentiles per second (ok replies)",
            Axis("time (s)"),
            Axis("latency", "log", kind="time"),
            latency_traces,
            markers,
            height_px=340,
        ),
    ]


def _node_figures(ts: pd.DataFrame, markers: list[Marker]) -> list[Figure]:
    ts = ts.sort_values(["node", "point", "t_s"])
    nodes = list(dict.fromkeys(ts["node"].astype(str)))
    figs: list[Figure] = []
    if "cpu_percent" in ts:
        cpu = [
            Trace(
                "points",
                n,
                ts.loc[ts["node"] == n, "t_s"].tolist(),
                ts.loc[ts["node"] == n, "cpu_percent"].tolist(),
                color=i,
            )
            for i, n in enumerate(nodes)
            if ts.loc[ts["node"] == n, "cpu_percent"].notna().any()  # not a link's rows
        ]
        if "foreign_cpu_percent" in ts:  # the runner's host rows (knee.monitor)
            host = ts[ts["node"] == "host"]
            cpu.append(
                Trace(
                    "points",
                    "other processes (foreign)",
                    host["t_s"].tolist(),
                    host["foreign_cpu_percent"].tolist(),
                    color=len(nodes),
                    symbol="x",
                )
            )
        figs.append(
            Figure(
                "ts-cpu",
                "CPU per node, the whole host, and other processes (foreign: neither the "
                "run's nodes nor the runner; 100% = one core)",
                Axis("time (s)"),
                Axis("CPU %"),
                cpu,
                markers,
                height_px=340,
            )
        )
    if "cpu_percent_of_quota" in ts:  # nodes with a CPU limit (knee.hosts)
        limited = ts[ts["cpu_percent_of_quota"].notna()]
        figs.append(
            Figure(
                "ts-cpu-quota",
                "CPU of each node with a CPU limit, relative to it (100% = its whole quota)",
                Axis("time (s)"),
                Axis("% of quota"),
                [
                    Trace(
                        "points",
                        f"{n} (of {limited.loc[limited['node'] == n, 'cpu_quota_cores'].iloc[0]:g}"
                        " cores)",
                        limited.loc[limited["node"] == n, "t_s"].tolist(),
                        limited.loc[limited["node"] == n, "cpu_percent_of_quota"].tolist(),
                        color=nodes.index(n),
                    )
                    for n in dict.fromkeys(limited["node"].astype(str))
                ],
                markers,
                height_px=300,
            )
        )
    net: list[Trace] = []
    for col, label in (("bytes_tx", "tx"), ("bytes_rx", "rx")):
        if col not in ts:
            continue
        # Counters are cumulative per node process: rates within one (point, node).
        grouped = ts.groupby(["point", "node"], observed=True)
        rate = grouped[col].diff() / grouped["t_s"].diff()
        rate = rate.where(rate >= 0)  # a restarted node resets its counters
        for i, n in enumerate(nodes):
            mask = (ts["node"] == n) & rate.notna()
            if mask.any():
                net.append(
                    Trace(
                        "points",
                        f"{n} {label}",
                        ts.loc[mask, "t_s"].tolist(),
                        (rate[mask] / 1e6).tolist(),
                        color=i,
                        symbol="circle" if label == "tx" else "triangle-up",
                    )
                )
    if net:
        figs.append(
            Figure(
                "ts-network",
                "network per node (the node's own byte counters)",
                Axis("time (s)"),
                Axis("MB/s"),
                net,
                markers,
                height_px=340,
            )
        )
    return figs
