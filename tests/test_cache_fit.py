"""A result cache in the statistics and the models: `knee.stats.cache.cache_split` over one
point's samples, and the fit's steady-state hit ratio and hit/miss mixture
(knee.models.fit), on a simulated FIFO cache like matrix's (200 entries, 501 keys)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import pytest
from test_models import synthetic_point

from knee.models import analyze
from knee.models.fit import fit_service
from knee.stats.cache import SEGMENTS, cache_split

ENTRIES = 200
KEYS = 501
HIT_NS = 15e3
MISS_NS = 18e6
SPEC: dict[str, Any] = {
    "load": {"schedule": "poisson", "rate_per_s": 10},
    "server": {"threads": 1, "cache": ENTRIES},
    "series": {"s": {}},
}


def fifo_hits(requests: int, rng: np.random.Generator) -> np.ndarray:
    """Whether each request hits a FIFO cache of ENTRIES that starts empty, for keys drawn
    uniformly from KEYS (matrix: P uniform in [2000, 2500], one matrix)."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = np.zeros(requests, dtype=bool)
    for i, key in enumerate(rng.integers(0, KEYS, requests)):
        if key in cache:
            hits[i] = True
            continue
        cache[int(key)] = None
        if len(cache) > ENTRIES:
            cache.popitem(last=False)
    return hits


def cache_point(
    index: int, rate: float, warmup: int, requests: int, rng: np.random.Generator
) -> dict[str, Any]:
    """A summary.json point of a cache server at low load (no queueing): `warmup` requests
    then `requests` measured ones, in send order."""
    hits = fifo_hits(warmup + requests, rng)[warmup:]
    service = np.where(hits, rng.normal(HIT_NS, 1e3, requests), rng.normal(MISS_NS, 5e5, requests))
    intended = np.arange(requests) * (1e9 / rate)
    return {
        **synthetic_point(index, rate, service, delay_ns=2e5),
        "achieved_rate_per_s": rate,
        "warmup_count": warmup,
        "cache": cache_split(hits.astype(np.int64), service, intended),
    }


