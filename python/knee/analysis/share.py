"""share (report 002): the data of the report's figures, computed from a run.

Every function takes a run (`knee.open_run(path)`) of one of the share experiments
(experiments/share-*.toml) and returns a DataFrame, one row per (point, operation), with
the point's parameters (series, design, index, peers, file_bytes) as columns. Warm-up and
unsuccessful samples are left out of latencies; counts of each status are kept. Percentiles
are knee's order statistic x_(ceil(n q)) (`knee.stats.quantiles`), as in summary.json.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from knee.contract import SHARE_FLAG_REPLICA as FLAG_REPLICA
from knee.contract import SHARE_OPS as OPS
from knee.results import Run
from knee.stats.quantiles import order_statistics

PARAMS = ("design", "index", "peers", "files", "file_bytes")


def point_parameters(run: Run) -> pd.DataFrame:
    """One row per point: its series and the share server parameters it ran with."""
    base = run.spec.get("server", {})
    series = run.spec.get("series", {})
    rows = []
    for p in run.points:
        server: dict[str, Any] = {**base, **series.get(p["series"], {}).get("server", {})}
        server.update(
            {k.partition(".")[2]: v for k, v in p["swept"].items() if k.startswith("server.")}
        )
        values = {k: server.get(k) for k in PARAMS}
        rows.append({"point": p["point"], "series": p["series"], **values})
    return pd.DataFrame(rows)


def _ok(run: Run) -> pd.DataFrame:
    s = run.samples
    s = s[~s["warmup"] & (s["status"].astype(str) == "ok")]
    return s.assign(operation=s["op"].map(OPS))


def _per_op(df: pd.DataFrame) -> pd.core.groupby.DataFrameGroupBy:
    return df.groupby(["point", "operation"], observed=True)


def response_time_vs_nodes(run: Run) -> pd.DataFrame:
    """Figures "response time vs nodes" for register, search and obtain (report part 1,
    distributed design; part 3, centralized design): per point and operation, the mean and
    quantiles of the response time in ms, with the number of peers. Per operation, where the
    report plotted register as the time for all 50 files (its 35 ms = 50 x 0.7 ms)."""
    g = _per_op(_ok(run))["latency_ns"]
    q = order_statistics(g, [0.5, 0.99]) / 1e6
    out = pd.DataFrame(
        {
            "count": g.size(),
            "mean_ms": g.mean() / 1e6,
            "p50_ms": q[0.5],
            "p99_ms": q[0.99],
        }
    ).reset_index()
    return _with_parameters(run, out)


def ops_per_second(run: Run) -> pd.DataFrame:
    """The report's operations per second per operation: per client, 1000 / mean response
    time in ms (the report's 2,611 searches/s = 1000 / 0.383 ms), the report's aggregate
    (that times the clients) and the measured aggregate (operations over the span they
    took)."""
    ok = _ok(run)
    g = _per_op(ok)
    span_s = (g["received_ns"].max() - g["sent_ns"].min()) / 1e9
    per_client = 1e9 / g["latency_ns"].mean()
    clients = g["client"].nunique()
    out = pd.DataFrame(
        {
            "count": g.size(),
            "clients": clients,
            "per_client_per_s": per_client,
            "report_estimate_per_s": per_client * clients,
            "aggregate_per_s": g.size() / span_s.replace(0, np.nan),
        }
    ).reset_index()
    return _with_parameters(run, out)


def obtain_vs_file_size(run: Run) -> pd.DataFrame:
    """Figures "obtain time vs file size" and the aggregate throughput table (report part
    2: 10.3 MBps at 1 KB to ~550 MBps at 10 MB-1 GB for 8 clients): per point, the mean and
    quantiles of the obtain time, the report's estimate (file size / mean time x clients)
    and the measured aggregate MB/s (bytes downloaded over the span the obtains took)."""
    ok = _ok(run)
    obtains = ok[ok["operation"] == "obtain"]
    g = obtains.groupby("point")
    span_s = (g["received_ns"].max() - g["sent_ns"].min()) / 1e9
    params = point_parameters(run).set_index("point")
    size_b = params["file_bytes"].reindex(g.size().index).astype(float)
    clients = g["client"].nunique()
    mean_s = g["latency_ns"].mean() / 1e9
    q = order_statistics(g["latency_ns"], [0.5, 0.99]) / 1e6
    out = pd.DataFrame(
        {
            "count": g.size(),
            "mean_ms": mean_s * 1e3,
            "p50_ms": q[0.5],
            "p99_ms": q[0.99],
            "per_client_mb_per_s": size_b / mean_s / 1e6,
            "report_estimate_mb_per_s": size_b / mean_s / 1e6 * clients,
            "aggregate_mb_per_s": g.size() * size_b / span_s.replace(0, np.nan) / 1e6,
        }
    ).reset_index()
    return params.reset_index().merge(out, on="point").sort_values("file_bytes")


def replica_fallbacks(run: Run) -> pd.DataFrame:
    """Table (knee's addition): per point and operation, how many index operations the
    owner's replica answered because the owner was down (distributed design), and how many
    operations found the node they needed down (status drop: no replica to fall back to,
    or an obtain from the stopped peer)."""
    s = run.samples
    s = s.assign(
        operation=s["op"].map(OPS),
        replica=(s["flags"].to_numpy() & FLAG_REPLICA) != 0,
        drop=s["status"].astype(str).to_numpy() == "drop",
    )
    g = _per_op(s)
    out = pd.DataFrame({"count": g.size(), "replica": g["replica"].sum(), "drop": g["drop"].sum()})
    return out.reset_index()


def _with_parameters(run: Run, per_op: pd.DataFrame) -> pd.DataFrame:
    merged = point_parameters(run).merge(per_op, on="point")
    return merged.sort_values(["series", "peers", "operation"], ignore_index=True)
