"""The data of matrix's findings and figures (report 004), from a run directory.

Every function takes a `knee.results.Run` of a matrix experiment (experiments/matrix.toml or
a user's own) and reads only what the run directory holds: summary.json's points and the
resolved spec.toml. Series are recognised by what they sweep and how their server is set,
not by name (`roles`), so a user's own matrix spec gets the findings its data supports.

Means are of the successful requests (`latency_ok_ns`, or `latency_ns` in a summary that has
only that); latencies are in ms, compute (service) times in ns, as summary.json has them.
Missing values are NaN in the tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from knee import run_params
from knee.config_values import ConfigTable, integer
from knee.results import Run
from knee.stats.summary import Distribution, PointStats

#: A point whose mean latency exceeds this multiple of the lowest-load mean is past the
#: measured knee.
KNEE_FACTOR = 2.0
#: A thread count "helps" when it raises capacity by more than this fraction.
HELPS = 0.10
#: Server CPU below this share of what its threads could use, while saturated, means
#: other processes took the cores.
CONTENDED = 0.85
#: The same work taking more than this multiple of its shortest compute time at another
#: rate (one thread) means the cores were shared with other processes.
CONTENTION_SPREAD = 1.3


@dataclass(frozen=True)
class Roles:
    """The series that ran each of the report's experiments (None: not in this run)."""

    difficulty: str | None  # sweeps driver.p
    rate: str | None  # the M/M/1 experiment: open loop over the rate, one thread, no cache
    cache: str | None  # a rate sweep with the result cache on
    threads: str | None  # sweeps server.threads


def setting(run: Run, point: PointStats, key: str) -> Any:
    """A point's value of "section.name" (e.g. "server.threads"), as the run directory
    records it (`knee.run_params`)."""
    return run_params.setting(run_params.point_params(run).get(int(point["point"])), key)


def points_of(run: Run, series: str) -> list[PointStats]:
    return [p for p in run.points if str(p.get("series", "")) == series]


def roles(run: Run) -> Roles:
    def swept(p: PointStats) -> ConfigTable:
        return p.get("swept") or {}

    def rate_swept(p: PointStats) -> bool:
        return "load.rate_per_s" in swept(p)

    def baseline(p: PointStats) -> bool:
        return (
            rate_swept(p)
            and "server.threads" not in swept(p)
            and setting(run, p, "server.threads") == 1
            and not setting(run, p, "server.cache")
        )

    return Roles(
        difficulty=_find(run, lambda p: "driver.p" in swept(p)),
        rate=_find(run, baseline),
        cache=_find(run, lambda p: rate_swept(p) and bool(setting(run, p, "server.cache"))),
        threads=_find(run, lambda p: "server.threads" in swept(p)),
    )


def _find(run: Run, pred: Any) -> str | None:
    """The first series (in run order) whose points all satisfy pred(point)."""
    for s in dict.fromkeys(str(p.get("series", "")) for p in run.points):
        pts = points_of(run, s)
        if pts and all(pred(p) for p in pts):
            return s
    return None


def ok_latency(point: PointStats) -> Distribution | None:
    """The latency distribution of a point's successful requests (ns); None: none."""
    return point.get("latency_ok_ns") or point.get("latency_ns")


def _ms(ns: Any) -> float:
    return float(ns) / 1e6 if isinstance(ns, int | float) else np.nan


def _mean_ns(point: PointStats, dist: Literal["server_ns", "network_ns", "service_ns"]) -> float:
    found = point.get(dist)
    value = found.get("mean") if found else None
    return float(value) if isinstance(value, int | float) else np.nan


def ok_mean_ms(point: PointStats) -> float:
    """Mean latency of a point's successful requests, in ms (NaN when there is none)."""
    latency = ok_latency(point)
    return _ms(latency.get("mean") if latency else None)


# ------------------------------------------------------------------ difficulty (#1)


@dataclass(frozen=True)
class DifficultyFit:
    """Compute time against P, by least squares, and what network time did meanwhile."""

    ms_per_p: float
    intercept_ms: float
    network_min_ms: float
    network_max_ms: float
    top_p: float
    compute_share: float  # of the response time at the largest P


def difficulty(run: Run, series: str) -> pd.DataFrame:
    """Per point of a P sweep, in increasing P: point, p, response_mean_ms (successful
    requests), server_mean_ms (compute and queue), network_mean_ms."""
    rows = [
        {
            "point": p.get("point"),
            "p": (p.get("swept") or {}).get("driver.p"),
            "response_mean_ms": ok_mean_ms(p),
            "server_mean_ms": _mean_ns(p, "server_ns") / 1e6,
            "network_mean_ms": _mean_ns(p, "network_ns") / 1e6,
        }
        for p in points_of(run, series)
    ]
    table = pd.DataFrame(rows, columns=_DIFFICULTY_COLUMNS)
    table = table[pd.to_numeric(table["p"], errors="coerce").notna()]
    return table.sort_values("p", kind="stable", ignore_index=True)


