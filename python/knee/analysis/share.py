"""share (report 002): the data of the report's figures, computed from a run.

Every function takes a run (`knee.open_run(path)`) of one of the share experiments
(experiments/share-*.toml) and returns a DataFrame, one row per (point, operation), with
the point's parameters (series, design, index, peers, file_bytes) as columns. Warm-up and
unsuccessful samples are left out of latencies; counts of each status are kept. Percentiles
are knee's order statistic x_(ceil(n q)) (`knee.stats.quantiles`), as in summary.json. The
parameters are those the run directory records each point ran with (`knee.run_params`).

After the tables: how points join into a figure's lines (`lines`), and the numbers the
report's findings state (under "lines and findings"); the report only words them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from knee.contract import SHARE_FLAG_REPLICA as FLAG_REPLICA
from knee.contract import SHARE_OPS as OPS
from knee.params import TimelineEvent
from knee.results import Run
from knee.run_params import point_params, setting, timeline
from knee.stats.quantiles import order_statistics

PARAMS = ("design", "index", "peers", "files", "file_bytes")
#: The op code of an obtain.
OBTAIN = next(op for op, name in OPS.items() if name == "obtain")
#: Operations in the order a client runs them (docs/share.md).
PHASES = ("register", "search", "obtain", "unregister")


def point_parameters(run: Run) -> pd.DataFrame:
    """One row per point: its series and the share server parameters it ran with."""
    params = point_params(run)
    rows = []
    for p in run.points:
        pp = params.get(p["point"])
        values = {k: setting(pp, f"server.{k}") for k in PARAMS}
        rows.append({"point": p["point"], "series": p["series"], **values})
    return pd.DataFrame(rows)


#: The samples of the latencies: successful requests after the warm-up.
_OK = (pc.field("status") == "ok") & ~pc.field("warmup")


def _per_point(
    run: Run,
    columns: Sequence[str],
    table: Callable[[pd.DataFrame], pd.DataFrame],
    where: pc.Expression | None = _OK,
) -> pd.DataFrame:
    """`table` of each point's samples that `where` keeps (`columns`, the point and the
    operation), one point in memory at a time, the points' rows one under the other; `table`
    of no samples when no point has any."""
    parts, none = [], pd.DataFrame(columns=["point", "op", *columns])
    for _, s in run.iter_points(["point", "op", *columns], where):
        if len(s):
            parts.append(table(s.assign(operation=s["op"].map(OPS))))
        else:
            none = s
    return pd.concat(parts) if parts else table(none.assign(operation=none["op"].map(OPS)))


def _per_op(df: pd.DataFrame) -> pd.core.groupby.DataFrameGroupBy:
    return df.groupby(["point", "operation"], observed=True)


def response_time_vs_nodes(run: Run) -> pd.DataFrame:
    """Figures "response time vs nodes" for register, search and obtain (report part 1,
    distributed design; part 3, centralized design): per point and operation, the mean and
    quantiles of the response time in ms, with the number of peers. Per operation, where the
    report plotted register as the time for all 50 files (its 35 ms = 50 x 0.7 ms):
    `all_files_ms` is that figure (files per peer x mean register time; NaN for the other
    operations)."""
    out = _per_point(run, ["latency_ns"], _response_times).reset_index()
    out = _with_parameters(run, out)
    register = out["operation"] == "register"
    out["all_files_ms"] = (out["mean_ms"] * out["files"]).where(register)
    return out


def _response_times(ok: pd.DataFrame) -> pd.DataFrame:
    g = _per_op(ok)["latency_ns"]
    q = order_statistics(g, [0.5, 0.99]) / 1e6
    return pd.DataFrame(
        {
            "count": g.size(),
            "mean_ms": g.mean() / 1e6,
            "p50_ms": q[0.5],
            "p99_ms": q[0.99],
        }
    )


def ops_per_second(run: Run) -> pd.DataFrame:
    """The report's operations per second per operation: per client, 1000 / mean response
    time in ms (the report's 2,611 searches/s = 1000 / 0.383 ms), the report's aggregate
    (that times the clients) and the measured aggregate (operations over the span they
    took)."""
    columns = ["received_ns", "sent_ns", "latency_ns", "client"]
    return _with_parameters(run, _per_point(run, columns, _rates).reset_index())


def _rates(ok: pd.DataFrame) -> pd.DataFrame:
    g = _per_op(ok)
    span_s = (g["received_ns"].max() - g["sent_ns"].min()) / 1e9
    per_client = 1e9 / g["latency_ns"].mean()
    clients = g["client"].nunique()
    return pd.DataFrame(
        {
            "count": g.size(),
            "clients": clients,
            "per_client_per_s": per_client,
            "report_estimate_per_s": per_client * clients,
            "aggregate_per_s": g.size() / span_s.replace(0, np.nan),
        }
    )


def obtain_vs_file_size(run: Run) -> pd.DataFrame:
    """Figures "obtain time vs file size" and the aggregate throughput table (report part
    2: 10.3 MBps at 1 KB to ~550 MBps at 10 MB-1 GB for 8 clients): per point, the mean and
    quantiles of the obtain time, the report's estimate (file size / mean time x clients)
    and the measured aggregate MB/s (bytes downloaded over the span the obtains took)."""
    params = point_parameters(run).set_index("point")
    obtains = _OK & (pc.field("op") == OBTAIN)
    columns = ["received_ns", "sent_ns", "latency_ns", "client"]
    out = _per_point(run, columns, lambda s: _obtain_rates(s, params), obtains).reset_index()
    return params.reset_index().merge(out, on="point").sort_values("file_bytes")


def _obtain_rates(obtains: pd.DataFrame, params: pd.DataFrame) -> pd.DataFrame:
    g = obtains.groupby("point")
    span_s = (g["received_ns"].max() - g["sent_ns"].min()) / 1e9
    size_b = params["file_bytes"].reindex(g.size().index).astype(float)
    clients = g["client"].nunique()
    mean_s = g["latency_ns"].mean() / 1e9
    q = order_statistics(g["latency_ns"], [0.5, 0.99]) / 1e6
    return pd.DataFrame(
        {
            "count": g.size(),
            "mean_ms": mean_s * 1e3,
            "p50_ms": q[0.5],
            "p99_ms": q[0.99],
            "per_client_mb_per_s": size_b / mean_s / 1e6,
            "report_estimate_mb_per_s": size_b / mean_s / 1e6 * clients,
            "aggregate_mb_per_s": g.size() * size_b / span_s.replace(0, np.nan) / 1e6,
        }
    )


def replica_fallbacks(run: Run) -> pd.DataFrame:
    """Table (knee's addition): per point and operation, how many index operations the
    owner's replica answered because the owner was down (distributed design), and how many
    operations found the node they needed down (status drop: no replica to fall back to,
    or an obtain from the stopped peer)."""
    return _per_point(run, ["flags", "status"], _fallbacks, where=None).reset_index()


def _fallbacks(s: pd.DataFrame) -> pd.DataFrame:
    s = s.assign(
        replica=(s["flags"].to_numpy() & FLAG_REPLICA) != 0,
        drop=s["status"].astype(str).to_numpy() == "drop",
    )
    g = _per_op(s)
    return pd.DataFrame({"count": g.size(), "replica": g["replica"].sum(), "drop": g["drop"].sum()})


def _with_parameters(run: Run, per_op: pd.DataFrame) -> pd.DataFrame:
    merged = point_parameters(run).merge(per_op, on="point")
    return merged.sort_values(["series", "peers", "operation"], ignore_index=True)


# ------------------------------------------------------------------ lines and findings


def design_label(df: pd.DataFrame) -> pd.Series:
    """ "distributed" or "central (index)" per row."""
    central = "central (" + df["index"].astype(str) + ")"
    return central.where(df["design"] == "central", df["design"].astype(str))


def operations_present(df: pd.DataFrame) -> list[str]:
    """The operations in the data, in the order a client runs its phases."""
    return [op for op in PHASES if op in set(df["operation"])]


@dataclass
class Line:
    """One line of a figure: points that differ only in the figure's x."""

    design: str  # design_label
    #: The keys that tell it from the other lines of its design ([]: only its series does);
    #: None when it is its design's only line.
    distinct: list[str] | None
    frame: pd.DataFrame  # its rows, sorted by x


def lines(df: pd.DataFrame, keys: list[str], x: str) -> list[Line]:
    """The lines of a figure over `x`: points grouped by `keys` (what must be equal along a
    line), leaving out series that vary a key (they sweep something else: another figure's
    experiment) so share-sizes' one-size series join its swept one. A group with an x value
    twice is split by series. A line needs two or more x values."""
    per_point = df.drop_duplicates("point")
    varying = per_point.groupby("series", observed=True)[keys].nunique(dropna=False).max(axis=1)
    df = df[~df["series"].isin(varying[varying > 1].index)]
    df = df.assign(design_label=design_label(df))
    groups: list[pd.DataFrame] = []
    for _, g in df.groupby(keys, sort=False, dropna=False):
        split = g[x].duplicated().any()
        parts = [s for _, s in g.groupby("series", sort=False)] if split else [g]
        groups += [s.sort_values(x) for s in parts if s[x].nunique() > 1]
    designs = [str(g["design_label"].iloc[0]) for g in groups]
    out = []
    for design, g in zip(designs, groups, strict=True):
        same = [h for n, h in zip(designs, groups, strict=True) if n == design]
        distinct = None
        if len(same) > 1:
            distinct = [k for k in keys if len({h[k].iloc[0] for h in same}) > 1]
        out.append(Line(design, distinct, g))
    return out


class NodesSummary(TypedDict):
    """`nodes_summary`: a line's fewest and most peers."""

    first_peers: int
    first_ms: float
    last_peers: int
    last_ms: float
    ratio: float
    files: int
    all_files_ms: float  # NaN where the point did not time all its files


class SizeSummary(TypedDict):
    """`size_summary`: a line's smallest and largest file."""

    peers: int
    first_bytes: int
    first_ms: float
    first_mb_per_s: float
    last_bytes: int
    last_ms: float
    last_mb_per_s: float
    step: tuple[int, float, float]  # (the smaller size, size ratio, mean ratio)
    peak_mb_per_s: float
    peak_bytes: int


class DesignOps(TypedDict):
    """`ops_by_design`: one design's case, its rows by operation."""

    design: str
    point: int
    peers: int
    file_bytes: int
    by_operation: pd.DataFrame


class ReplicaSummary(TypedDict):
    """`replica_summary`: the distributed design's fallbacks."""

    fallbacks: pd.DataFrame
    timeline: list[TimelineEvent]
    replica: int
    index_operations: int
    drops: int
    by_operation: dict[str, int]


def nodes_summary(line: pd.DataFrame) -> NodesSummary:
    """A line (`Line.frame`) of `response_time_vs_nodes` from its fewest to its most peers:
    the mean at both, their ratio, and (register) the time for all files at the most."""
    first, last = line.iloc[0], line.iloc[-1]
    return {
        "first_peers": first["peers"],
        "first_ms": first["mean_ms"],
        "last_peers": last["peers"],
        "last_ms": last["mean_ms"],
        "ratio": last["mean_ms"] / first["mean_ms"],
        "files": last["files"],
        "all_files_ms": last["all_files_ms"],
    }


def design_growth(times: pd.DataFrame) -> list[tuple[str, int, int]]:
    """Per central index design: for how many operations its mean grew more than the
    distributed index's from the fewest to the most peers, of the operations both measured
    over more than one peer count: (design, count, operations). [] without a distributed
    design."""
    df = times.assign(design_label=design_label(times))
    g = df.sort_values("peers").groupby(["operation", "design_label"], sort=False)
    spans = g["peers"].agg(["min", "max"])
    ratio = (g["mean_ms"].last() / g["mean_ms"].first()).where(spans["max"] > spans["min"])
    ratio = ratio.dropna().unstack()
    if "distributed" not in ratio.columns:
        return []
    out = []
    for c in [c for c in ratio.columns if c.startswith("central")]:
        both = ratio[[c, "distributed"]].dropna()
        if not both.empty:
            out.append((c, int((both[c] > both["distributed"]).sum()), len(both)))
    return out


def size_summary(g: pd.DataFrame) -> SizeSummary:
    """A line (`Line.frame`) of `obtain_vs_file_size` from its smallest to its largest file:
    the mean obtain time and measured aggregate MB/s at both, the step between its two
    largest sizes (the smaller size, size ratio, mean ratio), and the peak aggregate MB/s
    with its size."""
    first, last = g.iloc[0], g.iloc[-1]
    a = g.iloc[-2]
    peak = g["aggregate_mb_per_s"].idxmax()
    return {
        "peers": last["peers"],
        "first_bytes": first["file_bytes"],
        "first_ms": first["mean_ms"],
        "first_mb_per_s": first["aggregate_mb_per_s"],
        "last_bytes": last["file_bytes"],
        "last_ms": last["mean_ms"],
        "last_mb_per_s": last["aggregate_mb_per_s"],
        "step": (
            a["file_bytes"],
            last["file_bytes"] / a["file_bytes"],
            last["mean_ms"] / a["mean_ms"],
        ),
        "peak_mb_per_s": g["aggregate_mb_per_s"].max(),
        "peak_bytes": g.loc[peak, "file_bytes"],
    }


def ops_by_design(rates: pd.DataFrame) -> list[DesignOps]:
    """From `ops_per_second`: per design, its point with the most peers and the smallest
    files (the report's case), with that point's rows by operation (in phase order)."""
    rates = rates.assign(design_label=design_label(rates))
    best = rates.sort_values(["peers", "file_bytes"], ascending=[False, True])
    chosen = best.groupby("design_label", sort=False)["point"].first()
    ops = operations_present(rates)
    out: list[DesignOps] = []
    for design, point in chosen.items():
        rows = rates[rates["point"] == point]
        first = rows.iloc[0]
        out.append(
            {
                "design": design,
                "point": point,
                "peers": first["peers"],
                "file_bytes": first["file_bytes"],
                "by_operation": rows.set_index("operation").reindex(ops),
            }
        )
    return out


def replica_summary(run: Run) -> ReplicaSummary | None:
    """The distributed design's fallbacks: `fallbacks` (`replica_fallbacks` of its points),
    the spec's event `timeline`, how many index operations (not obtains) a replica answered
    of how many (`replica`, `index_operations`), those per operation (non-zero), and how many
    operations found their node down (`drops`). None without distributed points."""
    params = point_parameters(run)
    distributed = set(params.loc[params["design"] == "distributed", "point"])
    fb = replica_fallbacks(run)
    fb = fb[fb["point"].isin(distributed)]
    if fb.empty:
        return None
    index_ops = fb[fb["operation"] != "obtain"]
    by_op = index_ops.groupby("operation")["replica"].sum()
    return {
        "fallbacks": fb,
        "timeline": timeline(run),
        "replica": int(index_ops["replica"].sum()),
        "index_operations": int(index_ops["count"].sum()),
        "drops": int(fb["drop"].sum()),
        "by_operation": {str(op): int(n) for op, n in by_op.items() if n},
    }
