"""The data of the stream system's figures and tables (report 000), from a run directory.

Every function takes a `knee.results.Run` of `experiments/stream.toml` or
`experiments/stream-loss.toml` and returns a pandas DataFrame, computed with arrays (no
per-sample Python loops). Conventions of the stream samples (docs/stream.md): one sample per
block request; `client` = frame, `arg` = block, `service` = the service's index; statuses
ok / timeout / late / error; flags bit 0 = redundant copy (hedging), bit 1 = retransmission;
`detail_ns` = the emulated delay of a reply, or the timeout of a request that got none in time.
Quartiles, medians and time-to-buffer levels are knee's order statistic x_(ceil(n q))
(`knee.stats.quantiles`), the percentile summary.json gives. What each point ran with (its
services, mode, timeout, loss rate) is what the run directory records (`knee.run_params`).

The functions after the tables take a table and give the numbers the report's findings
state (ranges, ratios, counts): the report only puts them into words.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypedDict

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from knee.contract import STREAM_BLOCK_BYTES as BLOCK_BYTES
from knee.contract import STREAM_FLAG_REDUNDANT as FLAG_REDUNDANT
from knee.contract import STREAM_FLAG_RETRANSMISSION as FLAG_RETRANSMISSION
from knee.contract import STREAM_OP_BLOCK
from knee.results import Run
from knee.run_params import PointParams, point_params, setting
from knee.stats.quantiles import order_statistic

#: Time-to-buffer levels of the first frames, and how many frames they count.
BUFFER_LEVELS = (0.5, 0.8, 0.95, 0.99, 1.0)
BUFFER_FRAMES = 100
#: z of the confidence intervals of drop rates (95 %).
Z_95 = 1.959964
#: The driver's modes; Table 1's column of the parallel client.
SERIAL, PARALLEL = "serial", "parallel"
PARALLEL_COLUMN = "parallel - all services"


def _service_names(params: PointParams | None) -> list[str]:
    """The point's services' names by index (one without a name is named by its index, as
    the stream system names it)."""
    services = setting(params, "server.services") or []
    return [s.get("name") or f"service-{i}" for i, s in enumerate(services)]


#: Block requests after the warm-up: the samples of every stream figure and table.
_BLOCKS = (pc.field("op") == STREAM_OP_BLOCK) & ~pc.field("warmup")
#: The columns that say when a block was resolved and whether it was useful.
_RESOLVE_COLUMNS = ("point", "status", "sent_ns", "received_ns", "detail_ns", "flags")


def _blocks(run: Run, columns: Sequence[str] = ()) -> Iterator[pd.DataFrame]:
    """Per point with block requests after the warm-up, those requests (`columns` besides
    what tells when each was resolved), with the time each was resolved (reply, or timeout)
    in ns: one point in memory at a time."""
    for _, df in run.iter_points([*_RESOLVE_COLUMNS, *columns], _BLOCKS):
        if df.empty:
            continue
        status = df["status"].astype(str).to_numpy()
        answered = np.isin(status, ("ok", "error"))
        df["resolved_ns"] = np.where(answered, df["received_ns"], df["sent_ns"] + df["detail_ns"])
        df["status"] = status
        df["useful"] = (status == "ok") & ((df["flags"].to_numpy() & FLAG_REDUNDANT) == 0)
        yield df


def _points(run: Run) -> pd.DataFrame:
    """Per measured point: what it ran with, as the run directory records it."""
    params = point_params(run)
    rows = []
    for p in run.points:
        pp = params.get(p["point"])
        names = _service_names(pp)
        mode = setting(pp, "driver.mode")
        service = int(setting(pp, "driver.service") or 0)
        rows.append(
            {
                "point": p["point"],
                "series": p["series"],
                "label": p["label"],
                "mode": mode,
                "column": names[service] if mode == SERIAL else PARALLEL_COLUMN,
                "timeout_ms": float(setting(pp, "load.timeout_ms")),
                "loss_p": setting(pp, "server.loss_p"),
                "names": names,
            }
        )
    return pd.DataFrame(rows)


def timeouts_ms(run: Run) -> list[float]:
    """The per-request timeouts the measured points ran with, ascending."""
    params = point_params(run)
    values = {setting(params.get(p["point"]), "load.timeout_ms") for p in run.points}
    return sorted(values - {None})


def _tukey(latency_ms: pd.Series) -> pd.Series:
    v = latency_ms.to_numpy()
    q1, median, q3 = order_statistic(v, [0.25, 0.5, 0.75])
    iqr = q3 - q1
    inside = v[(v >= q1 - 1.5 * iqr) & (v <= q3 + 1.5 * iqr)]
    return pd.Series(
        {
            "n": len(v),
            "q1_ms": q1,
            "median_ms": median,
            "mean_ms": v.mean(),
            "q3_ms": q3,
            "whisker_low_ms": inside.min(),
            "whisker_high_ms": inside.max(),
            "outliers_ms": np.sort(v[(v < inside.min()) | (v > inside.max())]),
        }
    )


def block_latency_boxplot(run: Run) -> pd.DataFrame:
    """Figures 1 and 2 of report 000: Tukey box plots of block latency per service, serially
    accessed (left) and during parallel access (right). One row per (point, service): n,
    quartiles (order statistics), mean, whiskers (most extreme value within 1.5 IQR of the
    box) and the outliers, in ms, of every block received in time (dropped and late blocks
    are not latencies, as in the report)."""
    boxes = []
    for b in _blocks(run, ["service", "latency_ns"]):
        ok = b[b["status"] == "ok"]
        if len(ok):
            latency_ms = ok["latency_ns"] / 1e6
            boxes.append(latency_ms.groupby([ok["point"], ok["service"]]).apply(_tukey).unstack())
    cols = ["point", "series", "mode", "service", "service_name"]
    if not boxes:  # no block arrived in time
        return pd.DataFrame(columns=cols + list(_tukey(pd.Series([0.0])).index))
    points = _points(run).set_index("point")
    stats = pd.concat(boxes).reset_index()
    stats["mode"] = stats["point"].map(points["mode"])
    stats["series"] = stats["point"].map(points["series"])
    stats["service_name"] = [
        points.at[p, "names"][s] for p, s in zip(stats["point"], stats["service"], strict=True)
    ]
    return stats[cols + [c for c in stats.columns if c not in cols]]


def _per_point(run: Run) -> pd.DataFrame:
    """Per point: elapsed time, frames, blocks and bytes (the base of the tables)."""
    out = pd.concat([_point_totals(b) for b in _blocks(run, ["client", "bytes_out", "bytes_in"])])
    out["elapsed_s"] = (out["end_ns"] - out["start_ns"]) / 1e9
    return out


def _point_totals(b: pd.DataFrame) -> pd.DataFrame:
    """`_per_point`'s row of one point's blocks (without the elapsed time)."""
    b["wire_bytes"] = b["bytes_out"] + b["bytes_in"]
    g = b.groupby("point")
    return pd.DataFrame(
        {
            "start_ns": g["sent_ns"].min(),
            "end_ns": g["resolved_ns"].max(),
            "requests": g.size(),
            "useful_blocks": g["useful"].sum(),
            "wire_bytes": g["wire_bytes"].sum(),
            "frames": g["client"].nunique(),
        }
    )


def frames_and_bits_table(run: Run) -> pd.DataFrame:
    """Table 1 of report 000: frames per second and bits per second of each serial client
    (one column per service) and of the parallel client. Goodput counts the 768-byte blocks
    received in time once (6,144 bits each, as the report); on the wire counts every request
    and reply datagram's UDP payload, redundant and late ones included."""
    base = _per_point(run)
    points = _points(run).set_index("point")
    table = pd.DataFrame(
        {
            "series": points["series"],
            "column": points["column"],
            "frames": base["frames"],
            "elapsed_s": base["elapsed_s"],
            "frames_per_s": base["frames"] / base["elapsed_s"],
            "goodput_bits_per_s": base["useful_blocks"] * BLOCK_BYTES * 8 / base["elapsed_s"],
            "wire_bits_per_s": base["wire_bytes"] * 8 / base["elapsed_s"],
        }
    )
    return table.reset_index()


