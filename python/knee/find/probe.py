"""One probe's decision, read from its point's statistics (docs/find.md, "A probe").

A probe is an ordinary point at one open-loop rate. What the search needs from it:

- **capacity**: `stable` (the system keeps up: stability verdict stable and the sender
  check not failing), `unstable` (over the limit: the stability verdict, a probe cut short
  for its growing backlog, or an error share over ERROR_SHARE), or `undecided` (too few
  samples, or a sign of overload that is there but under its threshold: the probe is
  lengthened);
- **limit**: who is the limit when the probe is not stable: `target`, `errors` (requests
  fail), or `generator` (sends were late while connections were free: the generator's own
  CPU or pacing; that is never the target's capacity);
- **slo**: met, missed or undecided (knee.stats.slo), when an SLO is set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from knee.stats.stability import BACKLOG_MIN, BACKLOG_SHARE

#: Late sends do not bias latency (it is measured from the intended send time); they make
#: the generator the limit when this share of the sends (those late with connections
#: free, where the statistics tell them apart) was late, or when the rate sent fell below
#: the target beyond its interval.
GENERATOR_LATE_SHARE = 0.10
#: A probe whose failed share (errors, timeouts, drops) passes this is over the limit,
#: whatever its latency: a service that sheds load keeps its latency low.
ERROR_SHARE = 0.01
#: Signs of overload at this fraction of their threshold make a stable verdict undecided:
#: the trend test at p < 5% (the verdict's threshold is 1%), growth over half the mean,
#: a backlog over half the backlog rule's.
MARGINAL_P = 0.05
MARGINAL_FRACTION = 0.5
#: An overloaded probe is cut short once the requests due and not yet over exceed both
#: this many seconds of its rate and CUT_LATENCIES low-load latencies of it (a stable
#: queue holds about rate x latency: Little's law), and at least CUT_MIN_REQUESTS.
CUT_BACKLOG_S = 2.0
CUT_LATENCIES = 20.0
CUT_MIN_REQUESTS = 100
#: Seconds after the start before a probe can be cut (its warm-up and first queue).
CUT_AFTER_S = 3.0


@dataclass(frozen=True)
class Decision:
    capacity: str  # "stable" | "unstable" | "undecided"
    limit: str | None  # "target" | "errors" | "generator"; None when stable
    slo: str | None  # "met" | "missed" | "undecided"; None without an SLO
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "limit": self.limit,
            "slo": self.slo,
            "reason": self.reason,
        }


def _check(stats: dict[str, Any], name: str) -> dict[str, Any]:
    return next((c for c in stats.get("checks") or [] if c.get("name") == name), {})


def failed_share(stats: dict[str, Any]) -> float:
    """The share of post-warm-up requests that did not end OK."""
    rates = stats.get("status_rates") or {}
    return 1.0 - float(rates.get("ok", 1.0)) if stats.get("count") else 0.0


def decide(stats: dict[str, Any]) -> Decision:
    """The probe's decision from its statistics (summary.json's point)."""
    slo = (stats.get("slo") or {}).get("verdict")
    stability = stats.get("stability") or {}
    sender = _check(stats, "sender")
    if stats.get("cut_short"):
        return Decision("unstable", "target", slo, f"cut short: {stats['cut_short']}")
    verdict = stability.get("verdict")
    if verdict == "unstable":  # its failures are what a queue past capacity leaves
        return Decision("unstable", "target", slo, stability.get("detail", "unstable"))
    share = failed_share(stats)
    if share > ERROR_SHARE:  # keeping up in time, but failing: shedding load, or broken
        return Decision(
            "unstable", "errors", slo, f"{share:.1%} of requests failed (over {ERROR_SHARE:.0%})"
        )
    if _behind(stats) and sender.get("limit") == "target":
        sent, target = stats.get("achieved_rate_per_s") or 0.0, stats["target_rate_per_s"]
        return Decision(
            "unstable",
            "target",
            slo,
            f"the rate was not offered: {sent:.4g}/s sent of {target:.4g}/s, the sends waiting "
            "for connections the target held",
        )
    if generator_limited(stats, sender):
        return Decision(
            "undecided",
            "generator",
            slo,
            "the generator is the limit here (its sends fell behind the schedule while it had "
            f"connections free): {sender.get('detail', '')}; give it more load.generators, or "
            "more connections",
        )
    if verdict != "stable":
        return Decision("undecided", None, slo, stability.get("detail", "too few samples"))
    marginal = _marginal(stats, stability)
    if marginal:
        return Decision(
            "undecided", None, slo, "signs of overload under their thresholds: " + marginal
        )
    return Decision("stable", None, slo, stability.get("detail", "stable"))


def generator_limited(stats: dict[str, Any], sender: dict[str, Any]) -> bool:
    """The sender check failed for the generator's own sake (not a target that held its
    connections), and by enough to matter: the rate sent below the target beyond its
    interval, or GENERATOR_LATE_SHARE of the sends late on a quiet machine. On a machine
    busy with other processes (the interference check warned) late sends are the
    machine's, not the generator's limit: the answers say the machine was busy."""
    if sender.get("verdict") != "fail" or sender.get("limit", "generator") != "generator":
        return False
    if _behind(stats):
        return True
    busy = _check(stats, "interference").get("verdict") in ("warn", "fail")
    sent = stats.get("sent") or 0
    late = stats.get("late_sends_free")  # None where sends are not told apart
    late = stats.get("late_sends") or 0 if late is None else late
    return not busy and sent > 0 and late / sent > GENERATOR_LATE_SHARE


def _behind(stats: dict[str, Any]) -> bool:
    """The rate sent fell below the target beyond its 95% interval."""
    target, ci = stats.get("target_rate_per_s"), stats.get("achieved_rate_ci_per_s")
    return bool(target and ci and ci[1] < target)


def _marginal(stats: dict[str, Any], stability: dict[str, Any]) -> str:
    """Signs of overload at half their threshold or more, as one phrase ('' when none)."""
    signs = []
    p, growth = stability.get("trend_p"), stability.get("growth_ns")
    mean = ((stats.get("latency_ok_ns") or {}).get("mean")) or 0.0
    if (
        p is not None
        and growth is not None
        and p < MARGINAL_P
        and growth > MARGINAL_FRACTION * mean
    ):
        signs.append(f"latency grows by {growth / 1e6:.3g} ms (p = {p:.2g})")
    backlog, sent = stability.get("backlog") or 0, stability.get("sent_in_window") or 0
    if sent and backlog > MARGINAL_FRACTION * max(BACKLOG_MIN, BACKLOG_SHARE * sent):
        signs.append(f"{backlog} requests in flight at the end")
    return "; ".join(signs)


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
