"""The decision on one point, read from its statistics (docs/find.md, "A probe"): what a
search's probe needs, and what a curve's answers (knee.analysis.answers) read of each point.

A probe is an ordinary point at one open-loop rate. What the search needs from it:

- **capacity**: `stable` (the system keeps up: stability verdict stable and the sender
  check not failing), `unstable` (over the limit: the stability verdict, a probe cut short
  for its growing backlog, or an error share over ERROR_SHARE), or `undecided` (too few
  samples, or a sign of overload that is there but under its threshold: the probe is
  lengthened);
- **limit**: who is the limit when the probe is not stable: `target`, `errors` (requests
  fail), or `generator` (sends were late while connections were free: the generator's own
  CPU or pacing, or a CPU it waited for that other processes took; that is never the
  target's capacity). Late sends whose generator waited for a core that the run's own
  processes took (a target on the same cores: `cpu_wait` below) are the target's doing;
- **cpu_wait**: what the kernel says of the generator's late sends (`generator_cpu`).
- **slo**: met, missed or undecided (knee.stats.slo), when an SLO is set.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from knee.stats.stability import BACKLOG_MIN, BACKLOG_SHARE
from knee.stats.summary import MACHINE, Check, PointStats, Stability

#: Late sends do not bias latency (it is measured from the intended send time); they make
#: the generator the limit when this share of the sends (those late with connections
#: free, where the statistics tell them apart) was late, or when the rate sent fell below
#: the target beyond its interval.
GENERATOR_LATE_SHARE = 0.10
#: The generator's own CPU is full at this share of its cores (its quota, else one core):
#: its late sends are its own.
GENERATOR_CPU_FULL = 0.8
#: The generator waited for a CPU when its threads' run-queue delay (the kernel's
#: run_delay, knee.monitor) reached this, in core-percent: 10 ms in each second, ten 1 ms
#: waits, where a generator with a core to itself waits well under 1 ms.
GENERATOR_WAIT_PERCENT = 1.0
#: A probe whose failed share (errors, timeouts, drops) passes this is over the limit,
#: whatever its latency: a service that sheds load keeps its latency low.
ERROR_SHARE = 0.01
#: Signs of overload at this fraction of their threshold make a stable verdict undecided:
#: the trend test at p < 5% (the verdict's threshold is 1%), growth over half the mean,
#: a backlog over half the backlog rule's.
MARGINAL_P = 0.05
MARGINAL_FRACTION = 0.5


@dataclass(frozen=True)
class Decision:
    capacity: str  # "stable" | "unstable" | "undecided"
    limit: str | None  # "target" | "errors" | "generator"; None when stable
    slo: str | None  # "met" | "missed" | "undecided"; None without an SLO
    reason: str

    def good_for(self, answer: str) -> bool:
        """Whether the point showed its rate good for an answer ("capacity" or "slo")."""
        return self.capacity == "stable" and (answer == "capacity" or self.slo == "met")

    def to_json(self) -> dict[str, Any]:
        """Its fields, in order: capacity, limit, slo, reason."""
        return asdict(self)


def _check(stats: PointStats, name: str) -> Check | None:
    return next((c for c in stats.get("checks") or [] if c["name"] == name), None)


def failed_share(stats: PointStats) -> float:
    """The share of post-warm-up requests that did not end OK."""
    ok = (stats.get("status_rates") or {}).get("ok", 1.0)
    return 1.0 - float(1.0 if ok is None else ok) if stats.get("count") else 0.0


def decide(stats: PointStats) -> Decision:
    """The probe's decision from its statistics (summary.json's point)."""
    slo = stats["slo"].get("verdict") if stats.get("slo") else None
    stability = stats.get("stability")
    sender = _check(stats, "sender")
    if _own_sender_fail(sender) and generator_cpu(stats)["cause"] == "own_cpu":
        # Its CPU was full, or its own quota throttled it: it sent late, and it read the
        # replies late too (their latency grows with its backlog, whatever the target did):
        # nothing is shown of the target.
        return _generator(stats, sender, slo)
    if stats.get("cut_short"):
        return Decision("unstable", "target", slo, f"cut short: {stats['cut_short']}")
    verdict = stability.get("verdict") if stability else None
    if stability and verdict == "unstable" and stability.get("queueing", True):
        # Its failures are what a queue past capacity leaves.
        return Decision("unstable", "target", slo, stability.get("detail", "unstable"))
    share = failed_share(stats)
    if share > ERROR_SHARE:  # keeping up in time, but failing: shedding load, or broken
        return Decision(
            "unstable", "errors", slo, f"{share:.1%} of requests failed (over {ERROR_SHARE:.0%})"
        )
    if _behind(stats) and sender and sender.get("limit") == "target":
        return _not_offered(stats, slo, ", the sends waiting for connections the target held")
    if generator_limited(stats, sender):
        return _generator(stats, sender, slo)
    if _behind(stats) and generator_cpu(stats)["cause"] == "shared_cores":
        return _not_offered(
            stats,
            slo,
            "; the target took the machine's cores from the generator "
            f"({generator_cpu(stats)['detail']}): the target is at its capacity, set by the "
            "shared cores",
        )
    if not stability or verdict != "stable":
        detail = stability.get("detail", "too few samples") if stability else "too few samples"
        return Decision("undecided", None, slo, detail)
    marginal = _marginal(stats, stability)
    if marginal:
        return Decision(
            "undecided", None, slo, "signs of overload under their thresholds: " + marginal
        )
    return Decision("stable", None, slo, stability.get("detail", "stable"))


def _not_offered(stats: PointStats, slo: str | None, why: str) -> Decision:
    """The target's capacity: the rate was not offered, the sends held back by it (`why`)."""
    sent, target = stats.get("achieved_rate_per_s") or 0.0, stats["target_rate_per_s"]
    return Decision(
        "unstable",
        "target",
        slo,
        f"the rate was not offered: {sent:.4g}/s sent of {target:.4g}/s{why}",
    )


