"""CPU quota, cpuset and memory limits through cgroups (knee.hosts.cgroups), for real: a
busy process under a quota, a pinned one, the files the kernel reads. Skipped, with the
reason, where the machine cannot (not root, a controller not mounted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import Processes, unavailable

from knee.hosts import cgroups, cleanup
from knee.hosts.base import Limits, Unsupported

#: Seconds the busy process's CPU time is read over.
WINDOW_S = 1.5
#: Seconds a helper process may live (a bound on the busy loop, whatever happens).
HELPER_TIMEOUT_S = 20.0
BUSY = "import time\nend = time.monotonic() + float(__import__('sys').argv[1])\n" + (
    "while time.monotonic() < end: pass\n"
)
REPORT = "import json, os; print(json.dumps([os.getpid(), sorted(os.sched_getaffinity(0))]))"


def _need(*limits: Limits) -> None:
    if os.geteuid() != 0:
        unavailable("cgroup limits need root")
    try:
        cgroups.check_limits(limits)
    except Unsupported as e:
        unavailable(str(e))


@pytest.fixture
def run_cgroups() -> Iterator[cgroups.RunCgroups]:
    """A run's cgroups; removed after the test, and checked gone."""
    run = cgroups.RunCgroups(cleanup.new_run_id())
    yield run
    tops = list(run.tops)
    assert run.remove() == []
    assert [t for t in tops if t.exists()] == []
    assert cleanup.read_record(run.run_id) is None


def _wait_joined(cgroup: cgroups.Cgroup, pid: int) -> None:
    deadline = time.monotonic() + 5
    while pid not in cgroup.pids():
        assert time.monotonic() < deadline, f"{pid} never joined {cgroup.procs_files}"
        time.sleep(0.01)


def _cpu_stat(cgroup: cgroups.Cgroup) -> dict[str, int]:
    """The quota's counters in the cgroup's cpu.stat (v1 and v2 alike): periods that had
    runnable tasks, and how many of them ran out of quota."""
    lines = (cgroup.paths["cpu"] / "cpu.stat").read_text().splitlines()
    stat = {key: int(value) for key, _, value in (line.partition(" ") for line in lines)}
    return {k: stat[k] for k in ("nr_periods", "nr_throttled")}


def test_a_quota_of_a_quarter_core(run_cgroups: cgroups.RunCgroups, processes: Processes) -> None:
    """A busy loop is held to a quarter of a core by the kernel, in every period."""
    limits = Limits(cpu_cores=0.25)
    _need(limits)
    cgroup = run_cgroups.make(("h1",), limits)
    proc = processes.spawn(
        cgroups.wrap([sys.executable, "-c", BUSY, str(HELPER_TIMEOUT_S)], [cgroup])
    )
    _wait_joined(cgroup, proc.pid)
    time.sleep(0.2)  # the shell has exec'd Python, which now only spins
    assert "python" in " ".join(psutil.Process(proc.pid).cmdline())  # the pid is kept
    used0, stat0 = cgroup.cpu_usage_s(), _cpu_stat(cgroup)
    time.sleep(WINDOW_S)  # how long the kernel's periods are watched, not a rate
    used1, stat1 = cgroup.cpu_usage_s(), _cpu_stat(cgroup)
    Processes.stop(proc)
    assert used0 is not None and used1 is not None
    # The kernel's own accounting: in each period it ran, the loop used at most its quota
    # (2.5 ms of 10 ms) and was throttled for wanting more, whatever else the machine ran.
    periods = stat1["nr_periods"] - stat0["nr_periods"]
    throttled = stat1["nr_throttled"] - stat0["nr_throttled"]
    assert periods > 0, (stat0, stat1)
    assert (used1 - used0) <= periods * 0.0025 * 1.05 + 0.0025, (used1 - used0, periods)
    assert throttled >= 0.5 * periods, (throttled, periods)
    assert cgroup.describe()["quota_cores"] == 0.25
    # A short period (10 ms), so the quota stalls the node for 7.5 ms at most, not 75 ms.
    cpu_dir = cgroup.paths["cpu"]
    if cgroup.versions["cpu"] == 1:
        quota = (cpu_dir / "cpu.cfs_quota_us").read_text().strip()
        period = (cpu_dir / "cpu.cfs_period_us").read_text().strip()
    else:
        quota, period = (cpu_dir / "cpu.max").read_text().split()
    assert (int(quota), int(period)) == (2_500, 10_000)


def test_the_quota_period_keeps_the_kernels_minimum() -> None:
    assert cgroups.cfs_period_us(0.25) == 10_000
    assert cgroups.cfs_period_us(4.0) == 10_000
    assert cgroups.cfs_period_us(0.05) == 20_000
    assert cgroups.cfs_period_us(cgroups.MIN_CPU_CORES) == 100_000


