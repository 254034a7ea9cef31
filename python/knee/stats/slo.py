"""A service-level objective on latency, and whether a point meets it (docs/find.md, "SLO").

An SLO is written ``p99<50ms`` (any percentile: p50, p90, p99, p99.9 or p999, p75, ...) or
``mean<10ms``, in ns, us, ms or s. A point's decision, each side at one-sided 99%
confidence (CONFIDENCE):

- **met**: the statistic's one-sided 99% upper bound is under the limit. For a percentile
  this is MLPerf LoadGen's early-stopping rule (mlcommons/inference, loadgen/results.cc,
  ``PerformanceSummary::EarlyStopping``, server scenario: ``confidence = 0.99``,
  ``tolerance = 0``): with t requests over the target, the run passes when n >= h + t, h
  the fewest requests under it with P(Binomial(h + t, 1 - q) <= t) <= 1%
  (loadgen/early_stopping.cc). That is the same event as the order statistic
  x_(u) of the smallest rank u with F(u - 1) >= 0.99 (B ~ Binomial(n, q)) lying under the
  limit;
- **missed**: the one-sided 99% lower bound is at or over the limit (knee's own rule, the
  mirror image: LoadGen only passes or fails a run, it never stops one early as missed);
- **undecided**: neither (more samples would tell), or too few samples for either bound.

A percentile counts every request after warm-up: a timeout, drop or error ranks above every
success (knee.stats.distribution's headline), so failures can only push it up; a bound
that lands on a failure is over any limit. The percentile's bounds are distribution-free
order statistics (knee.stats.intervals); the mean's are batch means with Student's t at
one-sided 99%, over successful requests (failures count through the error share instead).
LoadGen has no rule for a mean.

An unstable point (over capacity) misses the SLO whatever its percentile says: its
latency depends on how long it ran.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from knee.stats.intervals import (
    MEAN_MIN_BATCHES,
    lower_bound_rank,
    mean_ci,
    quantile_rank,
    upper_bound_rank,
)
from knee.stats.summary import PointStats, SloVerdict

_UNITS_NS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_SLO = re.compile(
    r"^\s*(?P<stat>mean|p(?P<digits>\d+)(?:\.(?P<frac>\d+))?)\s*<\s*"
    r"(?P<value>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ns|us|µs|ms|s)\s*$"
)
#: An SLO's limit may not exceed an hour, as a request's timeout may not (params.MAX_WAIT_MS).
MAX_LIMIT_NS = 3_600e9
#: One-sided confidence of each bound (MLPerf LoadGen's early stopping: 0.99). The two
#: bounds together make a two-sided 98% interval.
CONFIDENCE = 0.99


class SloError(ValueError):
    """An SLO that cannot be read; its message says what was expected."""


@dataclass(frozen=True)
class Slo:
    text: str  # as normalised: "p99<50ms"
    stat: str  # "mean" or "p99", "p99.9", ...
    q: float | None  # the percentile's quantile (0.99); None for the mean
    limit_ns: float

    def to_json(self) -> dict[str, str | float | None]:
        return {"text": self.text, "stat": self.stat, "q": self.q, "limit_ns": self.limit_ns}


def _quantile(digits: str, frac: str | None) -> float:
    """p99 -> 0.99, p99.9 and p999 -> 0.999, p5 -> 0.05, p50 -> 0.5."""
    if frac is not None:
        return round(float(f"{digits}.{frac}") / 100, 12)
    if len(digits) <= 2:
        return int(digits) / 100
    if digits.startswith("99"):
        return float("0." + digits)  # p999, p9999: knee's own names for p99.9, p99.99
    raise SloError(f"a percentile lies between p0 and p100, exclusive; got p{digits}")


def parse(text: str) -> Slo:
    """``'p99<50ms'`` -> Slo; raises SloError with what was expected."""
    m = _SLO.match(text)
    if m is None:
        raise SloError(
            f"expected a percentile or the mean below a time, e.g. 'p99<50ms', 'p99.9<1s', "
            f"'mean<200us' (units ns, us, ms, s); got {text!r}"
        )
    value, unit = float(m["value"]), m["unit"]
    limit_ns = value * _UNITS_NS[unit]
    if not 0 < limit_ns <= MAX_LIMIT_NS:
        raise SloError(f"the limit must be above 0 and at most an hour; got {text!r}")
    if m["stat"] == "mean":
        q, stat = None, "mean"
    else:
        q = _quantile(m["digits"], m["frac"])
        if not 0 < q < 1:
            raise SloError(f"a percentile lies between p0 and p100, exclusive; got {text!r}")
        stat = "p" + f"{q * 100:.10g}"
    shown_unit = "us" if unit == "µs" else unit
    return Slo(f"{stat}<{value:g}{shown_unit}", stat, q, limit_ns)


def min_samples(slo: Slo) -> int:
    """The fewest requests for which the SLO can be met: a percentile's one-sided 99% upper
    bound exists once q^n <= 1%, n >= ln(0.01) / ln(q) (459 for a p99, 4,603 for a p99.9,
    44 for a p90: with no request over the limit, LoadGen's h for t = 0); the mean's
    batch-means interval needs MEAN_MIN_BATCHES."""
    if slo.q is None:
        return MEAN_MIN_BATCHES
    # The top rank is the last to exist; the exact binomial test settles the boundary.
    n = max(1, math.floor(math.log(1 - CONFIDENCE) / math.log(slo.q)))
    while upper_bound_rank(n, slo.q, CONFIDENCE) is None:
        n += 1
    while n > 1 and upper_bound_rank(n - 1, slo.q, CONFIDENCE) is not None:
        n -= 1
    return n


def decide(
    sorted_ok_ns: np.ndarray,
    ok_in_send_order_ns: np.ndarray,
    failures: int,
    slo: Slo,
    unstable: bool,
) -> SloVerdict:
    """The point's decision on `slo` ("met", "missed", "undecided"), with the statistic's
    value and its one-sided 99% bounds (`ci_ns`: [lower, upper], ns; None where a bound
    lands on a failure, and `ci_ns` None when neither bound exists) and a one-line
    detail."""
    n_ok = len(sorted_ok_ns)
    value, ci = _statistic(sorted_ok_ns, ok_in_send_order_ns, failures, slo)
    shown = (
        f"{slo.stat} {_ms(value)} ms, 99% bounds [{_bound(ci[0])}, {_bound(ci[1])}] ms"
        if ci
        else (f"{slo.stat} {_ms(value)} ms, no bound ({n_ok + failures} requests: too few)")
    )
    limit = f"{slo.limit_ns / 1e6:g} ms"
    if unstable:
        verdict, why = "missed", f"the point is over capacity ({shown}; its latency grows)"
    elif ci is None:
        verdict, why = "undecided", shown
    elif ci[1] is not _NONE and ci[1] is not None and ci[1] < slo.limit_ns:
        verdict, why = "met", f"{shown}: the upper bound is under {limit}"
    elif ci[0] is not _NONE and (ci[0] is None or ci[0] >= slo.limit_ns):
        verdict, why = "missed", f"{shown}: the lower bound is at or over {limit}"
    elif ci[1] is _NONE:
        verdict, why = "undecided", f"{shown}: too few requests for an upper bound"
    else:
        verdict, why = "undecided", f"{shown}: the bounds straddle {limit}"
    return {
        "slo": slo.text,
        "verdict": verdict,
        "value_ns": value,
        "ci_ns": None if ci is None else [_json(ci[0]), _json(ci[1])],
        "confidence": CONFIDENCE,
        "limit_ns": slo.limit_ns,
        "detail": f"SLO {slo.text} {verdict}: {why}",
    }


#: A bound that does not exist (too few samples for that side), apart from None (a bound
#: that lands on a failure: over any limit).
_NONE: Any = object()


def _statistic(
    sorted_ok_ns: np.ndarray, ok_in_send_order_ns: np.ndarray, failures: int, slo: Slo
) -> tuple[float | None, list[Any] | None]:
    """The statistic and its one-sided 99% [lower, upper] bounds; a percentile rank past
    the successes is a failure (None: slower than any limit), a bound too few samples
    give is _NONE, and both missing is None."""
    n_ok = len(sorted_ok_ns)
    if slo.q is None:
        mean = float(ok_in_send_order_ns.mean()) if n_ok else None
        # Two-sided 98%: each end a one-sided 99% bound.
        ci = mean_ci(ok_in_send_order_ns, 2 * CONFIDENCE - 1) if n_ok else None
        return mean, (None if ci is None else [float(ci[0]), float(ci[1])])
    n = n_ok + failures

    def at(rank: int | None) -> Any:  # 1-based; None past the successes
        if rank is None:
            return _NONE
        return float(sorted_ok_ns[rank - 1]) if rank <= n_ok else None

    value = at(quantile_rank(n, slo.q)) if n else None
    if not n:
        return None, None
    bounds = [
        at(lower_bound_rank(n, slo.q, CONFIDENCE)),
        at(upper_bound_rank(n, slo.q, CONFIDENCE)),
    ]
    return value, (None if bounds[0] is _NONE and bounds[1] is _NONE else bounds)


def _json(bound: Any) -> float | None:
    return None if bound is _NONE else bound


def _bound(bound: Any) -> str:
    return "-" if bound is _NONE else _ms(bound)


def _ms(ns: float | None) -> str:
    return "failed" if ns is None else f"{ns / 1e6:.4g}"


def point_slo(samples: Any, slo: Slo, stats: PointStats) -> SloVerdict:
    """`decide` over one point's samples (knee.results.point_frame: every row, warm-up
    marked) and its statistics (for the stability verdict)."""
    post = samples[~samples["warmup"].to_numpy()]
    ok = post["status"].to_numpy() == "ok"
    order = np.argsort(post["intended_ns"].to_numpy()[ok], kind="stable")
    latency = post["latency_ns"].to_numpy()[ok][order].astype(np.float64)
    stability = stats.get("stability")
    unstable = stability is not None and stability["verdict"] == "unstable"
    return decide(np.sort(latency), latency, int(np.count_nonzero(~ok)), slo, unstable)