def drop_rate_table(run: Run) -> pd.DataFrame:
    """Table 2 of report 000: drop rate in % per service, serial vs parallel. A drop is a
    request without a reply within its timeout (status timeout); late replies are counted
    apart (late %), not as drops. With a 95 % Wilson interval of each rate."""
    points = _points(run).set_index("point")
    counts = []  # per point, then added up over the points
    for b in _blocks(run, ["service"]):
        b["mode"] = b["point"].map(points["mode"])
        b["dropped"] = b["status"] == "timeout"
        b["late"] = b["status"] == "late"
        g = b.groupby(["service", "mode"])
        counts.append(
            pd.DataFrame(
                {"requests": g.size(), "dropped": g["dropped"].sum(), "late": g["late"].sum()}
            )
        )
    t = pd.concat(counts).groupby(level=["service", "mode"]).sum()
    n, p = t["requests"], t["dropped"] / t["requests"]
    centre = (p + Z_95**2 / (2 * n)) / (1 + Z_95**2 / n)
    half = Z_95 * np.sqrt(p * (1 - p) / n + Z_95**2 / (4 * n * n)) / (1 + Z_95**2 / n)
    t["drop_rate_pct"] = 100 * p
    t["ci_low_pct"], t["ci_high_pct"] = 100 * (centre - half), 100 * (centre + half)
    t["late_pct"] = 100 * t["late"] / n
    t = t.reset_index()
    first = point_params(run).get(run.points[0]["point"]) if run.points else None
    names = _service_names(first)
    t["service_name"] = [names[s] if s < len(names) else str(s) for s in t["service"]]
    return t


