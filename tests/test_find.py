"""`knee find` and `knee http` with no rate (docs/find.md): the SLO's decisions on samples
of known quantiles, the search's rules (a probe lengthened while undecided, the brackets,
the repeats), and real searches: a service of known capacity found within a wide margin,
a generator held to a sliver of a core named as the limit, and `--slo` as a threshold."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import unavailable
from real_http_servers import SLEEP_MS, SLEEP_WORKERS, real_server
from test_hosts_limits import cgroups_usable
from test_runner import only_run_dir, run_knee, write_spec

from knee.find.probe import Decision
from knee.find.search import REPEATS, Probe, Search, Settings
from knee.stats import slo as slo_mod

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
    from knee.find.probe import decide

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
    ) -> None:
        self.capacity, self.margin, self.decides_s = capacity, margin, decides_s
        self.slo_limit = slo_limit  # the SLO met below this rate
        self.starved = starved  # the generator falls behind between these rates, once
        self.calls: list[tuple[float, float, str]] = []

    def __call__(self, rate: float, length_s: float, phase: str) -> Probe:
        self.calls.append((rate, length_s, phase))
        near = abs(rate / self.capacity - 1) < self.margin and length_s < self.decides_s
        verdict = "undecided" if near else "stable" if rate < self.capacity else "unstable"
        slo = None if self.slo_limit is None else "met" if rate < self.slo_limit else "missed"
        decision = Decision(verdict, None if verdict == "stable" else "target", slo, "")
        if self.starved and self.starved[0] <= rate <= self.starved[1]:
            self.starved = None
            decision = Decision("undecided", "generator", slo, "starved")
        stats = {"latency_ok_ns": {"mean": 10e6}, "server_ns": {"mean": 10e6}}
        return Probe(len(self.calls) - 1, rate, length_s, phase, decision, stats, length_s)


def _settings(**kw: float) -> Settings:
    base = dict(
        min_rate_per_s=5.0, max_rate_per_s=1e6, probe_s=10.0, tolerance=0.05, slo=False, servers=1
    )
    return Settings(**{**base, **kw})  # type: ignore[arg-type]


def test_the_search_brackets_bisects_and_repeats_to_the_tolerance() -> None:
    target = _Target(capacity=333.0)
    outcome = Search(_settings(), target).run()
    lo, hi = outcome.capacity.lo, outcome.capacity.hi
    assert outcome.stopped == "done", outcome.detail
    assert lo is not None and hi is not None
    assert lo < 333.0 <= hi and hi / lo - 1 <= 0.05
    assert [p for p in target.calls if p[2] == "repeat"] == [(lo, 10.0, "repeat")] * REPEATS
    assert target.calls[0][2] == "low" and target.calls[0][0] == 5.0


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
    """An answer is decided only when its search ended as planned; a closed bracket the
    budget cut before the repeats finished is partial, with the repeats done; an open one
    is undecided."""
    from knee.find.answers import _answer
    from knee.find.run import _repeats, mark_state
    from knee.find.search import OutOfBudget

    def cut_after(n: int) -> tuple[Search, list[int]]:
        target, calls = _Target(capacity=500.0), [0]

        def measure(rate: float, length_s: float, phase: str) -> Probe:
            calls[0] += 1
            if calls[0] > n:
                raise OutOfBudget("test budget")
            return target(rate, length_s, phase)

        return Search(_settings(), measure), calls

    full, _ = cut_after(1000)
    done = full.run()
    first_repeat = next(i for i, p in enumerate(done.probes) if p.phase == "repeat")
    for n, state, reps in ((1000, "decided", REPEATS), (first_repeat + 1, "partial", 1)):
        search, _ = cut_after(n)
        outcome = search.run()
        answer = _answer(outcome.capacity.lo, outcome.capacity.hi, "capacity", None)
        mark_state(answer, outcome, _repeats(outcome.probes, outcome.capacity.lo), "capacity")
        assert (answer["state"], answer["repeats_done"]) == (state, reps), answer
        assert answer["decided"] is (state == "decided")
    opened = cut_after(2)[0].run()  # the low probe and one step, both stable: no upper end
    answer = _answer(opened.capacity.lo, opened.capacity.hi, "capacity", None)
    mark_state(answer, opened, [], "capacity")
    assert answer["state"] == "undecided" and opened.capacity.hi is None


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
    Found within a wide margin (the sleep overshoots, each request is a new connection)."""
    truth = SLEEP_WORKERS / (SLEEP_MS / 1e3)
    with real_server("gunicorn-sleep", tmp_path / "srv", knee_node) as server:
        proc = run_knee(
            "http",
            server.url + "/",
            "--probe", "4s", "--tolerance", "10%", "--budget", "200s",
            "--min-rate", "20", "--out", str(tmp_path / "runs"), "--no-progress", "--json",
            timeout_s=400,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    group = _answers(proc.stdout)["groups"][0]
    capacity = group["capacity"]
    assert capacity["limited_by"] != "generator", capacity
    assert 0.6 * truth <= capacity["rate_per_s"] <= 1.1 * truth, capacity
    run_dir = only_run_dir(tmp_path / "runs")
    path = json.loads((run_dir / "find.json").read_text())
    assert path["status"] == "complete"
    assert path["probes"][0]["phase"] == "low"
    phases = {p["phase"] for p in path["probes"]}
    assert {"low", "step"} <= phases
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["points"]) == len(path["probes"])
    # Why: the listener's 2 prefork workers, busy by their Server-Timing, not their CPU.
    assert {p["target"]["workers"] for p in summary["points"]} == {SLEEP_WORKERS}
    named = group["bottleneck"]["bottleneck"]
    assert named["resource"] == "pool:target", group["bottleneck"]
    assert named["label"] == f"the target gunicorn's {SLEEP_WORKERS} workers"
    assert group["bottleneck"]["sentence"].startswith(f"set by {named['label']}")


