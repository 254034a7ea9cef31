"""A service-level objective on latency, and whether a point meets it (docs/find.md, "SLO").

An SLO is written ``p99<50ms`` (any percentile: p50, p90, p99, p99.9 or p999, p75, ...) or
``mean<10ms``, in ns, us, ms or s. A point's decision, at 95% confidence:

- **met**: the upper bound of the statistic's 95% interval is under the limit (MLPerf
  LoadGen's rule: the SLO holds even at the pessimistic end of what the data allows);
- **missed**: the lower bound is at or over the limit;
- **undecided**: the interval straddles the limit (more samples would tell), or there are
  too few samples for an interval.

A percentile counts every request after warm-up: a timeout, drop or error ranks above every
success (knee.stats.distribution's headline), so failures can only push it up; an interval
bound that lands on a failure is over any limit. The percentile interval is the
distribution-free order-statistic one (knee.stats.intervals); the mean's is batch means,
over successful requests (failures count through the error share instead). Both ends of a
two-sided 95% interval are used, so each one-sided decision holds with 97.5%.

An unstable point (over capacity) misses the SLO whatever its percentile says: its
latency depends on how long it ran.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from knee.stats.intervals import (
    MEAN_MIN_BATCHES,
    mean_ci,
    order_statistic_ranks,
    quantile_rank,
)

_UNITS_NS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_SLO = re.compile(
    r"^\s*(?P<stat>mean|p(?P<digits>\d+)(?:\.(?P<frac>\d+))?)\s*<\s*"
    r"(?P<value>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ns|us|µs|ms|s)\s*$"
)
#: An SLO's limit may not exceed an hour, as a request's timeout may not (params.MAX_WAIT_MS).
MAX_LIMIT_NS = 3_600e9


class SloError(ValueError):
    """An SLO that cannot be read; its message says what was expected."""


@dataclass(frozen=True)
class Slo:
    text: str  # as normalised: "p99<50ms"
    stat: str  # "mean" or "p99", "p99.9", ...
    q: float | None  # the percentile's quantile (0.99); None for the mean
    limit_ns: float

    def to_json(self) -> dict[str, Any]:
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
    """The fewest requests whose 95% interval of the SLO's statistic exists: a percentile's
    order-statistic interval needs its upper rank within the sample (about 550 for a p99,
    5,500 for a p99.9); the mean's batch-means interval, MEAN_MIN_BATCHES."""
    if slo.q is None:
        return MEAN_MIN_BATCHES
    lo, hi = 2, 2
    while order_statistic_ranks(hi, slo.q) is None:
        lo, hi = hi, hi * 2
    while lo < hi:  # the smallest n in (lo, hi] with an interval
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if order_statistic_ranks(mid, slo.q) is None else (lo, mid)
    return hi


def decide(
    sorted_ok_ns: np.ndarray,
    ok_in_send_order_ns: np.ndarray,
    failures: int,
    slo: Slo,
    unstable: bool,
) -> dict[str, Any]:
    """The point's decision on `slo` ("met", "missed", "undecided"), with the statistic's
    value and 95% interval (ns; None where it lands on a failure) and a one-line detail."""
    n_ok = len(sorted_ok_ns)
    value, ci = _statistic(sorted_ok_ns, ok_in_send_order_ns, failures, slo)
    shown = (
        f"{slo.stat} {_ms(value)} ms, 95% interval [{_ms(ci[0])}, {_ms(ci[1])}] ms"
        if ci
        else (f"{slo.stat} {_ms(value)} ms, no interval ({n_ok + failures} requests: too few)")
    )
    limit = f"{slo.limit_ns / 1e6:g} ms"
    if unstable:
        verdict, why = "missed", f"the point is over capacity ({shown}; its latency grows)"
    elif ci is None:
        verdict, why = "undecided", shown
    elif ci[1] is not None and ci[1] < slo.limit_ns:
        verdict, why = "met", f"{shown}: the upper bound is under {limit}"
    elif ci[0] is None or ci[0] >= slo.limit_ns:
        verdict, why = "missed", f"{shown}: the lower bound is at or over {limit}"
    else:
        verdict, why = "undecided", f"{shown}: the interval straddles {limit}"
    return {
        "slo": slo.text,
        "verdict": verdict,
        "value_ns": value,
        "ci_ns": ci,
        "limit_ns": slo.limit_ns,
        "detail": f"SLO {slo.text} {verdict}: {why}",
    }


def _statistic(
    sorted_ok_ns: np.ndarray, ok_in_send_order_ns: np.ndarray, failures: int, slo: Slo
) -> tuple[float | None, list[float | None] | None]:
    """The statistic and its 95% interval; a percentile rank past the successes is a
    failure (None: slower than any limit)."""
    n_ok = len(sorted_ok_ns)
    if slo.q is None:
        mean = float(ok_in_send_order_ns.mean()) if n_ok else None
        ci = mean_ci(ok_in_send_order_ns) if n_ok else None
        return mean, (None if ci is None else [float(ci[0]), float(ci[1])])
    n = n_ok + failures

    def at(rank: int) -> float | None:  # 1-based; None past the successes
        return float(sorted_ok_ns[rank - 1]) if rank <= n_ok else None

    value = at(quantile_rank(n, slo.q)) if n else None
    ranks = order_statistic_ranks(n, slo.q) if n else None
    return value, (None if ranks is None else [at(ranks[0]), at(ranks[1])])


def _ms(ns: float | None) -> str:
    return "failed" if ns is None else f"{ns / 1e6:.4g}"


def point_slo(samples: Any, slo: Slo, stats: dict[str, Any]) -> dict[str, Any]:
    """`decide` over one point's samples (knee.results.point_frame: every row, warm-up
    marked) and its statistics (for the stability verdict)."""
    post = samples[~samples["warmup"].to_numpy()]
    ok = post["status"].to_numpy() == "ok"
    order = np.argsort(post["intended_ns"].to_numpy()[ok], kind="stable")
    latency = post["latency_ns"].to_numpy()[ok][order].astype(np.float64)
    unstable = (stats.get("stability") or {}).get("verdict") == "unstable"
    return decide(np.sort(latency), latency, int(np.count_nonzero(~ok)), slo, unstable)
