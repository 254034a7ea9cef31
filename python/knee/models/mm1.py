"""M/M/1: Poisson arrivals, exponential service, one server, FIFO.

With rho = lambda E[S] < 1 the sojourn time (wait + service) is exponential with rate
mu - lambda, so E[T] = 1 / (mu - lambda) and its q-quantile is -ln(1 - q) / (mu - lambda).
Times in seconds; None when the queue has no steady state (rho >= 1).
"""

from __future__ import annotations

import math


def sojourn_mean_s(rate_per_s: float, service_s: float) -> float | None:
    mu = 1.0 / service_s
    if rate_per_s >= mu:
        return None
    return 1.0 / (mu - rate_per_s)


def sojourn_quantile_s(q: float, rate_per_s: float, service_s: float) -> float | None:
    mu = 1.0 / service_s
    if rate_per_s >= mu:
        return None
    return -math.log1p(-q) / (mu - rate_per_s)
