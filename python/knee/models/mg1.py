"""M/G/1: Poisson arrivals, any service time distribution, one server, FIFO.

Pollaczek-Khinchine: E[W] = rho E[S] (1 + cs2) / (2 (1 - rho)), with cs2 = Var[S] / E[S]^2
the squared coefficient of variation of service time; E[T] = E[W] + E[S]. Only the mean
has a closed form for a general service distribution. Times in seconds; None when rho >= 1.
"""

from __future__ import annotations


def wait_mean_s(rate_per_s: float, service_s: float, cs2: float) -> float | None:
    rho = rate_per_s * service_s
    if rho >= 1:
        return None
    return rho * service_s * (1 + cs2) / (2 * (1 - rho))


def sojourn_mean_s(rate_per_s: float, service_s: float, cs2: float) -> float | None:
    wait = wait_mean_s(rate_per_s, service_s, cs2)
    return None if wait is None else wait + service_s