#: What to do about a generator held back, by who held it (`generator_cpu`'s cause).
REMEDY = {
    "other_processes": "run it on a quieter machine, or give the generator cores of its own "
    "(a cpuset) that other processes do not use",
    "own_cpu": "give it more CPU (a larger quota), or more load.generators",
}


def _generator(stats: PointStats, sender: Check | None, slo: str | None) -> Decision:
    why = generator_cpu(stats)
    detail = why["detail"]
    remedy = REMEDY.get(str(why["cause"]), "give it more load.generators, or more connections")
    return Decision(
        "undecided",
        "generator",
        slo,
        "the generator is the limit here (its sends fell behind the schedule while it had "
        f"connections free{': ' + detail if detail else ''}): "
        f"{sender.get('detail', '') if sender else ''}; " + remedy,
    )


def generator_limited(stats: PointStats, sender: Check | None) -> bool:
    """The sender check failed for the generator's own sake (not a target that held its
    connections), and by enough to matter: the rate sent below the target beyond its
    interval, or GENERATOR_LATE_SHARE of the sends late; and the kernel does not put the
    blame on the target: a generator that waited for cores the run's own processes took
    (`generator_cpu`'s "shared_cores") was held back by the target it shares them with."""
    if not _own_sender_fail(sender):
        return False
    if generator_cpu(stats)["cause"] == "shared_cores":
        return False
    if _behind(stats):
        return True
    sent = stats.get("sent") or 0
    late = stats.get("late_sends_free")  # None where sends are not told apart
    late = stats.get("late_sends") or 0 if late is None else late
    return sent > 0 and late / sent > GENERATOR_LATE_SHARE


