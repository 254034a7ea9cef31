"""Statistics per operation and per service: one entry per distinct key (the whole point's
figures, reused, when the run has only one)."""

from __future__ import annotations

from typing import Any

import numpy as np

from knee.results import STATUS_NAMES
from knee.stats.distribution import distribution

#: The column index of "ok" in status codes (codes follow knee.results.STATUS_NAMES).
OK_CODE = STATUS_NAMES.index("ok")


def status_counts(codes: np.ndarray) -> dict[str, int]:
    """Requests per status name; codes index STATUS_NAMES (-1, unknown, is not counted)."""
    counts = np.bincount(codes[codes >= 0], minlength=len(STATUS_NAMES))
    return {name: int(counts[i]) for i, name in enumerate(STATUS_NAMES)}


def status_rates(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {name: (c / total if total else 0.0) for name, c in counts.items()}


def group_entry(
    codes: np.ndarray,
    window_s: float,
    latency_ns: np.ndarray,
    server_ns: np.ndarray,
    network_ns: np.ndarray,
    latency: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
    network: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One group's figures: `codes` are the statuses of all its post-warm-up requests, the
    arrays its OK requests in send order; distributions already computed may be passed."""
    counts = status_counts(codes)
    return {
        "count": len(codes),
        "throughput_per_s": counts["ok"] / window_s if window_s > 0 else 0.0,
        "status_rates": status_rates(counts),
        "latency_ns": latency if latency is not None else distribution(latency_ns),
        "server_ns": server if server is not None else distribution(server_ns),
        "network_ns": network if network is not None else distribution(network_ns),
    }


def by_key(
    keys: np.ndarray,
    codes: np.ndarray,
    window_s: float,
    latency_ns: np.ndarray,
    server_ns: np.ndarray,
    network_ns: np.ndarray,
    whole: dict[str, Any],
) -> dict[str, dict[str, Any]]:
    """Entries keyed by str(key): `keys` and `codes` cover every post-warm-up request, the
    arrays all OK ones (in send order). A single key gets `whole`, the point's own entry."""
    distinct = np.unique(keys)
    if len(distinct) == 1:
        return {str(distinct[0]): whole}
    ok_keys = keys[codes == OK_CODE]
    out: dict[str, dict[str, Any]] = {}
    for key in distinct:  # one pass per operation or service, not per sample
        mine = ok_keys == key
        out[str(key)] = group_entry(
            codes[keys == key], window_s, latency_ns[mine], server_ns[mine], network_ns[mine]
        )
    return out