def test_an_answer_the_budget_cut_before_its_repeats_is_partial(
    tmp_path: Path, knee_node: str
) -> None:
    """One gunicorn worker whose requests sleep 50 ms under one lock (at most 20/s):
    --min-rate 12 is sustainable and --max-rate 23.8 is not, so the bracket [12, 23.8]
    closes after two probes (8.3 s and 8.4 s: 100 and 200 samples) and is within the 99%
    tolerance. A repeat at 12/s lasts
    16.7 s (200 samples) plus the 3 s of overhead the budget counts per probe: after two
    probes and their overhead (at least 22.7 s), at most one fits in 50 s, never three.
    The capacity is then partial, not decided: in the printed answers, find.json,
    summary.json and the report."""
    with real_server("gunicorn-slow", tmp_path / "srv", knee_node) as server:
        proc = run_knee(
            "http",
            server.url + "/",
            "--probe", "2s", "--tolerance", "99%", "--budget", "50s",
            "--min-rate", "12", "--max-rate", "23.8", "--out", str(tmp_path / "runs"),
            "--no-progress",
            timeout_s=300,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    found = json.loads((run_dir / "find.json").read_text())
    group = found["answers"]["groups"][0]
    assert group["search"]["stopped"] == "budget", group["search"]
    capacity = group["capacity"]
    lo, hi = capacity["interval_per_s"]
    assert lo is not None and hi is not None and 12.0 <= lo < hi <= 23.8, found["probes"]
    assert capacity["state"] == "partial" and capacity["decided"] is False, capacity
    assert capacity["repeats_done"] < capacity["repeats_needed"] == REPEATS, capacity
    assert f"after {capacity['repeats_done']} of {REPEATS} repeats" in capacity["partial"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["find"]["groups"][0]["capacity"]["state"] == "partial"
    assert f"(partial: {capacity['repeats_done']} of {REPEATS} repeats)" in proc.stdout
    report = (run_dir / "report.html").read_text()
    assert "partial: the search stopped within the budget after" in report


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


def test_a_wrong_url_stops_the_search_at_once_and_names_the_status(
    tmp_path: Path, knee_node: str
) -> None:
    """gunicorn answering 403 to every request at /forbidden: `knee http URL` stops after
    its low probe (no step down), names the status and the count, hints at the URL, exits
    6, and still writes its report, which states it."""
    with real_server("gunicorn-sync", tmp_path / "srv", knee_node) as server:
        proc = run_knee(
            "http", server.url + "/forbidden", "--probe", "2s", "--min-rate", "20",
            "--out", str(tmp_path / "runs"), "--no-progress",
            timeout_s=300,
        )  # fmt: skip
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
    with real_server("gunicorn-sync", tmp_path / "srv", knee_node) as server:
        proc = run_knee(
            "http", server.url + "/forbidden", "--rate", "20", "--duration", "3s",
            "--out", str(tmp_path / "runs"), "--no-progress",
            timeout_s=300,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    assert "the report failed" not in proc.stderr
    assert (run_dir / "report.html").stat().st_size > 0
    point = json.loads((run_dir / "summary.json").read_text())["points"][0]
    assert point["statuses"]["ok"] == 0 and set(point["http_statuses"]) == {"403"}
