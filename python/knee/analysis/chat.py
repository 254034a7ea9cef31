"""The data of chat's figures and tables (report 001), computed from a run directory.

Every function takes a ``knee.results.Run`` and returns a DataFrame or a dict; latencies are
in ms. The latency of a request splits into database (``detail_ns``: the transaction, as the
replica measured it), server (the rest of the replica's residence) and network and
middleware (round trip minus residence). Warm-up samples are left out everywhere except the
failover time line.

Percentiles are knee's order statistic (`knee.stats.quantiles`: x_(ceil(n q)), the value
summary.json gives), and "the top 1%" is `knee.stats.tail`'s slowest 1%: of a point's n OK
requests, the floor(n/100) ranked above its p99.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from knee.contract import CHAT_WRITE_OPS as WRITE_OPS
from knee.results import Run
from knee.stats.quantiles import order_statistics
from knee.stats.tail import top_mask_by

CONFIG = ("think_ms", "reply_bytes", "clients")
#: The magic-1% rule holds for a configuration when leaving out its highest 1% at least
#: divides the standard deviation by this factor (the spread is in the 1%, the rest is
#: predictable).
MAGIC_STD_FACTOR = 2.0
_MS = 1e6


def _ok(run: Run) -> pd.DataFrame:
    s = run.samples
    return s[(s["status"] == "ok") & ~s["warmup"]]


def configurations(run: Run) -> pd.DataFrame:
    """One row per point: its configuration (inter-request time, reply size, clients) and its
    latency statistics. The table behind every sweep figure."""
    base = {
        "think_ms": run.spec.get("load", {}).get("think_ms"),
        "reply_bytes": run.spec.get("driver", {}).get("reply_bytes"),
        "clients": run.spec.get("load", {}).get("clients"),
    }
    rows = []
    for p in run.points:
        swept = {k.partition(".")[2]: v for k, v in p.get("swept", {}).items()}
        rows.append({"point": p["point"], **base, **{k: swept[k] for k in CONFIG if k in swept}})
    cfg = pd.DataFrame(rows, columns=["point", *CONFIG])
    ok = _ok(run)
    lat = ok.groupby("point", observed=True)["latency_ns"]
    stats = pd.DataFrame(
        {
            "count": lat.size(),
            "mean_ms": lat.mean() / _MS,
            "p99_ms": order_statistics(lat, 0.99) / _MS,
            "max_ms": lat.max() / _MS,
            "db_ms": ok.groupby("point", observed=True)["detail_ns"].mean() / _MS,
            "server_ms": (ok["server_ns"] - ok["detail_ns"]).groupby(ok["point"]).mean() / _MS,
            "network_ms": ok.groupby("point", observed=True)["network_ns"].mean() / _MS,
        }
    )
    span_s = ok.groupby("point", observed=True)["received_ns"].agg(np.ptp) / 1e9
    stats["throughput_per_s"] = stats["count"] / span_s.where(span_s > 0)
    return cfg.merge(stats, left_on="point", right_index=True, how="left")


def latency_vs_clients(run: Run) -> pd.DataFrame:
    """Figure 1, "line plots of latency for increasing number of clients and different reply
    sizes (no pause)": mean latency by clients, one column per reply size, think time 0."""
    c = configurations(run)
    c = c[c["think_ms"] == 0]
    return c.pivot_table(index="clients", columns="reply_bytes", values="mean_ms")


def latency_area(run: Run) -> pd.DataFrame:
    """Figure 2, "area plots of (mean, max) latency and (mean, 99%) latency, sorted by
    increasing mean values": one row per configuration in order of its mean."""
    c = configurations(run).sort_values("mean_ms", kind="stable").reset_index(drop=True)
    c.insert(0, "rank", np.arange(len(c)))
    return c[["rank", "point", *CONFIG, "mean_ms", "p99_ms", "max_ms"]]


def breakdown(run: Run, by: str = "clients") -> pd.DataFrame:
    """Figure 3, "bar graphs of latency component break-down for outliers and normal
    requests": mean database / server / network-and-middleware ms of the top 1% (outliers:
    each point's slowest 1%, `knee.stats.tail`) and of the rest, by clients (0 ms, 1024 B,
    as the report) or by reply size (0 ms, 10 clients; ``by="reply_bytes"``)."""
    c = configurations(run)
    fixed = {
        "clients": ("reply_bytes", c["reply_bytes"].max()),
        "reply_bytes": ("clients", c["clients"].max()),
    }
    key, value = fixed[by]
    chosen = c[(c["think_ms"] == 0) & (c[key] == value)][["point", by]]
    ok = _ok(run).merge(chosen, on="point")
    top = top_mask_by(ok.groupby("point")["latency_ns"])
    ok = ok.assign(
        kind=np.where(top, "outlier", "normal"),
        db_ms=ok["detail_ns"] / _MS,
        server_ms=(ok["server_ns"] - ok["detail_ns"]) / _MS,
        network_ms=ok["network_ns"] / _MS,
    )
    return ok.groupby([by, "kind"])[["db_ms", "server_ms", "network_ms"]].mean().reset_index()


