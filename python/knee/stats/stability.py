"""Is the system keeping up at this point? (docs/statistics.md, "Stability")

Four signs that a point is over capacity, any of which makes it `unstable`:

- **trend**: OK latency grows through the point. The OK latencies in send order are cut
  into 30 consecutive batches; Kendall's tau of batch mean against batch time (a
  Mann-Kendall trend test), with its variance corrected for the batch means' own lag-1
  autocorrelation (Yue and Wang, 2004: a queue's excursions outlast a batch near
  capacity), must be significant at 1%, and the Theil-Sen slope must carry the latency up
  by more than its own mean over the window. The size rule, because a short excursion in a
  long run can be significant without mattering.
- **backlog**: more than 10% of the requests sent in the window (and over 10) are not over
  when it closes: still in flight, or meant to leave by then and still waiting to be sent
  (knee.stats.rates). In a stable queue that number is about rate x mean latency
  (Little's law), a small share of a window of many requests.
- **deficit**: fewer than 95% of the requests sent in the window completed OK in it, and
  the gap is beyond 3 Poisson standard deviations: requests time out, are shed, or fail.
- **wait** (only where each connection carries one request at a time, http: `connections`
  given): the wait for a connection grows through the point. Past capacity the target holds
  every connection, the requests queue in the generator, and the latency it measures on the
  wire barely grows (the queued connections inflate its mean); the send wait (sent -
  intended, in send order) grows instead. The same Mann-Kendall test as the trend, and a
  size rule: the wait's growth over the window exceeds both its mean and `late_ms` (a
  wait under a late send is noise). Brief waits near capacity (a queue that comes and
  goes) have no such trend.

An unstable point's mean and percentiles depend on how long it ran: the report says so,
draws it apart, and no model is fitted to it.
"""

from __future__ import annotations

import math
from typing import TypedDict, cast

import numpy as np
from scipy import stats as sps

from knee.stats.intervals import batch_means_of
from knee.stats.summary import Stability

#: Batches the trend test runs over, and the fewest OK samples it needs.
TREND_BATCHES = 30
TREND_MIN_SAMPLES = 10
#: Significance of the trend test.
TREND_P = 0.01
#: Share of the requests sent in the window that may still be in flight at its end, and the
#: least such count that can make a point unstable.
BACKLOG_SHARE = 0.10
BACKLOG_MIN = 10
#: Share of sent requests that must complete OK in the window, and the Poisson z the gap
#: must exceed.
OK_SHARE = 0.95
DEFICIT_Z = 3.0


class Trend(TypedDict):
    """`trend`: Kendall's tau, its p-value, the Theil-Sen slope and the lag-1
    autocorrelation of the detrended batch means."""

    tau: float
    p: float
    slope_ns_per_s: float
    lag1: float | None


def _grows(found: Trend | None, window_s: float, floor_ns: float) -> float | None:
    """The Theil-Sen growth over the window when the trend is significant and larger than
    `floor_ns`; else None."""
    if found is None or found["p"] >= TREND_P:
        return None
    growth_ns = found["slope_ns_per_s"] * window_s
    return growth_ns if growth_ns > floor_ns else None


def trend(
    intended_ok_ns: np.ndarray, latency_ok_ns: np.ndarray, *, corrected: bool = True
) -> Trend | None:
    """Mann-Kendall test and Theil-Sen slope (ns of latency per s) over batch means of OK
    latency in send order; None below TREND_MIN_SAMPLES.

    The test's p-value is corrected for autocorrelation of the batch means (Yue and Wang's
    variance correction with the lag-1 autocorrelation r of the detrended batch means: the
    statistic's variance grows by (1 + r) / (1 - r), so z shrinks by its square root);
    `corrected=False` leaves it out (the wait for a connection, see `stability`)."""
    if len(latency_ok_ns) < TREND_MIN_SAMPLES:
        return None
    t_s = batch_means_of(intended_ok_ns.astype(np.float64), TREND_BATCHES) / 1e9
    y = batch_means_of(latency_ok_ns.astype(np.float64), TREND_BATCHES)
    if np.ptp(y) == 0 or np.ptp(t_s) == 0:
        return {"tau": 0.0, "p": 1.0, "slope_ns_per_s": 0.0, "lag1": None}
    tau = sps.kendalltau(t_s, y)
    fit = sps.theilslopes(y, t_s)
    residual = y - (fit.intercept + fit.slope * t_s)
    r = _lag1(residual)
    inflation = (1 + r) / (1 - r) if corrected and r is not None and r > 0 else 1.0
    z = float(sps.norm.isf(float(tau.pvalue) / 2)) / np.sqrt(inflation)
    return {
        "tau": float(tau.statistic),
        "p": float(2 * sps.norm.sf(z)),
        "slope_ns_per_s": float(fit.slope),
        "lag1": r,
    }


def _lag1(x: np.ndarray) -> float | None:
    """Lag-1 autocorrelation, capped below 1 (None without variance)."""
    d = x - x.mean()
    denom = float(np.dot(d, d))
    if denom <= 0:
        return None
    return min(float(np.dot(d[:-1], d[1:]) / denom), 0.95)


