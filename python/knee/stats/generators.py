"""Each load generator's own sending, when a point has several (load.generators, or one
client per peer): its achieved rate and late sends, so an overloaded generator is visible.
The latency statistics stay pooled over every generator's samples (a percentile is never
averaged over generators)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from knee.stats import checks
from knee.stats.summary import GeneratorStats, Rates


def generators(
    nodes: np.ndarray,
    group_rates: Callable[[np.ndarray], Rates],
    target_rate_per_s: float | None,
    late_ms: float | None,
) -> list[GeneratorStats]:
    """Per recording node (empty with a single one): its sends and late sends, its share of
    the target (the target split evenly, as the runner splits it) and its own sender
    check."""
    labels = np.asarray(nodes).astype(str)
    names = [str(n) for n in np.unique(labels)]
    if len(names) < 2:
        return []
    share = target_rate_per_s / len(names) if target_rate_per_s else None
    out: list[GeneratorStats] = []
    for name in names:
        r = group_rates(labels == name)
        verdict = checks.sends_check(share, r, late_ms)
        out.append(
            {
                "node": name,
                "sent": r["sent"],
                "achieved_rate_per_s": r["achieved_rate_per_s"],
                "achieved_rate_ci_per_s": r["achieved_rate_ci_per_s"],
                "late_sends": r["late_sends"],
                "late_send_share": r["late_send_share"],
                "late_sends_held": r["late_sends_held"],
                "late_sends_free": r["late_sends_free"],
                "target_rate_per_s": share,
                "sender": verdict,
            }
        )
    return out
