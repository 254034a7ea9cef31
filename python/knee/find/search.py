"""The search for one group of settings (docs/find.md, "The search").

1. **Low probe** at the lowest rate: the service time S (the server's own time where the
   system reports it, else the low-load latency) and a first model, capacity c / L (c the
   declared servers, else 1; L the low-load latency, S and everything else on the path).
2. **Bracket**: the first step goes to MODEL_START of the model's capacity (at least
   STEP x the low rate, at most MAX_JUMP x), then rates step up geometrically (x STEP)
   until a probe is not
   stable. A low probe that is not stable steps down instead (/ STEP^2), to the floor.
3. **Bisect** (geometric midpoints) the capacity bracket [highest stable, lowest
   unstable], then, with an SLO, the SLO bracket [highest met, lowest missed], until each
   is within the tolerance (hi / lo - 1).
4. **Lengthen**: an undecided probe is run again at the same rate for twice as long, up
   to LENGTHEN_MAX times the probe length; still undecided, it counts against the rate
   (not shown stable, not shown to meet the SLO).
5. **Repeat** the answers REPEATS times with fresh probes (fresh processes and
   connections). A repeat that disagrees moves the bracket and the bisection resumes,
   at most MAX_ROUNDS times.

Every probe costs wall time; the search stops where the budget ends and says which
brackets were reached. The probes themselves are run by a `Measure` callable, so the
search is the same for a spec's system and for `knee http`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from knee.find.probe import Decision

#: Geometric step of the bracketing phase, and where the first step goes against the
#: model's capacity (the one-server model underestimates a pool: the steps correct it).
STEP = 2.0
MODEL_START = 0.5
#: The model's first step goes at most this far above the low rate: a service time that
#: misses a part of the path (a slow link after a fast server) must not send a probe
#: hundreds of times over capacity.
MAX_JUMP = 16.0
#: An undecided probe's length doubles up to this many times the probe length.
LENGTHEN_MAX = 4.0
#: Fresh probes at each answer once its bracket is narrow, and how many times a repeat
#: that disagrees may reopen the bisection.
REPEATS = 3
MAX_ROUNDS = 2
#: Probes per search at most (a bound on the path whatever the budget).
MAX_PROBES = 60
#: Samples a probe should hold at least: its length grows at low rates to get them (200
#: give the trend test its batches and a p90 its interval; an SLO on a higher percentile
#: lengthens the probe while it has no interval; the low probe needs only a mean).
MIN_SAMPLES = 200
LOW_SAMPLES = 100


@dataclass
class Probe:
    """One probe as the search saw it."""

    point: int
    rate_per_s: float
    duration_s: float
    phase: str  # "low", "step", "bisect", "lengthen", "repeat"
    decision: Decision
    stats: dict[str, Any]
    wall_s: float
    brackets: dict[str, list[float | None]] = field(default_factory=dict)  # after it

    def to_json(self) -> dict[str, Any]:
        return {
            "point": self.point,
            "rate_per_s": self.rate_per_s,
            "duration_s": self.duration_s,
            "phase": self.phase,
            "decision": self.decision.to_json(),
            "sent_per_s": self.stats.get("achieved_rate_per_s"),
            "throughput_per_s": self.stats.get("throughput_per_s"),
            "cut_short": self.stats.get("cut_short"),
            "wall_s": self.wall_s,
            "brackets": self.brackets,
        }


#: Runs one probe: (rate, length in s, phase) -> the probe. It may raise OutOfBudget.
Measure = Callable[[float, float, str], Probe]


class OutOfBudget(Exception):
    """The next probe would end past the search's budget."""


@dataclass
class Settings:
    min_rate_per_s: float
    max_rate_per_s: float
    probe_s: float
    tolerance: float  # hi / lo - 1 at which a bracket is narrow enough
    slo: bool  # an SLO was set
    servers: int  # declared (else 1): the first model's c
    #: The lowest rate a step down may reach when the low probe is not sustainable: the
    #: lowest rate itself when the user gave it (--min-rate), else far below it.
    floor_per_s: float | None = None
    #: Samples the SLO's statistic needs for an interval (knee.stats.slo.min_samples): a
    #: probe runs long enough for them rather than being lengthened to them.
    slo_samples: int = 0