def time_to_buffer(run: Run) -> pd.DataFrame:
    """Time to buffer 50, 80, 95, 99 and 100 % of the first 100 frames of each point (s from
    the first request): a frame is buffered once every block arrived or was given up."""
    rows = []
    for b in _blocks(run, ["client"]):
        point = int(b["point"].iloc[0])
        b = b[b["client"] < b["client"].min() + BUFFER_FRAMES]
        start = b["sent_ns"].min()
        t = np.sort(b.groupby("client")["resolved_ns"].max().to_numpy() - start) / 1e9
        row: dict[str, Any] = {"point": point, "frames": len(t)}
        levels = order_statistic(t, BUFFER_LEVELS, sorted_values=t)
        for level, value in zip(BUFFER_LEVELS, levels, strict=True):
            row[f"t_{round(level * 100)}pct_s"] = value
        rows.append(row)
    out = pd.DataFrame(rows)
    return out.merge(_points(run)[["point", "series", "label"]], on="point")


def throughput_vs_loss(run: Run) -> pd.DataFrame:
    """The loss experiment's figure: time per delivered block and goodput against the loss
    rate p, with and without retransmission, next to the expected time per block
    L + p/(1-p) T (L: the mean latency of the blocks received in time at that point, T: the
    timeout). Retransmitting until a block arrives takes L + p/(1-p) T per block; without
    retransmission a block takes (1-p) L + p T and only a fraction 1-p arrive, which is the
    same time per *delivered* block: retransmission changes the delivered fraction, not the
    goodput (with a fixed timeout). `measured_loss_p` is the fraction of requests that timed
    out: a short run's realized loss differs from the nominal p by chance."""
    base = _per_point(run)
    points = _points(run).set_index("point")
    per_point = pd.DataFrame(
        [_point_loss(b) for b in _blocks(run, ["latency_ns", "client", "arg"])]
    ).set_index("point")
    latency_s = per_point["latency_ns"] / 1e9
    p = points["loss_p"].astype(float)
    t_s = points["timeout_ms"] / 1e3
    measured_s = base["elapsed_s"] / base["useful_blocks"]
    with np.errstate(divide="ignore", invalid="ignore"):
        expected_s = latency_s + p / (1 - p) * t_s
    out = pd.DataFrame(
        {
            "series": points["series"],
            "loss_p": p,
            "measured_loss_p": per_point["lost"],
            "timeout_s": t_s,
            "latency_s": latency_s,
            "retransmissions": per_point["retransmissions"],
            "delivered_fraction": base["useful_blocks"] / per_point["blocks"],
            "time_per_block_s": measured_s,
            "expected_time_per_block_s": expected_s,
            "goodput_bits_per_s": BLOCK_BYTES * 8 / measured_s,
            "expected_goodput_bits_per_s": BLOCK_BYTES * 8 / expected_s,
        }
    )
    return out.reset_index()