def test_cpuset_and_memory_of_a_host_hold_for_its_node(
    run_cgroups: cgroups.RunCgroups,
) -> None:
    """The host's cgroup pins to one core and limits memory; its node's, made under it,
    adds a quota: the node gets all three."""
    core = max(cgroups.available_cores())
    host_limits = Limits(cpuset=str(core), memory_bytes=64 << 20)
    node_limits = Limits(cpu_cores=0.5)
    _need(host_limits, node_limits)
    run_cgroups.make(("h1",), host_limits)
    node = run_cgroups.make(("h1", "n1"), node_limits)
    res = subprocess.run(
        cgroups.wrap([sys.executable, "-c", REPORT], [node]),
        capture_output=True,
        text=True,
        timeout=HELPER_TIMEOUT_S,
    )
    assert res.returncode == 0, res.stderr
    _pid, affinity = json.loads(res.stdout)
    assert affinity == [core]
    memory = node.paths["memory"]
    limit_file = "memory.limit_in_bytes" if node.versions["memory"] == 1 else "memory.max"
    assert int((memory.parent / limit_file).read_text()) == 64 << 20
    described = node.describe()
    assert described["cpus"] == str(core)
    assert described["quota_cores"] == 0.5
    assert described["limits"] == {"cpu_cores": 0.5}


def test_wrap_keeps_the_pid(run_cgroups: cgroups.RunCgroups, processes: Processes) -> None:
    _need(Limits())
    cgroup = run_cgroups.make(("h1",), Limits())
    proc = processes.spawn(
        cgroups.wrap([sys.executable, "-c", REPORT, "--", "x"], [cgroup]),
        stdout=subprocess.PIPE,
    )
    out, _ = proc.communicate(timeout=HELPER_TIMEOUT_S)
    pid, _affinity = json.loads(out)
    assert pid == proc.pid
    assert (cgroup.cpu_usage_s() or 0) > 0  # its CPU time was counted there


def test_impossible_limits_are_refused_in_one_line() -> None:
    _need(Limits(cpu_cores=0.5, cpuset="0"))
    cores = cgroups.available_cores()
    for limits, words in [
        (Limits(cpuset=str(max(cores) + 1)), "names cores this machine does not have"),
        (Limits(cpu_cores=len(cores) + 1.0), "more than the"),
        (Limits(cpuset="0", cpu_cores=1.5), "more than the 1 cores"),
        (Limits(cpuset="one"), "expected a list of cores"),
    ]:
        with pytest.raises(Unsupported, match=words) as caught:
            cgroups.check_limits([limits])
        assert "\n" not in str(caught.value)


def test_v2_accounting_where_a_cgroup2_is_mounted(processes: Processes) -> None:
    """The v2 paths (mkdir, join, cpu.stat, rmdir) on this machine's cgroup2 mount, even
    where v1 holds the controllers (hybrid): accounting needs no controller in v2."""
    if os.geteuid() != 0:
        unavailable("cgroups need root")
    found = cgroups.hierarchies()
    v2 = next((h for h in found.values() if h.version == 2), None)
    if v2 is None:
        mounts = Path("/proc/self/mountinfo").read_text()
        v2_mount = next(
            (line.split()[4] for line in mounts.splitlines() if " - cgroup2 " in line), None
        )
        if v2_mount is None:
            unavailable("no cgroup2 mounted")
        v2 = cgroups.parse_hierarchies(
            mounts.replace(" - cgroup ", " - not-cgroup "), Path("/proc/self/cgroup").read_text()
        )["cpuacct"]
    run = cgroups.RunCgroups(cleanup.new_run_id(), {"cpuacct": v2})
    try:
        cgroup = run.make(("h1", "n1"), Limits())
        assert cgroup.versions == {"cpuacct": 2}
        proc = processes.spawn(cgroups.wrap([sys.executable, "-c", BUSY, "0.3"], [cgroup]))
        assert proc.wait(timeout=HELPER_TIMEOUT_S) == 0
        assert (cgroup.cpu_usage_s() or 0) > 0.1
    finally:
        assert run.remove() == []
    assert not (v2.base / f"knee-{run.run_id}").exists()


def test_parse_a_pure_v2_machine() -> None:
    """What /proc says on a v2-only machine with knee run from a user's systemd scope."""
    mountinfo = (
        "25 30 0:22 / /sys rw,nosuid - sysfs sysfs rw\n"
        "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    proc_cgroup = "0::/user.slice/user-1000.slice/session-2.scope\n"
    found = cgroups.parse_hierarchies(mountinfo, proc_cgroup)
    # No cgroup.controllers file at this path on this machine: accounting only.
    assert set(found) <= {"cpuacct", "cpu", "cpuset", "memory"}
    h = found["cpuacct"]
    assert h.version == 2
    assert h.base == Path("/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope")
