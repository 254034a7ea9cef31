"""A *distribution*: the summary of one set of durations (ns) that summary.json carries.

    {"n", "mean", "std", "p50", "p90", "p99", "p999", "max",
     "ci": {"mean": [lo, hi], "p50": [lo, hi], ...},   null when n is too small
     "supported": {"p50": bool, ...}}                   >= 100 samples beyond the percentile

Percentiles are order statistics (x_(ceil(n q)), "inverted CDF"), so each estimate and its
interval are actual measured values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from knee.stats.intervals import mean_ci, quantile_ci, quantile_rank

QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "p999": 0.999}
#: Samples needed beyond a percentile before it is called supported.
SUPPORT_SAMPLES = 100


def supported(n: int, q: float) -> bool:
    """Whether n samples leave at least SUPPORT_SAMPLES beyond the q-quantile (n (1-q) >=
    100, in integer thousandths)."""
    return n * (1000 - round(q * 1000)) >= SUPPORT_SAMPLES * 1000


def distribution(
    values_in_time_order: np.ndarray, sorted_values: np.ndarray | None = None
) -> dict[str, Any]:
    """Summary of `values` (in the order the requests were sent: the mean's interval uses
    batches of consecutive requests). Pass `sorted_values` when the caller has them."""
    values = np.asarray(values_in_time_order)
    n = len(values)
    if n == 0:
        return {
            "n": 0,
            "mean": None,
            "std": None,
            **{name: None for name in QUANTILES},
            "max": None,
            "ci": {"mean": None, **{name: None for name in QUANTILES}},
            "supported": {name: False for name in QUANTILES},
        }
    ordered = np.sort(values) if sorted_values is None else sorted_values
    out: dict[str, Any] = {
        "n": n,
        "mean": float(values.mean()),
        "std": float(values.std(ddof=1)) if n > 1 else None,
    }
    for name, q in QUANTILES.items():
        out[name] = float(ordered[quantile_rank(n, q) - 1])
    out["max"] = float(ordered[-1])
    out["ci"] = {"mean": mean_ci(values)}
    out["ci"].update({name: quantile_ci(ordered, q) for name, q in QUANTILES.items()})
    out["supported"] = {name: supported(n, q) for name, q in QUANTILES.items()}
    return out
