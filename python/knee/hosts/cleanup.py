"""What a run made outside its run directory (network namespaces, cgroups), written down
before it is made, so that a run that dies (SIGKILL, a crash, a power cut of the runner)
leaves something `knee cleanup` can find and remove.

One JSON record per run, ``$KNEE_RECORDS_DIR/<run_id>.json`` (default ``/run/knee``, a
tmpfs: records go with a reboot, as do namespaces and cgroups)::

    {"run_id": "3fa2c1", "runner_pid": 4242, "runner_start_ticks": 123456,
     "created": "2025-...Z", "namespaces": ["knee-3fa2c1-net", ...],
     "cgroups": ["/sys/fs/cgroup/cpu/knee-3fa2c1", ...]}

`note()` adds names before they are made, `forget()` drops them once removed (and the
record when it is empty). A record whose runner is gone (its pid is not running, or runs
a process that started at another time: pid reuse) is stale; `knee.hosts.sweep` removes what
stale records list. Only names with the ``knee-<run_id>`` prefix read from a record are
ever touched.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import subprocess
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DEFAULT_RECORDS_DIR = "/run/knee"
#: A run id: short, because interface names (15 chars) are derived from it.
RUN_ID_RE = re.compile(r"^[0-9a-z]{1,8}$")
#: Names a run may give its namespaces: knee-<run_id>-<host name>.
NAMESPACE_NAME_RE = re.compile(r"^knee-[0-9a-z]{1,8}-[A-Za-z0-9_.-]{1,64}$")
#: Seconds `ip netns del` may take (it is instant unless the machine is stuck).
IP_TIMEOUT_S = 30.0

# Record updates from the runner's threads are read-modify-write.
_lock = threading.Lock()


def new_run_id() -> str:
    """Six hex digits: veth names (15 chars at most) are derived from it."""
    return secrets.token_hex(3)


def check_run_id(run_id: str) -> str:
    if not RUN_ID_RE.match(run_id):
        raise ValueError(f"run id {run_id!r}: 1 to 8 lower-case letters or digits")
    return run_id


def records_dir() -> Path:
    return Path(os.environ.get("KNEE_RECORDS_DIR") or DEFAULT_RECORDS_DIR)


def record_path(run_id: str) -> Path:
    return records_dir() / f"{check_run_id(run_id)}.json"


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None if there is none.
    An exact integer: a pid reused by a later process has another one."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2, in parentheses) may contain spaces.
    return int(stat.rsplit(")", 1)[1].split()[19])


def read_record(run_id: str) -> dict[str, Any] | None:
    try:
        return json.loads(record_path(run_id).read_text())
    except FileNotFoundError:
        return None


def _write(path: Path, record: dict[str, Any]) -> None:
    # Written whole then renamed: a reader never sees half a record.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)


def note(
    run_id: str,
    namespaces: Iterable[str] = (),
    cgroups: Iterable[Path | str] = (),
    docker: Iterable[str] = (),
) -> None:
    """Records that this process (the runner) is about to make these; call it before.
    ``docker``: the run's docker network (knee.hosts.docker), whose removal also removes
    every container labelled with the run."""
    namespaces, cgroup_paths, docker = list(namespaces), [str(c) for c in cgroups], list(docker)
    for name in namespaces + docker:
        check_namespace(run_id, name)
    for cgroup in cgroup_paths:
        check_cgroup(run_id, Path(cgroup))
    with _lock:
        path = record_path(run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = read_record(run_id) or {
            "run_id": run_id,
            "runner_pid": os.getpid(),
            "runner_start_ticks": start_ticks(os.getpid()),
            "created": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "namespaces": [],
            "cgroups": [],
        }
        record["namespaces"] += [n for n in namespaces if n not in record["namespaces"]]
        record["cgroups"] += [c for c in cgroup_paths if c not in record["cgroups"]]
        record.setdefault("docker", [])
        record["docker"] += [d for d in docker if d not in record["docker"]]
        _write(path, record)


def forget(
    run_id: str,
    namespaces: Iterable[str] = (),
    cgroups: Iterable[Path | str] = (),
    docker: Iterable[str] = (),
) -> None:
    """Records that these are gone; the record goes when it lists nothing."""
    gone = set(namespaces) | {str(c) for c in cgroups} | set(docker)
    with _lock:
        record = read_record(run_id)
        if record is None:
            return
        record["namespaces"] = [n for n in record["namespaces"] if n not in gone]
        record["cgroups"] = [c for c in record["cgroups"] if c not in gone]
        record["docker"] = [d for d in record.get("docker", []) if d not in gone]
        path = record_path(run_id)
        if record["namespaces"] or record["cgroups"] or record["docker"]:
            _write(path, record)
        else:
            path.unlink(missing_ok=True)


def run_ids() -> list[str]:
    """Every run with a record."""
    try:
        names = sorted(p.stem for p in records_dir().glob("*.json"))
    except OSError:
        return []
    return [n for n in names if RUN_ID_RE.match(n)]


def is_stale(record: dict[str, Any]) -> bool:
    """The record's runner is gone (a pid that now names another process counts)."""
    ticks = start_ticks(int(record["runner_pid"]))
    return ticks is None or ticks != record.get("runner_start_ticks")