def test_cache_split_of_one_point() -> None:
    rng = np.random.default_rng(1)
    n = 400
    hits = np.concatenate([rng.random(n // 2) < 0.1, rng.random(n // 2) < 0.4])
    service = np.where(hits, rng.normal(HIT_NS, 1e3, n), rng.normal(MISS_NS, 5e5, n))
    intended = np.arange(n, dtype=np.int64) * 10_000_000
    flags = np.where(hits, 1, 0) | 4  # other bits do not count
    shuffle = rng.permutation(n)  # any order in: send order is restored
    out = cache_split(flags[shuffle], service[shuffle], intended[shuffle])
    assert out is not None
    assert (out["n_hits"], out["n_misses"]) == (hits.sum(), n - hits.sum())
    assert out["hit_ratio"] == pytest.approx(hits.mean())
    assert out["n_steady"] == n // 2 and out["n_hits_steady"] == hits[n // 2 :].sum()
    assert out["hit_ratio_steady"] == pytest.approx(hits[n // 2 :].mean())
    lo, hi = out["hit_ratio_steady_ci"]
    assert lo < out["hit_ratio_steady"] < hi
    assert out["hit_service_mean_ns"] == pytest.approx(service[hits].mean())
    assert out["hit_service_std_ns"] == pytest.approx(service[hits].std(ddof=1))
    assert out["miss_service_mean_ns"] == pytest.approx(service[~hits].mean())
    assert out["miss_service_std_ns"] == pytest.approx(service[~hits].std(ddof=1))
    assert [s["n"] for s in out["segments"]] == [n // SEGMENTS] * SEGMENTS
    assert [s["hits"] for s in out["segments"]] == [
        int(part.sum()) for part in np.array_split(hits, SEGMENTS)
    ]
    assert "second half" in out["steady_rule"]


def test_cache_split_without_a_hit_is_none() -> None:
    service = np.full(10, 1e6)
    intended = np.arange(10)
    assert cache_split(np.zeros(10, dtype=np.int64), service, intended) is None
    assert cache_split(np.full(10, 2), service, intended) is None  # another flag bit
    assert cache_split(np.array([], dtype=np.int64), service[:0], intended[:0]) is None
    one = cache_split(np.array([1]), np.array([5e3]), np.array([0]))
    assert one is not None and one["miss_service_mean_ns"] is None and one["n_steady"] == 1


def test_fit_uses_the_steady_hit_ratio() -> None:
    """Points whose cache starts empty, as the matrix cache series: the fit's hit ratio is
    the steady state's, ENTRIES / KEYS for uniform keys (any policy), not the cold mix."""
    rng = np.random.default_rng(2)
    steady_ratio = ENTRIES / KEYS
    points = [
        cache_point(0, 20, warmup=40, requests=120, rng=rng),  # never fills
        cache_point(1, 50, warmup=100, requests=500, rng=rng),  # fills in its first quarter
        cache_point(2, 70, warmup=300, requests=700, rng=rng),  # full from the start
    ]
    (entry,) = analyze(points, SPEC, cores=2)
    (group,) = entry["groups"]
    cache = group["fit"]["cache"]
    assert [(c["point"], c["full"]) for c in cache["points"]] == [
        (0, False),
        (1, True),
        (2, True),
    ]
    # Point 2 counts whole (its warm-up alone could fill the cache), point 1 from a quarter
    # on; point 0, never surely full, is left out.
    assert cache["points"][2]["n_steady"] == 700
    assert cache["points"][1]["n_steady"] in (375, 250)
    assert cache["n_steady"] == cache["points"][1]["n_steady"] + 700
    h = cache["hit_ratio_steady"]
    lo, hi = cache["hit_ratio_steady_ci"]
    assert lo <= steady_ratio <= hi and abs(h - steady_ratio) < 0.05
    assert cache["hit_ratio_whole"] < h and cache["points"][0]["hit_ratio_whole"] < 0.3
    # E[S] and cs2 of the mixture, from the pooled hit and miss service times.
    primary = next(m for m in entry["models"] if m["primary"])
    hit_mean, miss_mean = cache["hit_service_mean_ns"], cache["miss_service_mean_ns"]
    mean = h * hit_mean + (1 - h) * miss_mean
    assert primary["service_mean_ns"] == pytest.approx(mean, rel=1e-9)
    second = h * hit_mean**2 + (1 - h) * miss_mean**2  # the parts' own spread is tiny
    assert primary["service_cs2"] == pytest.approx(second / mean**2 - 1, rel=0.01)
    assert primary["kind"] == "M/G/1"  # cs2 about (1 - h) / ... : far from constant
    # Capacity: within a few % of the steady state's, far above the lowest point's.
    true_capacity = 1e9 / (steady_ratio * HIT_NS + (1 - steady_ratio) * MISS_NS)
    assert primary["capacity_per_s"] == pytest.approx(true_capacity, rel=0.08)
    lowest = 1e9 / points[0]["service_ns"]["mean"]
    assert lowest < 0.85 * true_capacity
    assert "steady-state hit ratio" in entry["note"]


def test_fit_without_cache_figures_or_cache_setting() -> None:
    """Runs written before the "cache" figures, and systems whose flag bit 0 means
    something else (no `server.cache`), get the plain pooled service time."""
    rng = np.random.default_rng(3)
    points = [cache_point(i, 30 + i, 300, 400, rng) for i in range(2)]
    plain = fit_service(points, [30.0, 31.0])  # no cache entries: the setting is absent
    assert plain is not None and plain.cache is None
    union_mean = sum(p["service_ns"]["n"] * p["service_ns"]["mean"] for p in points) / 800
    assert plain.service_s * 1e9 == pytest.approx(union_mean)
    old = [{k: v for k, v in p.items() if k != "cache"} for p in points]
    assert fit_service(old, [30.0, 31.0], cache_entries=ENTRIES).cache is None  # type: ignore[union-attr]
    with_cache = fit_service(points, [30.0, 31.0], cache_entries=ENTRIES)
    assert with_cache is not None and with_cache.cache is not None
    # A point whose cache never hit ("cache": null) counts as all misses.
    cold = {**points[0], "point": 9, "cache": None}
    mixed = fit_service([cold, points[1]], [30.0, 31.0], cache_entries=ENTRIES)
    assert mixed is not None and mixed.cache is not None
    assert mixed.cache.miss.n == points[0]["service_ns"]["n"] + points[1]["cache"]["n_misses"]
