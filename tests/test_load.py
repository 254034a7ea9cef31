"""The load generator against real servers: schedules, closed-loop accounting, timeouts,
and what a killed generator leaves on disk."""

from __future__ import annotations

import json
import math
import os
import queue
import signal
import subprocess
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import wire_client as wc
from conftest import LoadRun, Processes, RunLoad, Server, StartServer
from scipy import stats

from knee.results import SAMPLE_DTYPE, read_sample_records

STATUS_OK, STATUS_TIMEOUT, STATUS_DROP, STATUS_ERROR = range(4)
ECHO_DRIVER = {"request_bytes": 16, "reply_bytes": 16}


@pytest.fixture
def echo_server(start_server: StartServer) -> Server:
    return start_server("echo", {"threads": 0})


def offsets_by_id(records: np.ndarray) -> np.ndarray:
    """Intended send times in schedule order (open-loop ids follow it), relative to the first."""
    intended = records["intended_ns"][np.argsort(records["request_id"])].astype(np.int64)
    return intended - intended[0]


def anderson_expon_passes(x: np.ndarray, level_pct: float = 1.0) -> tuple[bool, str]:
    """Anderson-Darling against an exponential with fitted scale, at `level_pct` percent."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # SciPy >= 1.17 wants `method=`
        result = stats.anderson(x, dist="expon")
    levels = getattr(result, "significance_level", None)
    if levels is not None:
        critical = float(np.interp(level_pct, levels[::-1], result.critical_values[::-1]))
        return result.statistic < critical, f"A2={result.statistic:.3f} critical={critical:.3f}"
    # SciPy >= 1.19: p-values only.
    result = stats.anderson(x, dist="expon", method="interpolate")
    return result.pvalue > level_pct / 100, f"A2={result.statistic:.3f} p={result.pvalue:.3g}"


def test_poisson_gaps_are_exponential_and_seeded(echo_server: Server, run_load: RunLoad) -> None:
    rate = 2000.0
    schedule = {"kind": "poisson", "rate_per_s": rate}
    run = run_load("echo", echo_server.addr, schedule, requests=3000, seed=1, driver=ECHO_DRIVER)
    r = run.records
    assert len(r) == 3000
    assert np.all(r["status"] == STATUS_OK)
    assert run.done["sent"] == 3000 and run.done["ok"] == 3000
    assert np.array_equal(np.sort(r["request_id"]), np.arange(3000))

    gaps = np.diff(np.sort(r["intended_ns"]).astype(np.int64)).astype(float)
    assert len(gaps) == 2999 and np.all(gaps >= 0)
    ks = stats.kstest(gaps, stats.expon(scale=1e9 / rate).cdf)
    assert ks.pvalue > 0.01, f"KS vs exponential(mean {1e9 / rate:g} ns): {ks}"
    ok, detail = anderson_expon_passes(gaps, 1.0)
    assert ok, f"Anderson-Darling rejects exponential gaps: {detail}"
    # The first request leaves one exponential gap after the start, not at it.
    assert r["intended_ns"].min() >= run.start_ns

    # The schedule is a function of the seed: a shorter run with the same seed draws the
    # same first offsets, another seed does not.
    first = offsets_by_id(r)[:300]
    again = run_load(
        "echo", echo_server.addr, schedule, requests=300, seed=1, driver=ECHO_DRIVER
    ).records
    other = run_load(
        "echo", echo_server.addr, schedule, requests=300, seed=2, driver=ECHO_DRIVER
    ).records
    assert np.array_equal(offsets_by_id(again), first)
    assert not np.array_equal(offsets_by_id(other), first)


def test_constant_schedule_is_evenly_spaced(echo_server: Server, run_load: RunLoad) -> None:
    rate = 3000.0  # a gap of 333333.3 ns: exercises the rounding to whole ns
    run = run_load(
        "echo",
        echo_server.addr,
        {"kind": "constant", "rate_per_s": rate},
        requests=300,
        driver=ECHO_DRIVER,
    )
    r = run.records
    assert len(r) == 300 and np.all(r["status"] == STATUS_OK)
    intended = np.sort(r["intended_ns"]).astype(np.int64)
    assert intended[0] == run.start_ns  # offset 0: the first request leaves at the start
    gaps = np.diff(intended)
    assert np.all(np.abs(gaps - 1e9 / rate) <= 1.0), np.unique(gaps)
    # Offsets are truncated from index * gap, never accumulated: no drift.
    expected = (np.arange(300) * (1e9 / rate)).astype(np.int64)
    assert np.all(np.abs(intended - run.start_ns - expected) <= 1)


def test_closed_loop_with_a_request_count(echo_server: Server, run_load: RunLoad) -> None:
    run = run_load(
        "echo",
        echo_server.addr,
        {"kind": "closed", "clients": 4, "think_ms": 0},
        requests=500,
        driver=ECHO_DRIVER,
    )
    r = run.records
    assert len(r) == 500
    assert np.all(r["status"] == STATUS_OK)
    assert len(np.unique(r["request_id"])) == 500
    assert set(r["client"].tolist()) == {0, 1, 2, 3}
    # Ids carry the client index in their high bits.
    assert np.array_equal(r["request_id"] >> 40, r["client"].astype(np.uint64))
    done = run.done
    assert (done["sent"], done["completed"], done["ok"]) == (500, 500, 500)
    assert np.all(r["bytes_out"] == 4 + 12 + 16)
    assert np.all(r["bytes_in"] == 4 + 44 + 16)
    for client in range(4):
        mine = np.sort(r[r["client"] == client], order="sent_ns")
        assert np.all(mine["intended_ns"] <= mine["sent_ns"])
        assert np.all(mine["sent_ns"] < mine["received_ns"])
        # One request at a time per client: the next leaves after the previous reply.
        assert np.all(mine["sent_ns"][1:] >= mine["received_ns"][:-1]), f"client {client}"


def test_closed_loop_with_a_duration_ends_by_itself(echo_server: Server, run_load: RunLoad) -> None:
    run = run_load(
        "echo",
        echo_server.addr,
        {"kind": "closed", "clients": 2, "think_ms": 5, "think": "exponential"},
        duration_s=1.0,
        timeout_s=20,
        driver=ECHO_DRIVER,
    )
    r = run.records
    done = run.done
    assert len(r) > 0
    assert done["sent"] == len(r) == done["completed"] == done["ok"]
    assert np.all(r["status"] == STATUS_OK)
    # No request was meant to leave after the end of the run.
    assert np.all(r["intended_ns"] < run.start_ns + 1_000_000_000)
    assert set(r["client"].tolist()) == {0, 1}


def calibrated_p(addr: str, target_ns: float) -> int:
    """A P for which naive M^P (n = 50) takes at least about `target_ns` on this machine.

    The fastest of three probes sets the speed, so a probe slowed down by another process
    cannot make P too small; P is at least 20000 (~150 ms at 7.5 us per product)."""
    rng = np.random.default_rng(5)
    probe_p = 1001
    body = wc.matrix_body(wc.stochastic_matrix(50, rng), probe_p)
    with wc.Client(addr) as c:
        replies = [c.request(wc.OP_POWER, body) for _ in range(3)]
    assert all(r.status == wc.STATUS_OK for r in replies)
    per_product_ns = max(min(r.service_ns for r in replies) / (probe_p - 1), 1.0)
    return int(min(max(math.ceil(target_ns / per_product_ns), 20_000), 1_000_000))


def slow_matrix_run(
    start_server: StartServer,
    run_load: RunLoad,
    target_ns: float,
    schedule: dict[str, Any],
    server: dict[str, Any] | None = None,
    **options: Any,
) -> tuple[Server, int, LoadRun]:
    """A one-worker naive matrix server, a P for which each request takes at least about
    `target_ns`, and a load run of such requests: (the server, P, the run)."""
    srv = start_server("matrix", {"algorithm": "naive", "threads": 1, "cache": 0, **(server or {})})
    p = calibrated_p(srv.addr, target_ns)
    driver = {"n": 50, "same_matrix": True, "p": p}
    return srv, p, run_load("matrix", srv.addr, schedule, driver=driver, **options)


def test_timeouts_are_recorded_once(start_server: StartServer, run_load: RunLoad) -> None:
    # Each request takes ~6x the timeout; the client thinks long enough that the late reply
    # to one request arrives before it sends the next, and must skip it, not count it.
    server, p, run = slow_matrix_run(
        start_server,
        run_load,
        300e6,
        {"kind": "closed", "clients": 1, "think_ms": 400, "think": "fixed"},
        requests=3,
        timeout_ms=50,
    )
    r = run.records
    assert len(r) == 3
    assert np.all(r["status"] == STATUS_TIMEOUT), r["status"]
    assert np.all(r["received_ns"] == 0) and np.all(r["sent_ns"] > 0)
    assert np.all(r["arg"] == p)
    done = run.done
    assert (done["sent"], done["completed"], done["timeouts"], done["ok"]) == (3, 3, 3, 0)
    assert done["latency"]["count"] == 0
    assert server.alive()


def test_open_loop_timeouts_are_recorded_once(start_server: StartServer, run_load: RunLoad) -> None:
    # Every request takes several times the timeout and the queue only grows, so each one
    # times out; their replies still arrive later and must not be counted a second time.
    server, _, run = slow_matrix_run(
        start_server,
        run_load,
        150e6,
        {"kind": "constant", "rate_per_s": 50},
        requests=10,
        timeout_ms=20,
    )
    r = run.records
    assert len(r) == 10 and len(np.unique(r["request_id"])) == 10
    assert np.all(r["status"] == STATUS_TIMEOUT), r["status"]
    assert np.all(r["sent_ns"] > 0) and np.all(r["received_ns"] == 0)
    done = run.done
    assert (done["sent"], done["completed"], done["timeouts"], done["ok"]) == (10, 10, 10, 0)
    assert server.alive()


def test_killed_generator_keeps_flushed_records(
    knee_node: str, echo_server: Server, processes: Processes, tmp_path: Path
) -> None:
    samples = tmp_path / "killed.samples.bin"
    config = {
        "target": echo_server.addr,
        "schedule": {"kind": "poisson", "rate_per_s": 2000},
        "connections": 1,
        "duration_s": 30,
        "timeout_ms": 5000,
        "seed": 3,
        "samples_path": str(samples),
        "histogram_path": str(tmp_path / "killed.histogram.csv"),
        "driver": ECHO_DRIVER,
    }
    proc = processes.spawn(
        [knee_node, "load", "echo", "--name", "gen", "--config", json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    lines: queue.Queue[bytes] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    progress: list[dict[str, Any]] = []
    while len(progress) < 2:
        event = json.loads(lines.get(timeout=10))
        if event["event"] == "progress":
            progress.append(event)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=5)
    assert proc.returncode == -signal.SIGKILL

    size = samples.stat().st_size
    r = read_sample_records(samples)
    assert len(r) == size // SAMPLE_DTYPE.itemsize
    # Everything counted in the last progress line was flushed before it was printed: the
    # recorder counts a record only once it is buffered, and the progress thread reads the
    # counters before it flushes.
    assert progress[1]["completed"] > progress[0]["completed"] > 0
    assert len(r) >= progress[1]["completed"], (len(r), progress[1])
    assert np.all(np.isin(r["status"], [STATUS_OK, STATUS_TIMEOUT, STATUS_DROP, STATUS_ERROR]))
    assert len(np.unique(r["request_id"])) == len(r)
    assert np.all(r["pad"] == 0) and np.all(r["op"] == wc.OP_ECHO)
    ok = r[r["status"] == STATUS_OK]
    assert np.all((ok["intended_ns"] <= ok["sent_ns"]) & (ok["sent_ns"] < ok["received_ns"]))
    assert not (tmp_path / "killed.histogram.csv").exists()  # written only at a clean end


def test_steps_schedule_follows_each_rate(echo_server: Server, run_load: RunLoad) -> None:
    run = run_load(
        "echo",
        echo_server.addr,
        {"kind": "steps", "steps": [[500, 0.5], [2000, 0.5]]},
        seed=4,
        driver=ECHO_DRIVER,
    )
    r = run.records
    assert np.all(r["status"] == STATUS_OK)
    offsets = r["intended_ns"].astype(np.int64) - run.start_ns
    assert np.all((offsets >= 0) & (offsets < 1_000_000_000))
    first = int(np.count_nonzero(offsets < 500_000_000))
    second = len(offsets) - first
    assert 0.75 * 250 <= first <= 1.25 * 250, first
    assert 0.75 * 1000 <= second <= 1.25 * 1000, second
    assert run.done["sent"] == len(r)
