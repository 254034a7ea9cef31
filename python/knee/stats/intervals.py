"""95% confidence intervals: quantiles (order statistics), the mean (batch means), and an
arrival rate (Poisson count). The distributions themselves come from scipy."""

from __future__ import annotations

import math

import numpy as np

from knee.stats import quantiles

# scipy.stats takes about a second to import: each function that needs a distribution
# imports it when first called, so that reading a spec (its SLO's rules, below) does not.

CONFIDENCE = 0.95
#: Batches of consecutive samples the mean's interval is computed from.
MEAN_BATCHES = 30
#: Fewest batches (and so samples) the mean's interval is given for.
MEAN_MIN_BATCHES = 5


def quantile_rank(n: int, q: float) -> int:
    """1-based rank of the q-quantile estimate: x_(ceil(n q)) ("inverted CDF"), in integer
    arithmetic (knee.stats.quantiles, the one percentile definition)."""
    return quantiles.rank(n, q)


def order_statistic_ranks(
    n: int, q: float, confidence: float = CONFIDENCE
) -> tuple[int, int] | None:
    """1-based ranks (l, u) with P(x_(l) <= true q-quantile <= x_(u)) >= `confidence` (95%)
    for any continuous distribution, or None when n is too small for such ranks to exist.

    With B ~ Binomial(n, q), the coverage is P(l <= B < u) = F(u-1) - F(l-1): l is the
    largest rank with F(l-1) <= alpha/2, u the smallest with F(u-1) >= 1 - alpha/2 (scipy's
    exact binomial CDF and its inverse; alpha = 1 - confidence).
    """
    from scipy import stats as sps

    if n < 1 or not 0 < q < 1:
        return None
    alpha = 1 - confidence
    # ppf(p) is the smallest k with F(k) >= p; the largest k with F(k) <= p is ppf(p) when
    # F lands exactly on p there, else one below.
    k_low = int(sps.binom.ppf(alpha / 2, n, q))
    if sps.binom.cdf(k_low, n, q) > alpha / 2:
        k_low -= 1
    if k_low < 0:
        return None
    upper = int(sps.binom.ppf(1 - alpha / 2, n, q)) + 1
    if upper > n:
        return None
    return k_low + 1, upper


def upper_bound_rank(n: int, q: float, confidence: float) -> int | None:
    """The smallest 1-based rank u with P(x_(u) >= true q-quantile) >= `confidence` (one
    side), or None when n is too small (u would pass n).

    x_(u) lies below the quantile only when u or more of the n samples do, so with
    B ~ Binomial(n, q) the bound holds with P(B <= u - 1) = F(u - 1): u is the smallest rank
    with F(u - 1) >= confidence. The top rank, u = n, covers with 1 - q^n, so the bound
    exists once q^n <= 1 - confidence. MLPerf LoadGen's early-stopping rule is this test:
    the percentile passes when its upper bound at confidence 0.99 is under the target."""
    from scipy import stats as sps

    if n < 1 or not 0 < q < 1:
        return None
    u = int(sps.binom.ppf(confidence, n, q)) + 1
    # ppf works in floating point: step to the exact smallest rank the CDF allows.
    while u > 1 and sps.binom.cdf(u - 2, n, q) >= confidence:
        u -= 1
    while u <= n and sps.binom.cdf(u - 1, n, q) < confidence:
        u += 1
    return u if u <= n else None


def lower_bound_rank(n: int, q: float, confidence: float) -> int | None:
    """The largest 1-based rank l with P(x_(l) <= true q-quantile) >= `confidence` (one
    side), or None when n is too small: l is the largest rank with F(l - 1) <= 1 -
    `confidence` (B ~ Binomial(n, q)); it exists once (1 - q)^n <= 1 - confidence."""
    from scipy import stats as sps

    if n < 1 or not 0 < q < 1:
        return None
    alpha = 1 - confidence
    k = int(sps.binom.ppf(alpha, n, q))
    while k >= 0 and sps.binom.cdf(k, n, q) > alpha:
        k -= 1
    while k + 1 < n and sps.binom.cdf(k + 1, n, q) <= alpha:
        k += 1
    return k + 1 if k >= 0 else None


def quantile_ci(sorted_values: np.ndarray, q: float) -> list[float] | None:
    """[x_(l), x_(u)] from `order_statistic_ranks` over ascending values, or None."""
    ranks = order_statistic_ranks(len(sorted_values), q)
    if ranks is None:
        return None
    return [float(sorted_values[ranks[0] - 1]), float(sorted_values[ranks[1] - 1])]


def t_975(df: int) -> float:
    """Student-t 0.975 quantile (the batch-means interval)."""
    from scipy import stats as sps

    return float(sps.t.ppf(0.975, df))


def mean_ci(values_in_time_order: np.ndarray, confidence: float = CONFIDENCE) -> list[float] | None:
    """95% interval (or `confidence`, two-sided) for the mean by batch means: the samples,
    in the order they were sent, are cut into `MEAN_BATCHES` consecutive batches (fewer
    when n < 30: one sample each), and the interval is mean +- t(k-1) * sd(batch means) / sqrt(k).

    Batches, not single samples, because latencies under load are autocorrelated (a queue
    carries over from one request to the next); batch means stay valid for a stationary
    sequence whose correlation dies out within a batch, and reduce to the ordinary t
    interval for independent samples. The t quantile assumes the batch means are nearly
    normal (the central limit theorem), so this interval is asymptotically, not exactly,
    distribution-free. None when n < 5.
    """
    n = len(values_in_time_order)
    if n < MEAN_MIN_BATCHES:
        return None
    batch_means = batch_means_of(np.asarray(values_in_time_order, dtype=np.float64))
    mean = float(np.mean(values_in_time_order))
    half = t_half_width(batch_means, confidence)
    return [mean - half, mean + half]


def t_half_width(x: np.ndarray, confidence: float = CONFIDENCE) -> float:
    """Half the width of Student's t interval (two-sided `confidence`) for the mean of the
    independent values x: t(n-1) * sd(x) / sqrt(n). Batch means (`mean_ci`) and per-second
    resource rows (knee.resources.usage) both use it."""
    from scipy import stats as sps

    k = len(x)
    t = t_975(k - 1) if confidence == CONFIDENCE else float(sps.t.ppf(0.5 + confidence / 2, k - 1))
    return t * float(x.std(ddof=1)) / math.sqrt(k)


def batch_means_of(x: np.ndarray, batches: int = MEAN_BATCHES) -> np.ndarray:
    """Means of min(batches, n) consecutive, near-equal batches of x (in its order)."""
    n = len(x)
    k = min(batches, n)
    bounds = (np.arange(k + 1) * n) // k  # batch i holds x[bounds[i]:bounds[i + 1]]
    return np.add.reduceat(x, bounds[:-1]) / np.diff(bounds)


def poisson_count_ci(count: int) -> tuple[float, float]:
    """95% interval for the mean of a Poisson count that came out as `count`: Garwood's
    exact interval, chi2(2.5%, 2 count) / 2 to chi2(97.5%, 2 count + 2) / 2."""
    from scipy import stats as sps

    alpha = 1 - CONFIDENCE
    lower = 0.0 if count == 0 else float(sps.chi2.ppf(alpha / 2, 2 * count)) / 2
    upper = float(sps.chi2.ppf(1 - alpha / 2, 2 * count + 2)) / 2
    return lower, upper


def chi2_ppf(p: float, dof: int) -> float:
    """The chi-square quantile at probability p with `dof` degrees of freedom."""
    from scipy import stats as sps

    return float(sps.chi2.ppf(p, dof))