def stability(
    *,
    intended_ok_ns: np.ndarray,
    latency_ok_ns: np.ndarray,
    window_s: float,
    sent_in_window: int,
    ok_in_window: int,
    backlog: int,
    waiting: int = 0,
    intended_sent_ns: np.ndarray | None = None,
    wait_ns: np.ndarray | None = None,
    late_ms: float | None = None,
    connections: int | None = None,
) -> Stability:
    """The verdict ("stable", "unstable", "n/a"), its reasons and the figures behind them.
    `waiting` is the part of the backlog not yet sent; `intended_sent_ns` and `wait_ns` (the
    sent requests' intended times and send waits, in send order) feed the wait sign, run only
    when `connections` is given."""
    found = trend(intended_ok_ns, latency_ok_ns)
    mean_ns = float(latency_ok_ns.mean()) if len(latency_ok_ns) else 0.0
    growth_ns = found["slope_ns_per_s"] * window_s if found else None
    reasons: list[str] = []
    if _grows(found, window_s, mean_ns) is not None and found and growth_ns is not None:
        reasons.append(
            f"latency grows {found['slope_ns_per_s'] / 1e6:.3g} ms/s "
            f"(+{growth_ns / 1e6:.3g} ms over the point)"
        )
    if backlog > max(BACKLOG_MIN, BACKLOG_SHARE * sent_in_window):
        reasons.append(_backlog_reason(backlog, waiting, sent_in_window))
    waits = (
        trend(intended_sent_ns, wait_ns, corrected=False)
        if connections is not None and intended_sent_ns is not None and wait_ns is not None
        else None
    )
    wait_growth_ns = _wait_growth(waits, wait_ns, window_s, late_ms)
    if waits is not None and wait_growth_ns is not None:
        reasons.append(
            f"the wait for a connection grows {waits['slope_ns_per_s'] / 1e6:.3g} ms/s "
            f"(+{wait_growth_ns / 1e6:.3g} ms over the point): the target holds all "
            f"{connections} connections"
        )
    queueing = bool(reasons)
    gap = sent_in_window - ok_in_window
    if (
        sent_in_window
        and ok_in_window < OK_SHARE * sent_in_window
        and gap > DEFICIT_Z * math.sqrt(sent_in_window)
    ):
        reasons.append(
            f"only {ok_in_window / sent_in_window:.0%} of the requests sent completed OK "
            "within the schedule"
        )
    figures = {
        "trend_ns_per_s": found["slope_ns_per_s"] if found else None,
        "trend_p": found["p"] if found else None,
        "growth_ns": growth_ns,
        "backlog": backlog,
        "backlog_waiting": waiting,
        "wait_trend_ns_per_s": waits["slope_ns_per_s"] if waits else None,
        "wait_trend_p": waits["p"] if waits else None,
        "wait_growth_ns": waits["slope_ns_per_s"] * window_s if waits else None,
        "sent_in_window": sent_in_window,
        "ok_in_window": ok_in_window,
        "ok_share": ok_in_window / sent_in_window if sent_in_window else None,
        # A sign of a queue (latency, backlog or wait growing), not only failures.
        "queueing": queueing,
    }
    if reasons:
        # Only a queue makes the mean depend on the run's length; a target that fails
        # requests without one (it sheds load) does not.
        tail = (
            "; its mean depends on the run's length"
            if queueing
            else ": failing, with no growing queue"
        )
        detail = "over capacity: " + "; ".join(reasons) + tail
        return cast(
            Stability, {"verdict": "unstable", "reasons": reasons, "detail": detail, **figures}
        )
    if found is None or not sent_in_window:
        detail = f"{len(latency_ok_ns)} OK samples: too few to judge"
        return cast(Stability, {"verdict": "n/a", "reasons": [], "detail": detail, **figures})
    detail = (
        f"keeping up: no growing latency trend (Mann-Kendall p = {found['p']:.2g}), "
        f"{backlog - waiting} in flight and {waiting} waiting to be sent at the end, "
        f"{ok_in_window / sent_in_window:.1%} of sends completed OK in the window"
    )
    if waits is not None:
        detail += f", no growing wait for a connection (p = {waits['p']:.2g})"
    return cast(Stability, {"verdict": "stable", "reasons": [], "detail": detail, **figures})


def _backlog_reason(backlog: int, waiting: int, sent_in_window: int) -> str:
    share = f"{backlog / sent_in_window:.0%} of those sent" if sent_in_window else "none sent"
    return (
        f"{backlog} requests ({share}) not over when the schedule ended: "
        f"{backlog - waiting} in flight, {waiting} still waiting to be sent"
    )


def _wait_growth(
    waits: Trend | None,
    wait_ns: np.ndarray | None,
    window_s: float,
    late_ms: float | None,
) -> float | None:
    """The send wait's growth over the window when it is significant and larger than both
    the wait's mean and a late send (`late_ms`); else None."""
    if waits is None or wait_ns is None or not len(wait_ns):
        return None
    floor_ns = max(float(wait_ns.mean()), (late_ms or 0.0) * 1e6)
    return _grows(waits, window_s, floor_ns)
