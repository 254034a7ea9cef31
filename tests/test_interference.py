"""Interference: host CPU from /proc/stat, foreign CPU, the `interference` check, env.json.

The end-to-end test runs a real `knee run` and a real busy process beside it. The machine
may be shared (other builds), so the quiet point is only compared with the busy one when
the quiet point itself saw no interference.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from conftest import Processes, unavailable

import knee
from knee import env, results
from knee.monitor import (
    HOST_NODE,
    Monitor,
    foreign_cpu_percent,
    host_percent,
    parse_proc_stat,
)
from knee.stats import interference as intf

#: A busy loop that ends itself after argv[1] seconds, printing "monotonic_s cpu_s" every
#: 50 ms, so a test knows how much CPU it took in any window.
BUSY = """
import sys, time
end = time.monotonic() + float(sys.argv[1])
next_log = 0.0
while (now := time.monotonic()) < end:
    if now >= next_log:
        print(f"{now:.6f} {time.process_time():.6f}", flush=True)
        next_log = now + 0.05
print(f"{time.monotonic():.6f} {time.process_time():.6f}", flush=True)
"""

PROC_STAT = """cpu  100 5 50 1000 7 2 3 4 0 0
cpu0 50 5 25 500 3 1 1 2 0 0
cpu1 50 0 25 500 4 1 2 2 0 0
intr 12345 0 0
ctxt 999
"""


def test_proc_stat_aggregate_line_is_parsed() -> None:
    ticks = parse_proc_stat(PROC_STAT)
    assert ticks == {
        "user": 100,
        "nice": 5,
        "system": 50,
        "idle": 1000,
        "iowait": 7,
        "irq": 2,
        "softirq": 3,
        "steal": 4,
        "guest": 0,
        "guest_nice": 0,
    }
    # An old kernel without steal and guest columns: the missing fields are 0.
    old = parse_proc_stat("cpu  1 2 3 4 5 6 7\n")
    assert old["softirq"] == 7 and old["steal"] == 0 and old["guest_nice"] == 0
    with pytest.raises(ValueError):
        parse_proc_stat("cpu0 1 2 3 4\n")


def test_host_percent_and_foreign_on_fixed_ticks() -> None:
    before = parse_proc_stat(PROC_STAT)
    after = dict(before)
    # Two seconds on 2 cores (400 ticks at 100 Hz): 150 user, 30 system, 10 softirq,
    # 8 steal, 12 iowait, the rest idle.
    after.update(
        user=before["user"] + 150,
        system=before["system"] + 30,
        softirq=before["softirq"] + 10,
        steal=before["steal"] + 8,
        iowait=before["iowait"] + 12,
        idle=before["idle"] + 190,
    )
    pct = host_percent(before, after, wall_s=2.0, tick_s=0.01)
    assert pct["cpu_percent"] == pytest.approx(95.0)  # (150 + 30 + 10) ticks / 2 s
    assert pct["steal_percent"] == pytest.approx(4.0)
    assert pct["iowait_percent"] == pytest.approx(6.0)
    assert pct["irq_percent"] == pytest.approx(5.0)
    assert foreign_cpu_percent(95.0, nodes_cpu_percent=40.0, runner_cpu_percent=5.0) == 50.0
    # The host's and the processes' ticks are counted apart: never below 0.
    assert foreign_cpu_percent(30.0, nodes_cpu_percent=31.5, runner_cpu_percent=1.0) == 0.0


def _rows(foreign: list[float], steal: float = 0.0, interval_s: float = 1.0) -> list[dict]:
    return [
        {
            "foreign_cpu_percent": f,
            "steal_percent": steal,
            "iowait_percent": 1.0,
            "interval_s": interval_s,
        }
        for f in foreign
    ]


def test_interference_check_on_fixed_rows() -> None:
    summary, check = intf.interference(_rows([80.0, 90.0, 100.0, 70.0]))
    assert check["name"] == "interference" and check["verdict"] == "warn"
    assert check["value"] == pytest.approx(85.0) == summary["foreign_cpu_percent_mean"]
    assert summary["foreign_cpu_percent_max"] == 100.0 and summary["samples"] == 4
    assert "85.0% ± 0.0% of a core" in check["detail"] and "max 100%" in check["detail"]
    assert "steal 0.0%" in check["detail"]

    _, quiet = intf.interference(_rows([2.0, 5.0, 1.0]))
    assert quiet["verdict"] == "pass" and quiet["value"] == pytest.approx(8 / 3)

    # One second at 60% in a long point: the mean is low, the second is not.
    _, spike = intf.interference(_rows([0.0] * 29 + [60.0]))
    assert spike["verdict"] == "warn" and "one second above 50%" in spike["detail"]

    _, stolen = intf.interference(_rows([0.0, 0.0], steal=3.0))
    assert stolen["verdict"] == "warn" and "steal above 1%" in stolen["detail"]

    summary, none = intf.interference([])
    assert none["verdict"] == "n/a" and summary["samples"] == 0


def test_a_short_point_is_not_called_disturbed_by_tick_rounding() -> None:
    """Over 0.1 s, one 10 ms tick of the host, the runner or a node is 10% of a core: a
    25% reading from 5 rounded counts (tick error 50%) is no evidence of interference."""
    rows = [{**_rows([25.0], interval_s=0.1)[0], "tick_error_percent": 50.0}]
    summary, check = intf.interference(rows)
    assert check["verdict"] == "pass" and summary["tick_error_percent"] == pytest.approx(50.0)
    assert "25.0% ± 50.0% of a core" in check["detail"]
    # The same over ten 1 s samples (tick error 5% each, 1.6% for the mean) is disturbed.
    rows = [{**r, "tick_error_percent": 5.0} for r in _rows([25.0] * 10)]
    summary, check = intf.interference(rows)
    assert check["verdict"] == "warn"
    assert summary["tick_error_percent"] == pytest.approx(5.0 / np.sqrt(10))


def test_interference_weights_by_interval_and_ignores_short_samples_for_the_max() -> None:
    rows = _rows([5.0, 5.0]) + _rows([95.0], interval_s=0.1)  # a point's short last sample
    summary, check = intf.interference(rows)
    assert summary["foreign_cpu_percent_mean"] == pytest.approx((5 + 5 + 9.5) / 2.1)
    assert summary["foreign_cpu_percent_max"] == 5.0
    assert check["verdict"] == "pass"


def _busy_log(out: str) -> np.ndarray:
    return np.array([[float(v) for v in line.split()] for line in out.splitlines()])


def test_a_node_that_exits_between_samples_keeps_its_last_slice(processes: Processes) -> None:
    monitor = Monitor()
    proc = processes.spawn([sys.executable, "-c", BUSY, "0.6"], stdout=subprocess.PIPE)
    monitor.add("busy", proc.pid)
    time.sleep(0.3)
    monitor.sample()
    first = monitor.host
    out, _ = proc.communicate(timeout=10)  # reaped: its CPU moves to our children times
    nodes = monitor.sample()
    last = monitor.host
    if first is None or last is None:
        unavailable("no /proc/stat on this host")
    assert "busy" not in nodes
    cpu_s = _busy_log(out.decode())[-1, 1]
    seen_s = sum(h["nodes_cpu_percent"] * h["interval_s"] / 100 for h in (first, last))
    # Its whole CPU time, counted once: the loop's, plus Python's start-up.
    assert cpu_s * 0.95 <= seen_s <= cpu_s + 0.3, (cpu_s, seen_s)


def test_env_records_frequency_smt_and_library_versions(knee_node: str) -> None:
    info = env.collect(knee_node)
    for pkg in ("numpy", "pandas", "pyarrow", "psutil", "rich", "plotly", "matplotlib", "scipy"):
        assert info["packages"][pkg], pkg
    freq = info["cpu_frequency"]
    assert freq["governor"] is not None or freq["reason"]
    assert set(info["smt"]) == {"active", "control", "threads_per_core"}
    crates = info["knee_node_crates"]
    assert crates["crates"] is None and crates["reason"] or "hdrhistogram" in crates["crates"]


INTERFERENCE_SPEC = """
[experiment]
name = "interference-test"
system = "echo"

