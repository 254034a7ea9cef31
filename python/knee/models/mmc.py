"""M/M/c: Poisson arrivals, exponential service, c servers sharing one FIFO queue.

With offered load a = lambda E[S] erlangs and rho = a / c < 1, the probability of waiting
is Erlang's C formula, computed from the Erlang B recursion (stable for any c):

    B(0) = 1,  B(k) = a B(k-1) / (k + a B(k-1)),  C = B(c) / (1 - rho (1 - B(c)))

The wait is 0 with probability 1 - C, else exponential with rate theta = c mu - lambda:
P(W > t) = C e^(-theta t), E[W] = C / theta, E[T] = E[W] + 1/mu. The sojourn T = W + S
(S ~ exponential(mu), independent of W) has the exact survival function

    P(T > t) = (1 - C) e^(-mu t) + C (mu e^(-theta t) - theta e^(-mu t)) / (mu - theta)

(C (1 + mu t) e^(-mu t) in its second term when theta = mu); its quantiles are found by
bisection on it. Times in seconds; None when rho >= 1.
"""

from __future__ import annotations

import math


def erlang_c(servers: int, offered_erlangs: float) -> float:
    """Probability that an arrival waits (requires offered_erlangs < servers)."""
    b = 1.0
    for k in range(1, servers + 1):
        b = offered_erlangs * b / (k + offered_erlangs * b)
    rho = offered_erlangs / servers
    return b / (1 - rho * (1 - b))


def _stable(rate_per_s: float, service_s: float, servers: int) -> bool:
    return servers / service_s - rate_per_s > 0  # theta > 0, as the formulas divide by it


def wait_mean_s(rate_per_s: float, service_s: float, servers: int) -> float | None:
    if not _stable(rate_per_s, service_s, servers):
        return None
    c = erlang_c(servers, rate_per_s * service_s)
    return c / (servers / service_s - rate_per_s)


def sojourn_mean_s(rate_per_s: float, service_s: float, servers: int) -> float | None:
    wait = wait_mean_s(rate_per_s, service_s, servers)
    return None if wait is None else wait + service_s


def wait_quantile_s(q: float, rate_per_s: float, service_s: float, servers: int) -> float | None:
    """The q-quantile of the wait: 0 when q <= 1 - C, else ln(C / (1 - q)) / theta."""
    if not _stable(rate_per_s, service_s, servers):
        return None
    c = erlang_c(servers, rate_per_s * service_s)
    if 1 - q >= c:
        return 0.0
    return math.log(c / (1 - q)) / (servers / service_s - rate_per_s)


def sojourn_survival(t_s: float, rate_per_s: float, service_s: float, servers: int) -> float:
    """P(T > t) for the sojourn time (requires a stable queue)."""
    mu = 1.0 / service_s
    theta = servers * mu - rate_per_s
    c = erlang_c(servers, rate_per_s * service_s)
    if abs(mu - theta) <= 1e-9 * mu:
        both = (1 + mu * t_s) * math.exp(-mu * t_s)
    else:
        both = (mu * math.exp(-theta * t_s) - theta * math.exp(-mu * t_s)) / (mu - theta)
    return (1 - c) * math.exp(-mu * t_s) + c * both


def sojourn_quantile_s(q: float, rate_per_s: float, service_s: float, servers: int) -> float | None:
    if not _stable(rate_per_s, service_s, servers):
        return None
    target = 1 - q
    lo, hi = 0.0, service_s
    while sojourn_survival(hi, rate_per_s, service_s, servers) > target:
        lo, hi = hi, 2 * hi
    for _ in range(200):  # the survival function falls monotonically
        mid = (lo + hi) / 2
        if sojourn_survival(mid, rate_per_s, service_s, servers) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2
