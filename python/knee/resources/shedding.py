"""A target that sheds load (docs/explain.md, "A target that sheds load"): beyond its rate a
rate limiter or an overload guard (nginx's `limit_req`, Envoy's local rate limit, an
application's admission control) answers at once with 429 Too Many Requests or 503 Service
Unavailable. Its latency stays low while it fails requests, so no resource it uses is near
its limit, and the bound 1/D of the busiest one lies far above the measured capacity: the
failures, not a queue, are what set the capacity. This names them.
"""

from __future__ import annotations

from http import HTTPStatus

from knee.stats.decision import ERROR_SHARE, decide, failed_share
from knee.stats.summary import PointStats, Shedding

#: The statuses a service answers when it refuses work it could not take: RFC 6585's 429
#: (a rate limit) and RFC 9110's 503 (overloaded, or in maintenance).
SHED_STATUSES = (429, 503)
#: The failures over capacity are shedding when at least this share of them are replies
#: with one of SHED_STATUSES (the rest: timeouts, resets, other statuses).
SHED_SHARE = 0.9


def _rate(point: PointStats) -> float:
    return float(point.get("target_rate_per_s") or 0.0)


def _phrase(code: int) -> str:
    try:
        return f"{code} {HTTPStatus(code).phrase}"
    except ValueError:
        return str(code)


def shedding(points: list[PointStats]) -> Shedding | None:
    """How the target shed load over its capacity, from the points not kept up with whose
    failed share passed the search's ERROR_SHARE; None when it did not shed (the lowest rate
    not kept up with did not fail, or most failures were not SHED_STATUSES replies)."""
    bad = [p for p in points if decide(p).capacity == "unstable"]
    over = [p for p in bad if failed_share(p) > ERROR_SHARE]
    # Shedding sets the capacity only when the lowest rate not kept up with already failed
    # (a queue that grows first, and overflows into 503s above, is set by the queue).
    if not over or failed_share(min(bad, key=_rate)) <= ERROR_SHARE:
        return None
    failed = sum(_failed(p) for p in over)
    codes: dict[int, int] = {}
    for p in over:  # a few points, each with a few status codes: not a loop over samples
        for code, n in (p.get("http_statuses") or {}).items():
            if int(code) in SHED_STATUSES:
                codes[int(code)] = codes.get(int(code), 0) + int(n)
    shed = sum(codes.values())
    if failed <= 0 or shed < SHED_SHARE * failed:
        return None
    shares = [failed_share(p) for p in over]
    first = min(over, key=_rate)
    return {
        "from_rate_per_s": _rate(first),
        "failed_share": [min(shares), max(shares)],
        "statuses": {str(c): n for c, n in sorted(codes.items())},
        "shed_share_of_failures": shed / failed,
        # The requests it served (a refusal's own latency is not kept apart).
        "served_p50_ms": _ms(first["latency_ok_ns"]["p50"] if "latency_ok_ns" in first else None),
        "points": [p.get("point") for p in over],
    }


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def _failed(point: PointStats) -> int:
    """Post-warm-up requests that did not end OK."""
    statuses = point.get("statuses") or {}
    return sum(int(v) for k, v in statuses.items() if k != "ok")


def sentence(shed: Shedding) -> str:
    """The "set by ..." words for a target that shed load."""
    lo, hi = shed["failed_share"]
    share = f"{lo:.1%}" if abs(hi - lo) < 5e-4 else f"{lo:.1%} to {hi:.1%}"
    codes = ", ".join(f"{_phrase(int(c))} ({n:,})" for c, n in shed["statuses"].items())
    fast = (
        f", while the requests it served stayed fast (p50 {shed['served_p50_ms']:.3g} ms)"
        if shed.get("served_p50_ms")
        else ""
    )
    return (
        f"set by the target shedding load: from {shed['from_rate_per_s']:.4g}/s it refused "
        f"{share} of requests with {codes}{fast}; a rate limiter or an overload guard, not a "
        "resource filling up"
    )
