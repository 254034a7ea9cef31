"""The search for one group of settings (docs/find.md, "The search").

1. **Low probe** at the lowest rate: the service time S (the server's own time where the
   system reports it, else the low-load latency) and a first model, capacity c / L (c the
   declared servers, else 1; L the low-load latency, S and everything else on the path).
2. **Bracket**: the first step goes to MODEL_START of the model's capacity (at least
   STEP x the low rate, at most MAX_JUMP x), then rates step up geometrically (x STEP)
   until a probe is not
   stable. A low probe that is not stable steps down instead (/ STEP^2), to the floor.
3. **From the saturated throughput**: the first probe over capacity that ran its length
   measured what the target completes when saturated, T, an estimate of the capacity.
   Probes at T / (1 + SAT_SHARE x tolerance) and at T check the bracket it suggests.
4. **Bisect** (geometric midpoints) the capacity bracket [highest stable, lowest
   unstable], then, with an SLO, the SLO bracket [highest met, lowest missed], until each
   is within the tolerance (hi / lo - 1).
5. **Lengthen**: an undecided probe is run again at the same rate for twice as long, up
   to LENGTHEN_MAX times the probe length; still undecided, it counts against the rate
   (not shown stable, not shown to meet the SLO).
6. **Hold** each answer once with a fresh probe HOLD times the probe length (fresh
   processes and connections), never stopped early. A hold that fails moves the bracket
   and the bisection resumes, at most MAX_ROUNDS times.

The SLO is judged where it matters: a probe for the capacity runs for the capacity's
samples, and its SLO verdict moves the SLO bracket only when decided (met or missed; an
unstable probe misses). Probes for the SLO (phase "slo", and the holds) run long enough for
the SLO's samples and are lengthened while the SLO is undecided.

Every probe costs wall time; the search stops where the budget ends and says which
brackets were reached. The probes themselves are run by a `Measure` callable, so the
search is the same for a spec's system and for `knee http`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from knee.stats.decision import Decision
from knee.stats.summary import PointStats

#: Geometric step of the bracketing phase, and where the first step goes against the
#: model's capacity (the one-server model underestimates a pool: the steps correct it).
STEP = 2.0
MODEL_START = 0.5
#: The model's first step goes at most this far above the low rate: a service time that
#: misses a part of the path (a slow link after a fast server) must not send a probe
#: hundreds of times over capacity.
MAX_JUMP = 16.0
#: An undecided probe's length doubles up to this many times the probe length: once. A
#: rate undecided on twice the probe's length counts against it; a third, fourfold run
#: there cost report 004's search 40 s of its 2 minutes a thread count and moved no answer.
LENGTHEN_MAX = 2.0
#: The hold at each answer once its bracket is narrow lasts this many times the probe's
#: length, and is never stopped early (docs/find.md, "Why one hold"); how many times a
#: hold that fails may reopen the bisection.
HOLD = 2.0
MAX_ROUNDS = 2
#: The saturated throughput T's bracket is checked at T, then a step of SAT_SHARE x
#: tolerance above it (T held) or below it (it did not): within the tolerance when both
#: probes decide as expected (SAT_SHARE < 1: the rates' 4 significant digits must not push
#: it over).
SAT_SHARE = 0.9
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
    phase: str  # "low", "step", "sat", "bisect", "slo", "lengthen", "hold"
    decision: Decision
    stats: PointStats
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
            # A probe whose decision was clear before its length (knee.find.early): why,
            # and how much it ran (its samples after warm-up, its window).
            "stopped_early": self.stats.get("stopped_early"),
            "samples": self.stats.get("count"),
            "window_s": self.stats.get("window_s"),
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
    #: The probe that held each answer ("capacity", "slo") at its final rate.
    holds: dict[str, Probe] = field(default_factory=dict)


def service_time_s(stats: PointStats) -> float | None:
    """The service time a low-load probe shows: the server's mean own time where the
    system reports it, else the mean OK latency."""
    server = stats["server_ns"]["mean"] if "server_ns" in stats else None
    if server:
        return float(server) / 1e9
    latency = stats["latency_ok_ns"]["mean"] if "latency_ok_ns" in stats else None
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
        #: Answers whose hold passed, and the probe that held each.
        self.held: dict[tuple[str, float], Probe] = {}

    # ------------------------------------------------------------ one probe, decided

    def _length(self, rate: float, phase: str, for_slo: bool) -> float:
        samples = LOW_SAMPLES if phase == "low" else MIN_SAMPLES
        if for_slo:
            samples = max(samples, self.s.slo_samples)
        length = max(self.s.probe_s, samples / rate)
        return length * HOLD if phase == "hold" else length

    def _probe(self, rate: float, phase: str, for_slo: bool = False) -> Probe:
        """A probe at `rate`, lengthened while undecided; the brackets updated. A probe
        `for_slo` (and a hold, with an SLO) runs for the SLO's samples and is lengthened
        while its SLO verdict is undecided and would move the SLO bracket; any other probe
        moves the SLO bracket only when its verdict is decided."""
        for_slo = self.s.slo and (for_slo or phase == "hold")
        # 4 significant digits: a rate a reader can type again, finer than any tolerance.
        floor = self.s.floor_per_s if self.s.floor_per_s is not None else self.s.min_rate_per_s
        rate = float(f"{min(max(rate, floor), self.s.max_rate_per_s):.4g}")
        length = self._length(rate, phase, for_slo)
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
                    for_slo
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
            self._update(rate, d, for_slo)
        probe.brackets = self._brackets()
        return probe

    def _slo_open(self, rate: float) -> bool:
        """Whether the SLO's decision at `rate` would move its bracket."""
        lo, hi = self.slo_bracket.lo, self.slo_bracket.hi
        return (lo is None or rate > lo) and (hi is None or rate < hi)

    def _update(self, rate: float, d: Decision, for_slo: bool) -> None:
        if d.capacity == "stable":
            self.capacity.good(rate)
        else:  # unstable, or undecided at its cap: not shown sustainable
            self.capacity.bad(rate)
        if self.s.slo:
            if d.capacity == "stable" and d.slo == "met":
                self.slo_bracket.good(rate)
            elif d.capacity == "stable" and d.slo == "undecided" and not for_slo:
                pass  # a probe for the capacity, too short for the SLO: not judged here
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
            self._from_saturation()
            for _round in range(MAX_ROUNDS + 1):
                self._bisect()
                if self._hold():
                    break
                # A hold that failed was over capacity and measured what the target
                # completes now: the bracket is checked from it again.
                self._from_saturation()
            else:
                stopped, detail = "hold", "the hold at the answer kept failing"
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
            {name: probe for (name, rate), probe in self.held.items() if _final(self, name, rate)},
        )

    def _low(self) -> None:
        probe = self._probe(self.s.min_rate_per_s, "low")
        self.service_s = service_time_s(probe.stats)
        # The first model takes the whole low-load latency as the service time (the server's
        # own time, where reported, leaves out a link or a proxy that may be the limit):
        # the lower, safer guess; the steps correct it upward.
        ok = probe.stats.get("latency_ok_ns")
        latency_ns = ok["mean"] if ok else None
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

    def _from_saturation(self) -> None:
        """The probes over capacity measured the saturated throughput T (what the target
        completed per second while saturated; the lowest such rate's, one that ran its
        length preferred to one cut short). A probe at T, then at T x (1 + SAT_SHARE x
        tolerance) when T holds or at T / (1 + SAT_SHARE x tolerance) when it does not,
        each only where it lies inside the bracket, check the bracket T suggests."""
        over = [
            p
            for p in self.probes
            if p.decision.capacity == "unstable"
            and p.decision.limit == "target"
            and p.stats.get("throughput_per_s")
        ]
        if not over:
            return
        first = min(over, key=lambda p: (bool(p.stats.get("cut_short")), p.rate_per_s))
        sat = float(first.stats.get("throughput_per_s") or 0.0)  # over: only those with one
        step = 1 + SAT_SHARE * self.s.tolerance
        if not self._sat_probe(sat):
            return
        self._sat_probe(sat * step if self.capacity.lo == float(f"{sat:.4g}") else sat / step)

    def _sat_probe(self, rate: float) -> bool:
        """A probe at `rate` when it lies inside the capacity's bracket and the bracket is
        not narrow yet; whether it ran."""
        lo, hi = self.capacity.lo, self.capacity.hi
        rate = float(f"{rate:.4g}")
        if lo is None or hi is None or not lo < rate < hi or self.capacity.narrow(self.s.tolerance):
            return False
        self._probe(rate, "sat")
        return True

    def _slo_down(self) -> None:
        """The SLO not shown met at any rate so far: step down from the lowest rate shown
        not to meet it until one meets it."""
        rate = self.slo_bracket.hi or min(p.rate_per_s for p in self.probes)
        while self.slo_bracket.lo is None:
            rate /= STEP
            if rate < self.s.min_rate_per_s / 16:
                return  # the SLO's answer: below the rates tried
            self._probe(rate, "slo", for_slo=True)

    def _bisect(self) -> None:
        tol = self.s.tolerance
        while True:
            if not self.capacity.narrow(tol) and self.capacity.lo and self.capacity.hi:
                self._probe(self.capacity.mid(), "bisect")
            elif self.s.slo and self.slo_bracket.lo is None and self.capacity.lo is not None:
                # Not judged yet (the capacity's probes were too short for it, or it was
                # missed): first at the capacity, then down from it.
                if self.slo_bracket.hi is None or self.capacity.lo < self.slo_bracket.hi:
                    self._probe(self.capacity.lo, "slo", for_slo=True)
                else:
                    self._slo_down()
                    if self.slo_bracket.lo is None:
                        return
            elif (
                self.s.slo
                and self.slo_bracket.lo
                and self.slo_bracket.hi
                and not self.slo_bracket.narrow(tol)
            ):
                self._probe(self.slo_bracket.mid(), "slo", for_slo=True)
            else:
                return

    def _hold(self) -> bool:
        """One fresh probe HOLD times as long at each answer (a probe lengthened to that
        length at the answer's rate and run to its end is one); False when one failed (the
        bracket moved and the bisection goes on)."""
        while True:
            targets = [("capacity", self.capacity.lo)]
            if self.s.slo and self.slo_bracket.lo != self.capacity.lo:
                targets.append(("slo", self.slo_bracket.lo))
            pending = [(n, r) for n, r in targets if r is not None and (n, r) not in self.held]
            if not pending:
                return True
            name, rate = pending[0]
            assert rate is not None
            held = self._held_already(name, rate)
            if held is not None:
                self.held[(name, rate)] = held
                continue
            slo_before = self.slo_bracket.to_json()
            probe = self._probe(rate, "hold")
            bracket = self.capacity if name == "capacity" else self.slo_bracket
            if bracket.lo == rate:
                self.held[(name, rate)] = probe
                if self.slo_bracket.to_json() != slo_before:
                    self._bisect()  # the hold judged the SLO anew: its bracket first
                continue
            # It did not hold: it is the bad end now, and the good end the highest rate
            # below it that was shown good (else a step down).
            below = [p.rate_per_s for p in self.probes if p.rate_per_s < rate and good(p, name)]
            bracket.lo = max(below) if below else None
            if bracket.lo is None:
                self._probe(rate / STEP, "step" if name == "capacity" else "slo", name == "slo")
            return False

    def _held_already(self, answer: str, rate: float) -> Probe | None:
        """A probe at `rate` as long as a hold, run to its end (never stopped early: a
        lengthened probe or a hold), that showed it good for `answer`; else None."""
        length = self._length(rate, "hold", self.s.slo)
        for p in self.probes:
            if (
                p.rate_per_s == rate
                and p.duration_s >= length
                and not p.stats.get("stopped_early")
                and good(p, answer)
            ):
                return p
        return None


class GeneratorLimit(Exception):
    def __init__(self, rate: float, reason: str) -> None:
        super().__init__(f"at {rate:.4g}/s {reason}")


class MaxRate(Exception):
    pass


class MinRate(Exception):
    pass


def _final(search: Search, answer: str, rate: float) -> bool:
    """Whether `rate` is the answer's final good end."""
    bracket = search.capacity if answer == "capacity" else search.slo_bracket
    return bracket.lo == rate


def good(probe: Probe, answer: str) -> bool:
    """Whether a probe showed its rate good for an answer ("capacity" or "slo")."""
    return probe.decision.good_for(answer)
