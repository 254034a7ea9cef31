"""Statistics per operation and per service: one entry per distinct key (the whole point's
figures, reused, when the run has only one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

import numpy as np

from knee.contract import STATUSES as STATUS_NAMES
from knee.stats.distribution import distribution, headline
from knee.stats.summary import Distribution, GroupStats, Rates

#: The column index of "ok", "timeout" and "drop" in status codes (codes follow STATUS_NAMES).
OK_CODE = STATUS_NAMES.index("ok")
TIMEOUT_CODE = STATUS_NAMES.index("timeout")
DROP_CODE = STATUS_NAMES.index("drop")


class LatencyPair(TypedDict):
    latency_ns: Distribution  # the headline: every request, failures ranked last
    latency_ok_ns: Distribution


class Split(TypedDict):
    server_ns: Distribution
    network_ns: Distribution


def status_counts(codes: np.ndarray) -> dict[str, int]:
    """Requests per status name; codes index STATUS_NAMES (-1, unknown, is not counted)."""
    counts = np.bincount(codes[codes >= 0], minlength=len(STATUS_NAMES))
    return {name: int(counts[i]) for i, name in enumerate(STATUS_NAMES)}


def status_rates(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {name: (c / total if total else 0.0) for name, c in counts.items()}


def failures(counts: dict[str, int]) -> dict[str, int]:
    """Every status but ok: what ranks above all successes in a headline distribution."""
    return {name: c for name, c in counts.items() if name != "ok"}


def latency_pair(
    latency_ok_ns: np.ndarray, counts: dict[str, int], sorted_ok: np.ndarray | None = None
) -> LatencyPair:
    """The headline latency (every request, failures ranked last) and the OK-only one."""
    ordered = np.sort(latency_ok_ns) if sorted_ok is None else sorted_ok
    ok = distribution(latency_ok_ns, ordered)
    return {"latency_ns": headline(ok, ordered, failures(counts)), "latency_ok_ns": ok}


def split_parts(server_ns: np.ndarray, network_ns: np.ndarray) -> Split:
    """The server and network distributions over the requests whose reply carried a server
    time: server_ns -1 marks one that did not (an HTTP service without Server-Timing), whose
    split is unknown. (A network time can be negative when a server reports more than the
    round trip, so the mask comes from the server side.)"""
    known = server_ns >= 0
    return {
        "server_ns": distribution(server_ns[known]),
        "network_ns": distribution(network_ns[known]),
    }


def group_entry(
    codes: np.ndarray,
    rates: Rates,
    latency_ok_ns: np.ndarray,
    server_ns: np.ndarray,
    network_ns: np.ndarray,
) -> GroupStats:
    """One group's figures: `codes` are the statuses of all its post-warm-up requests,
    `rates` its rates (knee.stats.rates), the arrays its OK requests in send order."""
    counts = status_counts(codes)
    return {
        "count": len(codes),
        "achieved_rate_per_s": rates["achieved_rate_per_s"],
        "throughput_per_s": rates["throughput_per_s"],
        "status_rates": status_rates(counts),
        **latency_pair(latency_ok_ns, counts),
        **split_parts(server_ns, network_ns),
    }


def by_key(
    keys: np.ndarray,
    all_keys: np.ndarray,
    codes: np.ndarray,
    group_rates: Callable[[np.ndarray], Rates],
    latency_ns: np.ndarray,
    server_ns: np.ndarray,
    network_ns: np.ndarray,
    whole: GroupStats,
) -> dict[str, GroupStats]:
    """Entries keyed by str(key): `keys` and `codes` cover every post-warm-up request in
    send order, `all_keys` every request (warm-up too, for replies in the window),
    `group_rates(mask over all requests)` gives a group's rates, and the arrays hold all OK
    post-warm-up requests (in send order). A single key gets `whole`, the point's figures."""
    distinct = np.unique(keys)
    if len(distinct) == 1:
        return {str(distinct[0]): whole}
    ok_keys = keys[codes == OK_CODE]
    out: dict[str, GroupStats] = {}
    for key in distinct:  # one pass per operation or service, not per sample
        mine = ok_keys == key
        out[str(key)] = group_entry(
            codes[keys == key],
            group_rates(all_keys == key),
            latency_ns[mine],
            server_ns[mine],
            network_ns[mine],
        )
    return out
