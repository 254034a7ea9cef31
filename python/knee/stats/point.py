"""Per-point statistics for summary.json and the printed table (docs/statistics.md).

Everything is computed from the samples with arrays, warm-up excluded, all recorders of the
point pooled (never averaged) and put in send order (intended time) first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from knee.results import STATUS_NAMES
from knee.stats import checks
from knee.stats.distribution import distribution
from knee.stats.groups import OK_CODE, by_key, group_entry, status_counts, status_rates
from knee.stats.intervals import poisson_count_ci
from knee.stats.tail import top1


def point_stats(
    samples: pd.DataFrame,
    *,
    schedule: str | None = None,
    target_rate_per_s: float | None = None,
) -> dict[str, Any]:
    """Statistics of one point's samples. `schedule` (load.schedule) and the offered rate
    feed the rate and Poisson checks; without them those checks are n/a."""
    post = samples[~samples["warmup"].to_numpy()]
    order = np.argsort(post["intended_ns"].to_numpy(), kind="stable")

    def column(name: str) -> np.ndarray:
        return post[name].to_numpy()[order]

    codes = np.asarray(pd.Categorical(post["status"], categories=list(STATUS_NAMES)).codes)
    codes = codes[order].astype(np.int64)
    intended = column("intended_ns")
    sent = column("sent_ns")
    n = len(post)
    window_s = _window_s(intended)
    sent_count = int(np.count_nonzero(sent >= 0))
    ok = codes == OK_CODE
    counts = status_counts(codes)

    def ok_column(name: str) -> np.ndarray:
        return column(name)[ok]

    latency = ok_column("latency_ns")
    server = ok_column("server_ns")
    network = ok_column("network_ns")
    sorted_latency = np.sort(latency)
    dists = {
        "latency_ns": distribution(latency, sorted_latency),
        "server_ns": distribution(server),
        "network_ns": distribution(network),
        "queue_ns": distribution(ok_column("queue_ns")),
        "service_ns": distribution(ok_column("service_ns")),
        "detail_ns": distribution(ok_column("detail_ns")),
    }
    achieved = sent_count / window_s if window_s > 0 else 0.0
    rate_ci = [bound / window_s for bound in poisson_count_ci(sent_count)] if window_s > 0 else None
    bytes_out = float(post["bytes_out"].sum())
    bytes_in = float(post["bytes_in"].sum())
    whole = group_entry(
        codes,
        window_s,
        latency,
        server,
        network,
        dists["latency_ns"],
        dists["server_ns"],
        dists["network_ns"],
    )
    out: dict[str, Any] = {
        "count": n,
        "statuses": counts,
        "status_rates": status_rates(counts),
        "window_s": window_s,
        "achieved_rate_per_s": achieved,
        "achieved_rate_ci_per_s": rate_ci,
        "throughput_per_s": whole["throughput_per_s"],
        "bytes_out_per_s": bytes_out / window_s if window_s > 0 else 0.0,
        "bytes_in_per_s": bytes_in / window_s if window_s > 0 else 0.0,
        "throughput_bytes_per_s": (bytes_out + bytes_in) / window_s if window_s > 0 else 0.0,
        "warmup_count": int(len(samples) - n),
        **dists,
        "checks": [
            checks.rate_check(target_rate_per_s, achieved, rate_ci),
            checks.poisson_check(schedule, sent[sent >= 0]),
            checks.autocorrelation_check(latency),
            checks.support_check(len(latency)),
        ],
        "by_op": by_key(column("op"), codes, window_s, latency, server, network, whole),
        "by_service": by_key(column("service"), codes, window_s, latency, server, network, whole),
        "top1": top1(
            latency,
            server,
            network,
            ok_column("sent_ns") - intended[ok],
            intended[ok],
            dists["latency_ns"],
            sorted_latency,
        ),
    }
    return out


def _window_s(intended_ns: np.ndarray) -> float:
    """The span the requests were meant to cover, corrected for the gap after the last one:
    (max - min) * n / (n - 1), so n requests at rate r give n / r."""
    n = len(intended_ns)
    if n < 2:
        return 0.0
    span_s = float(intended_ns.max() - intended_ns.min()) / 1e9
    return span_s * n / (n - 1)
