"""Time series over the whole run: throughput, latency percentiles, CPU and network per
node, with the points' starts and the timeline's events (kill, stop, start) marked."""

from __future__ import annotations

import numpy as np
import pandas as pd

from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Marker, Trace
from knee.report.html import Section
from knee.report.kit import note
from knee.stats.quantiles import order_statistics

#: Width of a time bin for the sample-based series.
BIN_S = 1.0
#: Event kinds drawn as markers (the runner's own bookkeeping events are left out).
TIMELINE_KINDS = ("kill", "stop", "start", "run_failed", "run_interrupted")
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
    if len(rr.samples):
        blocks.extend(_sample_figures(rr.samples, markers))
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


def _sample_figures(samples: pd.DataFrame, markers: list[Marker]) -> list[Figure]:
    done = samples[samples["received_ns"] >= 0]
    t_bin = (done["received_ns"].to_numpy() // int(BIN_S * 1e9)).astype(np.int64)
    status = done["status"].to_numpy()
    frame = pd.DataFrame(
        {"bin": t_bin, "status": status, "latency_ms": done["latency_ns"].to_numpy() / 1e6}
    )
    counts = frame.groupby(["bin", "status"]).size().unstack(fill_value=0)
    all_bins = np.arange(counts.index.min(), counts.index.max() + 1) if len(counts) else []
    counts = counts.reindex(all_bins, fill_value=0)
    x = (counts.index.to_numpy() * BIN_S + BIN_S / 2).tolist()
    through = [
        Trace("line", f"{s}/s", x, (counts[s] / BIN_S).tolist(), color=i)
        for i, s in enumerate(counts.columns)
    ]
    # Requests that never got a reply (timeouts, drops) are binned by intended time.
    lost = samples[samples["received_ns"] < 0]
    if len(lost):
        lb = (lost["intended_ns"].to_numpy() // int(BIN_S * 1e9)).astype(np.int64)
        lc = pd.Series(lb).value_counts().sort_index()
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
    ok = frame[frame["status"] == "ok"]
    q = order_statistics(ok.groupby("bin")["latency_ms"], [0.5, 0.99])
    qx = (q.index.to_numpy() * BIN_S + BIN_S / 2).tolist()
    latency = [
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
            latency,
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
