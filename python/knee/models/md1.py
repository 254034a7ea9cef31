"""M/D/1: Poisson arrivals, constant service time, one server, FIFO.

The Pollaczek-Khinchine mean with cs2 = 0: E[W] = rho E[S] / (2 (1 - rho)), half the
M/M/1 wait at the same load. (Its waiting-time distribution has an exact series, but it
cancels catastrophically near capacity, so knee gives no M/D/1 percentiles.)
"""

from __future__ import annotations

from knee.models import mg1


def sojourn_mean_s(rate_per_s: float, service_s: float) -> float | None:
    return mg1.sojourn_mean_s(rate_per_s, service_s, 0.0)