def reply_rate_scatter(run: Run) -> pd.DataFrame:
    """Figure 4, "3D scatter plots of reply size and request rate impact on max and 99%
    latency": one point per configuration."""
    c = configurations(run)
    return c[["point", "reply_bytes", "throughput_per_s", "max_ms", "p99_ms"]]


def latency_vs_throughput(run: Run) -> pd.DataFrame:
    """Figure 5, "latency vs. throughput": mean latency against completed requests/s."""
    c = configurations(run).sort_values("throughput_per_s")
    return c[["point", *CONFIG, "throughput_per_s", "mean_ms", "p99_ms"]]


def magic_one_percent(run: Run) -> pd.DataFrame:
    """The magic-1% table (Dumitras & Narasimhan): per configuration, latency with and
    without its highest 1% (`knee.stats.tail`'s slowest 1%: the floor(n/100) OK requests
    ranked above the point's p99), and how much of the total latency and of the spread that 1%
    carries. "Bounded without it" shows as max_without_ms close to p99_ms; ``holds`` says
    whether leaving out the 1% divides the standard deviation by ``MAGIC_STD_FACTOR``."""
    ok = _ok(run)
    g = ok.groupby("point")["latency_ns"]
    in_top = top_mask_by(g)
    rest = ok[~in_top].groupby("point")["latency_ns"]
    top = ok[in_top].groupby("point")["latency_ns"]
    t = pd.DataFrame(
        {
            "mean_ms": g.mean() / _MS,
            "std_ms": g.std() / _MS,
            "max_ms": g.max() / _MS,
            "mean_without_ms": rest.mean() / _MS,
            "std_without_ms": rest.std() / _MS,
            "max_without_ms": rest.max() / _MS,
            "top_share_of_time": top.sum().reindex(g.sum().index, fill_value=0) / g.sum(),
            "top_count": top.size().reindex(g.sum().index, fill_value=0),
            "top_db_ms": ok[in_top].groupby("point")["detail_ns"].mean() / _MS,
        }
    )
    t["holds"] = t["std_ms"] >= MAGIC_STD_FACTOR * t["std_without_ms"]
    return configurations(run)[["point", *CONFIG]].merge(t, left_on="point", right_index=True)


# ------------------------------------------------------------------------------- failover


def failover_timeline(run: Run, point: int = 0) -> dict[str, Any]:
    """Figure: latency over time with the kill marked. ``samples`` has each request's intended
    send time (s since the run's start), latency (ms), status and the replica that answered;
    ``events`` the kill/stop/start times (s)."""
    s = run.samples[run.samples["point"] == point]
    frame = pd.DataFrame(
        {
            "t_s": s["intended_ns"] / 1e9,
            "latency_ms": s["latency_ns"] / _MS,
            "status": s["status"].astype(str),
            "replica": s["service"],
            "attempts": s["arg"],
        }
    ).sort_values("t_s")
    e = run.events
    marks = e[(e["point"] == point) & e["kind"].isin(["kill", "stop", "start"])]
    return {"samples": frame, "events": marks[["t_s", "kind", "node"]].reset_index(drop=True)}


def failover_gap_ms(run: Run, point: int = 0) -> float | None:
    """The unavailability gap: the longest time without any successful reply, around the
    first kill or stop of the point (None if the point had none)."""
    e = run.events
    kills = e[(e["point"] == point) & e["kind"].isin(["kill", "stop"])]
    if kills.empty:
        return None
    s = run.samples
    t = np.sort(s[(s["point"] == point) & (s["status"] == "ok")]["received_ns"].to_numpy()) / 1e9
    kill_s = float(kills["t_s"].iloc[0])
    gaps = np.diff(t)
    around = (t[1:] >= kill_s) & (t[:-1] <= kill_s + 60)
    return float(gaps[around].max() * 1e3) if around.any() else None


def failover_integrity(run: Run, point: int = 0) -> dict[str, int]:
    """Operations lost and applied twice, checked against the database: every write the
    clients saw acknowledged must appear exactly once in the database's operation log (the
    load node's end-of-run audit, ``raw/pNNN-<node>.audit.csv``). Both must be 0."""
    s = run.samples
    acked = s[(s["point"] == point) & (s["status"] == "ok") & s["op"].isin(WRITE_OPS)]
    audits = []
    for path in sorted(run.path.glob(f"raw/p{point:03d}-*.audit.csv")):
        a = pd.read_csv(path)
        a["node"] = path.name.split("-", 1)[1].removesuffix(".audit.csv")
        audits.append(a)
    if not audits:
        raise FileNotFoundError(f"{run.path}/raw: no audit of point {point}")
    audit = pd.concat(audits, ignore_index=True)
    keys = ["node", "client", "request_id"]
    joined = acked[keys].astype({"node": str}).merge(audit, on=keys, how="left")
    return {
        "acknowledged_writes": len(acked),
        "applied_writes": int(audit["applied"].sum()),
        "lost": int(joined["applied"].isna().sum()),
        "applied_twice": int((audit["applied"] > 1).sum()),
    }
