"""95% confidence intervals: quantiles (order statistics), the mean (batch means), and an
arrival rate (Poisson count).

Only numpy and the standard library: scipy is a test dependency, not a runtime one.
"""

from __future__ import annotations

import math

import numpy as np

CONFIDENCE = 0.95
#: Standard normal quantile for the two-sided 95% level.
Z_975 = 1.959963984540054
#: Student-t 0.975 quantiles for 4..29 degrees of freedom (the batch-means interval).
# fmt: off
_T_975 = {
    4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646, 8: 2.3060, 9: 2.2622, 10: 2.2281,
    11: 2.2010, 12: 2.1788, 13: 2.1604, 14: 2.1448, 15: 2.1314, 16: 2.1199, 17: 2.1098,
    18: 2.1009, 19: 2.0930, 20: 2.0860, 21: 2.0796, 22: 2.0739, 23: 2.0687, 24: 2.0639,
    25: 2.0595, 26: 2.0555, 27: 2.0518, 28: 2.0484, 29: 2.0452,
}
# fmt: on
#: Batches of consecutive samples the mean's interval is computed from.
MEAN_BATCHES = 30
#: Counts above this use the Wilson-Hilferty form of the Poisson interval (error < 1e-4).
_POISSON_EXACT_MAX = 1000


def quantile_rank(n: int, q: float) -> int:
    """1-based rank of the q-quantile estimate: x_(ceil(n q)) ("inverted CDF"), computed in
    thousandths so that n * 0.99 is not 9900.000000000002."""
    per_mille = round(q * 1000)
    return max(1, -(-n * per_mille // 1000))


def order_statistic_ranks(n: int, q: float) -> tuple[int, int] | None:
    """1-based ranks (l, u) with P(x_(l) <= true q-quantile <= x_(u)) >= 95% for any
    continuous distribution, or None when n is too small for such ranks to exist.

    With B ~ Binomial(n, q), the coverage is P(l <= B < u) = F(u-1) - F(l-1): l is the
    largest rank with F(l-1) <= 2.5%, u the smallest with F(u-1) >= 97.5%. F is computed
    exactly in log space over nq +- (12 sd + 30), outside which Bernstein's inequality
    leaves less than 1e-20 of the mass; so it is exact (to rounding) for every n.
    """
    if n < 1 or not 0 < q < 1:
        return None
    alpha = 1 - CONFIDENCE
    sd = math.sqrt(n * q * (1 - q))
    width = math.ceil(12 * sd + 30)
    lo = max(0, math.floor(n * q) - width)
    hi = min(n, math.ceil(n * q) + width)
    k = np.arange(lo, hi + 1, dtype=np.float64)
    # log C(n, k): anchored at lo, then the ratio C(n, k+1) / C(n, k) = (n - k) / (k + 1).
    anchor = math.lgamma(n + 1) - math.lgamma(lo + 1) - math.lgamma(n - lo + 1)
    log_binom = anchor + np.concatenate(([0.0], np.cumsum(np.log((n - k[:-1]) / (k[:-1] + 1)))))
    pmf = np.exp(log_binom + k * math.log(q) + (n - k) * math.log1p(-q))
    cdf = np.cumsum(pmf)  # F(lo + i); the mass below lo is negligible
    below = np.flatnonzero(cdf <= alpha / 2)
    above = np.flatnonzero(cdf >= 1 - alpha / 2)
    if len(below) == 0 or len(above) == 0:
        return None
    lower = lo + int(below[-1]) + 1
    upper = lo + int(above[0]) + 1
    if upper > n:
        return None
    return lower, upper


def quantile_ci(sorted_values: np.ndarray, q: float) -> list[float] | None:
    """[x_(l), x_(u)] from `order_statistic_ranks` over ascending values, or None."""
    ranks = order_statistic_ranks(len(sorted_values), q)
    if ranks is None:
        return None
    return [float(sorted_values[ranks[0] - 1]), float(sorted_values[ranks[1] - 1])]


def t_975(df: int) -> float | None:
    """Student-t 0.975 quantile for the degrees of freedom the batch-means interval uses."""
    return _T_975.get(df)


def mean_ci(values_in_time_order: np.ndarray) -> list[float] | None:
    """95% interval for the mean by batch means: the samples, in the order they were sent,
    are cut into `MEAN_BATCHES` consecutive batches (fewer when n < 30: one sample each), and
    the interval is mean +- t(k-1) * sd(batch means) / sqrt(k).

    Batches, not single samples, because latencies under load are autocorrelated (a queue
    carries over from one request to the next); batch means stay valid for a stationary
    sequence whose correlation dies out within a batch, and reduce to the ordinary t
    interval for independent samples. The t quantile assumes the batch means are nearly
    normal (the central limit theorem), so this interval is asymptotically, not exactly,
    distribution-free. None when n < 5.
    """
    n = len(values_in_time_order)
    k = min(MEAN_BATCHES, n)
    t = t_975(k - 1)
    if t is None:
        return None
    x = np.asarray(values_in_time_order, dtype=np.float64)
    # k near-equal consecutive batches: batch i holds x[bounds[i]:bounds[i + 1]].
    bounds = (np.arange(k + 1) * n) // k
    sums = np.add.reduceat(x, bounds[:-1])
    batch_means = sums / np.diff(bounds)
    mean = float(x.mean())
    half = t * float(batch_means.std(ddof=1)) / math.sqrt(k)
    return [mean - half, mean + half]


def poisson_count_ci(count: int) -> tuple[float, float]:
    """95% interval for the mean of a Poisson count that came out as `count` (Garwood's exact
    interval: P(X >= count) = 2.5% at the lower end, P(X <= count) = 2.5% at the upper).

    Exact by bisection on the Poisson CDF up to 1000; above, the Wilson-Hilferty form of the
    chi-square quantiles that Garwood's interval is written in (relative error below 1e-4).
    """
    alpha = 1 - CONFIDENCE
    if count > _POISSON_EXACT_MAX:
        lower = chi2_quantile(2 * count, -Z_975) / 2
        upper = chi2_quantile(2 * count + 2, Z_975) / 2
        return lower, upper
    lower = 0.0 if count == 0 else _solve_poisson_cdf(count - 1, 1 - alpha / 2)
    upper = _solve_poisson_cdf(count, alpha / 2)
    return lower, upper


def _poisson_cdf(m: int, lam: float) -> float:
    """P(X <= m) for X ~ Poisson(lam), summed in log space."""
    k = np.arange(m + 1, dtype=np.float64)
    log_fact = np.concatenate(([0.0], np.cumsum(np.log(k[1:]))))
    return float(np.exp(k * math.log(lam) - lam - log_fact).sum())


def _solve_poisson_cdf(m: int, target: float) -> float:
    """The lam with P(X <= m; lam) = target (the CDF falls as lam grows)."""
    lo, hi = 1e-12, m + 20.0 + 10.0 * math.sqrt(m + 1)
    for _ in range(200):
        mid = (lo + hi) / 2
        if _poisson_cdf(m, mid) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2


def chi2_quantile(dof: int, z: float) -> float:
    """Chi-square quantile with `dof` degrees of freedom at the standard normal quantile z
    (Wilson-Hilferty: relative error below 0.2% from 10 degrees of freedom on)."""
    c = 2.0 / (9.0 * dof)
    return dof * (1.0 - c + z * math.sqrt(c)) ** 3