[load]
schedule = "poisson"
rate_per_s = 200
duration_s = {duration_s}
warmup_s = 0.5

[sweep]
"load.rate_per_s" = [200, 250]
"""
#: Each point's length; the busy process runs this plus BUSY_MARGIN_S.
POINT_S = 5.0
BUSY_MARGIN_S = 3.0


def _wait_for_point(runner: subprocess.Popen[str], tag: str, timeout_s: float) -> None:
    """Returns once the runner has started a node of the point tagged `tag` (p001)."""
    parent = psutil.Process(runner.pid)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        for child in parent.children():
            try:
                if any(f".{tag}.json" in arg for arg in child.cmdline()):
                    return
            except psutil.Error:
                continue
        if runner.poll() is not None:
            break
        time.sleep(0.02)
    raise AssertionError(f"the runner did not start point {tag}")


def _stop_runner(runner: subprocess.Popen[str]) -> None:
    """Ctrl-C by PID (the runner then stops its nodes), SIGKILL if that does not end it."""
    if runner.poll() is None:
        os.kill(runner.pid, signal.SIGINT)
        try:
            runner.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(runner.pid, signal.SIGKILL)
            runner.wait(timeout=5)


def _busy_percent_in(log: np.ndarray, start_s: float, end_s: float) -> float:
    """CPU % (100 = one core) the busy process used between two monotonic times."""
    cpu = np.interp([start_s, end_s], log[:, 0], log[:, 1], left=0.0, right=log[-1, 1])
    return float(100 * (cpu[1] - cpu[0]) / (end_s - start_s))


def test_a_busy_process_during_a_point_raises_the_interference_warning(
    tmp_path: Path, processes: Processes
) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(INTERFERENCE_SPEC.format(duration_s=POINT_S))
    out = tmp_path / "runs"
    runner = subprocess.Popen(
        [sys.executable, "-m", "knee.cli", "run", str(spec), "--out", str(out), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_point(runner, "p001", timeout_s=60)
        busy = processes.spawn(
            [sys.executable, "-c", BUSY, str(POINT_S + BUSY_MARGIN_S)], stdout=subprocess.PIPE
        )
        _, stderr = runner.communicate(timeout=60)
        busy_out, _ = busy.communicate(timeout=POINT_S + BUSY_MARGIN_S + 10)
    finally:
        _stop_runner(runner)
    assert runner.returncode == 0, stderr
    (run_dir,) = out.iterdir()
    run = knee.open_run(run_dir)
    quiet, disturbed = run.points
    checks = {p["point"]: {c["name"]: c for c in p["checks"]} for p in run.points}
    for p in run.points:
        assert set(p["interference"]) == {
            "foreign_cpu_percent_mean",
            "foreign_cpu_percent_max",
            "steal_percent_mean",
            "iowait_percent_mean",
            "tick_error_percent",
            "samples",
        }
        assert HOST_NODE not in p["resources"]  # per-node resources stay per node
    check = checks[1]["interference"]
    assert check["verdict"] == "warn", check
    assert check["value"] == disturbed["interference"]["foreign_cpu_percent_mean"]

    # The busy process's own CPU over the window the point's host samples cover.
    ts = run.timeseries
    host = ts[(ts["node"] == HOST_NODE) & (ts["point"] == 1)].sort_values("t_s")
    raw = next(r for r in results.read_manifest(run_dir) if r.point == 1)
    host = host[host["t_s"] >= (raw.warmup_end_ns - raw.run_start_ns) / 1e9]
    assert len(host) == disturbed["interference"]["samples"] >= 3
    t0_s = raw.run_start_ns / 1e9  # the runner's t_s is from this CLOCK_MONOTONIC time
    window = (t0_s + host["t_s"].iloc[0] - host["interval_s"].iloc[0], t0_s + host["t_s"].iloc[-1])
    busy_percent = _busy_percent_in(_busy_log(busy_out.decode()), *window)
    assert busy_percent > 20, f"the busy process hardly ran ({busy_percent:.0f}%)"
    # Foreign CPU holds the busy process (within the tick accounting's few percent); other
    # work on a shared host can only add to it.
    cores = os.cpu_count() or 1
    assert busy_percent * 0.85 - 5 <= check["value"] <= 100 * cores + 5, (busy_percent, check)
    print(f"busy {busy_percent:.1f}%, interference {check}, quiet {checks[0]['interference']}")
    assert f"{check['value']:.1f}% ± " in check["detail"]
    # Node rows are as before: CPU and memory, no host fields.
    nodes = ts[ts["node"] != HOST_NODE]
    assert nodes["cpu_percent"].notna().all() and nodes["foreign_cpu_percent"].isna().all()

    quiet_check = checks[0]["interference"]
    if quiet_check["verdict"] == "pass":
        # Measured on a quiet host: the busy point stands out by about the busy process.
        assert check["value"] - quiet_check["value"] >= busy_percent * 0.7 - 5, (
            quiet_check,
            check,
            busy_percent,
        )
    else:
        # Another program was busy during the quiet point (a shared machine): it said so.
        assert quiet["interference"]["foreign_cpu_percent_mean"] is not None
    env_json = json.loads((run_dir / "env.json").read_text())
    assert "cpu_frequency" in env_json and "smt" in env_json
