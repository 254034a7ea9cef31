"""`knee cleanup`: removes what runs that died left behind, from their records
(knee.hosts.cleanup): swarm services (knee.hosts.swarm), docker containers and networks
(knee.hosts.docker) first, then
network namespaces and cgroups. Apart from the records so that the hosts that write
records (cgroups, netns, docker) do not import the hosts they remove.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from knee.hosts import cleanup, docker, swarm


def remove_run(run_id: str, problems: list[str] | None = None) -> list[str]:
    """Removes what run ``run_id``'s record lists, then the record; what it removed. What
    it could not remove stays in the record and is described in ``problems``."""
    problems = problems if problems is not None else []
    record = cleanup.read_record(run_id)
    if record is None:
        return []
    removed: list[str] = []
    for name in record.get("docker", []):  # containers first: they hold cgroups
        try:
            cleanup.check_namespace(run_id, name)
        except ValueError as e:
            problems.append(str(e))
            continue
        before = len(problems)
        removed += swarm.remove_run(run_id, problems)  # services before their network
        removed += docker.remove_run(run_id, problems)
        if len(problems) == before:
            cleanup.forget(run_id, docker=[name])
    # Hosts' namespaces before the bridge's, cgroups children first (inside the tree).
    for name in sorted(record["namespaces"], key=lambda n: n.endswith("-net")):
        try:
            cleanup.check_namespace(run_id, name)
            if cleanup.delete_namespace(name):
                removed.append(f"network namespace {name}")
            cleanup.forget(run_id, namespaces=[name])
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            problems.append(f"namespace {name}: {e}")
    for path in map(Path, record["cgroups"]):
        try:
            cleanup.check_cgroup(run_id, path)
        except ValueError as e:
            problems.append(str(e))
            continue
        existed = path.exists()
        if cleanup.remove_cgroup_tree(path, problems):
            if existed:
                removed.append(f"cgroup {path}")
            cleanup.forget(run_id, cgroups=[path])
    if cleanup.read_record(run_id) is not None and not problems:
        cleanup.record_path(run_id).unlink(missing_ok=True)  # an empty record from a crash
    return removed


def sweep(
    all_stale: bool = True, runs: Iterable[str] = (), problems: list[str] | None = None
) -> list[str]:
    """Removes what stale runs made (with ``all_stale``) and what the named ``runs`` made,
    whatever their state; a list of what it removed."""
    targets = list(dict.fromkeys([*(cleanup.stale_runs() if all_stale else []), *runs]))
    return [item for run_id in targets for item in remove_run(run_id, problems)]


def main(console_print: Callable[[str], Any]) -> int:
    """`knee cleanup`: removes what runs that died left behind; 1 if something stayed."""
    problems: list[str] = []
    removed = sweep(problems=problems)
    for item in removed:
        console_print(f"removed {item}")
    for problem in problems:
        console_print(f"could not remove: {problem}")
    if not removed and not problems:
        console_print("nothing to clean up")
    return 1 if problems else 0
