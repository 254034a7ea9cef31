"""Clean-up after a run that died (knee.hosts.cleanup), for real: a runner process makes a
network, hosts and cgroups, is SIGKILLed, and `cleanup()` removes what it made and
nothing else. Records go to a directory of the test's own ($KNEE_RECORDS_DIR)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Processes, unavailable

from knee.hosts import cgroups, cleanup, netns, sweep
from knee.hosts.base import Limits, Unsupported

#: Seconds the runner process may take to make its network and cgroups.
READY_TIMEOUT_S = 30.0

RUNNER = r"""
import json, subprocess, sys, time
from knee.hosts import cgroups, cleanup, netns
from knee.hosts.base import Limits

run_id = cleanup.new_run_id()
network = netns.Network(run_id)
hosts = [netns.NetnsHost(n, Limits(), network, **s) for n, s in json.loads(sys.argv[1])]
for host in hosts:
    host.setup()
run = cgroups.RunCgroups(run_id)
run.make(("h1",), Limits(cpu_cores=0.5))
node = run.make(("h1", "n1"), Limits())
# A process left in a cgroup: clean-up reports it, and neither moves nor kills it.
orphan = subprocess.Popen(cgroups.wrap(["sleep", "30"], [node]))
while orphan.pid not in node.pids():
    time.sleep(0.01)
print(json.dumps({"run_id": run_id, "orphan": orphan.pid, "tops": [str(t) for t in run.tops],
                  "namespaces": [network.namespace] + [h.namespace for h in hosts]}), flush=True)
time.sleep(60)
"""


def _namespaces() -> set[str]:
    return set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()


def _knee_cgroups() -> set[Path]:
    return {
        p for h in set(cgroups.hierarchies().values()) for p in h.base.glob("knee-*") if p.is_dir()
    }


def test_cleanup_removes_what_a_killed_run_made_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, processes: Processes
) -> None:
    try:
        netns.check_features(True, False, False)
        cgroups.check_limits([Limits(cpu_cores=0.5)])
    except Unsupported as e:
        unavailable(str(e))
    monkeypatch.setenv("KNEE_RECORDS_DIR", str(tmp_path / "records"))
    # Decoys: a namespace and a cgroup named like a run's but in no record, and a live
    # run's (this process's) namespace.
    decoy_id, live_id = cleanup.new_run_id(), cleanup.new_run_id()
    decoy_ns, live_ns = f"knee-{decoy_id}-h1", f"knee-{live_id}-h1"
    decoy_cgroup = cgroups.hierarchies()["cpu"].base / f"knee-{decoy_id}"
    cleanup.note(live_id, namespaces=[live_ns])
    subprocess.run(["ip", "netns", "add", decoy_ns], check=True, timeout=30)
    subprocess.run(["ip", "netns", "add", live_ns], check=True, timeout=30)
    decoy_cgroup.mkdir()
    orphan = None
    try:
        settings = [["h1", {"rate_mbit": 10.0}], ["h2", {}]]
        runner = processes.spawn(
            [sys.executable, "-c", RUNNER, json.dumps(settings)], stdout=subprocess.PIPE
        )
        assert runner.stdout is not None
        made = json.loads(runner.stdout.readline())
        orphan = made["orphan"]
        run_id, tops = made["run_id"], {Path(t) for t in made["tops"]}
        before_ns, before_cg = _namespaces(), _knee_cgroups()
        assert set(made["namespaces"]) <= before_ns and tops <= before_cg
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(timeout=10)

        assert cleanup.stale_runs() == [run_id]  # not the live run
        problems: list[str] = []
        removed = sweep.sweep(problems=problems)
        assert sorted(removed) == sorted([f"network namespace {n}" for n in made["namespaces"]]), (
            removed
        )
        # The orphan's cgroups stay (a node left running is reported, not killed).
        assert problems and all(f"({orphan})" in p for p in problems), problems
        assert cleanup.read_record(run_id) is not None

        os.kill(orphan, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while orphan in cleanup.cgroup_pids(next(iter(tops)) / "h1" / "n1"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        orphan = None
        lines: list[str] = []
        assert sweep.main(lines.append) == 0
        assert sorted(lines) == sorted(f"removed cgroup {t}" for t in tops), lines
        assert cleanup.read_record(run_id) is None
        lines.clear()
        assert sweep.main(lines.append) == 0
        assert lines == ["nothing to clean up"]

        after_ns, after_cg = _namespaces(), _knee_cgroups()
        assert not (set(made["namespaces"]) & after_ns) and not (tops & after_cg)
        assert {decoy_ns, live_ns} <= after_ns and decoy_cgroup in after_cg
        assert before_ns - after_ns == set(made["namespaces"])
        assert before_cg - after_cg == tops
    finally:
        if orphan is not None:
            os.kill(orphan, signal.SIGKILL)
        for name in (decoy_ns, live_ns):
            cleanup.delete_namespace(name)
        decoy_cgroup.rmdir()
        cleanup.forget(live_id, namespaces=[live_ns])


def test_a_reused_pid_is_a_dead_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record whose pid now names another process (it started at another time) is
    stale; one naming this process is not."""
    monkeypatch.setenv("KNEE_RECORDS_DIR", str(tmp_path))
    live, reused = cleanup.new_run_id(), cleanup.new_run_id()
    cleanup.note(live, namespaces=[f"knee-{live}-h1"])
    cleanup.note(reused, namespaces=[f"knee-{reused}-h1"])
    path = cleanup.record_path(reused)
    record = json.loads(path.read_text())
    record["runner_start_ticks"] -= 1
    path.write_text(json.dumps(record))
    assert cleanup.stale_runs() == [reused]
    # Names outside the run's prefix are never recorded, hence never touched.
    with pytest.raises(ValueError):
        cleanup.note(live, namespaces=["knee-other-h1"])
    with pytest.raises(ValueError):
        cleanup.note(live, cgroups=["/sys/fs/cgroup/cpu"])
    assert sweep.remove_run(reused) == []  # its namespace was never made
    assert cleanup.read_record(reused) is None
    assert len(cleanup.new_run_id()) == 6