def generator_cpu(stats: PointStats) -> dict[str, Any]:
    """What the kernel says of the generator's sends, from what the runner sampled of its
    own processes (summary.json's `resources`): `cause` is

    - "own_cpu": its busiest node used GENERATOR_CPU_FULL of its cores (its quota, else one
      core), or waited for a CPU under a limit of its own (a quota throttles it);
    - "shared_cores": its threads waited for a CPU (run-queue delay at least
      GENERATOR_WAIT_PERCENT) while the run's other processes (the target, on the same
      cores) used more of the machine than processes outside the run did;
    - "other_processes": it waited while processes outside the run used more;
    - "waited": it waited, and who took the cores is unknown (the machine's cores are not
      one resource of the run: a host with a CPU limit, a remote node);
    - "pacing": it neither waited nor filled its CPU; None without its CPU samples.

    `detail` says it in words."""
    res = stats.get("resources") or {}
    gens = [r for r in res.values() if r.get("kind") == "cpu" and r.get("generator")]
    if not gens:
        return {"cause": None, "detail": ""}
    gen = max(gens, key=lambda r: float(r.get("cpu_percent") or 0.0))
    cpu, wait = float(gen.get("cpu_percent") or 0.0), gen.get("cpu_wait_percent")
    own = f"its CPU {cpu:.0f}% of a core"
    limited = gen.get("cpu_percent_of_quota") is not None  # a quota or cpuset of its own
    cores = float(gen.get("capacity") or 1.0) if limited else 1.0
    if cpu >= 100.0 * GENERATOR_CPU_FULL * cores:
        return {"cause": "own_cpu", "detail": f"{own}, of {cores:g} it may use"}
    if wait is None:
        return {"cause": "pacing", "detail": f"{own}; its wait for a CPU unknown"}
    waited = f"{own}; it waited for a CPU {wait:.1f}% of the time (its run-queue delay)"
    if wait < GENERATOR_WAIT_PERCENT:
        return {"cause": "pacing", "detail": waited + ": its own pacing"}
    if limited:  # a throttled quota is time on the run queue: its own limit
        return {"cause": "own_cpu", "detail": f"{waited}, held to {cores:g} cores"}
    machine = res.get(MACHINE)
    if machine is None:
        return {"cause": "waited", "detail": waited}
    run = max(0.0, float(machine.get("busy") or 0.0) - cpu / 100.0)
    foreign = float(machine.get("foreign_cpu_percent") or 0.0) / 100.0
    cores_text = f"{float(machine.get('machine_cores') or machine.get('capacity') or 0):g}"
    if run >= foreign:
        return {
            "cause": "shared_cores",
            "detail": f"{waited}, while the run's other processes used {run:.2f} of the "
            f"machine's {cores_text} cores and processes outside the run {foreign:.2f}",
        }
    return {
        "cause": "other_processes",
        "detail": f"{waited}, while processes outside the run used {foreign:.2f} of the "
        f"machine's {cores_text} cores and the run's other processes {run:.2f}",
    }


def _own_sender_fail(sender: Check | None) -> bool:
    """The sender check failed, and not for a target that held the connections."""
    if sender is None:
        return False
    return sender.get("verdict") == "fail" and sender.get("limit", "generator") == "generator"


def _behind(stats: PointStats) -> bool:
    """The rate sent fell below the target beyond its 95% interval, and below what the
    schedule itself made due: a Poisson schedule draws a rate of its own (at 600 requests
    its 2.5% lower tail is 8% under the target), and sends that kept to it are not behind
    (knee.stats.checks.sender_check judges them the same way)."""
    target, ci = stats.get("target_rate_per_s"), stats.get("achieved_rate_ci_per_s")
    if not (target and ci and ci[1] < target):
        return False
    scheduled = stats.get("scheduled_rate_per_s")
    return scheduled is None or ci[1] < scheduled


def _marginal(stats: PointStats, stability: Stability) -> str:
    """Signs of overload at half their threshold or more, as one phrase ('' when none)."""
    signs = []
    p, growth = stability.get("trend_p"), stability.get("growth_ns")
    ok = stats.get("latency_ok_ns")
    mean = (ok["mean"] if ok else None) or 0.0
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
