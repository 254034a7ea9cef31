"""Queueing models (knee.models): textbook values, discrete-event simulations of the same
queues (simpy, fixed seeds), the fit (pooled over stable points, a cache's steady state),
the choice of the primary model, the measured knee, and `analyze` on a real matrix run."""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import simpy
from report_helpers import run_spec

from knee.models import analyze, md1, mg1, mm1, mmc
from knee.models.fit import Fit, fit_service, ok_latency, pool
from knee.models.measured import measured_knee, power
from knee.models.mva import mva
from knee.models.open_loop import CS2_CONSTANT, OpenModel, primary_kind
from knee.stats import distribution
from knee.stats.intervals import poisson_count_ci

#: Simulated and predicted means (and M/M/c percentiles) agree within this: with 200,000
#: customers at utilization 0.7 the simulation's own error is about 1-2%.
SIM_TOLERANCE = 0.05

# ---------------------------------------------------------------- textbook values


def test_mm1_at_half_load() -> None:
    # mu = 1/s, lambda = 0.5/s: E[T] = 1 / (mu - lambda) = 2 / mu; T ~ exponential(0.5).
    assert mm1.sojourn_mean_s(0.5, 1.0) == pytest.approx(2.0)
    assert mm1.sojourn_quantile_s(0.5, 0.5, 1.0) == pytest.approx(2 * math.log(2))
    assert mm1.sojourn_quantile_s(0.99, 0.5, 1.0) == pytest.approx(2 * math.log(100))
    assert mm1.sojourn_mean_s(1.0, 1.0) is None and mm1.sojourn_mean_s(2.0, 1.0) is None


def _erlang_c_direct(c: int, a: float) -> float:
    top = a**c / math.factorial(c) / (1 - a / c)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


def test_erlang_c_known_values() -> None:
    # Two servers at one erlang: C = (1/2) / (1/2) / (1 + 1 + 1) = 1/3; E[W] = C / (2 - 1).
    assert mmc.erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert mmc.wait_mean_s(1.0, 1.0, 2) == pytest.approx(1 / 3)
    assert mmc.sojourn_mean_s(1.0, 1.0, 2) == pytest.approx(4 / 3)
    assert mmc.erlang_c(1, 0.7) == pytest.approx(0.7)  # M/M/1: P(wait) = rho
    for c, a in ((3, 2.0), (10, 8.0), (16, 12.5), (50, 45.0)):
        assert mmc.erlang_c(c, a) == pytest.approx(_erlang_c_direct(c, a), rel=1e-12)
    assert mmc.erlang_c(10, 8.0) == pytest.approx(0.4092, abs=1e-4)  # the classic table
    assert mmc.sojourn_mean_s(2.0, 1.0, 2) is None


def test_mmc_with_one_server_is_mm1() -> None:
    for rate in (0.1, 0.5, 0.9):
        assert mmc.sojourn_mean_s(rate, 1.0, 1) == pytest.approx(mm1.sojourn_mean_s(rate, 1.0))
        for q in (0.5, 0.99):
            assert mmc.sojourn_quantile_s(q, rate, 1.0, 1) == pytest.approx(
                mm1.sojourn_quantile_s(q, rate, 1.0), rel=1e-9
            )


def test_mmc_wait_quantiles() -> None:
    c = mmc.erlang_c(2, 1.0)  # 1/3 of arrivals wait, the wait exponential(2 - 1)
    assert mmc.wait_quantile_s(0.5, 1.0, 1.0, 2) == 0.0  # 2/3 do not wait at all
    assert mmc.wait_quantile_s(0.99, 1.0, 1.0, 2) == pytest.approx(math.log(c / 0.01))


def _sojourn_survival_numeric(t: float, rate: float, service: float, servers: int) -> float:
    """P(W + S > t) by integrating the wait's density against the service's survival."""
    mu, theta = 1 / service, servers / service - rate
    c = mmc.erlang_c(servers, rate * service)
    w = np.linspace(0.0, t, 200_001)
    density = c * theta * np.exp(-theta * w) * np.exp(-mu * (t - w))
    tail = c * math.exp(-theta * t)  # waits longer than t
    integral = float(np.sum((density[1:] + density[:-1]) / 2 * np.diff(w)))
    return (1 - c) * math.exp(-mu * t) + integral + tail