_DIFFICULTY_COLUMNS = ["point", "p", "response_mean_ms", "server_mean_ms", "network_mean_ms"]


def difficulty_fit(table: pd.DataFrame) -> DifficultyFit | None:
    """The fit over `difficulty`'s table; None with fewer than two points or a point
    without server time."""
    if len(table) < 2 or table["server_mean_ms"].isna().any():
        return None
    ps = table["p"].to_numpy(dtype=float)
    server = table["server_mean_ms"].to_numpy(dtype=float)
    network = table["network_mean_ms"].to_numpy(dtype=float)
    slope, intercept = np.polyfit(ps, server, 1)
    return DifficultyFit(
        ms_per_p=float(slope),
        intercept_ms=float(intercept),
        network_min_ms=float(np.nanmin(network)),
        network_max_ms=float(np.nanmax(network)),
        top_p=float(ps[-1]),
        compute_share=float(server[-1] / (server[-1] + network[-1])),
    )


# ------------------------------------------------------------------ rate and M/M/1 (#2)


@dataclass(frozen=True)
class Contention:
    """The shortest and the longest mean compute time of the same work at two rates."""

    low_ns: float
    low_rate_per_s: float
    high_ns: float
    high_rate_per_s: float


def arrival_rate(point: PointStats) -> Any:
    """The rate requests were really sent at: achieved, else the offered (target) rate."""
    return point.get("achieved_rate_per_s") or point.get("target_rate_per_s")


def rate_curve(run: Run, series: str) -> pd.DataFrame:
    """Per point of a rate sweep, in increasing arrival rate: point, target_rate_per_s,
    rate_per_s (the achieved arrival rate, where the models put points), mean_ms
    (successful requests) and service_mean_ns (compute time per request)."""
    rows = [
        {
            "point": p.get("point"),
            "target_rate_per_s": p.get("target_rate_per_s"),
            "rate_per_s": arrival_rate(p),
            "mean_ms": ok_mean_ms(p),
            "service_mean_ns": _mean_ns(p, "service_ns"),
        }
        for p in points_of(run, series)
        if isinstance(arrival_rate(p), int | float)
    ]
    columns = ["point", "target_rate_per_s", "rate_per_s", "mean_ms", "service_mean_ns"]
    table = pd.DataFrame(rows, columns=columns).astype({"target_rate_per_s": float})
    return table.sort_values("rate_per_s", kind="stable", ignore_index=True)


def past_knee(mean_ms: pd.Series) -> int | None:
    """Position of the first mean above KNEE_FACTOR times the first (the lowest load's)."""
    past = np.flatnonzero(mean_ms.to_numpy(dtype=float) > KNEE_FACTOR * mean_ms.iloc[0])
    return int(past[0]) if len(past) else None


def contention(curve: pd.DataFrame) -> Contention | None:
    """The same work (one thread) taking very different compute times at two rates: the CPU
    was shared with other processes, so the fitted service time, and the model, are only as
    good as the quietest moment. None when the spread is within CONTENTION_SPREAD."""
    known = curve[curve["service_mean_ns"] > 0]
    if len(known) < 2:
        return None
    low = known.loc[known["service_mean_ns"].idxmin()]
    high = known.loc[known["service_mean_ns"].idxmax()]
    if high["service_mean_ns"] < CONTENTION_SPREAD * low["service_mean_ns"]:
        return None
    return Contention(
        float(low["service_mean_ns"]),
        float(low["target_rate_per_s"]),
        float(high["service_mean_ns"]),
        float(high["target_rate_per_s"]),
    )


# ------------------------------------------------------------------ cache (#3)


@dataclass(frozen=True)
class CacheHits:
    entries: Any  # the cache's size (server.cache)
    hit_ratio: float  # mean over the points (NaN: no point has one)
    hit_ratio_steady: float  # once the cache filled (each point's second half)


@dataclass(frozen=True)
class CacheGain:
    """Mean compute time per request without and with the cache (ns), over every point of
    each series, and the ratio: how much one thread's capacity grows."""

    without_ns: float
    with_ns: float

    @property
    def gain(self) -> float:
        return self.without_ns / self.with_ns


def cache_hits(run: Run, series: str) -> CacheHits:
    pts = points_of(run, series)
    caches = [p.get("cache") for p in pts]
    return CacheHits(
        setting(run, pts[0], "server.cache") if pts else None,
        _mean([c.get("hit_ratio") if c else None for c in caches]),
        _mean([c.get("hit_ratio_steady") if c else None for c in caches]),
    )


def _mean(values: list[Any]) -> float:
    known = [float(v) for v in values if isinstance(v, int | float)]
    return float(np.mean(known)) if known else np.nan


