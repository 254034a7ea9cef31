"""The data of chat's figures and tables (report 001), computed from a run directory.

Every function takes a ``knee.results.Run`` and returns a DataFrame or a dict; latencies are
in ms. The latency of a request splits into database (``detail_ns``: the transaction, as the
replica measured it), server (the rest of the replica's residence) and network and
middleware (round trip minus residence). Warm-up samples are left out everywhere except the
failover time line.

Percentiles are knee's order statistic (`knee.stats.quantiles`: x_(ceil(n q)), the value
summary.json gives), and "the top 1%" is `knee.stats.tail`'s slowest 1%: of a point's n OK
requests, the floor(n/100) ranked above its p99.

A point's configuration (think time, reply size, clients) is what the run directory records
it ran with (`knee.run_params`: swept, series override or top level alike). The functions
under "findings" give the numbers the report's findings state; the report only words them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypedDict

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from knee.contract import CHAT_WRITE_OPS as WRITE_OPS
from knee.results import Run
from knee.run_params import point_params, setting
from knee.stats.quantiles import above, order_statistics
from knee.stats.tail import top_mask_by

#: A configuration's parameters, and where each is in a point's sections.
CONFIG_KEYS = {
    "think_ms": "load.think_ms",
    "reply_bytes": "driver.reply_bytes",
    "clients": "load.clients",
}
CONFIG = tuple(CONFIG_KEYS)
#: The magic-1% rule holds for a configuration when leaving out its highest 1% at least
#: divides the standard deviation by this factor (the spread is in the 1%, the rest is
#: predictable).
MAGIC_STD_FACTOR = 2.0
#: Below this many OK requests a point has no slowest 1% (floor(n/100) = 0): no verdict.
MAGIC_MIN_REQUESTS = 100
#: Timeline events that take a replica down, and all those marked on the timeline.
DOWN_EVENTS = ("kill", "stop", "freeze")
TIMELINE_EVENTS = ("kill", "stop", "start", "freeze", "resume")
_MS = 1e6


#: The samples of the sweep's figures: successful requests after the warm-up.
_OK = (pc.field("status") == "ok") & ~pc.field("warmup")


def _per_point(
    run: Run, columns: Sequence[str], table: Callable[[pd.DataFrame], pd.DataFrame]
) -> pd.DataFrame:
    """`table` of each point's successful post-warm-up samples (`columns` and the point),
    one point in memory at a time, the points' rows one under the other; `table` of no
    samples when no point has any."""
    parts, none = [], None
    for _, ok in run.iter_points(["point", *columns], _OK):
        if len(ok):
            parts.append(table(ok))
        else:
            none = ok
    if not parts:
        return table(none if none is not None else pd.DataFrame(columns=["point", *columns]))
    return pd.concat(parts)


def configurations(run: Run) -> pd.DataFrame:
    """One row per point: its configuration (inter-request time, reply size, clients) as it
    ran, and its latency statistics. The table behind every sweep figure."""
    params = point_params(run)
    rows = [
        {
            "point": p["point"],
            **{name: setting(params.get(p["point"]), key) for name, key in CONFIG_KEYS.items()},
        }
        for p in run.points
    ]
    cfg = pd.DataFrame(rows, columns=["point", *CONFIG])
    columns = ["latency_ns", "detail_ns", "server_ns", "network_ns", "received_ns"]
    stats = _per_point(run, columns, _latency_stats)
    return cfg.merge(stats, left_on="point", right_index=True, how="left")


def _latency_stats(ok: pd.DataFrame) -> pd.DataFrame:
    """`configurations`' latency statistics of OK samples, one row per point."""
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
    return stats


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
    key, value = breakdown_fixed(c)[by]
    chosen = c[(c["think_ms"] == 0) & (c[key] == value)][["point", by]]
    parts = ["db_ms", "server_ms", "network_ms"]
    columns = ["point", "latency_ns", "detail_ns", "server_ns", "network_ns"]
    sums = []  # per chosen point, its sums and counts by kind
    for point, value in zip(chosen["point"], chosen[by], strict=True):
        ok = run.point_samples(int(point), columns, _OK)
        if not len(ok):
            continue
        top = top_mask_by(ok.groupby("point")["latency_ns"])
        ok = ok.assign(
            **{by: value},
            kind=np.where(top, "outlier", "normal"),
            db_ms=ok["detail_ns"] / _MS,
            server_ms=(ok["server_ns"] - ok["detail_ns"]) / _MS,
            network_ms=ok["network_ns"] / _MS,
        )
        sums.append(ok.groupby([by, "kind"])[parts].agg(["sum", "count"]))
    if not sums:
        empty = {by: pd.Series(dtype=chosen[by].dtype), "kind": pd.Series(dtype="str")}
        return pd.DataFrame({**empty, **{p: pd.Series(dtype=float) for p in parts}})
    # The mean over the requests of every point with the same `by`: sums and counts added up.
    total = pd.concat(sums).groupby(level=[by, "kind"]).sum()
    means = {p: total[(p, "sum")] / total[(p, "count")] for p in parts}
    out = pd.DataFrame(means, index=total.index).reset_index()
    return out.astype({by: chosen[by].dtype})  # as the configurations hold it


