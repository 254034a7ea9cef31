"""A result cache's hit ratio and the service time of hits and misses, per point
(docs/statistics.md, "Models": "A cache").

A server with a result cache (matrix with `server.cache > 0`) starts every point with an
empty cache: the first requests miss, and the hit ratio climbs until the cache is full (a
FIFO cache of k entries is full after k misses), then stays at its steady level. A point's
overall hit ratio therefore mixes the cold start with the steady state, and the mix depends
on how many requests the point had: in the matrix `cache` series the lowest rate hits about
18% of the time against about 40% once the cache is full. The queueing models need the
steady state, so `cache_split` also gives the hit ratio of the point's **second half**
(the later half of its post-warm-up requests, in send order).

Why the second half: it needs no knowledge of the cache (its size, its policy, the number
of distinct keys), only that warming ends. It is exactly the steady state when the cache
filled within the first half (with matrix's 200-entry cache and 501 keys: about 255
requests after the point's start, warm-up included), and it errs low (still warming) in
points shorter than about twice that; weighting points by their count when pooling
(knee.models.fit) leaves such short points little say. An interval (Clopper-Pearson, exact)
is given for it.
"""

from __future__ import annotations

import numpy as np

from knee.contract import MATRIX_FLAG_CACHE_HIT
from knee.stats.summary import CacheSplit

#: Reply flag bit that marks a reply served from the cache (matrix's).
CACHE_HIT_FLAG = MATRIX_FLAG_CACHE_HIT
#: What `hit_ratio_steady` is measured over, as summary.json states it.
STEADY_RULE = "second half of the point's post-warm-up OK requests, in send order"
#: Consecutive parts (in send order) whose hits and misses are also given, so that a reader
#: who knows the cache's size can tell from which part on it was full (knee.models.fit).
SEGMENTS = 4


def _mean_std(values: np.ndarray) -> tuple[float | None, float | None]:
    if len(values) == 0:
        return None, None
    std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
    return float(values.mean()), std


def cache_split(
    flags: np.ndarray,
    service_ns: np.ndarray,
    intended_ns: np.ndarray,
    *,
    hit_flag: int = CACHE_HIT_FLAG,
) -> CacheSplit | None:
    """Hit ratio (whole point and steady state) and hit/miss service times of one point's
    post-warm-up OK requests (equal-length arrays, any order); None when no reply carries
    `hit_flag` (no cache, or one that never hit). Call it only for a system whose flag bit
    means a cache hit: other systems use bit 0 for other things.

    Keys: `hit_ratio`, `n_hits`, `n_misses` (whole point); `hit_ratio_steady`,
    `hit_ratio_steady_ci` (95%, exact binomial), `n_steady`, `n_hits_steady` (the second
    half); `hit_service_mean_ns`, `hit_service_std_ns`, `miss_service_mean_ns`,
    `miss_service_std_ns` (sample std, n - 1; the whole point: a hit's or a miss's work does
    not depend on how full the cache is); `steady_rule`; `segments`: [{"n", "hits"}] of
    SEGMENTS consecutive near-equal parts in send order.
    """
    from scipy import stats as sps  # about a second to import: not for every spec read

    flags = np.asarray(flags)
    service = np.asarray(service_ns, dtype=np.float64)
    hit = (flags.astype(np.int64) & hit_flag) != 0
    n = len(hit)
    if n == 0 or not hit.any():
        return None
    order = np.argsort(np.asarray(intended_ns), kind="stable")
    in_order = hit[order]
    steady = in_order[n // 2 :]
    n_steady = len(steady)
    hits_steady = int(np.count_nonzero(steady))
    ci = sps.binomtest(hits_steady, n_steady).proportion_ci(method="exact")
    n_hits = int(np.count_nonzero(hit))
    hit_mean, hit_std = _mean_std(service[hit])
    miss_mean, miss_std = _mean_std(service[~hit])
    return {
        "hit_ratio": n_hits / n,
        "n_hits": n_hits,
        "n_misses": n - n_hits,
        "hit_ratio_steady": hits_steady / n_steady,
        "hit_ratio_steady_ci": [float(ci.low), float(ci.high)],
        "n_steady": n_steady,
        "n_hits_steady": hits_steady,
        "hit_service_mean_ns": hit_mean,
        "hit_service_std_ns": hit_std,
        "miss_service_mean_ns": miss_mean,
        "miss_service_std_ns": miss_std,
        "steady_rule": STEADY_RULE,
        "segments": [
            {"n": len(part), "hits": int(np.count_nonzero(part))}
            for part in np.array_split(in_order, min(SEGMENTS, n))
        ],
    }
