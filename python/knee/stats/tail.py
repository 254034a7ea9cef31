"""The "magic 1%": statistics with and without the slowest 1% of requests, and what those
requests are made of (server vs network share) and whether they cluster in time.

The slowest 1% is defined here, once, for knee: of n OK requests, the floor(n/100) slowest,
those ranked above the p99 order statistic (`knee.stats.quantiles`). `top_mask` picks them
from one point's latencies, `top_mask_by` from every group of a pandas groupby; the report's
"slowest 1%" section and the chat analysis's magic-1% table both use them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from knee.stats import quantiles
from knee.stats.distribution import distribution
from knee.stats.intervals import chi2_ppf
from knee.stats.summary import Clustering, Distribution, MadeOf, Top1

#: The slowest 1% are the requests ranked above this quantile.
TOP_Q = 0.99

#: Equal time bins the chi-square test of clustering counts the top requests in.
CLUSTER_BINS = 20
#: Fewest top requests the chi-square test is run on (about one expected per two bins).
CLUSTER_MIN_TOP = 10
#: Both clustering tests are one-sided at 1%.
_P_CLUSTER = 0.01


def top_count(n: int) -> int:
    """How many of n requests are the slowest 1%: n - rank(n, 0.99) = floor(n/100)."""
    return n - quantiles.rank(n, TOP_Q) if n else 0


def top_mask(latency_ns: np.ndarray, sorted_latency_ns: np.ndarray | None = None) -> np.ndarray:
    """The slowest 1% of one set of OK latencies (a mask in their order): the floor(n/100)
    ranked above the p99 order statistic; of equal latencies, the later ones rank higher."""
    return quantiles.above(latency_ns, TOP_Q, sorted_latency_ns)


def top_mask_by(latency_ns: Any) -> np.ndarray:
    """`top_mask` within each group of a pandas SeriesGroupBy of OK latencies (e.g.
    ``ok.groupby("point")["latency_ns"]``): a mask over the rows of its frame."""
    return quantiles.above_by(latency_ns, TOP_Q)


def top1(
    latency_ns: np.ndarray,
    server_ns: np.ndarray,
    network_ns: np.ndarray,
    late_ns: np.ndarray,
    intended_ns: np.ndarray,
    with_dist: Distribution,
    sorted_latency_ns: np.ndarray,
) -> Top1:
    """The top 1% of OK requests by latency (all arrays in send order, one entry per
    request; `with_dist` is the latency distribution of all of them). The top is the
    floor(n/100) slowest requests, those ranked above the p99 order statistic."""
    n = len(latency_ns)
    top = top_mask(latency_ns, sorted_latency_ns)
    k = top_count(n)
    return {
        "threshold_ns": with_dist["p99"],
        "count": k,
        "with": with_dist,
        "without": distribution(latency_ns[~top], sorted_latency_ns[: n - k]),
        "top": _made_of(latency_ns, server_ns, network_ns, late_ns, top),
        "rest": _made_of(latency_ns, server_ns, network_ns, late_ns, ~top),
        "clustering": clustering(top, intended_ns),
    }


def _made_of(
    latency: np.ndarray, server: np.ndarray, network: np.ndarray, late: np.ndarray, mask: np.ndarray
) -> MadeOf:
    """Shares of the summed latency spent in the server, in the network/middleware, and
    late at the client (sent after the intended time); they add up to 1."""
    total = float(latency[mask].sum())
    if not mask.any() or total <= 0:
        return {"server_share": None, "network_share": None, "late_share": None, "mean_ns": None}
    if (server[mask] < 0).any():  # replies without a server time: no split to share out
        return {
            "server_share": None,
            "network_share": None,
            "late_share": float(late[mask].sum()) / total,
            "mean_ns": float(latency[mask].mean()),
        }
    return {
        "server_share": float(server[mask].sum()) / total,
        "network_share": float(network[mask].sum()) / total,
        "late_share": float(late[mask].sum()) / total,
        "mean_ns": float(latency[mask].mean()),
    }


def clustering(top_in_time_order: np.ndarray, intended_ns: np.ndarray) -> Clustering:
    """Whether the top requests bunch up in time, by two one-sided tests at 1%:

    - chi-square over CLUSTER_BINS equal time bins, each bin expected to hold top requests
      in proportion to all its requests; index_of_dispersion = chi2 / dof (about 1 when
      scattered; for equal bins it is the variance-to-mean ratio of the counts);
    - the longest run of consecutive top requests: with a fraction p of the n requests in
      the top, a run of L appears by chance about n p^L times; below 0.01 it is a cluster.
    """
    n = len(top_in_time_order)
    k = int(top_in_time_order.sum())
    longest = _longest_run(top_in_time_order)
    reasons: list[str] = []
    dispersion = 0.0  # no top requests: nothing dispersed
    if k:
        edges = np.linspace(float(intended_ns.min()), float(intended_ns.max()), CLUSTER_BINS + 1)
        bins = np.clip(np.searchsorted(edges, intended_ns, side="right") - 1, 0, CLUSTER_BINS - 1)
        all_counts = np.bincount(bins, minlength=CLUSTER_BINS)
        top_counts = np.bincount(bins[top_in_time_order], minlength=CLUSTER_BINS)
        used = all_counts > 0
        expected = k * all_counts[used] / n
        chi2 = float((((top_counts[used] - expected) ** 2) / expected).sum())
        dof = int(used.sum()) - 1
        dispersion = chi2 / dof if dof > 0 else 0.0
        # Tested only with enough top requests; below that the value is descriptive.
        if k >= CLUSTER_MIN_TOP and dof > 0 and chi2 > chi2_ppf(1 - _P_CLUSTER, dof):
            reasons.append(f"uneven over time (chi-square {chi2:.1f}, {dof} dof)")
    chance = n * (k / n) ** longest if n and longest else 1.0
    if longest >= 2 and chance < _P_CLUSTER:
        reasons.append(f"{longest} in a row (expected by chance {chance:.2g} times)")
    if reasons:
        verdict, detail = "clustered", "; ".join(reasons)
    elif k < CLUSTER_MIN_TOP:
        verdict, detail = "scattered", f"{k} top requests: no run of them stands out"
    else:
        verdict, detail = "scattered", f"spread like the load (dispersion {dispersion:.2f})"
    return {
        "index_of_dispersion": dispersion,
        "longest_run": longest,
        "verdict": verdict,
        "detail": detail,
    }


def _longest_run(mask: np.ndarray) -> int:
    if not mask.any():
        return 0
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    return int((ends - starts).max())
