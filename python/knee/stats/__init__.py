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

from typing import TYPE_CHECKING

from knee import lazy

# Light (scipy and pandas are imported where an interval or a frame is computed), and
# `distribution` is also a module's name, which a lazy name could not be (knee.lazy).
from knee.stats.distribution import QUANTILES, distribution

if TYPE_CHECKING:
    from knee.stats.point import point_stats

#: Where each name lives (imported on first use: knee.lazy), so that a light module of this
#: package (slo.py, which every spec's parsing reads) does not load the point statistics.
_LAZY = {"point_stats": "knee.stats.point"}

__getattr__ = lazy.attributes(__name__, _LAZY)

__all__ = ["QUANTILES", "distribution", "point_stats"]
