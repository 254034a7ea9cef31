"""The watch that cuts an overloaded probe short (docs/find.md, "A probe"): its backlog of
requests due and not yet over keeps growing past a bound."""

from __future__ import annotations

from typing import Any

#: An overloaded probe is cut short once the requests due and not yet over exceed both
#: this many seconds of its rate and CUT_LATENCIES low-load latencies of it (a stable
#: queue holds about rate x latency: Little's law), and at least CUT_MIN_REQUESTS.
CUT_BACKLOG_S = 2.0
CUT_LATENCIES = 20.0
CUT_MIN_REQUESTS = 100
#: Seconds after the start before a probe can be cut (its warm-up and first queue).
CUT_AFTER_S = 3.0


def overload_watch(rate_per_s: float, low_latency_s: float | None) -> Any:
    """A runner watch (knee.runner.local.Watch) that cuts a probe short when the requests
    due and not yet over keep exceeding the bound (module constants) on two progress lines
    in a row. The backlog a cut probe leaves is then at most the bound plus about 2 s of
    the rate (the two lines and the stop). The reason goes into the point's `cut_short`."""
    bound = max(CUT_MIN_REQUESTS, rate_per_s * CUT_BACKLOG_S)
    if low_latency_s:
        bound = max(bound, rate_per_s * low_latency_s * CUT_LATENCIES)
    over = [0]

    def watch(progress: dict[str, Any]) -> str | None:
        t_s = float(progress.get("t_s") or 0.0)
        target = progress.get("target_rate_per_s") or rate_per_s
        due = target * t_s
        outstanding = due - float(progress.get("completed") or 0)
        if t_s < CUT_AFTER_S or outstanding <= bound:
            over[0] = 0
            return None
        over[0] += 1
        if over[0] < 2:
            return None
        return (
            f"{outstanding:.0f} requests due and not over after {t_s:.0f} s "
            f"(bound {bound:.0f}: the target is not keeping up)"
        )

    return watch