@dataclass
class Bracket:
    """The highest rate shown good and the lowest shown bad (None: none yet)."""

    lo: float | None = None
    hi: float | None = None

    def good(self, rate: float) -> None:
        self.lo = rate if self.lo is None else max(self.lo, rate)
        if self.hi is not None and self.hi <= self.lo:
            self.hi = None  # a good rate at or over the bad one: the bad one is re-opened

    def bad(self, rate: float) -> None:
        self.hi = rate if self.hi is None else min(self.hi, rate)
        if self.lo is not None and self.lo >= self.hi:
            self.lo = None

    def narrow(self, tolerance: float) -> bool:
        return self.lo is not None and self.hi is not None and self.hi / self.lo - 1 <= tolerance

    def mid(self) -> float:
        assert self.lo is not None and self.hi is not None
        return math.sqrt(self.lo * self.hi)

    def to_json(self) -> list[float | None]:
        return [self.lo, self.hi]


@dataclass
class Outcome:
    probes: list[Probe]
    capacity: Bracket
    slo: Bracket
    stopped: str  # why the search ended: "done", "budget", "generator", "max_rate", ...
    detail: str
    service_s: float | None  # from the low probe
    first_model_per_s: float | None


def service_time_s(stats: dict[str, Any]) -> float | None:
    """The service time a low-load probe shows: the server's mean own time where the
    system reports it, else the mean OK latency."""
    server = (stats.get("server_ns") or {}).get("mean")
    if server:
        return float(server) / 1e9
    latency = (stats.get("latency_ok_ns") or {}).get("mean")
    return float(latency) / 1e9 if latency else None


