"""`knee find` and `knee http` with no rate (docs/find.md): the SLO's decisions on samples
of known quantiles, the search's rules (a probe lengthened while undecided, the brackets,
the start from the saturated throughput, the SLO judged where it matters, the hold), and
real searches: a service of known capacity found within a wide margin,
a generator held to a sliver of a core named as the limit, and `--slo` as a threshold."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import unavailable
from real_http_servers import SLEEP_MS, SLEEP_WORKERS, real_server
from test_hosts_limits import cgroups_usable
from test_runner import only_run_dir, run_knee, write_spec

from knee.find.search import HOLD, SAT_SHARE, Probe, Search, Settings
from knee.stats import slo as slo_mod
from knee.stats.decision import Decision

# ------------------------------------------------------------------ SLO decisions


def test_slo_parses_percentiles_means_and_units() -> None:
    assert slo_mod.parse("p99<50ms").limit_ns == 50e6
    assert slo_mod.parse("p99.9 < 1s").q == pytest.approx(0.999)
    assert slo_mod.parse("p999<2ms").stat == "p99.9"
    assert slo_mod.parse("mean<200us").q is None
    for bad in ("p100<1ms", "p99<0ms", "p99>5ms", "99<5ms", "p99<5 minutes"):
        with pytest.raises(slo_mod.SloError):
            slo_mod.parse(bad)


def _decide(values_ms: np.ndarray, text: str, failures: int = 0, unstable: bool = False) -> str:
    ns = values_ms * 1e6
    return slo_mod.decide(np.sort(ns), ns, failures, slo_mod.parse(text), unstable)["verdict"]


def test_slo_met_missed_and_undecided_on_known_quantiles() -> None:
    # 10,000 samples uniform on [0, 100) ms: the true p99 is 99 ms, the sample's bounds
    # within a few tenths of a ms at one-sided 99%.
    values = np.random.default_rng(1).uniform(0, 100, 10_000)
    assert _decide(values, "p99<100ms") == "met"
    assert _decide(values, "p99<95ms") == "missed"
    assert _decide(values, "p99<99ms") == "undecided"  # the interval straddles the truth
    assert _decide(values, "p50<55ms") == "met"
    assert _decide(values, "mean<52ms") == "met" and _decide(values, "mean<48ms") == "missed"
    # Too few samples for a p99 upper bound: undecided, whatever the value.
    assert _decide(values[:50], "p99<1s") == "undecided"


def test_the_fewest_samples_for_an_slo_are_loadgens() -> None:
    """The SLO is met when the percentile's one-sided 99% upper bound is under the limit
    (MLPerf LoadGen's early stopping, confidence 0.99). With B ~ Binomial(n, q), the top
    order statistic x_(n) is an upper bound with confidence P(B <= n - 1) = 1 - q^n, so the
    fewest samples with a bound are the smallest n with q^n <= 0.01, n >= ln 0.01 / ln q:
      p99:   ln 0.01 / ln 0.99  = 458.21; 0.99^458  = 0.010021 > 0.01, 0.99^459  = 0.009921
      p90:   ln 0.01 / ln 0.9   = 43.71;  0.9^43    = 0.010775 > 0.01, 0.9^44    = 0.009698
      p99.9: ln 0.01 / ln 0.999 = 4602.87; 0.999^4602 = 0.0100087,     0.999^4603 = 0.0099987
      p50:   ln 0.01 / ln 0.5   = 6.64;   0.5^6     = 0.015625,        0.5^7     = 0.0078125
    LoadGen's h for t = 0 requests over the target is ceil(ln 0.01 / ln 0.99) = 459 too."""
    expected = {"p99": 459, "p90": 44, "p99.9": 4603, "p50": 7}
    for stat, n in expected.items():
        assert slo_mod.min_samples(slo_mod.parse(f"{stat}<1s")) == n, stat
    # At the boundary the decision flips: 459 requests of 1 ms meet p99<10ms, 458 cannot.
    assert _decide(np.full(459, 1.0), "p99<10ms") == "met"
    assert _decide(np.full(458, 1.0), "p99<10ms") == "undecided"
    # One request over the limit (t = 1): the bound is x_(n-1), with confidence
    # P(B <= n - 2) = 1 - P(B(n, 0.01) <= 1 over the limit) ... i.e. LoadGen's
    # P(Binomial(n, 0.01) <= 1) = 0.99^n + n 0.01 0.99^(n-1) <= 0.01:
    #   n = 661: 0.99^661 + 6.61 x 0.99^660 = 0.0100010 > 0.01
    #   n = 662: 0.99^662 + 6.62 x 0.99^661 = 0.0099140 <= 0.01
    for n, verdict in ((661, "undecided"), (662, "met")):
        values = np.full(n, 1.0)
        values[n // 2] = 100.0  # one slow request, over the limit
        assert _decide(values, "p99<10ms") == verdict, n


def test_failures_rank_above_successes_and_an_unstable_point_misses() -> None:
    values = np.full(1000, 1.0)  # every success takes 1 ms
    assert _decide(values, "p99<10ms") == "met"
    # 5% of requests failed: the p99 lands on a failure, over any limit.
    assert _decide(values, "p99<10ms", failures=50) == "missed"
    assert _decide(values, "p99<10ms", unstable=True) == "missed"


def test_a_rate_not_offered_is_over_capacity_or_the_generators_limit() -> None:
    """A probe that kept its latency but sent 70/s of 100/s did not show 100/s sustainable:
    over capacity when its sends waited for connections the target held, the generator's
    limit when they were late with connections free (the sender check's `limit`)."""
    from knee.stats.decision import decide

    stats = {
        "count": 700,
        "status_rates": {"ok": 1.0},
        "stability": {"verdict": "stable"},
        "target_rate_per_s": 100.0,
        "achieved_rate_per_s": 70.0,
        "achieved_rate_ci_per_s": [65.0, 75.0],
        "sent": 700,
    }
    held = {**stats, "checks": [{"name": "sender", "verdict": "fail", "limit": "target"}]}
    assert (decide(held).capacity, decide(held).limit) == ("unstable", "target")
    free = {**stats, "checks": [{"name": "sender", "verdict": "fail", "limit": "generator"}]}
    assert decide(free).limit == "generator"


def test_failures_without_a_queue_are_the_errors_limit_and_with_one_the_targets() -> None:
    """Unstable for its OK share alone (a target that sheds load), a probe is limited by
    errors; unstable with a sign of a queue, by the target, whatever its failures."""
    from knee.stats.decision import decide

    stats = {
        "count": 1000,
        "status_rates": {"ok": 0.7, "error": 0.3},
        "target_rate_per_s": 100.0,
        "achieved_rate_per_s": 100.0,
        "sent": 1000,
    }
    shed = {**stats, "stability": {"verdict": "unstable", "queueing": False}}
    assert (decide(shed).capacity, decide(shed).limit) == ("unstable", "errors")
    assert decide(shed).reason == "30.0% of requests failed (over 1%)"
    queue = {**stats, "stability": {"verdict": "unstable", "queueing": True, "detail": "q"}}
    assert (decide(queue).capacity, decide(queue).limit) == ("unstable", "target")


# ------------------------------------------------------------------ the search's rules


class _Target:
    """A target for the search's rules alone: stable below `capacity`, unstable above, and
    undecided within `margin` of it on probes shorter than `decides_s`."""

    def __init__(
        self,
        capacity: float,
        margin: float = 0.0,
        decides_s: float = 0.0,
        slo_limit: float | None = None,
        starved: tuple[float, float] | None = None,
        saturated: float | None = None,
        slo_samples: int = 0,
    ) -> None:
        self.capacity, self.margin, self.decides_s = capacity, margin, decides_s
        self.slo_limit = slo_limit  # the SLO met below this rate
        self.saturated = saturated  # the throughput a probe over capacity shows
        self.slo_samples = slo_samples  # the SLO undecided on fewer samples
        self.starved = starved  # the generator falls behind between these rates, once
        self.calls: list[tuple[float, float, str]] = []

    def __call__(self, rate: float, length_s: float, phase: str) -> Probe:
        self.calls.append((rate, length_s, phase))
        near = abs(rate / self.capacity - 1) < self.margin and length_s < self.decides_s
        verdict = "undecided" if near else "stable" if rate < self.capacity else "unstable"
        slo = None if self.slo_limit is None else "met" if rate < self.slo_limit else "missed"
        if slo is not None and rate * length_s < self.slo_samples:
            slo = "undecided"
        decision = Decision(verdict, None if verdict == "stable" else "target", slo, "")
        if self.starved and self.starved[0] <= rate <= self.starved[1]:
            self.starved = None
            decision = Decision("undecided", "generator", slo, "starved")
        stats: dict = {"latency_ok_ns": {"mean": 10e6}, "server_ns": {"mean": 10e6}}
        if verdict == "unstable" and self.saturated:
            stats["throughput_per_s"] = self.saturated
        return Probe(len(self.calls) - 1, rate, length_s, phase, decision, stats, length_s)


def _settings(**kw: float) -> Settings:
    base = dict(
        min_rate_per_s=5.0, max_rate_per_s=1e6, probe_s=10.0, tolerance=0.05, slo=False, servers=1
    )
    return Settings(**{**base, **kw})  # type: ignore[arg-type]


def test_the_search_brackets_bisects_and_holds_to_the_tolerance() -> None:
    target = _Target(capacity=333.0)
    outcome = Search(_settings(), target).run()
    lo, hi = outcome.capacity.lo, outcome.capacity.hi
    assert outcome.stopped == "done", outcome.detail
    assert lo is not None and hi is not None
    assert lo < 333.0 <= hi and hi / lo - 1 <= 0.05
    # One hold at the answer, HOLD times the probe's length, and it is the last probe.
    assert [p for p in target.calls if p[2] == "hold"] == [(lo, 10.0 * HOLD, "hold")]
    assert target.calls[-1] == (lo, 10.0 * HOLD, "hold")
    assert target.calls[0][2] == "low" and target.calls[0][0] == 5.0


def test_a_hold_that_fails_moves_the_bracket_and_the_bisection_resumes() -> None:
    """Stable on a probe, unstable when held longer: the held rate becomes the bad end."""
    # A capacity that shows only on long probes: 333/s on a probe, 300/s on a hold.
    calls: list[tuple[float, float, str]] = []

    def measure(rate: float, length_s: float, phase: str) -> Probe:
        calls.append((rate, length_s, phase))
        cap = 300.0 if length_s >= 10.0 * HOLD else 333.0
        return _Target(capacity=cap)(rate, length_s, phase)

    outcome = Search(_settings(), measure).run()
    holds = [c for c in calls if c[2] == "hold"]
    assert len(holds) >= 2 and holds[0][0] > 300.0 > holds[-1][0], calls
    assert outcome.stopped == "done", outcome.detail
    assert outcome.capacity.lo is not None and outcome.capacity.lo < 300.0 <= outcome.capacity.hi
    # With the saturated throughput measured, the failed hold's (290/s) restarts the
    # check: the next probe is at it.
    calls.clear()

    def saturating(rate: float, length_s: float, phase: str) -> Probe:
        calls.append((rate, length_s, phase))
        cap = 300.0 if length_s >= 10.0 * HOLD else 333.0
        return _Target(capacity=cap, saturated=290.0 if cap == 300.0 else 333.0)(
            rate, length_s, phase
        )

    outcome = Search(_settings(), saturating).run()
    first_hold = next(i for i, c in enumerate(calls) if c[2] == "hold")
    assert calls[first_hold + 1] == (290.0, 10.0, "sat"), calls
    # Every later hold is at a rate below the first: the bracket only moves down.
    assert all(c[0] < calls[first_hold][0] for c in calls[first_hold + 1 :] if c[2] == "hold")
    assert outcome.capacity.hi is not None and outcome.capacity.hi <= calls[first_hold][0]


def test_a_probe_lengthened_at_the_answer_is_its_hold() -> None:
    """Near the capacity a probe is undecided on 10 s and lengthened to 20 s: run to its
    end at the answer's rate, it is as long as a hold, and no further probe is run."""
    target = _Target(capacity=100.0, margin=0.05, decides_s=15.0, saturated=100.0)
    outcome = Search(_settings(min_rate_per_s=20.0), target).run()
    assert outcome.stopped == "done", outcome.detail
    lo = outcome.capacity.lo
    assert lo is not None and lo < 100.0 <= (outcome.capacity.hi or 0.0)
    held = outcome.holds["capacity"]
    assert (held.rate_per_s, held.phase, held.duration_s) == (lo, "lengthen", 10.0 * HOLD)
    assert not [c for c in target.calls if c[2] == "hold"], target.calls
    assert target.calls[-1][0] != lo or target.calls[-1][2] == "lengthen"


def test_the_bisection_starts_from_the_saturated_throughput() -> None:
    """The first probe over capacity measured the throughput a saturated target completes,
    T: the next probe is at T, then one a step of the tolerance below it (T did not hold)
    or above it (it did), and the search needs fewer probes than from the doubling's
    bracket alone."""
    plain = _Target(capacity=333.0)
    Search(_settings(), plain).run()
    step = 1 + SAT_SHARE * 0.05
    for saturated, second in ((333.0, 333.0 / step), (320.0, 320.0 * step)):
        target = _Target(capacity=333.0, saturated=saturated)
        outcome = Search(_settings(), target).run()
        assert outcome.stopped == "done", outcome.detail
        first_over = next(i for i, c in enumerate(target.calls) if c[0] >= 333.0)
        after = target.calls[first_over + 1 : first_over + 3]
        second = float(f"{second:.4g}")
        assert after == [(saturated, 10.0, "sat"), (second, 10.0, "sat")], target.calls
        assert outcome.capacity.to_json() == sorted([saturated, second])
        assert len(target.calls) < len(plain.calls), (target.calls, plain.calls)


def test_the_slo_is_judged_only_where_it_matters() -> None:
    """The SLO needs 550 samples: probes for the capacity do not run for them (a low probe
    at 5/s lasts its own 20 s, not 110 s), their undecided SLO moves nothing, and the probes
    for the SLO and the hold run long enough for it."""
    target = _Target(capacity=333.0, saturated=333.0, slo_limit=200.0, slo_samples=550)
    outcome = Search(_settings(slo=True, slo_samples=550), target).run()
    assert outcome.stopped == "done", outcome.detail
    low = target.calls[0]
    assert low[2] == "low" and low[1] == 20.0  # 100 samples at 5/s, not 550
    for rate, length_s, phase in target.calls:
        if phase in ("slo", "hold"):
            assert rate * length_s >= 550, (rate, length_s, phase)
    assert outcome.slo.lo is not None and outcome.slo.hi is not None
    assert outcome.slo.lo < 200.0 <= outcome.slo.hi and outcome.slo.hi / outcome.slo.lo <= 1.05


def test_an_undecided_probe_is_lengthened_at_the_same_rate_not_re_guessed() -> None:
    target = _Target(capacity=100.0, margin=0.03, decides_s=25.0)
    outcome = Search(_settings(min_rate_per_s=30.0), target).run()
    lengthened = [c for c in target.calls if c[2] == "lengthen"]
    assert lengthened, target.calls
    for rate, length_s, _ in lengthened:
        before = target.calls[target.calls.index((rate, length_s, "lengthen")) - 1]
        assert before[0] == rate and length_s == 2 * before[1]  # same rate, twice as long
    assert outcome.capacity.lo is not None and outcome.capacity.lo < 100.0


def test_a_passing_generator_shortfall_below_the_capacity_is_lengthened() -> None:
    """The generator fell behind once, at a rate under one already shown sustainable (a
    probe for the SLO): not the end of the search, and not a verdict on that rate."""
    target = _Target(capacity=400.0, slo_limit=150.0, starved=(120.0, 145.0))
    outcome = Search(_settings(slo=True), target).run()
    assert outcome.stopped == "done", outcome.detail
    starved = [c for c in target.calls if 120.0 <= c[0] <= 145.0]
    assert any(phase == "lengthen" for _, _, phase in starved), target.calls
    assert outcome.capacity.lo is not None and outcome.capacity.lo < 400.0 <= outcome.capacity.hi
    assert outcome.slo.lo is not None and outcome.slo.lo < 150.0 <= outcome.slo.hi
    # Above every rate shown good, the generator's shortfall ends the search.
    above = Search(_settings(), _Target(capacity=400.0, starved=(300.0, 1e6))).run()
    assert above.stopped == "generator"


def test_a_low_probe_over_capacity_steps_down_to_the_floor() -> None:
    target = _Target(capacity=2.0)
    outcome = Search(_settings(floor_per_s=5.0 / 64), target).run()
    assert outcome.stopped == "done", outcome.detail
    assert outcome.capacity.lo is not None and outcome.capacity.lo < 2.0 <= outcome.capacity.hi
    # A floor the user gave (--min-rate) is not crossed: the search says so.
    refused = Search(_settings(floor_per_s=5.0), _Target(capacity=2.0)).run()
    assert refused.stopped == "min_rate" and "--min-rate" in refused.detail


def test_the_budget_stops_the_search_and_keeps_its_bracket() -> None:
    target = _Target(capacity=500.0)
    calls = 0

    def measure(rate: float, length_s: float, phase: str) -> Probe:
        nonlocal calls
        calls += 1
        if calls > 4:
            from knee.find.search import OutOfBudget

            raise OutOfBudget("test budget")
        return target(rate, length_s, phase)

    outcome = Search(_settings(), measure).run()
    assert outcome.stopped == "budget"
    assert outcome.capacity.lo is not None  # the bracket reached is kept


def test_states_decided_partial_undecided_follow_the_search() -> None:
    """An answer is decided only when its bracket is within the tolerance and its hold
    held; a closed bracket the budget cut before its hold is partial (held false, and why);
    an open one is undecided."""
    from knee.analysis.answers import _answer
    from knee.find.run import mark_state
    from knee.find.search import OutOfBudget

    def cut_after(n: int) -> Search:
        target, calls = _Target(capacity=500.0), [0]

        def measure(rate: float, length_s: float, phase: str) -> Probe:
            calls[0] += 1
            if calls[0] > n:
                raise OutOfBudget("test budget")
            return target(rate, length_s, phase)

        return Search(_settings(), measure)

    done = cut_after(1000).run()
    first_hold = next(i for i, p in enumerate(done.probes) if p.phase == "hold")
    # The whole search, and the same one cut where its first hold would start.
    for n, state in ((1000, "decided"), (first_hold, "partial")):
        outcome = cut_after(n).run()
        answer = _answer(outcome.capacity.lo, outcome.capacity.hi, "capacity", None)
        assert answer["state"] == "decided"  # the bracket is closed and narrow either way
        mark_state(answer, outcome, "capacity")
        assert (answer["state"], answer["held"]) == (state, state == "decided"), answer
        assert answer["decided"] is (state == "decided")
        if state == "decided":
            assert outcome.stopped == "done"
            assert answer["hold_probe"] == outcome.holds["capacity"].point
            assert outcome.holds["capacity"].rate_per_s == answer["rate_per_s"]
        else:
            assert outcome.stopped == "budget" and not outcome.holds
            assert answer["partial"].startswith("the search stopped (budget: ")
            assert f"before the hold at {answer['rate_per_s']:.4g}/s" in answer["partial"]
    opened = cut_after(2).run()  # the low probe and one step, both stable: no upper end
    answer = _answer(opened.capacity.lo, opened.capacity.hi, "capacity", None)
    mark_state(answer, opened, "capacity")
    assert answer["state"] == "undecided" and opened.capacity.hi is None
    assert answer["held"] is False and "partial" not in answer


def test_a_model_fit_that_raises_is_recorded_not_dropped() -> None:
    """A fit that raises (here a probe's statistics without its series) leaves the knee to
    the data and says why: the error is returned for the answers' `model_error`, printed by
    `knee find` and stated in the report's headline."""
    import io

    from rich.console import Console

    from knee.find.cli import print_answers
    from knee.find.run import primary_model
    from knee.report.sections.headline import model_note

    model, error = primary_model([{"point": 0, "target_rate_per_s": 10.0}], [], None)  # type: ignore[arg-type]
    assert model is None and error == "KeyError: 'series'"
    group = {"label": "main", "capacity": {"interval_per_s": [None, None]}, "model_error": error}
    out = io.StringIO()
    print_answers(Console(file=out, width=200), {"groups": [group]})
    assert "the fit failed: KeyError: 'series'" in out.getvalue()
    assert "could not be fitted (KeyError: 'series')" in model_note(group)


# ------------------------------------------------------------------ real searches


def _answers(stdout: str) -> dict:
    start = stdout.index("\n{\n") + 1
    return json.loads(stdout[start:])


def test_knee_http_with_no_rate_finds_a_known_capacity(tmp_path: Path, knee_node: str) -> None:
    """gunicorn, W sync workers in front of an app that sleeps D: at most W / D per second.
    Found within a wide margin (the sleep overshoots, each request is a new connection),
    by the default search: probes that stop once their decision is clear, a bisection from
    the saturated throughput, and a hold at the answer."""
    truth = SLEEP_WORKERS / (SLEEP_MS / 1e3)
    with real_server("gunicorn-sleep", tmp_path / "srv", knee_node) as server:
        proc = run_knee(
            "http",
            server.url + "/",
            "--budget", "240s", "--min-rate", "20", "--out", str(tmp_path / "runs"),
            "--no-progress", "--json",
            timeout_s=480,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    group = _answers(proc.stdout)["groups"][0]
    capacity = group["capacity"]
    assert capacity["limited_by"] != "generator", capacity
    assert 0.6 * truth <= capacity["rate_per_s"] <= 1.1 * truth, capacity
    run_dir = only_run_dir(tmp_path / "runs")
    path = json.loads((run_dir / "find.json").read_text())
    assert path["status"] == "complete"
    probes = path["probes"]
    assert probes[0]["phase"] == "low"
    phases = {p["phase"] for p in probes}
    assert {"low", "step"} <= phases
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["points"]) == len(probes)
    # A probe whose decision was clear stopped before its length, with why; its samples and
    # window are below what its length would hold.
    early = [p for p in probes if p["stopped_early"]]
    assert early, [(p["phase"], p["rate_per_s"], p["decision"]["reason"]) for p in probes]
    for p in early:
        assert p["stopped_early"].startswith("decided early"), p
        assert p["decision"]["capacity"] == "stable" and not p["cut_short"], p
        assert p["window_s"] < p["duration_s"] and p["samples"] < p["rate_per_s"] * p["duration_s"]
        assert p["phase"] not in ("hold", "lengthen")
    # The bisection starts from the saturated throughput of the probes over capacity (the
    # lowest rate's that ran its length, else the lowest cut short), at 4 significant digits.
    over = [
        p
        for p in probes
        if p["decision"]["capacity"] == "unstable"
        and p["decision"]["limit"] == "target"
        and p["throughput_per_s"]
    ]
    sat = [i for i, p in enumerate(probes) if p["phase"] == "sat"]
    if over and sat:
        first_sat = sat[0]
        before = [p for p in over if p["point"] < probes[first_sat]["point"]]
        source = min(before, key=lambda p: (bool(p["cut_short"]), p["rate_per_s"]))
        assert probes[first_sat]["rate_per_s"] == float(f"{source['throughput_per_s']:.4g}")
        assert all(p["phase"] not in ("bisect", "hold") for p in probes[:first_sat])
    # The answer: a bracket [a rate shown stable, a rate shown not], within the tolerance,
    # and held by a probe twice a probe's length at its lower end, run to its end.
    lo, hi = capacity["interval_per_s"]
    assert capacity["decided"] and hi / lo - 1 <= 0.05, capacity
    stable = {p["rate_per_s"] for p in probes if p["decision"]["capacity"] == "stable"}
    not_stable = {p["rate_per_s"] for p in probes if p["decision"]["capacity"] != "stable"}
    assert lo in stable and hi in not_stable
    hold = group["hold"]
    assert hold["rate_per_s"] == lo and hold["verdicts"][0] == "stable", hold
    held = next(p for p in probes if p["point"] == hold["probes"][0])
    assert held["duration_s"] >= 20.0 and not held["stopped_early"]
    # Why: the listener's 2 prefork workers, busy by their Server-Timing, not their CPU.
    assert {p["target"]["workers"] for p in summary["points"]} == {SLEEP_WORKERS}
    named = group["bottleneck"]["bottleneck"]
    assert named["resource"] == "pool:target", group["bottleneck"]
    assert named["label"] == f"the target gunicorn's {SLEEP_WORKERS} workers"
    assert group["bottleneck"]["sentence"].startswith(f"set by {named['label']}")


def test_an_answer_the_budget_cut_before_its_hold_is_partial(
    tmp_path: Path, knee_node: str
) -> None:
    """One gunicorn worker whose requests sleep 50 ms under one lock (at most 20/s):
    --min-rate 12 is sustainable and --max-rate 23.8 is not, so the bracket [12, 23.8]
    closes after two probes (8.3 s and 8.4 s: 100 and 200 samples) and is within the 99%
    tolerance (no probe from the saturated throughput, no bisection). The hold at 12/s
    lasts HOLD x 16.7 s (200 samples) = 33.3 s, and with the overhead the budget counts per
    probe 36.3 s: a budget under that can never start it, whatever the time spent before.
    The capacity is then partial, not decided: in the printed answers, find.json,
    summary.json and the report."""
    from knee.find.run import PROBE_OVERHEAD_S
    from knee.find.search import MIN_SAMPLES

    hold_s = HOLD * max(2.0, MIN_SAMPLES / 12.0)
    budget_s = math.floor(hold_s + PROBE_OVERHEAD_S)
    assert budget_s < hold_s + PROBE_OVERHEAD_S  # the hold cannot fit, even at 0 s spent
    with real_server("gunicorn-slow", tmp_path / "srv", knee_node) as server:
        proc = run_knee(
            "http",
            server.url + "/",
            "--probe", "2s", "--tolerance", "99%", "--budget", f"{budget_s}s",
            "--min-rate", "12", "--max-rate", "23.8", "--out", str(tmp_path / "runs"),
            "--no-progress",
            timeout_s=300,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    found = json.loads((run_dir / "find.json").read_text())
    group = found["answers"]["groups"][0]
    assert group["search"]["stopped"] == "budget", group["search"]
    assert "hold" not in [p["phase"] for p in found["probes"]], found["probes"]
    capacity = group["capacity"]
    lo, hi = capacity["interval_per_s"]
    assert lo is not None and hi is not None and 12.0 <= lo < hi <= 23.8, found["probes"]
    assert capacity["state"] == "partial" and capacity["decided"] is False, capacity
    assert capacity["held"] is False and group["hold"]["probes"] == [], capacity
    assert capacity["partial"].startswith("the search stopped (budget: "), capacity
    assert f"before the hold at {lo:.4g}/s: the bracket reached" in capacity["partial"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["find"]["groups"][0]["capacity"]["state"] == "partial"
    assert "(partial: not held)" in proc.stdout
    report = (run_dir / "report.html").read_text()
    assert f"partial: the search stopped within the budget before the hold at {lo:.4g}/s" in report


GENERATOR_SPEC = """
[experiment]
name = "starved"
system = "echo"

[hosts.sliver]
kind = "local"
cpu_cores = 0.03

[placement]
load = "sliver"

[load]
schedule = "poisson"
rate_per_s = 200
duration_s = 3
warmup_s = 0.5
"""


def test_a_starved_generator_is_named_as_the_limit(tmp_path: Path) -> None:
    """The generator on 3% of a core cannot keep a high rate's schedule: the search names
    the generator, never reporting that rate as the target's capacity."""
    reason = cgroups_usable(0.03)
    if reason:
        unavailable(reason)
    spec = write_spec(tmp_path, GENERATOR_SPEC)
    proc = run_knee(
        "find", str(spec), "--probe", "3s", "--budget", "120s", "--out", str(tmp_path / "runs"),
        "--no-progress", "--no-report", "--json",
        timeout_s=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    group = _answers(proc.stdout)["groups"][0]
    assert group["search"]["stopped"] == "generator", group["search"]
    assert group["capacity"]["limited_by"] == "generator"
    assert "generator is the limit" in group["capacity"]["detail"]


SLO_SPEC = """
[experiment]
name = "threshold"
system = "echo"
slo = "{slo}"

[load]
schedule = "poisson"
rate_per_s = 300
duration_s = 3
warmup_s = 0.5
"""


@pytest.mark.parametrize(("slo", "code"), [("p99<1s", 0), ("p50<1us", 5)])
def test_an_slo_on_a_fixed_rate_run_is_a_threshold(tmp_path: Path, slo: str, code: int) -> None:
    """Loopback echo answers in tens of microseconds: p99 < 1 s is met, p50 < 1 us missed
    (exit code 5), each decided at one-sided 99% confidence and recorded on the point."""
    spec = write_spec(tmp_path, SLO_SPEC.format(slo=slo))
    proc = run_knee(
        "run", str(spec), "--out", str(tmp_path / "runs"), "--no-progress", "--no-report"
    )
    assert proc.returncode == code, proc.stderr
    point = json.loads((only_run_dir(tmp_path / "runs") / "summary.json").read_text())["points"][0]
    assert point["slo"]["verdict"] == ("met" if code == 0 else "missed")
    if code:
        assert "SLO p50<1us missed" in proc.stderr


def test_a_bad_slo_is_refused_in_one_line(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, SLO_SPEC.format(slo="p99 under 5ms"))
    proc = run_knee("run", str(spec), "--out", str(tmp_path / "runs"))
    assert proc.returncode == 2
    assert "experiment.slo" in proc.stderr and "p99<50ms" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def _knee_http_forbidden(
    tmp_path: Path, knee_node: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """`knee http` with `args` at gunicorn's /forbidden (403 to every request), into
    tmp_path/runs."""
    with real_server("gunicorn-sync", tmp_path / "srv", knee_node) as server:
        return run_knee(
            "http", server.url + "/forbidden", *args,
            "--out", str(tmp_path / "runs"), "--no-progress",
            timeout_s=300,
        )  # fmt: skip


def test_a_wrong_url_stops_the_search_at_once_and_names_the_status(
    tmp_path: Path, knee_node: str
) -> None:
    """gunicorn answering 403 to every request at /forbidden: `knee http URL` stops after
    its low probe (no step down), names the status and the count, hints at the URL, exits
    6, and still writes its report, which states it."""
    proc = _knee_http_forbidden(tmp_path, knee_node, "--probe", "2s", "--min-rate", "20")
    assert proc.returncode == 6, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if "every request at 20/s failed" in x)
    assert "403 Forbidden (" in line and "check the URL, method and headers" in line, line
    run_dir = only_run_dir(tmp_path / "runs")
    found = json.loads((run_dir / "find.json").read_text())
    assert [p["phase"] for p in found["probes"]] == ["low"]
    assert found["status"] == "failed" and "403 Forbidden" in found["error"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["find"]["error"] == found["error"]
    point = summary["points"][0]
    assert set(point["http_statuses"]) == {"403"}
    assert f"({point['http_statuses']['403']} of {point['count']})" in line
    assert "The search stopped at once: every request" in (run_dir / "report.html").read_text()


def test_a_fixed_rate_run_whose_every_request_failed_writes_its_report(
    tmp_path: Path, knee_node: str
) -> None:
    """A fixed rate against the same 403: no latency, no throughput above 0, and the report
    is written all the same (its log axes had failed it with matplotlib's ValueError)."""
    proc = _knee_http_forbidden(tmp_path, knee_node, "--rate", "20", "--duration", "3s")
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    assert "the report failed" not in proc.stderr
    assert (run_dir / "report.html").stat().st_size > 0
    point = json.loads((run_dir / "summary.json").read_text())["points"][0]
    assert point["statuses"]["ok"] == 0 and set(point["http_statuses"]) == {"403"}


# ------------------------------------------------------------------ a probe that decides early


def _records(latency_ms: np.ndarray, rate_per_s: float, failed: int = 0) -> np.ndarray:
    """Sample records as knee-node flushes them: one every 1 / rate s, OK but `failed`."""
    from knee.results import SAMPLE_DTYPE

    n = len(latency_ms)
    r = np.zeros(n, dtype=SAMPLE_DTYPE)
    intended = (1e9 + np.arange(n) * 1e9 / rate_per_s).astype(np.uint64)
    r["intended_ns"] = intended
    r["sent_ns"] = intended
    r["received_ns"] = intended + (latency_ms * 1e6).astype(np.uint64)
    r["status"][n - failed :] = 3
    return r


def test_an_early_look_stops_only_a_probe_clear_of_every_threshold() -> None:
    from knee.find.early import look

    rng = np.random.default_rng(7)
    rate, t_s = 100.0, 7.0
    flat = rng.exponential(20.0, int(rate * t_s)) + 1.0
    progress = {
        "t_s": t_s,
        "sent": rate * t_s,
        "completed": rate * t_s - 2,
        "target_rate_per_s": rate,
    }
    why = look(_records(flat, rate), progress, 10.0, 1.0, None)
    assert why is not None and why.startswith("decided early at 7 s of 10 s"), why
    # Before half the length, or on too few samples: keep running.
    assert look(_records(flat, rate), {**progress, "t_s": 4.0}, 10.0, 1.0, None) is None
    assert look(_records(flat[:80], rate), progress, 10.0, 1.0, None) is None
    # Latency that grows (a queue building): keep running, whatever else says.
    growing = flat + np.linspace(0.0, 60.0, len(flat))
    assert look(_records(growing, rate), progress, 10.0, 1.0, None) is None
    # Requests due and not over (a backlog), failures, late sends: keep running.
    assert (
        look(_records(flat, rate), {**progress, "completed": rate * t_s - 60}, 10.0, 1.0, None)
        is None
    )
    assert look(_records(flat, rate, failed=20), progress, 10.0, 1.0, None) is None
    assert look(_records(flat, rate), {**progress, "late_sends": 100}, 10.0, 1.0, None) is None
    # A probe for the SLO stops only once the SLO is decided, met or missed.
    met = look(_records(flat, rate), progress, 10.0, 1.0, slo_mod.parse("p99<1s"))
    assert met is not None and met.endswith("SLO met")
    missed = look(_records(flat, rate), progress, 10.0, 1.0, slo_mod.parse("p99<5ms"))
    assert missed is not None and missed.endswith("SLO missed")
    straddles = look(_records(flat, rate), progress, 10.0, 1.0, slo_mod.parse("p99<95ms"))
    assert straddles is None
