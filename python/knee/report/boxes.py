"""Box statistics computed over groups of samples in one pass (no per-row loops)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from knee.stats.quantiles import order_statistics

#: Whiskers at the 1st and 99th percentiles (latency tails are long: Tukey's 1.5 IQR
#: fences would call most of the tail an outlier). Every one is knee's order statistic
#: x_(ceil(n q)), the percentile summary.json gives.
QUANTILES = (0.01, 0.25, 0.5, 0.75, 0.99)


def box_stats(df: pd.DataFrame, by: list[str], column: str) -> dict[Any, dict[str, float]]:
    """{group key: {"lo", "q1", "median", "q3", "hi", "mean"}} in ms."""
    if df.empty:
        return {}
    grouped = df.groupby(by, observed=True)[column]
    q = order_statistics(grouped, list(QUANTILES)) / 1e6
    mean = grouped.mean() / 1e6
    out: dict[Any, dict[str, float]] = {}
    for key, row in q.iterrows():  # one row per group, not per sample
        lo, q1, med, q3, hi = (float(row[x]) for x in QUANTILES)
        out[key] = {"lo": lo, "q1": q1, "median": med, "q3": q3, "hi": hi, "mean": float(mean[key])}
    return out
