"""Statistics of a run's samples with confidence intervals and checks (docs/statistics.md).

- `point_stats`: everything summary.json holds for one sweep point (point.py);
- `distribution`: count, mean, percentiles, max, their 95% intervals and support;
- rates.py (the send rate, throughput inside the window, drain, backlog, late sends),
  stability.py (is the system keeping up?), quantiles.py (the one percentile definition),
  intervals.py (order statistics, batch means, Poisson counts), checks.py (sender, Poisson
  arrivals, autocorrelation, percentile support), interference.py (other processes' CPU),
  cache.py (a result cache's hit ratio), tail.py (the top 1%), groups.py (per operation
  and per service), seconds.py (the one per-second binning, and per-second order
  statistics), progress.py (the recorders' live progress merged).
"""

from knee.stats.distribution import QUANTILES, distribution
from knee.stats.point import point_stats

__all__ = ["QUANTILES", "distribution", "point_stats"]
