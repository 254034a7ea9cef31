"""Queueing models (knee.models): textbook values, discrete-event simulations of the same
queues (simpy, fixed seeds), and `analyze` on a real matrix run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import simpy

from knee.models import analyze, md1, mg1, mm1, mmc
from knee.models.fit import Fit
from knee.models.mva import mva
from knee.models.open_loop import OpenModel

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
    model = OpenModel("M/M/1", 1, Fit(point=0, x=1.0, service_s=0.01, cs2=1.0, delay_s=0.0))
    assert model.knee_x() == pytest.approx(50.0, rel=1e-3)
    # A fixed delay outside the server moves the knee to higher load.
    slowed = OpenModel("M/M/1", 1, Fit(point=0, x=1.0, service_s=0.01, cs2=1.0, delay_s=0.02))
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
    tmp = tmp_path_factory.mktemp("models")
    spec = tmp / "spec.toml"
    spec.write_text(MATRIX_SPEC)
    out = tmp / "runs"
    cmd = [sys.executable, "-m", "knee.cli", "run", str(spec), "--out", str(out), "--no-progress"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    points = json.loads((run_dir / "summary.json").read_text())["points"]
    resolved = tomllib.loads((run_dir / "spec.toml").read_text())
    return points, resolved


def test_analyze_fits_every_applicable_series(matrix_run: tuple[list[dict], dict]) -> None:
    points, spec = matrix_run
    result = analyze(points, spec, cores=2)
    # The constant-rate series fits none of the models.
    assert [(e["series"], e["x"], e["primary"]) for e in result] == [
        ("rate", "rate_per_s", "M/M/1"),
        ("pool", "rate_per_s", "M/M/c"),
        ("closed", "clients", "MVA"),
    ]
    json.dumps(result)
    by_point = {p["point"]: p for p in points}
    for entry in result:
        assert entry["note"]
        for m in entry["models"]:
            fit = by_point[m["fit_point"]]
            assert m["service_mean_ns"] == pytest.approx(fit["service_ns"]["mean"])
            cs2 = (fit["service_ns"]["std"] / fit["service_ns"]["mean"]) ** 2
            assert m["service_cs2"] == pytest.approx(cs2)
            assert m["capacity_per_s"] == pytest.approx(m["servers"] * 1e9 / m["service_mean_ns"])
            assert 0 < m["knee_x"]
            means = [c["mean_ns"] for c in m["curve"]]
            assert means == sorted(means) and len(means) >= 2
            for cmp in m["points"]:
                measured = by_point[cmp["point"]]["latency_ns"]
                assert cmp["measured_mean_ns"] == measured["mean"]
                assert cmp["measured_ci"] == measured["ci"]["mean"]
                pred = cmp["predicted_mean_ns"]
                if pred is None:
                    assert not cmp["flag"] and "beyond capacity" in cmp["detail"]
                    continue
                lo, hi = cmp["measured_ci"]
                off = not lo <= pred <= hi and abs(pred / measured["mean"] - 1) > 0.10
                assert cmp["flag"] == off


def test_analyze_open_loop_models(matrix_run: tuple[list[dict], dict]) -> None:
    points, spec = matrix_run
    rate, pool, _ = analyze(points, spec, cores=2)
    kinds = [m["kind"] for m in rate["models"]]
    assert kinds == ["M/M/1", "M/G/1", "M/D/1"]
    lowest = min((p for p in points if p["series"] == "rate"), key=lambda p: p["target_rate_per_s"])
    assert all(m["fit_point"] == lowest["point"] for m in rate["models"])
    mm1_model, mg1_model, md1_model = rate["models"]
    assert mm1_model["capacity_per_s"] / 2 <= mm1_model["knee_x"] < mm1_model["capacity_per_s"]
    # Pollaczek-Khinchine orders the predictions by cs2 (matrix service is nearly constant).
    assert mg1_model["service_cs2"] < 1
    triples = zip(md1_model["points"], mg1_model["points"], mm1_model["points"], strict=True)
    stable = [t for t in triples if t[2]["predicted_mean_ns"] is not None]
    assert stable  # the lowest rate, at least, is below capacity
    for a, b, c in stable:
        assert a["predicted_mean_ns"] <= b["predicted_mean_ns"] <= c["predicted_mean_ns"]
        assert c["predicted_p99_ns"] > c["predicted_mean_ns"]
    assert all(p["predicted_p99_ns"] is None for p in mg1_model["points"])
    # The pool series: 1 thread, then 3 threads as configured and as the 2 cores allow.
    assert [(m["kind"], m["servers"], m["limited_by"]) for m in pool["models"]] == [
        ("M/M/c", 1, "threads"),
        ("M/G/1", 1, "threads"),
        ("M/D/1", 1, "threads"),
        ("M/M/c", 3, "threads"),
        ("M/M/c", 2, "cores"),
    ]
    assert pool["models"][3]["group"] == {"server.threads": 3}
    assert "2 cores" in pool["note"]
    # Every pool group is fitted at the 1-thread point (threads do not change the work).
    assert len({m["fit_point"] for m in pool["models"]}) == 1
    without_cores = analyze(points, spec, cores=None)[1]
    assert [m["servers"] for m in without_cores["models"]] == [1, 1, 1, 3]


def test_analyze_closed_loop(matrix_run: tuple[list[dict], dict]) -> None:
    points, spec = matrix_run
    closed = analyze(points, spec, cores=2)[2]
    (model,) = closed["models"]
    assert model["kind"] == "MVA" and model["servers"] == 1
    one, four = model["points"]
    assert (one["x"], four["x"]) == (1.0, 4.0)
    # One client never queues: the model's latency is the fitted service time plus the
    # measured time outside the server, close to what was measured.
    assert one["predicted_mean_ns"] == pytest.approx(
        model["service_mean_ns"] + model["delay_ns"], rel=1e-9
    )
    assert one["predicted_mean_ns"] == pytest.approx(one["measured_mean_ns"], rel=0.25)
    assert four["predicted_mean_ns"] > one["predicted_mean_ns"]
    assert [c["x"] for c in model["curve"]][:4] == [1.0, 2.0, 3.0, 4.0]
