"""Statistics of a run's samples with confidence intervals and checks (docs/statistics.md).

- `point_stats`: everything summary.json holds for one sweep point (point.py);
- `distribution`: count, mean, percentiles, max, their 95% intervals and support;
- intervals.py (order statistics, batch means, Poisson counts), checks.py (rate, Poisson
  arrivals, autocorrelation, percentile support), tail.py (the top 1%), groups.py (per
  operation and per service).
"""

from knee.stats.distribution import QUANTILES, distribution
from knee.stats.point import point_stats

__all__ = ["QUANTILES", "distribution", "point_stats"]
