"""The generator judged by what the kernel says of it (issue 36, A and B): its run-queue
delay (knee.monitor's `cpu_wait_percent`), its own CPU, and the machine's cores shared by
the run's processes (knee.resources.usage's `machine`). A target that takes the machine's
cores from the generator is the limit, set by the shared cores; a generator starved of CPU
by anything else (its own quota) is the limit itself."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import unavailable
from test_hosts_limits import cgroups_usable
from test_runner import only_run_dir, run_knee, write_spec

from knee.monitor import Monitor
from knee.resources.bottleneck import explain
from knee.resources.usage import MACHINE
from knee.stats.decision import GENERATOR_WAIT_PERCENT, decide, generator_cpu

BUSY = [sys.executable, "-c", "while True: pass"]


def test_the_monitor_reads_each_process_run_queue_delay() -> None:
    """Three busy loops on a 2-core machine cannot all run: each waits for a core, and its
    wait plus its CPU is at most its wall time (one thread). A sleeping process waits for
    nothing."""
    busy = [subprocess.Popen(BUSY) for _ in range(3)]
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        monitor = Monitor()
        monitor.add("busy", busy[0].pid)
        monitor.add("sleeper", sleeper.pid)
        rows = []
        for _ in range(3):
            time.sleep(1.0)
            rows.append(monitor.sample())
    finally:
        for p in [*busy, sleeper]:
            p.kill()
            p.wait()
    for row in rows[1:]:
        b, s = row["busy"], row["sleeper"]
        assert b["cpu_wait_percent"] > 20, row  # 3 loops on 2 cores: a third of the time
        assert b["cpu_wait_percent"] + b["cpu_percent"] < 115, row  # one thread: <= 100
        assert s["cpu_wait_percent"] < 1, row


def _f(**figures: Any) -> dict[str, Any]:
    return figures


def _stats(
    *, gen_cpu: float, gen_wait: float | None, run: float, foreign: float, quota: float | None
) -> dict[str, Any]:
    """A probe's statistics as the runner writes them, with the figures that matter here:
    the generator sent 70% of its 100/s, 30% of its sends late with connections free."""
    gen: dict[str, Any] = {
        "kind": "cpu",
        "generator": True,
        "cpu_percent": gen_cpu,
        "cpu_wait_percent": gen_wait,
        "capacity": quota or 2.0,
    }
    if quota:
        gen["cpu_percent_of_quota"] = gen_cpu / quota
    machine = {
        "kind": "cpu",
        "role": MACHINE,
        "busy": run + gen_cpu / 100,
        "capacity": 2.0,
        "foreign_cpu_percent": foreign * 100,
    }
    return {
        "count": 700,
        "sent": 700,
        "late_sends": 210,
        "late_sends_free": 210,
        "status_rates": {"ok": 1.0},
        "target_rate_per_s": 100.0,
        "achieved_rate_per_s": 70.0,
        "achieved_rate_ci_per_s": [65.0, 75.0],
        "stability": {"verdict": "stable", "detail": "stable"},
        "checks": [{"name": "sender", "verdict": "fail", "limit": "generator", "detail": "late"}],
        "resources": {"load": gen, **({} if quota else {MACHINE: machine})},
    }


@pytest.mark.parametrize(
    ("figures", "cause", "limit"),
    [
        # It waited for a core while the target used the machine: the target's limit.
        (
            _f(gen_cpu=1.0, gen_wait=20.0, run=1.9, foreign=0.05, quota=None),
            "shared_cores",
            "target",
        ),
        # It waited while processes outside the run used the machine: its own limit.
        (
            _f(gen_cpu=1.0, gen_wait=20.0, run=0.3, foreign=1.6, quota=None),
            "other_processes",
            "generator",
        ),
        # Its own CPU full: its own limit.
        (_f(gen_cpu=95.0, gen_wait=2.0, run=0.5, foreign=0.0, quota=None), "own_cpu", "generator"),
        # At its quota of 0.05 cores: its own limit, whatever the machine did.
        (_f(gen_cpu=4.5, gen_wait=60.0, run=1.0, foreign=0.0, quota=0.05), "own_cpu", "generator"),
        # No wait, CPU idle: its pacing.
        (_f(gen_cpu=1.0, gen_wait=0.1, run=1.9, foreign=0.0, quota=None), "pacing", "generator"),
    ],
)
def test_who_held_the_generator_back(figures: dict[str, Any], cause: str, limit: str) -> None:
    stats = _stats(**figures)
    assert generator_cpu(stats)["cause"] == cause
    d = decide(stats)
    assert d.limit == limit, d
    if limit == "target":
        assert d.capacity == "unstable" and "shared cores" in d.reason, d
    if cause == "other_processes":
        assert "machine's 2 cores" in d.reason and "quieter machine" in d.reason, d


def test_sends_that_kept_to_a_low_poisson_draw_are_not_behind() -> None:
    """Report 004's 4-thread probe at 81.21/s: the Poisson schedule itself drew 74.86/s,
    and the generator sent 74.9/s [69.02, 81.15]: below the target beyond its interval, but
    on the schedule. Waiting for the cores the server took does not make it "not offered":
    the probe is judged by its latency, as any other. A rate below the schedule's own draw
    is still behind."""
    stats = _stats(gen_cpu=1.0, gen_wait=12.0, run=1.9, foreign=0.05, quota=None)
    stats |= {
        "late_sends": 101,
        "late_sends_free": 101,
        "target_rate_per_s": 81.21,
        "achieved_rate_per_s": 74.9,
        "achieved_rate_ci_per_s": [69.02, 81.15],
        "scheduled_rate_per_s": 74.86,
    }
    assert generator_cpu(stats)["cause"] == "shared_cores"
    d = decide(stats)
    assert d.capacity == "stable" and d.limit is None, d
    behind = stats | {"scheduled_rate_per_s": 81.3}  # the schedule drew the target
    d = decide(behind)
    assert d.capacity == "unstable" and d.limit == "target", d
    assert "the rate was not offered" in d.reason, d


MATRIX = """
[experiment]
name = "cores"
system = "matrix"