def stale_runs() -> list[str]:
    """Runs whose runner is gone but whose record is still there."""
    out = []
    for run_id in run_ids():
        try:
            record = read_record(run_id)
        except (OSError, ValueError):
            continue  # being written (renamed in a moment) or not ours: leave it
        if record is not None and is_stale(record):
            out.append(run_id)
    return out


def check_namespace(run_id: str, name: str) -> None:
    if not (NAMESPACE_NAME_RE.match(name) and name.startswith(f"knee-{run_id}-")):
        raise ValueError(f"namespace {name!r} is not one of run {run_id}'s")


def check_cgroup(run_id: str, path: Path) -> None:
    # A run's own top cgroup, directly under a cgroup (the runner's) in a cgroup mount.
    if not (
        path.is_absolute()
        and ".." not in path.parts
        and path.name == f"knee-{run_id}"
        and (path.parent / "cgroup.procs").is_file()
    ):
        raise ValueError(f"cgroup {str(path)!r} is not one of run {run_id}'s")


def namespace_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def delete_namespace(name: str) -> bool:
    """Deletes network namespace ``name``; False if there was none. Its interfaces and
    nftables tables go with it (once no process is left in it)."""
    if not namespace_exists(name):
        return False
    res = subprocess.run(
        ["ip", "netns", "del", name], capture_output=True, text=True, timeout=IP_TIMEOUT_S
    )
    if res.returncode != 0 and namespace_exists(name):
        raise OSError(f"ip netns del {name}: {res.stderr.strip()}")
    return True


def cgroup_pids(path: Path) -> list[int]:
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def remove_cgroup_tree(top: Path, problems: list[str]) -> bool:
    """Removes cgroup ``top`` and every cgroup under it, children first. A cgroup that
    still has processes is left where it is (its pids go in ``problems``): the runner
    stops its nodes before, and processes are not moved nor killed here. True if ``top``
    is gone."""
    if not top.is_dir():
        return True
    stuck: set[str] = set()  # cgroups left in place, and every cgroup above them
    for dirpath, _dirs, _files in os.walk(top, topdown=False):
        if dirpath in stuck:
            stuck.add(os.path.dirname(dirpath))
            continue
        try:
            os.rmdir(dirpath)
        except FileNotFoundError:
            pass
        except OSError as e:
            stuck.add(os.path.dirname(dirpath))
            if e.errno == errno.EBUSY and (pids := cgroup_pids(Path(dirpath))):
                listed = " ".join(map(str, pids))
                problems.append(f"cgroup {dirpath} still has processes ({listed}): left")
            else:
                problems.append(f"cgroup {dirpath}: {e.strerror}")
    return not top.exists()