class Search:
    def __init__(self, settings: Settings, measure: Measure) -> None:
        self.s = settings
        self.measure = measure
        self.probes: list[Probe] = []
        self.capacity = Bracket()
        self.slo_bracket = Bracket()
        self.service_s: float | None = None
        self.model_per_s: float | None = None

    # ------------------------------------------------------------ one probe, decided

    def _length(self, rate: float, phase: str) -> float:
        samples = max(LOW_SAMPLES if phase == "low" else MIN_SAMPLES, self.s.slo_samples)
        return max(self.s.probe_s, samples / rate)

    def _probe(self, rate: float, phase: str) -> Probe:
        """A probe at `rate`, lengthened while undecided; the brackets updated."""
        # 4 significant digits: a rate a reader can type again, finer than any tolerance.
        floor = self.s.floor_per_s if self.s.floor_per_s is not None else self.s.min_rate_per_s
        rate = float(f"{min(max(rate, floor), self.s.max_rate_per_s):.4g}")
        length = self._length(rate, phase)
        cap = length * LENGTHEN_MAX
        while True:
            if len(self.probes) >= MAX_PROBES:
                raise OutOfBudget(f"{MAX_PROBES} probes")
            probe = self.measure(rate, length, phase)
            self.probes.append(probe)
            d = probe.decision
            # The generator cannot offer this rate. Above every rate shown good, that ends
            # the search: what lies beyond is not the target's to show. Below one (a probe
            # for the SLO), it was a passing shortfall: the probe is lengthened, and never
            # counts for or against the capacity.
            noise = (
                d.limit == "generator" and self.capacity.lo is not None and rate < self.capacity.lo
            )
            if d.limit == "generator" and not noise:
                probe.brackets = self._brackets()
                raise GeneratorLimit(rate, d.reason)
            undecided = (
                noise
                or d.capacity == "undecided"
                or (
                    self.s.slo
                    and d.capacity == "stable"
                    and d.slo == "undecided"
                    and self._slo_open(rate)
                )
            )
            if not undecided or length * 2 > cap:
                break
            length, phase = length * 2, "lengthen"
        if noise and self.s.slo:
            self.slo_bracket.bad(rate)  # not shown to meet the SLO
        elif not noise:
            self._update(rate, d)
        probe.brackets = self._brackets()
        return probe

    def _slo_open(self, rate: float) -> bool:
        """Whether the SLO's decision at `rate` would move its bracket."""
        lo, hi = self.slo_bracket.lo, self.slo_bracket.hi
        return (lo is None or rate > lo) and (hi is None or rate < hi)

    def _update(self, rate: float, d: Decision) -> None:
        if d.capacity == "stable":
            self.capacity.good(rate)
        else:  # unstable, or undecided at its cap: not shown sustainable
            self.capacity.bad(rate)
        if self.s.slo:
            if d.capacity == "stable" and d.slo == "met":
                self.slo_bracket.good(rate)
            else:  # missed, undecided at its cap, or not stable: not shown to meet it
                self.slo_bracket.bad(rate)

    def _brackets(self) -> dict[str, list[float | None]]:
        out = {"capacity": self.capacity.to_json()}
        if self.s.slo:
            out["slo"] = self.slo_bracket.to_json()
        return out

    # ------------------------------------------------------------ the phases

    def run(self) -> Outcome:
        stopped, detail = "done", ""
        try:
            self._low()
            self._bracket()
            for _round in range(MAX_ROUNDS + 1):
                self._bisect()
                if self._repeat():
                    break
            else:
                stopped, detail = "repeats", "repeats kept disagreeing with the bracket"
        except OutOfBudget as e:
            stopped, detail = "budget", f"the budget ran out ({e})"
        except GeneratorLimit as e:
            stopped, detail = "generator", str(e)
        except MaxRate as e:
            stopped, detail = "max_rate", str(e)
        except MinRate as e:
            stopped, detail = "min_rate", str(e)
        return Outcome(
            self.probes,
            self.capacity,
            self.slo_bracket,
            stopped,
            detail,
            self.service_s,
            self.model_per_s,
        )

    def _low(self) -> None:
        probe = self._probe(self.s.min_rate_per_s, "low")
        self.service_s = service_time_s(probe.stats)
        # The first model takes the whole low-load latency as the service time (the server's
        # own time, where reported, leaves out a link or a proxy that may be the limit):
        # the lower, safer guess; the steps correct it upward.
        latency_ns = (probe.stats.get("latency_ok_ns") or {}).get("mean")
        first_s = max(self.service_s or 0.0, float(latency_ns or 0.0) / 1e9)
        if first_s > 0:
            self.model_per_s = self.s.servers / first_s

    def _bracket(self) -> None:
        s = self.s
        floor = s.floor_per_s if s.floor_per_s is not None else s.min_rate_per_s
        while self.capacity.lo is None:  # not sustainable at the lowest rate: step down
            rate = min(p.rate_per_s for p in self.probes) / (STEP * STEP)
            if rate < floor:
                raise MinRate(
                    f"not sustainable at {min(p.rate_per_s for p in self.probes):.4g}/s "
                    f"({self.probes[-1].decision.reason}); give a lower --min-rate"
                )
            self._probe(rate, "step")
        rate = self.capacity.lo * STEP
        if self.model_per_s:
            rate = max(rate, min(MODEL_START * self.model_per_s, MAX_JUMP * self.capacity.lo))
        while self.capacity.hi is None:
            if self.capacity.lo is not None and self.capacity.lo >= s.max_rate_per_s:
                raise MaxRate(f"stable at the highest rate allowed, {s.max_rate_per_s:g}/s")
            self._probe(min(rate, s.max_rate_per_s), "step")
            rate = (self.capacity.lo or rate) * STEP
        if s.slo and self.slo_bracket.lo is None:
            self._slo_down()

    def _slo_down(self) -> None:
        """The SLO missed at every rate so far: step down from the lowest until met."""
        rate = min(p.rate_per_s for p in self.probes)
        while self.slo_bracket.lo is None:
            rate /= STEP * STEP
            if rate < self.s.min_rate_per_s / 16:
                return  # the SLO's answer: below the rates tried
            self._probe(rate, "step")

    def _bisect(self) -> None:
        tol = self.s.tolerance
        while True:
            if not self.capacity.narrow(tol) and self.capacity.lo and self.capacity.hi:
                self._probe(self.capacity.mid(), "bisect")
            elif (
                self.s.slo
                and self.slo_bracket.lo
                and self.slo_bracket.hi
                and not self.slo_bracket.narrow(tol)
            ):
                self._probe(self.slo_bracket.mid(), "bisect")
            else:
                return

    def _repeat(self) -> bool:
        """REPEATS fresh probes at each answer; False when one disagreed (the bracket
        moved and the bisection goes on)."""
        targets = [("capacity", self.capacity.lo)]
        if self.s.slo and self.slo_bracket.lo != self.capacity.lo:
            targets.append(("slo", self.slo_bracket.lo))
        for name, rate in targets:
            if rate is None:
                continue
            for _ in range(REPEATS):
                self._probe(rate, "repeat")
                bracket = self.capacity if name == "capacity" else self.slo_bracket
                if bracket.lo == rate:
                    continue
                # It did not hold: it is the bad end now, and the good end the highest
                # rate below it that was shown good (else a step down).
                below = [p.rate_per_s for p in self.probes if p.rate_per_s < rate and good(p, name)]
                bracket.lo = max(below) if below else None
                if bracket.lo is None:
                    self._probe(rate / STEP, "step")
                return False
        return True


class GeneratorLimit(Exception):
    def __init__(self, rate: float, reason: str) -> None:
        super().__init__(f"at {rate:.4g}/s {reason}")


class MaxRate(Exception):
    pass


class MinRate(Exception):
    pass


def good(probe: Probe, answer: str) -> bool:
    """Whether a probe showed its rate good for an answer ("capacity" or "slo")."""
    d = probe.decision
    return d.capacity == "stable" and (answer == "capacity" or d.slo == "met")