def _point_loss(b: pd.DataFrame) -> dict[str, float]:
    """`throughput_vs_loss`'s counts of one point's blocks: the mean latency of those received
    in time (NaN when none was), distinct blocks, the fraction of requests that timed out
    and the retransmissions."""
    return {
        "point": b["point"].iloc[0],
        "latency_ns": b.loc[b["status"] == "ok", "latency_ns"].mean(),
        "blocks": len(b.drop_duplicates(["client", "arg"])),
        "lost": (b["status"] == "timeout").mean(),
        "retransmissions": int(np.count_nonzero(b["flags"].to_numpy() & FLAG_RETRANSMISSION)),
    }


# ------------------------------------------------------------------ the findings' numbers

Span = tuple[float, float]  # (lowest, highest)


class ModeBoxes(TypedDict):
    """`box_summary`: one mode's boxes."""

    mode: str
    median_ms: Span
    n: Span
    outliers: int
    largest_outlier_ms: float | None


class ParallelThroughput(TypedDict):
    frames_per_s: float
    goodput_bits_per_s: float
    best_serial: str
    gain: float


class ThroughputSummary(TypedDict):
    """`throughput_summary`: the serial points' ranges, and the parallel client's."""

    serial_frames_per_s: Span
    serial_goodput_bits_per_s: Span
    parallel: ParallelThroughput | None


class ModeDrops(TypedDict):
    mode: str
    drop_rate_pct: Span
    ci_low_pct: float
    ci_high_pct: float


class DropSummary(TypedDict):
    """`drop_summary`: per mode, and for how many services parallel drops more."""

    modes: list[ModeDrops]
    parallel_above: tuple[int, int] | None  # (count, services)


class SeriesLoss(TypedDict):
    """`loss_summary`: one loss sweep's ends."""

    series: str
    low_p: float
    low_time_per_block_s: float
    high_p: float
    high_time_per_block_s: float
    high_delivered_fraction: float
    measured_over_expected: Span


class BufferSummary(TypedDict):
    """`buffer_summary`: frames counted, the soonest and latest (label, s), half's range."""

    frames: Span
    fastest: tuple[str, float]
    slowest: tuple[str, float]
    half_s: Span


def _span(values: pd.Series) -> tuple[float, float]:
    return float(values.min()), float(values.max())


def boxes_share_point(boxes: pd.DataFrame) -> pd.Series:
    """Per row of `block_latency_boxplot`: whether its point has other boxes (a parallel
    point, one box per service)."""
    return boxes.groupby("point")["service"].transform("size") > 1


def box_summary(boxes: pd.DataFrame) -> list[ModeBoxes]:
    """Per mode of `block_latency_boxplot` (in order of appearance): the range of the boxes'
    medians (ms) and sizes, the outliers beyond the whiskers and the largest (None if none)."""
    out: list[ModeBoxes] = []
    for mode, g in boxes.groupby("mode", sort=False):
        largest = max((float(np.max(o)) for o in g["outliers_ms"] if len(o)), default=None)
        out.append(
            {
                "mode": mode,
                "median_ms": _span(g["median_ms"]),
                "n": _span(g["n"]),
                "outliers": int(g["outliers_ms"].map(len).sum()),
                "largest_outlier_ms": largest,
            }
        )
    return out


def parallel_over_serial_median(boxes: pd.DataFrame) -> tuple[float, float] | None:
    """The range, over the services measured in both modes, of the parallel median over the
    serial median; None when no service was."""
    if not {SERIAL, PARALLEL} <= set(boxes["mode"]):
        return None
    med = boxes.pivot_table(index="service", columns="mode", values="median_ms")
    ratio = (med[PARALLEL] / med[SERIAL]).dropna()
    return _span(ratio) if len(ratio) else None


def is_per_service(table: pd.DataFrame) -> bool:
    """Whether `frames_and_bits_table` has one point per column (each serial service once,
    the parallel client once): the report's own layout."""
    return bool(table["column"].is_unique)