def breakdown_fixed(cfg: pd.DataFrame) -> dict[str, tuple[str, Any]]:
    """What `breakdown` holds fixed for each `by`: (the other parameter, its value): the
    largest reply size along clients, the most clients along reply sizes (no pause both)."""
    return {
        "clients": ("reply_bytes", cfg["reply_bytes"].max()),
        "reply_bytes": ("clients", cfg["clients"].max()),
    }


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
    whether leaving out the 1% divides the standard deviation by ``MAGIC_STD_FACTOR``
    (meaningful from ``MAGIC_MIN_REQUESTS`` requests: `count`)."""
    t = _per_point(run, ["latency_ns", "detail_ns"], _magic_stats)
    return configurations(run)[["point", *CONFIG]].merge(t, left_on="point", right_index=True)


def _magic_stats(ok: pd.DataFrame) -> pd.DataFrame:
    """`magic_one_percent`'s statistics of OK samples, one row per point."""
    g = ok.groupby("point")["latency_ns"]
    in_top = top_mask_by(g)
    rest = ok[~in_top].groupby("point")["latency_ns"]
    top = ok[in_top].groupby("point")["latency_ns"]
    t = pd.DataFrame(
        {
            "count": g.size(),
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
    return t


# ------------------------------------------------------------------------------- failover


class Timeline(TypedDict):
    """`failover_timeline`: the samples to draw and the kill/stop/start marks."""

    samples: pd.DataFrame
    events: pd.DataFrame


class Down(TypedDict):
    kind: str
    node: str
    t_s: float


class FailoverSummary(TypedDict):
    """`failover_summary`: what the failover verdict of one point states."""

    integrity: dict[str, int] | None
    missing: str
    passed: bool
    gap_ms: float | None
    down: Down
    requests: int
    retried: int
    failed: int
    most_attempts: int
    served_by: list[int]
    timeline: Timeline


class ClientsLine(TypedDict):
    """`latency_vs_clients_summary`: one reply size's ends."""

    reply_bytes: int
    first_clients: int
    first_ms: float
    last_clients: int
    last_ms: float
    fell: bool


class AreaSummary(TypedDict):
    ratio: tuple[float, float]
    widest: int


class BreakdownSummary(TypedDict):
    """`breakdown_summary`: (value of `by`, network ms) at both ends, and the rest."""

    first: tuple[float, float]
    last: tuple[float, float]
    grows: bool
    db_share_of_top: float


class MagicSummary(TypedDict):
    held: int
    judged: int
    top_share_of_time: tuple[float, float]
    max_over_max_without: tuple[float, float]
    smallest_top_count: int


def failover_timeline(run: Run, point: int = 0) -> Timeline:
    """Figure: latency over time with the kill marked. ``samples`` has each request's intended
    send time (s since the run's start), latency (ms), status and the replica that answered;
    ``events`` the kill/stop/start times (s)."""
    s = run.point_samples(point, ["intended_ns", "latency_ns", "status", "service", "attempts"])
    frame = pd.DataFrame(
        {
            "t_s": s["intended_ns"] / 1e9,
            "latency_ms": s["latency_ns"] / _MS,
            "status": s["status"].astype(str),
            "replica": s["service"],
            "attempts": s["attempts"],
        }
    ).sort_values("t_s")
    e = run.events
    marks = e[(e["point"] == point) & e["kind"].isin(TIMELINE_EVENTS)]
    return {"samples": frame, "events": marks[["t_s", "kind", "node"]].reset_index(drop=True)}


def failover_gap_ms(run: Run, point: int = 0) -> float | None:
    """The unavailability gap: the longest time without any successful reply, around the
    first kill or stop of the point (None if the point had none)."""
    e = run.events
    kills = e[(e["point"] == point) & e["kind"].isin(DOWN_EVENTS)]
    if kills.empty:
        return None
    ok = run.point_samples(point, ["received_ns"], pc.field("status") == "ok")
    t = np.sort(ok["received_ns"].to_numpy()) / 1e9
    kill_s = float(kills["t_s"].iloc[0])
    gaps = np.diff(t)
    around = (t[1:] >= kill_s) & (t[:-1] <= kill_s + 60)
    return float(gaps[around].max() * 1e3) if around.any() else None


def failover_integrity(run: Run, point: int = 0) -> dict[str, int]:
    """Operations lost and applied twice, checked against the database: every write the
    clients saw acknowledged must appear exactly once in the database's operation log (the
    load node's end-of-run audit, ``raw/pNNN-<node>.audit.csv``). Both must be 0."""
    keys = ["node", "client", "request_id"]
    acked = run.point_samples(
        point, keys, (pc.field("status") == "ok") & pc.field("op").isin(list(WRITE_OPS))
    )
    audits = []
    for path in sorted(run.path.glob(f"raw/p{point:03d}-*.audit.csv")):
        a = pd.read_csv(path)
        a["node"] = path.name.split("-", 1)[1].removesuffix(".audit.csv")
        audits.append(a)
    if not audits:
        raise FileNotFoundError(f"{run.path}/raw: no audit of point {point}")
    audit = pd.concat(audits, ignore_index=True)
    joined = acked[keys].astype({"node": str}).merge(audit, on=keys, how="left")
    return {
        "acknowledged_writes": len(acked),
        "applied_writes": int(audit["applied"].sum()),
        "lost": int(joined["applied"].isna().sum()),
        "applied_twice": int((audit["applied"] > 1).sum()),
    }


# ------------------------------------------------------------------------------- findings


def failover_points(run: Run) -> list[int]:
    """The points in which a replica was killed or stopped."""
    e = run.events
    if e.empty:
        return []
    return sorted(int(p) for p in e[e["kind"].isin(DOWN_EVENTS)]["point"].unique())


def failover_summary(run: Run, point: int) -> FailoverSummary:
    """Everything the failover verdict of one point states: `integrity`
    (`failover_integrity`, None when the audit is missing: `missing` says why), `passed`
    (nothing lost, nothing applied twice), `gap_ms`, the first kill or stop (`down`: kind,
    node, t_s), the requests, those retried and failed, the most attempts one took, the
    replicas that answered, and the `timeline` (`failover_timeline`)."""
    try:
        integrity: dict[str, int] | None = failover_integrity(run, point)
        missing = ""
    except FileNotFoundError as e:
        integrity, missing = None, str(e)
    timeline = failover_timeline(run, point)
    frame, events = timeline["samples"], timeline["events"]
    down = events[events["kind"].isin(DOWN_EVENTS)].iloc[0]
    ok = frame["status"] == "ok"
    return {
        "integrity": integrity,
        "missing": missing,
        "passed": integrity is not None
        and integrity["lost"] == 0
        and integrity["applied_twice"] == 0,
        "gap_ms": failover_gap_ms(run, point),
        "down": {"kind": str(down["kind"]), "node": str(down["node"]), "t_s": float(down["t_s"])},
        "requests": len(frame),
        "retried": int((frame["attempts"] > 1).sum()),
        "failed": int((~ok).sum()),
        "most_attempts": int(frame["attempts"].max()) if len(frame) else 0,
        "served_by": sorted(int(r) for r in frame.loc[ok, "replica"].unique()),
        "timeline": timeline,
    }


def thin_timeline(frame: pd.DataFrame, most: int) -> pd.DataFrame:
    """At most about `most` rows of `failover_timeline`'s samples to draw: every one ranked
    above the p99 (the slowest 1%, `knee.stats.quantiles.above`), and an even sample of the
    rest."""
    if len(frame) <= most:
        return frame
    slow = above(frame["latency_ms"].to_numpy(), 0.99)
    stride = int(np.ceil(len(frame) / most))
    even = np.zeros(len(frame), dtype=bool)
    even[::stride] = True
    return frame[slow | even]


def measured_configurations(run: Run) -> pd.DataFrame:
    """`configurations` of the points with at least one OK request after warm-up."""
    cfg = configurations(run)
    return cfg[cfg["count"].fillna(0) > 0]


def latency_vs_clients_summary(table: pd.DataFrame) -> list[ClientsLine]:
    """Per reply size (column) of `latency_vs_clients`: the mean at the fewest and the most
    clients, and whether adding clients lowered the mean anywhere (`fell`)."""
    clients = [int(c) for c in table.index]
    out: list[ClientsLine] = []
    for reply in table.columns:
        ys = table[reply].to_numpy(dtype=float)
        out.append(
            {
                "reply_bytes": int(reply),
                "first_clients": clients[0],
                "first_ms": float(ys[0]),
                "last_clients": clients[-1],
                "last_ms": float(ys[-1]),
                "fell": bool((np.diff(ys) < 0).any()),
            }
        )
    return out


def area_summary(area: pd.DataFrame, key: str) -> AreaSummary:
    """For `latency_area` without its unmeasured rows and `key` "max_ms" or "p99_ms": the
    range of key / mean over the configurations and the row (position) where it is widest."""
    ratio = (area[key] / area["mean_ms"]).to_numpy()
    return {
        "ratio": (float(np.nanmin(ratio)), float(np.nanmax(ratio))),
        "widest": int(np.nanargmax(ratio)),
    }


def breakdown_summary(b: pd.DataFrame, by: str) -> BreakdownSummary | None:
    """For `breakdown(run, by)`: the network-and-middleware mean of the other 99% at the
    first and last value of `by` and whether it grows at every step; the database's share of
    the top 1%'s time. None with fewer than two values of `by`."""
    if b[by].nunique() < 2:
        return None
    normal = b[b["kind"] == "normal"].sort_values(by)
    net = normal["network_ms"].to_numpy()
    top = b[b["kind"] == "outlier"]
    parts = top[["db_ms", "server_ms", "network_ms"]].sum().sum()
    return {
        "first": (normal[by].iloc[0], float(net[0])),
        "last": (normal[by].iloc[-1], float(net[-1])),
        "grows": bool(np.all(np.diff(net) > 0)),
        "db_share_of_top": float(top["db_ms"].sum() / parts),
    }


def scatter_correlations(scatter: pd.DataFrame, key: str) -> dict[str, float]:
    """Spearman's rank correlation of `key` ("max_ms" or "p99_ms") of `reply_rate_scatter`
    with the request rate and with the reply size (NaN when one of them is constant)."""
    return {
        "rate": float(scatter[key].corr(scatter["throughput_per_s"], method="spearman")),
        "reply": float(scatter[key].corr(scatter["reply_bytes"], method="spearman")),
    }


def highest_throughput(table: pd.DataFrame) -> int:
    """The row (position) of `latency_vs_throughput` with the highest throughput."""
    return int(np.argmax(table["throughput_per_s"].to_numpy()))


def magic_summary(magic: pd.DataFrame) -> MagicSummary:
    """For `magic_one_percent`'s measured rows: in how many of the configurations with at
    least MAGIC_MIN_REQUESTS requests the rule holds (`held`, `judged`), the range of the top
    1%'s share of the total latency and of max / max without it, and the size of the smallest
    configuration's top 1%."""
    judged = magic[magic["count"] >= MAGIC_MIN_REQUESTS]
    share = magic["top_share_of_time"]
    fall = magic["max_ms"] / magic["max_without_ms"]
    return {
        "held": int(judged["holds"].sum()),
        "judged": len(judged),
        "top_share_of_time": (float(share.min()), float(share.max())),
        "max_over_max_without": (float(fall.min()), float(fall.max())),
        "smallest_top_count": int(magic["top_count"].min()),
    }