@pytest.mark.parametrize(("rate", "servers"), [(1.4, 2), (1.0, 2), (3.0, 4)])
def test_mmc_sojourn_distribution_is_the_convolution(rate: float, servers: int) -> None:
    # (1.0, 2) has theta = mu: the formula's limiting branch.
    for t in (0.3, 1.0, 3.0, 8.0):
        assert mmc.sojourn_survival(t, rate, 1.0, servers) == pytest.approx(
            _sojourn_survival_numeric(t, rate, 1.0, servers), rel=1e-6
        )
    p99 = mmc.sojourn_quantile_s(0.99, rate, 1.0, servers)
    assert mmc.sojourn_survival(p99, rate, 1.0, servers) == pytest.approx(0.01, rel=1e-9)


def test_pollaczek_khinchine() -> None:
    mm1_wait = mm1.sojourn_mean_s(0.6, 1.0) - 1.0
    # M/D/1 waits half as long as M/M/1; cs2 = 1 is M/M/1's mean exactly.
    assert md1.sojourn_mean_s(0.6, 1.0) - 1.0 == pytest.approx(mm1_wait / 2)
    assert mg1.sojourn_mean_s(0.6, 1.0, 1.0) == pytest.approx(mm1.sojourn_mean_s(0.6, 1.0))
    assert mg1.wait_mean_s(0.5, 2.0, 3.0) is None  # rho = 1


def test_mva_by_hand() -> None:
    # D = 1, Z = 1: R(1) = 1, X(1) = 1/2, Q(1) = 1/2; R(2) = 1.5, X(2) = 2 / 2.5 = 0.8.
    res = mva(2, 1.0, 1.0)
    assert list(res.response_s) == pytest.approx([1.0, 1.5])
    assert list(res.throughput_per_s) == pytest.approx([0.5, 0.8])
    assert list(res.queue_len) == pytest.approx([0.5, 1.2])
    # With as many servers as clients nobody waits: R = D whatever N.
    assert list(mva(4, 1.0, 1.0, servers=4).response_s) == pytest.approx([1.0] * 4)


def test_mva_limits() -> None:
    res = mva(200, 0.01, 0.1, servers=2)
    x, r = res.throughput_per_s, res.response_s
    assert x[-1] == pytest.approx(2 / 0.01, rel=1e-3)  # saturates at c / D
    assert np.all(np.diff(x) >= -1e-9) and np.all(np.diff(r) >= -1e-12)
    assert np.all(x <= np.minimum(np.arange(1, 201) / (0.01 + 0.1), 200) + 1e-9)
    # Little's law over the whole loop: N = X (R + Z).
    assert np.allclose(np.arange(1, 201), x * (r + 0.1))
    with pytest.raises(ValueError):
        mva(0, 1.0, 1.0)


def test_knee_of_mm1_is_half_capacity() -> None:
    # Kleinrock's power lambda (mu - lambda) peaks at rho = 1/2 (no fixed delay).
    model = OpenModel("M/M/1", 1, Fit(service_s=0.01, cs2=1.0, delay_s=0.0))
    assert model.knee_x() == pytest.approx(50.0, rel=1e-3)
    # A fixed delay outside the server moves the knee to higher load.
    slowed = OpenModel("M/M/1", 1, Fit(service_s=0.01, cs2=1.0, delay_s=0.02))
    assert 50.0 < slowed.knee_x() < 100.0


# ---------------------------------------------------------------- simulations