[server]
threads = {threads}

[driver]
n = 50
p = 2000

[load]
schedule = "poisson"
rate_per_s = {rate}
duration_s = 5
warmup_s = 1.0
timeout_ms = 30000
{limits}
"""


def _point(tmp_path: Path, text: str) -> tuple[Path, dict[str, Any]]:
    out = tmp_path / "runs"
    res = run_knee("run", str(write_spec(tmp_path, text)), "--out", str(out), "--no-report")
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = only_run_dir(out)
    (point,) = json.loads((run_dir / "summary.json").read_text())["points"]
    return run_dir, point


def test_a_target_that_takes_both_cores_is_the_limit_set_by_the_shared_cores(
    tmp_path: Path,
) -> None:
    """A matrix server of 4 threads (about 17 ms of CPU a request) at 400/s, over what 2
    cores can compute: its threads take both cores, the generator waits for one. The probe's
    limit is the target, and the bottleneck is the machine's cores, shared (the server
    folded into them)."""
    run_dir, point = _point(tmp_path, MATRIX.format(threads=4, rate=400, limits=""))
    d = decide(point)
    assert d.limit == "target", d
    machine = point["resources"][MACHINE]
    assert machine["machine_cores"] == 2.0
    # The run's processes summed each second, against what other processes left of the
    # cores: from the host rows the monitor wrote.
    ts = pd.read_parquet(run_dir / "timeseries.parquet")
    host = ts[(ts["node"] == "host") & (ts["t_s"] >= ts["t_s"].min() + 1.0)]
    run = (host["nodes_cpu_percent"] + host["runner_cpu_percent"]) / 100
    assert run.min() - 0.05 <= machine["busy"] <= run.max() + 0.05
    left = 2.0 - host["foreign_cpu_percent"].mean() / 100
    assert machine["capacity"] == pytest.approx(max(left, machine["busy"]), abs=0.25)
    assert machine["u"] >= 0.7, machine  # the run took the cores it was left
    gen = point["resources"]["load"]
    assert gen["cpu_wait_percent"] is not None
    ex = explain([point])
    assert ex is not None
    assert ex["bottleneck"]["resource"] == MACHINE, ex["sentence"]
    assert "the server" in ex["bottleneck"]["label"], ex["sentence"]
    assert ex["sentence"].startswith("set by this machine's 2 cores, shared"), ex["sentence"]
    assert "the generator used" in ex["sentence"] and "waited for one" in ex["sentence"]


def test_a_generator_held_to_a_tiny_quota_is_the_limit(tmp_path: Path) -> None:
    """A two-thread matrix server at 60/s, about half its capacity, its generator in a
    cgroup of 0.01 cores (knee.hosts' limits): throttled, the generator sends late and reads
    its replies late (their latency grows as if the server were over capacity). Its probe
    says the generator is the limit, from its own CPU at its quota and its wait for a CPU.
    (At 30/s a fast machine's generator fit in its quota, sent on time, and was rightly not
    the limit: the rate must ask for more than the quota gives.)"""
    reason = cgroups_usable(0.01)
    if reason:
        unavailable(reason)
    limits = "[limits.load]\ncpu_cores = 0.01\n"
    _, point = _point(tmp_path, MATRIX.format(threads=2, rate=60, limits=limits))
    why = generator_cpu(point)
    assert why["cause"] == "own_cpu", why
    d = decide(point)
    assert d.limit == "generator", d
    assert point["resources"]["load"]["cpu_wait_percent"] >= GENERATOR_WAIT_PERCENT, point[
        "resources"
    ]["load"]
