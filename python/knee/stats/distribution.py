"""A *distribution*: the summary of one set of durations (ns) that summary.json carries.

    {"n", "mean", "std", "p50", "p90", "p99", "p999", "max",
     "ci": {"mean": [lo, hi], "p50": [lo, hi], ...},   null when n is too small
     "supported": {"p50": bool, ...}}                   >= 100 samples beyond the percentile

Percentiles are order statistics (x_(ceil(n q)), "inverted CDF"), so each estimate and its
interval are actual measured values.

A *headline* distribution covers every request, failed ones included: a timeout, drop or
error ranks above every success (as if it took forever), so a percentile that lands on one
is null, with the kind of failure in `failed` ("timeout" when every failure timed out, else
"failed"); its mean, std and max are null whenever a request failed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from knee.stats.intervals import mean_ci, order_statistic_ranks, quantile_ci, quantile_rank
from knee.stats.summary import Distribution, Percentiles

QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "p999": 0.999}
#: Samples needed beyond a percentile before it is called supported.
SUPPORT_SAMPLES = 100


def supported(n: int, q: float) -> bool:
    """Whether n samples leave at least SUPPORT_SAMPLES beyond the q-quantile (n (1-q) >=
    100, in integer thousandths)."""
    return n * (1000 - round(q * 1000)) >= SUPPORT_SAMPLES * 1000


def _percentiles(at: dict[str, float | None]) -> Percentiles:
    """The QUANTILES' keys of a distribution, from their values by name."""
    return {"p50": at["p50"], "p90": at["p90"], "p99": at["p99"], "p999": at["p999"]}


def distribution(
    values_in_time_order: np.ndarray, sorted_values: np.ndarray | None = None
) -> Distribution:
    """Summary of `values` (in the order the requests were sent: the mean's interval uses
    batches of consecutive requests). Pass `sorted_values` when the caller has them."""
    values = np.asarray(values_in_time_order)
    n = len(values)
    if n == 0:
        return {
            "n": 0,
            "mean": None,
            "std": None,
            **_percentiles({name: None for name in QUANTILES}),
            "max": None,
            "ci": {"mean": None, **{name: None for name in QUANTILES}},
            "supported": {name: False for name in QUANTILES},
        }
    ordered = np.sort(values) if sorted_values is None else sorted_values
    return {
        "n": n,
        "mean": float(values.mean()),
        "std": float(values.std(ddof=1)) if n > 1 else None,
        **_percentiles(
            {name: float(ordered[quantile_rank(n, q) - 1]) for name, q in QUANTILES.items()}
        ),
        "max": float(ordered[-1]),
        "ci": {
            "mean": mean_ci(values),
            **{name: quantile_ci(ordered, q) for name, q in QUANTILES.items()},
        },
        "supported": {name: supported(n, q) for name, q in QUANTILES.items()},
    }


def headline(ok: Distribution, sorted_ok: np.ndarray, failures: dict[str, int]) -> Distribution:
    """The distribution of every request's latency, from `ok` (the `distribution` of the OK
    ones, ascending in `sorted_ok`) and `failures` (count per status name), which rank above
    every success. With no failure it is `ok`. Extra keys: `failures` (their number) and
    `failed` ({"p99": "timeout", ...} for each percentile that lands on a failure)."""
    n_ok = len(sorted_ok)
    n_failed = sum(failures.values())
    if n_failed == 0:
        return {**ok, "failures": 0, "failed": {}}
    kind = "timeout" if failures.get("timeout", 0) == n_failed else "failed"
    n = n_ok + n_failed

    def at(rank: int) -> float | None:  # 1-based; None past the successes
        return float(sorted_ok[rank - 1]) if rank <= n_ok else None

    values = {name: at(quantile_rank(n, q)) for name, q in QUANTILES.items()}
    ci: dict[str, Sequence[float | None] | None] = {"mean": None}
    for name, q in QUANTILES.items():
        ranks = order_statistic_ranks(n, q)
        low = None if ranks is None else at(ranks[0])
        ci[name] = None if low is None or ranks is None else [low, at(ranks[1])]
    return {
        "n": n,
        "mean": None,
        "std": None,
        **_percentiles(values),
        "max": None,
        "ci": ci,
        "supported": {name: supported(n, q) for name, q in QUANTILES.items()},
        "failures": n_failed,
        "failed": {name: kind for name, value in values.items() if value is None},
    }