def simulate_open(rate: float, services: np.ndarray, servers: int, seed: int) -> np.ndarray:
    """Sojourn times of customers arriving as a Poisson process at a FIFO station of
    `servers` servers, in arrival order."""
    gaps = np.random.default_rng(seed).exponential(1 / rate, len(services))
    env = simpy.Environment()
    station = simpy.Resource(env, capacity=servers)
    sojourn = np.empty(len(services))

    def customer(i: int) -> Iterator[Any]:
        start = env.now
        with station.request() as turn:
            yield turn
            yield env.timeout(services[i])
        sojourn[i] = env.now - start

    def arrivals() -> Iterator[Any]:
        for i, gap in enumerate(gaps):
            yield env.timeout(gap)
            env.process(customer(i))

    env.process(arrivals())
    env.run()
    return sojourn[len(services) // 20 :]  # the first 5%: the empty start


def test_mmc_against_simulation() -> None:
    rng = np.random.default_rng(100)
    rate, servers = 1.4, 2  # utilization 0.7
    sim = simulate_open(rate, rng.exponential(1.0, 200_000), servers, seed=1)
    assert sim.mean() == pytest.approx(mmc.sojourn_mean_s(rate, 1.0, servers), rel=SIM_TOLERANCE)
    for q in (0.5, 0.99):
        assert np.quantile(sim, q) == pytest.approx(
            mmc.sojourn_quantile_s(q, rate, 1.0, servers), rel=SIM_TOLERANCE
        )


def test_mg1_and_md1_against_simulation() -> None:
    rng = np.random.default_rng(200)
    # Uniform service on [0.5, 1.5]: mean 1, variance 1/12, so cs2 = 1/12.
    sim = simulate_open(0.7, rng.uniform(0.5, 1.5, 150_000), 1, seed=2)
    assert sim.mean() == pytest.approx(mg1.sojourn_mean_s(0.7, 1.0, 1 / 12), rel=SIM_TOLERANCE)
    sim = simulate_open(0.7, np.ones(150_000), 1, seed=3)
    assert sim.mean() == pytest.approx(md1.sojourn_mean_s(0.7, 1.0), rel=SIM_TOLERANCE)


def simulate_closed(
    clients: int, service_s: float, think_s: float, servers: int, completions: int, seed: int
) -> tuple[float, float]:
    """Mean response time and throughput of N clients thinking (exponential) then queueing
    at a station of `servers` exponential servers, over `completions` requests."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    station = simpy.Resource(env, capacity=servers)
    responses: list[float] = []
    finished = env.event()

    def client() -> Iterator[Any]:
        while not finished.triggered:
            yield env.timeout(rng.exponential(think_s))
            start = env.now
            with station.request() as turn:
                yield turn
                yield env.timeout(rng.exponential(service_s))
            responses.append(env.now - start)
            if len(responses) == completions:
                finished.succeed()

    for _ in range(clients):
        env.process(client())
    env.run(until=finished)
    settled = responses[completions // 20 :]
    return float(np.mean(settled)), completions / env.now


@pytest.mark.parametrize(("clients", "servers"), [(1, 1), (3, 1), (8, 1), (5, 2), (9, 2)])
def test_mva_against_simulation(clients: int, servers: int) -> None:
    service_s, think_s = 1.0, 2.0 * servers
    response, throughput = simulate_closed(clients, service_s, think_s, servers, 40_000, seed=4)
    exact = mva(clients, service_s, think_s, servers)
    assert response == pytest.approx(exact.response_s[-1], rel=SIM_TOLERANCE)
    assert throughput == pytest.approx(exact.throughput_per_s[-1], rel=SIM_TOLERANCE)


# ---------------------------------------------------------------- fit, choice, measured knee

SPEC: dict[str, Any] = {
    "load": {"schedule": "poisson", "rate_per_s": 10},
    "server": {"threads": 1, "cache": 0},
    "series": {"s": {}},
}


def synthetic_point(
    index: int,
    rate: float,
    service_ns: np.ndarray,
    *,
    delay_ns: float = 1e5,
    wait_ns: float = 0.0,
    stable: bool = True,
    throughput_per_s: float | None = None,
) -> dict[str, Any]:
    """A summary.json point: OK latency = wait + service + delay per request, and a headline
    latency_ns whose mean is null (failures counted as +inf)."""
    server = service_ns + wait_ns
    latency = server + delay_ns
    verdict = "stable" if stable else "unstable"
    return {
        "point": index,
        "series": "s",
        "label": f"s rate_per_s={rate:g}",
        "swept": {"load.rate_per_s": rate},
        "target_rate_per_s": rate,
        "achieved_rate_per_s": rate * 1.02,
        "throughput_per_s": rate if throughput_per_s is None else throughput_per_s,
        "latency_ok_ns": distribution(latency),
        "latency_ns": {**distribution(latency), "mean": None},
        "server_ns": distribution(server),
        "service_ns": distribution(service_ns),
        "stability": {"verdict": verdict, "detail": f"{verdict} (synthetic)"},
        "warmup_count": 0,
    }


def test_pool_is_the_union_of_the_samples() -> None:
    rng = np.random.default_rng(5)
    samples = [rng.normal(m, s, n) for m, s, n in ((10, 1, 50), (12, 3, 400), (9, 0.5, 7))]
    pooled = pool((len(x), float(x.mean()), float(x.std(ddof=1))) for x in samples)
    union = np.concatenate(samples)
    assert pooled is not None and pooled.n == len(union)
    assert pooled.mean == pytest.approx(union.mean(), rel=1e-12)
    assert pooled.var == pytest.approx(union.var(ddof=1), rel=1e-12)  # between-point included
    assert pool([]) is None and pool([(1, 5.0, None)]) == type(pooled)(1, 5.0, 0.0)


def test_fit_pools_the_stable_points_by_count() -> None:
    rng = np.random.default_rng(6)
    services = [rng.normal(2e6, 2e5, n) for n in (100, 400, 900)]
    points = [
        synthetic_point(0, 10, services[0], delay_ns=1e5),
        synthetic_point(1, 40, services[1], delay_ns=3e5, wait_ns=1e6),
        synthetic_point(2, 90, services[2], delay_ns=5e5, wait_ns=4e6),
        # Over capacity: slow service and a huge queue; it must weigh nothing.
        synthetic_point(3, 800, rng.normal(9e6, 1e6, 2000), wait_ns=5e9, stable=False),
    ]
    (entry,) = analyze(points, SPEC, cores=2)
    union = np.concatenate(services)
    (group,) = entry["groups"]
    assert group["fit_points"] == [0, 1, 2] and group["unstable_points"] == [3]
    for m in entry["models"]:
        assert m["fit_points"] == [0, 1, 2]
        assert m["service_mean_ns"] == pytest.approx(union.mean(), rel=1e-9)
        assert m["service_cs2"] == pytest.approx(union.var(ddof=1) / union.mean() ** 2, rel=1e-9)
        # Latency minus server residence, weighted by each point's count.
        assert m["delay_ns"] == pytest.approx((100 * 1e5 + 400 * 3e5 + 900 * 5e5) / 1400)
        unstable = m["points"][-1]
        assert unstable["point"] == 3 and not unstable["stable"] and not unstable["flag"]
        assert unstable["detail"].startswith("unstable, not fitted")
        # Compared at the achieved rate, against the OK latency (the headline mean is null).
        first = m["points"][0]
        assert first["x"] == pytest.approx(10 * 1.02) and first["target_x"] == 10
        assert first["measured_mean_ns"] == ok_latency(points[0])["mean"]
    # A series of unstable points only: no fit, no model.
    assert analyze([points[3]], SPEC, cores=2) == []
    # The fit's own figures, without analyze.
    fit = fit_service(points[:3], [10.0, 40.0, 90.0])
    assert fit is not None and fit.points == (0, 1, 2) and fit.n == 1400


def test_primary_model_from_cs2() -> None:
    assert primary_kind(Fit(service_s=0.01, cs2=0.004, delay_s=0.0), 1) == "M/D/1"
    assert primary_kind(Fit(service_s=0.01, cs2=CS2_CONSTANT, delay_s=0.0), 1) == "M/G/1"
    assert primary_kind(Fit(service_s=0.01, cs2=0.5, delay_s=0.0), 1) == "M/G/1"
    assert primary_kind(Fit(service_s=0.01, cs2=0.004, delay_s=0.0), 4) == "M/M/c"
    rng = np.random.default_rng(7)
    for spread, kind in ((1e4, "M/D/1"), (1.5e6, "M/G/1")):  # cs2 0.000025 and 0.56
        pts = [synthetic_point(i, r, rng.normal(2e6, spread, 500)) for i, r in enumerate((50, 200))]
        (entry,) = analyze(pts, SPEC, cores=2)
        assert entry["primary"] == kind and entry["groups"][0]["primary"] == kind
        assert [m["kind"] for m in entry["models"] if m["primary"]] == [kind]
        (reference,) = [m for m in entry["models"] if m["reference"]]
        assert reference["kind"] == "M/M/1" and "reference" in reference["label"]
        assert kind in entry["note"]


def test_power_interval() -> None:
    rng = np.random.default_rng(8)
    p = synthetic_point(0, 100, rng.normal(2e6, 1e5, 1000), throughput_per_s=100)
    p["ok_in_window"] = 1000
    pw = power(p)
    latency = p["latency_ok_ns"]
    assert pw is not None
    assert pw.value == pytest.approx(100 / (latency["mean"] / 1e9))
    lo_count, hi_count = poisson_count_ci(1000)
    assert pw.lo == pytest.approx(100 * lo_count / 1000 / (latency["ci"]["mean"][1] / 1e9))
    assert pw.hi == pytest.approx(100 * hi_count / 1000 / (latency["ci"]["mean"][0] / 1e9))
    assert pw.lo < pw.value < pw.hi


def test_measured_knee_is_the_max_of_measured_power() -> None:
    """An M/M/1-like curve: latency 1 / (mu - lambda) with mu = 100/s, so power
    lambda (mu - lambda) peaks at 50/s."""
    rng = np.random.default_rng(9)
    points = []
    for i, rate in enumerate((10, 30, 50, 70, 90)):
        mean_ns = 1e9 / (100 - rate)
        service = rng.normal(mean_ns, mean_ns / 50, 4000)
        points.append(synthetic_point(i, rate, service, delay_ns=0.0))
    points.append(synthetic_point(5, 200, rng.normal(1e9, 1e7, 500), stable=False))
    knee = measured_knee(points, lambda p: float(p["target_rate_per_s"]))
    assert knee is not None
    assert (knee["x"], knee["point"], knee["edge"]) == (50.0, 2, None)
    assert knee["excluded_unstable"] == [5]
    # Power at 30 and 70 is 84% of the peak: far outside intervals of +-3-4%.
    assert knee["interval_x"] == [50.0, 50.0] and knee["interval_points"] == [2]
    lo, hi = knee["power_ci_per_s2"]
    assert lo < knee["power_per_s2"] < hi
    # Noisy points (few samples): the neighbours' power cannot be told apart from the peak.
    few = [
        synthetic_point(i, r, rng.normal(1e9 / (100 - r), 3e8 / (100 - r), 12), delay_ns=0.0)
        for i, r in enumerate((30, 50, 70))
    ]
    wide = measured_knee(few, lambda p: float(p["target_rate_per_s"]))
    assert wide is not None and len(wide["interval_points"]) > 1
    assert wide["interval_x"][0] < wide["x"] or wide["interval_x"][1] > wide["x"]
    # The peak at the highest stable load: the knee may lie beyond.
    rising = measured_knee(points[:3], lambda p: float(p["target_rate_per_s"]))
    assert rising is not None and rising["edge"] == "highest"
    assert measured_knee(points[:1], lambda p: 1.0) is None
    (entry,) = analyze(points, SPEC, cores=2)
    assert entry["groups"][0]["measured_knee"]["point"] == 2


# ---------------------------------------------------------------- analyze on a real run

MATRIX_SPEC = """
[experiment]
name = "models-matrix"
system = "matrix"

[server]
threads = 1

[driver]
p = 300

[load]
schedule = "poisson"
rate_per_s = 40
duration_s = 3
warmup_s = 0.5

[series.rate]
sweep = { "load.rate_per_s" = [40, 160] }

[series.pool]
load = { rate_per_s = 160 }
sweep = { "server.threads" = [1, 3] }

[series.paced]
load = { schedule = "constant", rate_per_s = 40 }

[series.closed]
load = { schedule = "closed", think_ms = 5, requests = 250, warmup_s = 0, warmup_requests = 20 }
sweep = { "load.clients" = [1, 4] }
"""


@pytest.fixture(scope="module")
def matrix_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], dict]:
    run_dir = run_spec(MATRIX_SPEC, tmp_path_factory.mktemp("models"), "matrix", timeout_s=300)
    points = json.loads((run_dir / "summary.json").read_text())["points"]
    resolved = tomllib.loads((run_dir / "spec.toml").read_text())
    return points, resolved


def _pooled_service(points: list[dict[str, Any]]) -> tuple[float, float]:
    """Mean and cs2 of the union of the points' service times, from their n, mean, std."""
    n = np.array([p["service_ns"]["n"] for p in points], dtype=float)
    mean = np.array([p["service_ns"]["mean"] for p in points])
    std = np.array([p["service_ns"]["std"] or 0.0 for p in points])
    total = n.sum()
    m = float((n * mean).sum() / total)
    var = float((((n - 1) * std**2).sum() + (n * (mean - m) ** 2).sum()) / (total - 1))
    return m, var / m**2


def _stable(p: dict[str, Any]) -> bool:
    return (p.get("stability") or {}).get("verdict") != "unstable"


def test_analyze_fits_every_applicable_series(matrix_run: tuple[list[dict], dict]) -> None:
    points, spec = matrix_run
    result = analyze(points, spec, cores=2)
    # The constant-rate series fits none of the models. Matrix service (P fixed) is nearly
    # constant on a quiet machine (cs2 ~0.005: M/D/1), but other processes preempting the
    # server make it variable (cs2 0.05-0.4 seen: M/G/1): the choice follows the fit.
    assert [(e["series"], e["x"]) for e in result] == [
        ("rate", "rate_per_s"),
        ("pool", "rate_per_s"),
        ("closed", "clients"),
    ]
    one_thread = "M/D/1" if result[0]["groups"][0]["fit"]["service_cs2"] < CS2_CONSTANT else "M/G/1"
    assert [e["primary"] for e in result] == [one_thread, "M/M/c", "MVA"]
    json.dumps(result)
    by_point = {p["point"]: p for p in points}
    for entry in result:
        assert entry["note"]
        for m in entry["models"]:
            fitted = [by_point[i] for i in m["fit_points"]]
            assert fitted and all(_stable(p) for p in fitted)
            mean, cs2 = _pooled_service(fitted)
            assert m["service_mean_ns"] == pytest.approx(mean)
            assert m["service_cs2"] == pytest.approx(cs2)
            assert m["capacity_per_s"] == pytest.approx(m["servers"] * 1e9 / m["service_mean_ns"])
            assert 0 < m["knee_x"]
            means = [c["mean_ns"] for c in m["curve"]]
            assert means == sorted(means) and len(means) >= 2
            for cmp in m["points"]:
                point = by_point[cmp["point"]]
                measured = ok_latency(point)
                assert cmp["measured_mean_ns"] == measured["mean"]
                assert cmp["measured_ci"] == measured["ci"]["mean"]
                assert cmp["stable"] == _stable(point)
                if entry["x"] == "rate_per_s":  # at the achieved rate
                    assert cmp["x"] == point["achieved_rate_per_s"]
                    assert cmp["target_x"] == point["target_rate_per_s"]
                pred = cmp["predicted_mean_ns"]
                if pred is None:
                    assert not cmp["flag"] and "beyond capacity" in cmp["detail"]
                    continue
                lo, hi = cmp["measured_ci"]
                off = not lo <= pred <= hi and abs(pred / measured["mean"] - 1) > 0.10
                assert cmp["flag"] == (off and cmp["stable"])


def test_analyze_open_loop_models(matrix_run: tuple[list[dict], dict]) -> None:
    points, spec = matrix_run
    rate, pool_entry, _ = analyze(points, spec, cores=2)
    (group,) = rate["groups"]
    constant = group["fit"]["service_cs2"] < CS2_CONSTANT
    kinds = [(m["kind"], m["primary"], m["reference"]) for m in rate["models"]]
    assert kinds == [
        ("M/M/1", False, True),
        ("M/G/1", not constant, False),
        ("M/D/1", constant, False),
    ]
    assert rate["models"][0]["label"] == "M/M/1 (source report's reference)"
    stable = [p["point"] for p in points if p["series"] == "rate" and _stable(p)]
    assert all(m["fit_points"] == stable for m in rate["models"])
    assert group["primary"] == ("M/D/1" if constant else "M/G/1") and group["fit_points"] == stable
    mm1_model, mg1_model, md1_model = rate["models"]
    assert mm1_model["capacity_per_s"] / 2 <= mm1_model["knee_x"] < mm1_model["capacity_per_s"]
    # Pollaczek-Khinchine orders the predictions by cs2 (matrix service is nearly constant).
    assert mg1_model["service_cs2"] < 1
    triples = zip(md1_model["points"], mg1_model["points"], mm1_model["points"], strict=True)
    below = [t for t in triples if t[2]["predicted_mean_ns"] is not None]
    assert below  # the lowest rate, at least, is below capacity
    for a, b, c in below:
        assert a["predicted_mean_ns"] <= b["predicted_mean_ns"] <= c["predicted_mean_ns"]
        assert c["predicted_p99_ns"] > c["predicted_mean_ns"]
    assert all(p["predicted_p99_ns"] is None for p in mg1_model["points"])
    # The pool series: 1 thread (M/M/1 reference, M/G/1, M/D/1), then 3 threads as
    # configured and as the 2 cores allow.
    assert [(m["kind"], m["servers"], m["limited_by"]) for m in pool_entry["models"]] == [
        ("M/M/1", 1, "threads"),
        ("M/G/1", 1, "threads"),
        ("M/D/1", 1, "threads"),
        ("M/M/c", 3, "threads"),
        ("M/M/c", 2, "cores"),
    ]
    single = pool_entry["groups"][0]["primary"]
    assert single in ("M/D/1", "M/G/1") and pool_entry["groups"][1]["primary"] == "M/M/c"
    assert [m["primary"] for m in pool_entry["models"]] == [
        False,
        single == "M/G/1",
        single == "M/D/1",
        True,
        True,
    ]
    assert pool_entry["models"][3]["group"] == {"server.threads": 3}
    assert "2 cores" in pool_entry["note"]
    # Every pool group is fitted on the stable points of the fewest threads (1, unless that
    # point was unstable): threads do not change the work.
    stable_pool = [p for p in points if p["series"] == "pool" and _stable(p)]
    fewest = min(p["swept"]["server.threads"] for p in stable_pool)
    expected = [p["point"] for p in stable_pool if p["swept"]["server.threads"] == fewest]
    assert all(m["fit_points"] == expected for m in pool_entry["models"])
    without_cores = analyze(points, spec, cores=None)[1]
    assert [m["servers"] for m in without_cores["models"]] == [1, 1, 1, 3]


def test_analyze_closed_loop(matrix_run: tuple[list[dict], dict]) -> None:
    points, spec = matrix_run
    closed = analyze(points, spec, cores=2)[2]
    (model,) = closed["models"]
    assert model["kind"] == "MVA" and model["servers"] == 1 and model["primary"]
    one, four = model["points"]
    assert (one["x"], four["x"]) == (1.0, 4.0) and one["target_x"] is None
    # One client never queues: the model's latency is the fitted service time plus the
    # measured time outside the server, close to what was measured.
    assert one["predicted_mean_ns"] == pytest.approx(
        model["service_mean_ns"] + model["delay_ns"], rel=1e-9
    )
    assert one["predicted_mean_ns"] == pytest.approx(one["measured_mean_ns"], rel=0.25)
    assert four["predicted_mean_ns"] > one["predicted_mean_ns"]
    assert [c["x"] for c in model["curve"]][:4] == [1.0, 2.0, 3.0, 4.0]
    # Both populations are fitted (pooled by count), and a measured knee is given.
    assert model["fit_points"] == [p["point"] for p in points if p["series"] == "closed"]
    knee = closed["groups"][0]["measured_knee"]
    assert knee is not None and knee["x"] in (1.0, 4.0)