def cache_comparison(run: Run, base: str, cached: str) -> pd.DataFrame:
    """Per offered rate measured both without and with the cache: target_rate_per_s,
    without_mean_ms, with_mean_ms (successful requests)."""
    b, c = _by_target_rate(run, base), _by_target_rate(run, cached)
    rows = [
        {
            "target_rate_per_s": r,
            "without_mean_ms": ok_mean_ms(b[r]),
            "with_mean_ms": ok_mean_ms(c[r]),
        }
        for r in sorted(set(b) & set(c))
    ]
    return pd.DataFrame(rows, columns=["target_rate_per_s", "without_mean_ms", "with_mean_ms"])


def cache_gain(run: Run, base: str, cached: str) -> CacheGain | None:
    """None unless every rated point of both series has a compute time."""
    sb = [_mean_ns(p, "service_ns") for p in _by_target_rate(run, base).values()]
    sc = [_mean_ns(p, "service_ns") for p in _by_target_rate(run, cached).values()]
    if not sb or not sc or not all(v > 0 for v in [*sb, *sc]):
        return None
    return CacheGain(float(np.mean(sb)), float(np.mean(sc)))


def _by_target_rate(run: Run, series: str) -> dict[float, PointStats]:
    return {
        rate: p for p in points_of(run, series) if (rate := p.get("target_rate_per_s")) is not None
    }


# ------------------------------------------------------------------ threads (task 2.2)


def by_threads(run: Run, series: str) -> dict[int, list[PointStats]]:
    """A thread sweep's points by thread count, in increasing count."""
    out: dict[int, list[PointStats]] = {}
    for p in points_of(run, series):
        out.setdefault(integer(p["swept"], "server.threads"), []).append(p)
    return dict(sorted(out.items()))


def threads_table(run: Run, series: str) -> pd.DataFrame:
    """Per thread count, at its highest offered rate: threads, rate_per_s (offered),
    capacity_per_s (threads / mean compute time), completion_per_s (ok replies completed in
    the point's window), service_ms (mean compute time), cpu_percent (the server's; 100 =
    one core), latency_ms (mean of the successful requests)."""
    rows = []
    for threads, members in by_threads(run, series).items():
        top = max(members, key=lambda p: p.get("target_rate_per_s") or 0)
        service_ns = _mean_ns(top, "service_ns")
        cpu = ((top.get("resources") or {}).get("server") or {}).get("cpu_percent")
        rows.append(
            {
                "threads": threads,
                "rate_per_s": top.get("target_rate_per_s"),
                "capacity_per_s": threads / (service_ns / 1e9) if service_ns > 0 else np.nan,
                "completion_per_s": top.get("throughput_per_s"),
                "service_ms": service_ns / 1e6,
                "cpu_percent": cpu,
                "latency_ms": ok_mean_ms(top),
            }
        )
    columns = [
        "threads",
        "rate_per_s",
        "capacity_per_s",
        "completion_per_s",
        "service_ms",
        "cpu_percent",
        "latency_ms",
    ]
    table = pd.DataFrame(rows, columns=columns)
    return table.astype({c: float for c in columns[1:]})


def threads_stop(capacity_per_s: pd.Series) -> int:
    """Position of the pool beyond which no larger pool raises capacity by more than HELPS
    (the last position when capacity still grew at the largest pool)."""
    caps = capacity_per_s.to_numpy(dtype=float)
    # The largest capacity of every larger pool, position by position.
    beyond = np.append(np.maximum.accumulate(caps[::-1])[::-1][1:], -np.inf)
    stops = np.flatnonzero(beyond <= caps * (1 + HELPS))
    return int(stops[0]) if len(stops) else len(caps) - 1


def core_bound_per_s(cores: int, one_thread_service_ms: float) -> float:
    """The most requests per second any pool can complete: the cores computing at once,
    each at the one-thread compute time."""
    return cores / (one_thread_service_ms / 1e3)


def contended(cpu_percent: float, cores: int, threads: int) -> bool:
    """Whether a saturated server used clearly less CPU than its threads could: other
    processes took part of the cores."""
    return cpu_percent < CONTENDED * 100 * min(cores, threads)


# ------------------------------------------------------------------ CPU and network


def server_resources(run: Run) -> pd.DataFrame:
    """Per point: point, series, target_rate_per_s, cpu_percent (the server's mean over the
    post-warm-up samples; 100 = one core) and network_mb_per_s (rx + tx, from the server's
    own byte counters)."""
    rows = []
    for p in run.points:
        srv = (p.get("resources") or {}).get("server") or {}
        rx, tx = srv.get("bytes_rx_per_s"), srv.get("bytes_tx_per_s")
        rows.append(
            {
                "point": p.get("point"),
                "series": str(p.get("series", "")),
                "target_rate_per_s": p.get("target_rate_per_s"),
                "cpu_percent": srv.get("cpu_percent"),
                "network_mb_per_s": (rx + tx) / 1e6 if rx is not None and tx is not None else None,
            }
        )
    columns = ["point", "series", "target_rate_per_s", "cpu_percent", "network_mb_per_s"]
    return pd.DataFrame(rows, columns=columns)