def throughput_summary(table: pd.DataFrame) -> ThroughputSummary | None:
    """From `frames_and_bits_table`: the serial points' ranges of frames/s and goodput, and,
    with one point per column and one parallel point, the parallel client's and its gain
    over the best serial service. None without serial points."""
    par = table[table["column"] == PARALLEL_COLUMN]
    ser = table[table["column"] != PARALLEL_COLUMN]
    if ser.empty:
        return None
    out: ThroughputSummary = {
        "serial_frames_per_s": _span(ser["frames_per_s"]),
        "serial_goodput_bits_per_s": _span(ser["goodput_bits_per_s"]),
        "parallel": None,
    }
    if is_per_service(table) and len(par) == 1:
        best = ser.loc[ser["goodput_bits_per_s"].idxmax()]
        goodput = float(par["goodput_bits_per_s"].iloc[0])
        out["parallel"] = {
            "frames_per_s": float(par["frames_per_s"].iloc[0]),
            "goodput_bits_per_s": goodput,
            "best_serial": str(best["column"]),
            "gain": float(goodput / best["goodput_bits_per_s"]),
        }
    return out


def drop_summary(drops: pd.DataFrame) -> DropSummary:
    """From `drop_rate_table`: per mode (serial first) the range of the services' drop rates
    (%, to 0.01) and the span of their 95 % intervals; and, with both modes, for how many of
    the services measured in both the parallel interval lies above the serial one
    (`parallel_above`: (count, services), else None)."""
    modes: list[ModeDrops] = []
    for mode, g in drops.sort_values("mode", ascending=False).groupby("mode", sort=False):
        modes.append(
            {
                "mode": mode,
                "drop_rate_pct": _span(g["drop_rate_pct"].round(2)),
                "ci_low_pct": float(g["ci_low_pct"].min()),
                "ci_high_pct": float(g["ci_high_pct"].max()),
            }
        )
    wide = drops.pivot_table(
        index="service", columns="mode", values=["ci_low_pct", "ci_high_pct"]
    ).dropna()
    above = None
    if {SERIAL, PARALLEL} <= set(drops["mode"]) and len(wide):
        n = int((wide[("ci_low_pct", PARALLEL)] > wide[("ci_high_pct", SERIAL)]).sum())
        above = (n, len(wide))
    return {"modes": modes, "parallel_above": above}


def loss_sweeps(loss: pd.DataFrame) -> pd.DataFrame:
    """The rows of `throughput_vs_loss` in series that sweep the loss rate (two or more
    values of p), by series and p."""
    loss = loss[np.isfinite(loss["loss_p"].astype(float))]
    swept = loss.groupby("series")["loss_p"].transform("nunique") > 1
    return loss[swept].sort_values(["series", "loss_p"], kind="stable")


def loss_summary(loss: pd.DataFrame) -> list[SeriesLoss]:
    """Per series of `loss_sweeps`: the time per delivered block at its lowest and highest
    p, the delivered fraction at the highest, and the range of measured / expected time."""
    out: list[SeriesLoss] = []
    for series, g in loss.groupby("series", sort=False):
        ratio = (g["time_per_block_s"] / g["expected_time_per_block_s"]).replace(
            [np.inf, -np.inf], np.nan
        )
        lo, hi = g.iloc[0], g.iloc[-1]
        out.append(
            {
                "series": series,
                "low_p": float(lo["loss_p"]),
                "low_time_per_block_s": float(lo["time_per_block_s"]),
                "high_p": float(hi["loss_p"]),
                "high_time_per_block_s": float(hi["time_per_block_s"]),
                "high_delivered_fraction": float(hi["delivered_fraction"]),
                "measured_over_expected": (float(ratio.min()), float(ratio.max())),
            }
        )
    return out


def buffer_summary(buf: pd.DataFrame) -> BufferSummary:
    """From `time_to_buffer`: the range of frames counted, the points that buffered every
    frame soonest and latest (label, s), and the range of the times to buffer half."""
    full = buf.set_index("label")["t_100pct_s"]
    return {
        "frames": _span(buf["frames"]),
        "fastest": (str(full.idxmin()), float(full.min())),
        "slowest": (str(full.idxmax()), float(full.max())),
        "half_s": _span(buf["t_50pct_s"]),
    }
