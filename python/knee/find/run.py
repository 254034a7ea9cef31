"""`knee find`: the search run as points of one run directory (docs/find.md).

Each group of the spec's points (a series, and every swept setting but the rate: matrix's
threads = 1, 2, 4 are three groups) gets a search of its own (knee.find.search). A probe is
an ordinary point, its rate and length set by the search, with its samples, statistics and
record in points/pNNN.json. find.json holds the path (every probe, its decision and reason,
the brackets after it) and the answers, rewritten after every probe so that an interrupted
search leaves what it had; summary.json's `find` holds the answers.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knee import results
from knee.analysis.answers import RATE_KEY, group_answers, key_of
from knee.config_values import integer, number, opt_integer
from knee.find.early import EARLY_MIN_SAMPLES, EARLY_MIN_SAMPLES_LOW, early_watch
from knee.find.overload import overload_watch
from knee.find.search import OutOfBudget, Probe, Search, Settings
from knee.find.search import good as search_good

# The functions, by name: `from knee.models import analyze` is the package's function of
# that name, not the module (knee.models re-exports it), and `analyze.analyze` then raised
# AttributeError on every search, silently.
from knee.models.analyze import analyze as fit_models
from knee.models.analyze import model_knee
from knee.params import Point
from knee.runner.display import Display
from knee.runner.local import Session
from knee.spec import Spec
from knee.stats import slo as slo_mod
from knee.stats.decision import decide
from knee.stats.replies import every_request_failed
from knee.stats.slo import Slo
from knee.stats.summary import Answer, GroupAnswers, ModelKnee, PointStats, RunAnswers

log = logging.getLogger(__name__)

FIND = "find.json"
#: Seconds a probe costs beyond its length (nodes started and stopped, statistics): the
#: budget check counts it.
PROBE_OVERHEAD_S = 3.0
#: The longest wait for a target to drain the backlog an overloaded probe left.
MAX_DRAIN_S = 30.0
#: Defaults for a service the user knows nothing about (`knee http URL` with no rate).
DEFAULT_MIN_RATE_PER_S = 10.0
DEFAULT_MAX_RATE_PER_S = 1_000_000.0
#: Without --min-rate, a search whose first rate is not sustainable steps down to this
#: fraction of it at most.
FLOOR_DIVISOR = 64.0
#: Phases whose probes stop once their decision is clear (knee.find.early): not a hold (the
#: answer's confirmation runs its whole length), nor a lengthened probe (its decision was
#: not clear at its first length). A probe for the SLO must have decided the SLO too.
EARLY_PHASES = ("low", "step", "sat", "bisect", "slo")


class FindError(ValueError):
    """A spec or option the search cannot run with; one line."""


class EveryRequestFailed(Exception):
    """No request of the low probe ended OK (a wrong URL, a refused method, a target that is
    down): the search stops at once, naming what the requests got, with a hint."""


@dataclass
class Options:
    slo: Slo | None = None
    tolerance: float = 0.05
    budget_s: float = 600.0
    min_rate_per_s: float | None = None
    max_rate_per_s: float | None = None
    probe_s: float = 10.0
    series: str | None = None


def groups_of(spec: Spec, series: str | None) -> tuple[list[list[Point]], list[str]]:
    """The spec's open-loop points grouped by series and every swept value but the rate,
    and the series left out (a closed loop or stepped rates: nothing to search)."""
    points = [p for p in spec.points if series is None or p.series == series]
    if not points:
        names = ", ".join(sorted({p.series for p in spec.points}))
        raise FindError(f"--series {series}: no such series; the spec has: {names}")
    searched = [p for p in points if p.load["schedule"] in ("poisson", "constant")]
    skipped = sorted({p.series for p in points} - {p.series for p in searched})
    if not searched:
        p = points[0]
        raise FindError(
            f"point {p.label!r}: load.schedule is {p.load['schedule']!r}; knee find searches "
            "an open-loop rate (schedule 'poisson' or 'constant')"
        )
    groups: dict[str, list[Point]] = {}
    for p in searched:
        groups.setdefault(key_of(p.series, p.swept), []).append(p)
    return list(groups.values()), skipped


def _probe_point(
    template: Point, index: int, rate: float, length_s: float, slo: Slo | None
) -> Point:
    load = dict(template.load)
    load.update(rate_per_s=rate, duration_s=length_s, requests=None)
    warmup = min(number(load, "warmup_s"), length_s / 4)  # a short probe keeps most of its samples
    load["warmup_s"] = warmup
    experiment = dict(template.experiment)
    # A fresh schedule per probe: a repeat with the same seed would replay the same
    # arrivals, and its agreement would prove nothing.
    experiment["seed"] = integer(template.experiment, "seed") + index
    if slo is not None:
        experiment["slo"] = slo.text
    swept = {**{k: v for k, v in template.swept.items() if k != RATE_KEY}, RATE_KEY: rate}
    return dataclasses.replace(template, index=index, swept=swept, load=load, experiment=experiment)


#: A probe holds this many times the samples its SLO's interval needs: at the bare minimum
#: the interval's bound is the largest sample, rarely under the limit.
SLO_SAMPLES_MARGIN = 1.5


def slo_samples(slo: Slo | None) -> int:
    """The samples a probe should hold for its SLO decision (0 without an SLO)."""
    if slo is None:
        return 0
    return round(SLO_SAMPLES_MARGIN * slo_mod.min_samples(slo))


def rate_bounds(group: list[Point], o: Options) -> tuple[float, float]:
    """The lowest and highest rate a group's search may probe: --min-rate, else the spec's
    lowest rate of the group; --max-rate, else DEFAULT_MAX_RATE_PER_S."""
    min_rate = o.min_rate_per_s or min(number(p.load, "rate_per_s") for p in group)
    max_rate = o.max_rate_per_s or DEFAULT_MAX_RATE_PER_S
    if min_rate >= max_rate:
        raise FindError(f"the lowest rate, {min_rate:g}/s, is not below --max-rate {max_rate:g}")
    return min_rate, max_rate


class _Finder:
    def __init__(self, spec: Spec, options: Options, session: Session) -> None:
        self.spec, self.o, self.session = spec, options, session
        self.t0 = time.monotonic()
        self.points: list[Point] = []
        self.stats: list[PointStats] = []
        self.path: list[dict[str, Any]] = []  # find.json's probes
        self.path_probes: list[Probe] = []  # each one's probe: its brackets come after it
        self.groups: list[GroupAnswers] = []  # answers so far
        # --slo, else the spec's (the same object its points carry: knee.params.Point.slo).
        self.slo = options.slo or (spec.points[0].slo if spec.points else None)
        self.skipped: list[str] = []  # series with no open-loop rate to search
        self.failed: str | None = None  # why the search stopped at once (EveryRequestFailed)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0

    def measure(self, template: Point, label: str, budget_end_s: float) -> Any:
        low_latency: list[float] = []

        def run(rate: float, length_s: float, phase: str) -> Probe:
            if self.elapsed_s() + length_s + PROBE_OVERHEAD_S > budget_end_s:
                raise OutOfBudget(
                    f"a {length_s:.0f} s probe at {rate:.4g}/s would end past the budget"
                )
            point = _probe_point(template, len(self.points), rate, length_s, self.slo)
            self.points.append(point)
            self.session.plan(self.points)
            watch = self._watch(point, rate, length_s, phase, low_latency)
            started = time.monotonic()
            stats = self.session.run_point(point, watch)
            if watch.early and stats.get("cut_short") == watch.early:
                stats["stopped_early"] = stats.pop("cut_short")
            self.stats.append(stats)
            decision = decide(stats)
            probe = Probe(
                point.index, rate, length_s, phase, decision, stats, time.monotonic() - started
            )
            # The cut's bound counts low-load latencies: the median, which one stall at the
            # start of the low probe (a cold target on a busy machine) does not move.
            latency = stats.get("latency_ok_ns")
            typical = (latency["p50"] or latency["mean"]) if latency else None
            if phase == "low" and typical:
                low_latency.append(float(typical) / 1e9)
            self.path.append({"group": label, **probe.to_json()})
            self.path_probes.append(probe)
            self._write(partial=True)
            if phase == "low" and (what := every_request_failed(stats)):
                hint = (
                    "check the URL, method and headers"
                    if point.server.get("target")
                    else "check the nodes' logs in the run directory"
                )
                raise EveryRequestFailed(f"every request at {rate:.4g}/s failed: {what}; {hint}")
            self._drain(point, stats, decision.capacity)
            return probe

        return run

    def _watch(
        self, point: Point, rate: float, length_s: float, phase: str, low_latency: list[float]
    ) -> _Watch:
        overload = overload_watch(rate, low_latency[0] if low_latency else None)
        if phase not in EARLY_PHASES:
            return _Watch(overload, None)
        files = lambda: sorted(  # noqa: E731
            (self.session.run_dir / "raw").glob(f"p{point.index:03d}-*.samples.bin")
        )
        slo = self.slo if phase == "slo" else None
        least = EARLY_MIN_SAMPLES_LOW if phase == "low" else EARLY_MIN_SAMPLES
        early = early_watch(files, length_s, number(point.load, "warmup_s"), slo, least)
        return _Watch(overload, early)

    def _drain(self, point: Point, stats: PointStats, capacity: str) -> None:
        """After an overloaded probe against a target knee did not start (its own servers
        are new at every point), wait as long as the backlog it left would take at the
        throughput it measured (the target's own queue is not visible), at most
        MAX_DRAIN_S."""
        if capacity == "stable" or not point.server.get("target"):
            return
        backlog = float(stats["stability"]["backlog"] if "stability" in stats else 0)
        throughput = float(stats.get("throughput_per_s") or 0.0)
        wait_s = min(MAX_DRAIN_S, backlog / throughput if throughput > 0 else MAX_DRAIN_S)
        if wait_s > 0:
            time.sleep(wait_s)

    def search(self, groups: list[list[Point]]) -> None:
        for i, group in enumerate(groups):
            template = group[0]
            label = " ".join(
                [template.series]
                + [f"{k.partition('.')[2]}={v}" for k, v in template.swept.items() if k != RATE_KEY]
            )
            min_rate, max_rate = rate_bounds(group, self.o)
            left_s = self.o.budget_s - self.elapsed_s()
            budget_end_s = self.elapsed_s() + left_s / (len(groups) - i)  # an equal share
            settings = Settings(
                min_rate_per_s=min_rate,
                max_rate_per_s=max_rate,
                probe_s=self.o.probe_s,
                tolerance=self.o.tolerance,
                slo=self.slo is not None,
                servers=opt_integer(template.server, "threads") or 1,
                # A rate the user gave is a floor; the spec's lowest rate is a first guess.
                floor_per_s=min_rate if self.o.min_rate_per_s else min_rate / FLOOR_DIVISOR,
                slo_samples=slo_samples(self.slo),
            )
            outcome = Search(settings, self.measure(template, label, budget_end_s)).run()
            self.groups.append(self._answers(label, outcome))
            self._write(partial=True)

    def _answers(self, label: str, outcome: Any) -> GroupAnswers:
        indices = {p.point for p in outcome.probes}
        points = [s for s in self.stats if s["point"] in indices]
        model, model_error = primary_model(points, self.points, self.spec)
        if model_error:
            # Not silent: the knee falls back to the measured power, and says why.
            log.warning("knee find: %s: the model fit failed: %s", label, model_error)
        out = group_answers(
            points,
            self.slo.text if self.slo else None,
            model,
            {"capacity": outcome.capacity.to_json(), "slo": outcome.slo.to_json()},
        )
        out["label"] = label
        out["model_error"] = model_error
        if model_error and (found_knee := out.get("knee")):
            found_knee["why"] += f" (no model: the model fit failed: {model_error})"
        answer = out["capacity"]["rate_per_s"]
        holds = [outcome.holds[name] for name in ("capacity", "slo") if name in outcome.holds]
        out["hold"] = {
            "rate_per_s": answer,
            "answers": [name for name in ("capacity", "slo") if name in outcome.holds],
            "probes": [p.point for p in holds],
            "phases": [p.phase for p in holds],
            "verdicts": [p.decision.capacity for p in holds],
            "duration_s": [p.duration_s for p in holds],
            "throughput_per_s": [p.stats.get("throughput_per_s") for p in holds],
        }
        out["search"] = {
            "stopped": outcome.stopped,
            "detail": outcome.detail,
            "probes": len(outcome.probes),
            "wall_s": sum(p.wall_s for p in outcome.probes),
            "service_s": outcome.service_s,
            "first_model_per_s": outcome.first_model_per_s,
        }
        mark_state(out["capacity"], outcome, "capacity")
        if slo_capacity := out.get("slo_capacity"):
            mark_state(slo_capacity, outcome, "slo")
        if outcome.stopped == "generator":
            out["capacity"]["limited_by"] = "generator"
            out["capacity"]["detail"] = (
                "the generator is the limit here, not the target: " + outcome.detail
            )
        elif outcome.stopped != "done":
            out["capacity"]["detail"] += f" (search stopped: {outcome.detail})"
        return out

    def answers(self) -> RunAnswers:
        return {
            "slo": self.slo.text if self.slo else None,
            "tolerance": self.o.tolerance,
            "budget_s": self.o.budget_s,
            "elapsed_s": self.elapsed_s(),
            "probe_s": self.o.probe_s,
            "skipped_series": self.skipped,
            "error": self.failed,
            "groups": self.groups,
        }

    def _write(self, partial: bool) -> None:
        for entry, probe in zip(self.path, self.path_probes, strict=True):
            entry["brackets"] = probe.brackets  # set by the search once the probe is decided
        answers = self.answers()
        status = "failed" if self.failed else "running" if partial else "complete"
        doc = {"version": 1, "status": status, "probes": self.path}
        if self.failed:
            doc["error"] = self.failed
        results.write_json(self.session.run_dir / FIND, doc | {"answers": answers})
        self.session.display.search(doc | {"answers": answers})
        self.session.extra["find"] = answers
        self.session.write_summary()


def mark_state(answer: Answer, outcome: Any, name: str) -> None:
    """An answer's state after its search (docs/find.md, "The answers"): `decided` when its
    bracket is within the tolerance and its hold held (a probe HOLD times the probe length at
    the answer's rate, run to its end, showed it good); `partial` when its bracket is closed
    but the search stopped first (the budget, the generator, a hold that kept failing): the
    bracket reached, `held` false; `undecided` when an end of the bracket is open."""
    rate = answer.get("rate_per_s")
    hold = next(
        (
            p
            for p in outcome.holds.values()
            if rate is not None and p.rate_per_s == rate and search_good(p, name)
        ),
        None,
    )
    answer["held"] = hold is not None
    answer["hold_probe"] = hold.point if hold is not None else None
    if answer["state"] != "decided" or hold is not None:
        return
    answer["state"], answer["decided"] = "partial", False
    answer["partial"] = (
        f"the search stopped ({outcome.stopped}: {outcome.detail}) before the hold at "
        f"{rate:.4g}/s: the bracket reached"
    )


class _Watch:
    """The overload watch (knee.stats.decision), then the early one (knee.find.early) if any;
    `early` keeps why the early one stopped the probe."""

    def __init__(self, overload: Any, early: Any) -> None:
        self.overload, self.early_watch = overload, early
        self.early: str | None = None

    def __call__(self, progress: dict[str, Any]) -> str | None:
        cut = self.overload(progress)
        if cut is not None or self.early_watch is None:
            return cut
        self.early = self.early_watch(progress)
        return self.early


def primary_model(
    points: list[PointStats], planned: list[Point], spec: Spec
) -> tuple[ModelKnee | None, str | None]:
    """The primary fitted model of one group's probes and its knee
    (knee.models.analyze.model_knee), or None; and the error of a fit that raised
    ("KeyError: 'series'"), recorded in the answers (`model_error`) rather than dropped."""
    by_index = {p.index: p for p in planned}

    def setting(point: Mapping[str, Any], key: str) -> Any:
        section, _, name = key.partition(".")
        known = by_index.get(point.get("point", -1))
        return None if known is None else getattr(known, section, {}).get(name)

    try:
        series = fit_models(points, setting, None)
        for entry in series:
            for group in entry.get("groups", []):
                found = model_knee(group, entry.get("models", []))
                if found is not None:
                    return found, None
    except Exception as e:  # any fit error: the knee is left to the data, and it is said
        return None, f"{type(e).__name__}: {e}"
    return None, None


def find(
    spec: Spec,
    options: Options,
    out_root: Path,
    display: Display,
    keep_scratch: bool = False,
) -> Path:
    """Runs the search; returns the run directory (find.json, summary.json's `find`)."""
    if not 0 < options.tolerance < 1:
        raise FindError(f"--tolerance: expected between 0% and 100%, got {options.tolerance:.0%}")
    if not math.isfinite(options.budget_s) or options.budget_s <= 0:
        raise FindError("--budget: expected a positive time")
    groups, skipped = groups_of(spec, options.series)
    for group in groups:  # refused before anything starts
        rate_bounds(group, options)
    with Session(spec, out_root, display, keep_scratch, n_points=0) as session:
        finder = _Finder(spec, options, session)
        finder.skipped = skipped
        try:
            finder.search(groups)
        except EveryRequestFailed as e:
            finder.failed = str(e)
            finder._write(partial=False)
            raise
        except BaseException:
            finder._write(partial=True)  # what the search had; the run's status says why
            raise
        finder._write(partial=False)
    return session.run_dir
