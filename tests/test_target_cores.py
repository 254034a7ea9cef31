"""The cores of `knee http`'s target (issue 36, C): a service knee did not start is measured
against the CPU the kernel lets it use, its affinity (taskset, a cpuset) and its cgroup's
CPU quota (docker --cpus, systemd's CPUQuota), as knee's own nodes are against theirs
(knee.hosts.cgroups.process_cpu_limit). A real gunicorn of 2 sync workers with a CPU-bound
app (tests/http_apps/spin_app.py) under `taskset -c 0`, then in a cgroup of half a core."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import unavailable
from real_http_servers import APPS, LAUNCHERS, Launch, real_server
from test_runner import only_run_dir, run_knee

from knee.hosts import cgroups
from knee.resources.usage import MACHINE

WORKERS = 2
RATE_PER_S = 25  # 10 ms of CPU each: a quarter of a core, half of the half-core quota


def _gunicorn(prefix: list[str]) -> Callable[[int, Path, str], Launch]:
    def launch(port: int, _workdir: Path, _knee_node: str) -> Launch:
        argv = [sys.executable, "-m", "gunicorn", "--workers", str(WORKERS)]
        argv += ["--worker-class", "sync", "--bind", f"127.0.0.1:{port}"]
        argv += ["--graceful-timeout", "2", "--chdir", str(APPS), "spin_app:app"]
        return Launch([*prefix, *argv])

    return launch


@pytest.fixture
def half_core_cgroup() -> Iterator[Path]:
    """A cgroup of this test's own, with a CPU quota of 50 ms per 100 ms (cgroup v2's
    cpu.max "50000 100000"; v1's cfs quota and period), removed after by its path."""
    h = cgroups.hierarchies().get("cpu")
    if os.geteuid() != 0 or h is None or not os.access(h.base, os.W_OK):
        unavailable("a cgroup with a CPU quota needs root and the cpu controller")
    assert h is not None
    path = h.base / f"knee-test-cores-{os.getpid()}"
    path.mkdir()
    try:
        if h.version == 1:
            (path / "cpu.cfs_period_us").write_text("100000")
            (path / "cpu.cfs_quota_us").write_text("50000")
        else:
            (path / "cpu.max").write_text("50000 100000")
        yield path
    finally:
        path.rmdir()  # its processes have stopped with the server


def _run(tmp_path: Path, prefix: list[str], name: str, knee_node: str) -> dict[str, Any]:
    LAUNCHERS[name] = _gunicorn(prefix)
    try:
        with real_server(name, tmp_path / "server", knee_node) as server:
            out = tmp_path / "runs"
            res = run_knee(
                "http", server.url + "/", "--rate", str(RATE_PER_S), "--duration", "6s",
                "--warmup", "1s", "--out", str(out), "--no-report", "--no-progress",
            )  # fmt: skip
            assert res.returncode == 0, res.stderr[-3000:]
    finally:
        del LAUNCHERS[name]
    (point,) = json.loads((only_run_dir(out) / "summary.json").read_text())["points"]
    return point


def _check(point: dict[str, Any], cores: float) -> None:
    target = point["target"]
    assert target["found"] and target["workers"] == WORKERS, target
    assert target["cpu_cores"] == pytest.approx(cores), target
    cpu = point["resources"]["target"]
    assert cpu["capacity"] == pytest.approx(cores), cpu  # not the machine's cores
    assert cpu["u"] == pytest.approx(cpu["busy"] / cores)
    assert cpu["cpu_percent_of_quota"] == pytest.approx(cpu["cpu_percent"] / cores)
    # 25/s of 10 ms: a quarter of a core busy, U a quarter of `cores` (wide: a busy machine).
    assert 0.1 < cpu["busy"] < 0.5, cpu
    # A target with a limit of its own does not share the machine's cores with the run.
    assert MACHINE not in point["resources"]


def test_a_target_pinned_to_one_core_is_measured_against_one_core(
    tmp_path: Path, knee_node: str
) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        unavailable("one core: pinning to one changes nothing")
    point = _run(tmp_path, ["taskset", "-c", "0"], "gunicorn-spin-taskset", knee_node)
    assert point["target"]["cpus"] == "0"
    assert point["target"]["quota_cores"] is None
    _check(point, 1.0)


def test_a_target_in_a_cgroup_of_half_a_core_is_measured_against_half(
    tmp_path: Path, knee_node: str, half_core_cgroup: Path
) -> None:
    procs = half_core_cgroup / "cgroup.procs"
    join = ["/bin/sh", "-c", f'echo $$ > {procs} && exec "$@"', "join"]
    point = _run(tmp_path, join, "gunicorn-spin-cgroup", knee_node)
    assert point["target"]["quota_cores"] == pytest.approx(0.5)
    assert point["target"]["cpus"] is None
    _check(point, 0.5)
