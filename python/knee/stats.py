"""Per-point statistics for summary.json and the printed table.

Everything is computed from the samples with arrays, warm-up excluded. (Confidence
intervals, distribution checks and the models come with the analysis plane.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from knee.results import STATUS_NAMES

QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "p999": 0.999}


def point_stats(samples: pd.DataFrame) -> dict[str, Any]:
    """Statistics of one point's samples (all nodes pooled, never averaged)."""
    df = samples[~samples["warmup"]]
    n = len(df)
    status = df["status"].astype(str).to_numpy()
    counts = {name: int(np.count_nonzero(status == name)) for name in STATUS_NAMES}
    ok = df[status == "ok"]
    intended_s = df["intended_ns"].to_numpy() / 1e9
    window_s = _window_s(intended_s)
    sent = int(np.count_nonzero(df["sent_ns"].to_numpy() >= 0))
    out: dict[str, Any] = {
        "count": n,
        "statuses": counts,
        "status_rates": {k: (v / n if n else 0.0) for k, v in counts.items()},
        "window_s": window_s,
        "achieved_rate_per_s": sent / window_s if window_s > 0 else 0.0,
        "throughput_per_s": len(ok) / window_s if window_s > 0 else 0.0,
        "bytes_out_per_s": float(df["bytes_out"].sum()) / window_s if window_s > 0 else 0.0,
        "bytes_in_per_s": float(df["bytes_in"].sum()) / window_s if window_s > 0 else 0.0,
        "warmup_count": int(len(samples) - n),
        "latency_ns": _distribution(ok["latency_ns"].to_numpy()),
        "server_ns": _distribution(ok["server_ns"].to_numpy()),
        "network_ns": _distribution(ok["network_ns"].to_numpy()),
        "queue_ns": _distribution(ok["queue_ns"].to_numpy()),
        "service_ns": _distribution(ok["service_ns"].to_numpy()),
    }
    return out


def _window_s(intended_s: np.ndarray) -> float:
    """The span the requests were meant to cover, corrected for the gap after the last one."""
    if len(intended_s) < 2:
        return 0.0
    span = float(intended_s.max() - intended_s.min())
    return span * len(intended_s) / (len(intended_s) - 1)


def _distribution(values: np.ndarray) -> dict[str, float | None]:
    if len(values) == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "p999": None, "max": None}
    qs = np.quantile(values, list(QUANTILES.values()), method="inverted_cdf")
    out: dict[str, float | None] = {"mean": float(values.mean())}
    out.update({name: float(q) for name, q in zip(QUANTILES, qs, strict=True)})
    out["max"] = float(values.max())
    return out
