"""One live progress view of a point's recorders (their `progress` lines, about one a
second each): what the runner displays and what `knee find` watches to cut a probe short.
"""

from __future__ import annotations

from typing import Any


def merged_progress(events: list[dict[str, Any]]) -> dict[str, Any]:
    """One progress view of several recorders: counts and rates add, p99 is the worst, the
    time is the latest."""
    return {
        "t_s": max(e.get("t_s", 0.0) for e in events),
        **{
            key: sum(e.get(key, 0) for e in events)
            for key in ("sent", "completed", "ok", "late_sends", "rate_per_s", "sent_rate_per_s")
        },
        "target_rate_per_s": sum(e.get("target_rate_per_s") or 0 for e in events) or None,
        "p99_ns": max((e.get("p99_ns") or 0) for e in events),
    }
