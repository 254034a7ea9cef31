"""The checks a point's statistics carry, each with a verdict (pass, warn, fail, n/a):

- sender: the achieved send rate is the target within its 95% Poisson interval, and at
  most 1% of the sends were late (where a connection carries one request at a time, only
  the late sends a free connection could have taken count: the others waited for the
  target); its `limit` names who held the schedule back, the generator or the target;
- poisson: gaps between sends are exponential (Anderson-Darling, mean estimated);
- autocorrelation: lag-1 autocorrelation of latency, in send order;
- percentile_support: enough samples beyond each percentile shown.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats as sps

from knee.stats.distribution import QUANTILES, SUPPORT_SAMPLES, supported
from knee.stats.summary import Check, Sends

#: Most late sends (after warm-up) a generator may have before its check fails.
LATE_SHARE_MAX = 0.01
#: Stephens' critical values of the modified statistic A*2 = A2 (1 + 0.6/n), exponential
#: with estimated mean (Stephens 1974, as older scipy.stats.anderson returned them; newer
#: versions give p-values instead): significance level -> value.
AD_CRITICAL = {0.15: 0.916, 0.10: 1.062, 0.05: 1.321, 0.025: 1.591, 0.01: 1.959}
#: Fewest gaps the Anderson-Darling check is run on (Stephens' table holds from n = 5).
AD_MIN_GAPS = 10
#: Most gaps it is run on, taken evenly through the point: with a million gaps the test
#: rejects nanosecond rounding and timer jitter, which no queue notices.
AD_MAX_GAPS = 5000
#: |lag-1 autocorrelation| limits: up to 0.2 the variance of a mean is inflated at most
#: 1.5 times ((1 + r) / (1 - r) for an AR(1) sequence); beyond 0.8, more than 9 times.
AUTOCORR_PASS = 0.2
AUTOCORR_WARN = 0.8


def check(name: str, verdict: str, value: float | None, detail: str) -> Check:
    return {"name": name, "verdict": verdict, "value": value, "detail": detail}


#: What a generator that is the limit can do about it.
GENERATOR_HINT = (
    "the generator is the limit here: spread the load over more load.generators, or give "
    "it more connections"
)
#: The same, when the target held the connections too (it is the limit).
GENERATOR_ALSO = (
    "the generator also fell behind with a connection free (more load.generators, or more "
    "connections)"
)


def sends_check(target_per_s: float | None, sends: Sends, late_ms: float | None) -> Check:
    """`sender_check` of sends as `knee.stats.rates.rates` counts them (a point's, or one
    generator's against its share of the target)."""
    return sender_check(
        target_per_s,
        sends["achieved_rate_per_s"],
        sends["achieved_rate_ci_per_s"],
        sends["late_sends"],
        sends["sent"],
        late_ms,
        held=sends["late_sends_held"],
        scheduled_per_s=sends["scheduled_rate_per_s"],
    )


def sender_check(
    target_per_s: float | None,
    achieved_per_s: float,
    ci_per_s: list[float] | None,
    late_sends: int | None,
    sent: int,
    late_ms: float | None,
    *,
    held: int | None = None,
    scheduled_per_s: float | None = None,
) -> Check:
    """Did the generator send what the schedule asked? Fails when the achieved send rate is
    below the target beyond its 95% interval, or when more than 1% of the sends after
    warm-up left later than `late_ms` after their intended time; warns when it sent faster
    than the target beyond the interval. The value is achieved / target - 1 (the late share
    without a single target rate).

    `held` (one request per connection, http): the late sends that waited for a connection
    the target held. Only the others (free) count against the generator; when the held ones
    exceed 1%, a shortfall of the rate is the target's doing too. `limit` is "target" when
    the held ones exceed 1% (the target is saturated, whatever the generator also did),
    "generator" when the check failed otherwise, else None.

    `scheduled_per_s`: the rate the schedule itself made due over the same requests. A
    Poisson schedule draws a rate of its own (at 400 requests its 2.5% lower tail is 10%
    under the target); a send rate below the target but not below that draw is the
    schedule's, kept to by the generator, and passes."""
    if sent == 0:
        return check("sender", "n/a", None, "nothing was sent after warm-up") | {"limit": None}
    free = late_sends - held if late_sends is not None and held is not None else late_sends
    target_held = held is not None and held / sent > LATE_SHARE_MAX
    problems: list[str] = []
    verdict = "pass"
    value: float | None = (late_sends or 0) / sent
    if target_per_s is not None and target_per_s > 0:
        value = achieved_per_s / target_per_s - 1
        shown = f"sent {achieved_per_s:.4g}/s vs target {target_per_s:.4g}/s ({value:+.1%})"
        interval = f"[{ci_per_s[0]:.4g}, {ci_per_s[1]:.4g}]" if ci_per_s else "(none)"
        if (
            scheduled_per_s is not None
            and ci_per_s is not None
            and scheduled_per_s <= ci_per_s[1] < target_per_s
        ):
            problems.append(
                f"{shown}: below the target beyond the 95% interval {interval}, as the "
                f"schedule drew {scheduled_per_s:.4g}/s: the sends kept to the schedule"
            )
        elif ci_per_s is not None and ci_per_s[1] < target_per_s:
            below = f"{shown}: below the target beyond the 95% interval {interval}"
            problems.append(below + (" (held by the target)" if target_held else ""))
            verdict = "pass" if target_held else "fail"
        elif ci_per_s is not None and ci_per_s[0] > target_per_s:
            problems.append(f"{shown}: above the target beyond the 95% interval {interval}")
            verdict = "warn"
        else:
            problems.append(f"{shown}: target inside the 95% interval {interval}")
    late, too_late = _late_sends(free, held, sent, late_ms)
    problems.append(late)
    if too_late:
        verdict = "fail"
    # A target that holds the connections is the limit, whatever the generator also did:
    # the point is over the target's capacity. Late sends of its own still fail the check.
    if verdict == "fail":
        problems.append(GENERATOR_ALSO if target_held else GENERATOR_HINT)
    limit = "target" if target_held else "generator" if verdict == "fail" else None
    return check("sender", verdict, value, "; ".join(problems)) | {"limit": limit}


def _late_sends(
    free: int | None, held: int | None, sent: int, late_ms: float | None
) -> tuple[str, bool]:
    """The late sends in words, and whether the generator's own (`free`, all of them
    without `held`) exceed 1%."""
    if free is None or late_ms is None:
        return "late sends unknown", False
    too_late = free / sent > LATE_SHARE_MAX
    words = f"{free} of {sent} sends ({free / sent:.2%}) later than {late_ms:g} ms"
    if held is not None:
        words += " with a connection free"
    if too_late:
        words += f": more than {LATE_SHARE_MAX:.0%}"
    if held:
        words += (
            f"; {held} ({held / sent:.2%}) waited for a connection the target held "
            "(the target is the limit)"
        )
    return words, too_late


def anderson_darling_expon(x: np.ndarray) -> float:
    """Anderson-Darling A2 of x against an exponential with the sample mean
    (scipy.stats.anderson's statistic)."""
    with warnings.catch_warnings():
        # scipy >= 1.17 warns that a future version computes p-values instead of critical
        # values; only the statistic, unchanged, is used here.
        warnings.simplefilter("ignore", FutureWarning)
        return float(sps.anderson(np.asarray(x, dtype=np.float64), dist="expon").statistic)


def poisson_check(schedule: str | None, sent_ns: np.ndarray) -> Check:
    """For a Poisson schedule: are the gaps between actual sends (what the server saw, after
    any lateness of the generator) exponential? At most AD_MAX_GAPS gaps are tested.
    Verdict by the modified statistic A*2: pass below the 5% critical value, warn below the
    1% one, fail above."""
    if schedule != "poisson":
        what = "unknown" if schedule is None else f"'{schedule}'"
        return check("poisson", "n/a", None, f"schedule {what}: Poisson arrivals not expected")
    # Whole-ns timestamps: a zero gap means under 1 ns, not an impossible exact 0.
    gaps = np.maximum(np.diff(np.sort(sent_ns)), 0.5)
    if len(gaps) > AD_MAX_GAPS:  # gaps of a Poisson process are independent: any subset is
        gaps = gaps[np.linspace(0, len(gaps) - 1, AD_MAX_GAPS).astype(np.int64)]
    n = len(gaps)
    if n < AD_MIN_GAPS or float(gaps.mean()) <= 0:
        return check("poisson", "n/a", None, f"{n} gaps between sends: too few to test")
    a2 = anderson_darling_expon(gaps) * (1 + 0.6 / n)
    at5, at1 = AD_CRITICAL[0.05], AD_CRITICAL[0.01]
    shown = f"A*2 = {a2:.3f} over {n} gaps between sends"
    if a2 < at5:
        return check("poisson", "pass", a2, f"{shown}: exponential (5% critical value {at5})")
    if a2 < at1:
        return check("poisson", "warn", a2, f"{shown}: rejected at 5% ({at5}), not at 1% ({at1})")
    return check(
        "poisson",
        "fail",
        a2,
        f"{shown}: not exponential (1% critical value {at1}); the generator may have "
        "fallen behind its schedule (see late sends)",
    )


def lag1_autocorrelation(x: np.ndarray) -> float | None:
    """Sample lag-1 autocorrelation; None for fewer than 3 values or no variance."""
    if len(x) < 3:
        return None
    d = np.asarray(x, dtype=np.float64) - float(np.mean(x))
    denom = float(np.dot(d, d))
    if denom <= 0:
        return None
    return float(np.dot(d[:-1], d[1:]) / denom)


def autocorrelation_check(latency_in_time_order: np.ndarray) -> Check:
    """Lag-1 autocorrelation of latency in send order. Order-statistic intervals assume
    independent samples; a queue carried from one request to the next breaks that."""
    n = len(latency_in_time_order)
    r = lag1_autocorrelation(latency_in_time_order) if n >= 10 else None
    if r is None:
        return check("autocorrelation", "n/a", None, f"{n} samples: too few or all equal")
    r_eff = min(max(r, 0.0), 0.999)
    n_eff = n * (1 - r_eff) / (1 + r_eff)
    shown = f"lag-1 autocorrelation {r:.3f}"
    if abs(r) <= AUTOCORR_PASS:
        return check("autocorrelation", "pass", r, f"{shown}: samples nearly independent")
    detail = (
        f"{shown}: consecutive requests share queueing; about {n_eff:.0f} of {n} samples' "
        f"worth of information (AR(1)), so percentile intervals are ~{math.sqrt(n / n_eff):.1f}x "
        "too narrow"
    )
    verdict = "warn" if abs(r) <= AUTOCORR_WARN else "fail"
    return check("autocorrelation", verdict, r, detail)


def support_check(n: int) -> Check:
    """Pass when every percentile shown has >= 100 samples beyond it; warn when only some
    (p50 at least) have; fail when not even the median has. The value is the highest
    supported quantile."""
    ok = [name for name, q in QUANTILES.items() if supported(n, q)]
    missing = [name for name in QUANTILES if name not in ok]
    top = max((QUANTILES[name] for name in ok), default=None)
    if not missing:
        return check("percentile_support", "pass", top, f"{n} samples support p50-p99.9")
    needs = ", ".join(
        f"{name} needs {SUPPORT_SAMPLES / (1 - QUANTILES[name]):.0f}" for name in missing
    )
    verdict = "warn" if ok else "fail"
    shown = f"{n} samples; supported: {', '.join(ok) or 'none'}; {needs}"
    return check("percentile_support", verdict, top, shown)
