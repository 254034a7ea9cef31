"""Was the machine disturbed during a point? From the host rows of timeseries.parquet
(knee.monitor: foreign CPU, steal and iowait per sample, in core-percent, 100 = one core).

The `interference` check warns when, over the point's post-warm-up samples:

- other processes used more than FOREIGN_MEAN_WARN_PERCENT of a core on average, or more
  than FOREIGN_MAX_WARN_PERCENT in one sample of at least MAX_MIN_INTERVAL_S;
- the hypervisor stole more than STEAL_WARN_PERCENT of a core on average.

Means are weighted by each sample's interval (a point's last sample is usually short).
/proc/stat and the processes' CPU times count whole 10 ms ticks, so a short sample's
foreign figure is coarse (one tick in 0.1 s is 10% of a core): a threshold must be exceeded
by more than that quantization (each sample's `tick_error_percent`, combined over the
point as independent errors) before the point is called disturbed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from knee.monitor import HOST_ROLE
from knee.stats.checks import Check, check
from knee.stats.summary import PointInterference, PointStats

#: Mean foreign CPU (core-percent) above which a point is disturbed. On 2 cores a tenth of
#: a core is 5% of the machine, and it is well above the floor of the measurement: host and
#: process ticks are counted apart (10 ms each), so a quiet host shows a few percent.
FOREIGN_MEAN_WARN_PERCENT = 10.0
#: A half core taken by others for a whole second delays the requests of that second (a
#: tail effect) even when the point's mean stays low.
FOREIGN_MAX_WARN_PERCENT = 50.0
#: Samples shorter than this do not count for the maximum: over 0.1 s one 10 ms tick is 10%.
MAX_MIN_INTERVAL_S = 0.5
#: Mean steal (core-percent). Steal is counted in 10 ms ticks; a tick now and then is the
#: hypervisor's background (measured in docs/statistics.md, "Interference") and would
#: mark every point. 1% is one tick per second on average.
STEAL_WARN_PERCENT = 1.0


def interference(rows: Sequence[Mapping[str, Any]]) -> tuple[PointInterference, Check]:
    """The point's interference summary and check, from its host rows (post-warm-up)."""
    empty: PointInterference = {
        "foreign_cpu_percent_mean": None,
        "foreign_cpu_percent_max": None,
        "steal_percent_mean": None,
        "iowait_percent_mean": None,
        "tick_error_percent": None,
        "samples": len(rows),
    }
    if not rows:
        return empty, check(
            "interference",
            "n/a",
            None,
            "no host CPU samples after the warm-up (no /proc/stat, or the point was shorter "
            "than one sample interval)",
        )
    weight = _column(rows, "interval_s", default=1.0)
    foreign = _column(rows, "foreign_cpu_percent")
    steal = _column(rows, "steal_percent")
    long_enough = weight >= MAX_MIN_INTERVAL_S
    error = _column(rows, "tick_error_percent")
    # A busy second beyond doubt: over the threshold even after its tick error.
    busy_second = bool(np.any(foreign[long_enough] - error[long_enough] > FOREIGN_MAX_WARN_PERCENT))
    mean, steal_mean = _mean(foreign, weight), _mean(steal, weight)
    peak = float(foreign[long_enough].max()) if long_enough.any() else None
    iowait = _mean(_column(rows, "iowait_percent"), weight)
    margin = (
        float(np.sqrt(((error * weight) ** 2).sum()) / weight.sum()) if weight.sum() > 0 else 0.0
    )
    summary: PointInterference = {
        "foreign_cpu_percent_mean": mean,
        "foreign_cpu_percent_max": peak,
        "steal_percent_mean": steal_mean,
        "iowait_percent_mean": iowait,
        "tick_error_percent": margin,
        "samples": len(rows),
    }
    return summary, _verdict(mean, peak, steal_mean, iowait, margin, len(rows), busy_second)


def add_interference(
    stats: PointStats, rows: Sequence[Mapping[str, Any]], point: int, after_s: float
) -> None:
    """Foreign CPU and steal over a point's post-warm-up host rows (of the run's timeseries
    `rows`, from `after_s` on): stats["interference"] and the `interference` check."""
    host = [
        r
        for r in rows
        if r["point"] == point and r["t_s"] >= after_s and r.get("role") == HOST_ROLE
    ]
    stats["interference"], verdict = interference(host)
    stats.setdefault("checks", []).append(verdict)


def _column(rows: Sequence[Mapping[str, Any]], key: str, default: float = 0.0) -> np.ndarray:
    values = [r.get(key) for r in rows]
    return np.array([default if v is None else v for v in values], dtype=np.float64)


def _mean(values: np.ndarray, weight: np.ndarray) -> float:
    total = float(weight.sum())
    return float((values * weight).sum() / total) if total > 0 else float(values.mean())


def _verdict(
    mean: float,
    peak: float | None,
    steal: float,
    iowait: float,
    margin: float,
    samples: int,
    busy_second: bool,
) -> Check:
    """The check of the means (core-percent) over a point's `samples` host rows; `margin`
    the tick error, `peak` the busiest second's foreign CPU."""
    shown_peak = "" if peak is None else f" (max {peak:.0f}% in one second)"
    detail = (
        f"other processes used {mean:.1f}% ± {margin:.1f}% of a core{shown_peak} during the "
        "point (± the 10 ms tick resolution); "
        f"steal {steal:.1f}%, iowait {iowait:.1f}% of a core; "
        f"{samples} samples"
    )
    over = []
    if mean - margin > FOREIGN_MEAN_WARN_PERCENT:
        over.append(f"mean above {FOREIGN_MEAN_WARN_PERCENT:g}% of a core")
    if busy_second:
        over.append(f"one second above {FOREIGN_MAX_WARN_PERCENT:g}%")
    if steal > STEAL_WARN_PERCENT:
        over.append(f"steal above {STEAL_WARN_PERCENT:g}%")
    if over:
        return check("interference", "warn", mean, f"{detail}: {', '.join(over)}")
    return check("interference", "pass", mean, detail)
