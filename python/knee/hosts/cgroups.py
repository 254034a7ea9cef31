"""CPU quota, cpuset and memory limits of a run's hosts and nodes, as cgroups.

Each controller is used where the machine mounts it, found at run time: cgroup v1 (one
hierarchy per controller or a few together, e.g. /sys/fs/cgroup/cpu,cpuacct), cgroup v2
(one hierarchy, /sys/fs/cgroup with cgroup.controllers), or both (hybrid: v1 for the
controllers it holds). knee's cgroups go under the runner's own cgroup in each hierarchy,
so that whatever limits the runner stay in force on its nodes::

    <runner's cgroup>/knee-<run_id>/<host>/<node>

A process joins its cgroups before it execs the node (`wrap`), so every thread and child
of the node is in them from its first instruction, and its pid is the node's.
"""

from __future__ import annotations

import errno
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from knee.hosts import cleanup
from knee.hosts.base import HostError, Limits, Unsupported
from knee.hosts.spec import parse_cpuset

CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory")
#: The scheduler periods a CPU quota is a share of. A group that used its quota is stopped
#: for the rest of the period: at the kernel's default 100 ms a quarter-core node can stall
#: for 75 ms, a delay that would show up as queueing or network time. The period is the
#: shortest from 10 ms (stalls of at most 7.5 ms at a quarter core) whose quota keeps the
#: kernel's 1 ms minimum, up to the default.
MIN_CFS_PERIOD_US = 10_000
MAX_CFS_PERIOD_US = 100_000
#: The kernel refuses a quota under 1 ms per period.
MIN_QUOTA_US = 1_000
MIN_CPU_CORES = MIN_QUOTA_US / MAX_CFS_PERIOD_US


def cfs_period_us(cpu_cores: float) -> int:
    """The period for a quota of `cpu_cores` (see MIN_CFS_PERIOD_US)."""
    return int(min(MAX_CFS_PERIOD_US, max(MIN_CFS_PERIOD_US, math.ceil(MIN_QUOTA_US / cpu_cores))))


PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
#: Joins the cgroup.procs files given before "--", then execs what follows: the shell's
#: pid ($$) is the one that joins and the one the command keeps.
JOIN_SCRIPT = (
    'for f; do [ "$f" = -- ] && break; '
    'echo $$ > "$f" || { echo "knee: cannot join cgroup $f" >&2; exit 125; }; done; '
    'while [ "$1" != -- ]; do shift; done; shift; exec "$@"'
)


@dataclass(frozen=True)
class Hierarchy:
    """One mounted cgroup hierarchy, as this process sees it."""

    version: int  # 1 or 2
    mount: Path
    base: Path  # the runner's own cgroup in it: knee's cgroups go under it
    controllers: frozenset[str]
    root: str = "/"  # the cgroup mounted at `mount` (a container's own, inside one)

    def directory(self, path: str) -> Path:
        """The directory of cgroup `path` (as /proc/PID/cgroup names it) in this mount."""
        return _base(self.mount, self.root, path)


def _unescape(path: str) -> str:
    # mountinfo writes a space as \040 (and tab, newline, backslash alike).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def parse_hierarchies(mountinfo: str, proc_cgroup: str) -> dict[str, Hierarchy]:
    """Where each of CONTROLLERS is, from /proc/self/mountinfo and /proc/self/cgroup
    (a v1 mount of a controller wins: the kernel then keeps it out of v2)."""
    own: dict[frozenset[str], str] = {}
    for line in proc_cgroup.splitlines():
        hier_id, listed, path = line.split(":", 2)
        own[frozenset(listed.split(",")) if listed else frozenset()] = path
    out: dict[str, Hierarchy] = {}
    v2: tuple[Path, str] | None = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        root, mount = _unescape(fields[3]), Path(_unescape(fields[4]))
        fstype, superopts = rfields[0], rfields[2]
        if fstype == "cgroup2":
            v2 = v2 or (mount, root)
        elif fstype == "cgroup":
            names: frozenset[str] = frozenset(superopts.split(",")) - {"rw", "ro"}
            mine = names & set(CONTROLLERS)
            if not mine or mine & out.keys():
                continue  # another hierarchy, or a second mount of one already found
            base = _base(mount, root, own.get(names, root))
            for name in mine:
                out[name] = Hierarchy(1, mount, base, frozenset(mine), root)
    if v2 is not None:
        mount, root = v2
        try:
            available = set((mount / "cgroup.controllers").read_text().split())
        except OSError:
            available = set()
        # cpu.stat (usage_usec) is in every v2 cgroup: accounting needs no controller.
        v2_names = ({"cpuacct"} | available) & set(CONTROLLERS) - out.keys()
        if v2_names:
            hierarchy = Hierarchy(
                2, mount, _base(mount, root, own.get(frozenset(), root)), frozenset(v2_names), root
            )
            out.update(dict.fromkeys(v2_names, hierarchy))
    return out


def _base(mount: Path, root: str, path: str) -> Path:
    """The directory of cgroup ``path`` in a hierarchy mounted at ``mount`` from ``root``."""
    rel = os.path.relpath(path, root) if path.startswith(root) else "."
    return mount if rel == "." else mount / rel


@cache
def hierarchies() -> dict[str, Hierarchy]:
    """This machine's: controller name -> hierarchy (absent if not mounted)."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
        proc_cgroup = Path("/proc/self/cgroup").read_text()
    except OSError:
        return {}
    return parse_hierarchies(mountinfo, proc_cgroup)


def controllers_for(limits: Limits) -> set[str]:
    """The controllers ``limits`` need (cpuacct always: a node's CPU time is measured)."""
    out = {"cpuacct"}
    if limits.cpu_cores is not None:
        out.add("cpu")
    if limits.cpuset is not None:
        out.add("cpuset")
    if limits.memory_bytes is not None:
        out.add("memory")
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as e:
        hint = " (a node's cpu_cores above its host's?)" if e.errno == errno.EINVAL else ""
        raise HostError(f"cgroup: cannot write {value!r} to {path}: {e.strerror}{hint}") from None


def available_cores(hierarchy: Hierarchy | None = None) -> set[int]:
    """The cores the runner's cgroups may use: its cpuset, else its affinity."""
    h = hierarchy or hierarchies().get("cpuset")
    if h is not None:
        name = "cpuset.effective_cpus" if h.version == 1 else "cpuset.cpus.effective"
        text = _read(h.base / name)
        if text:
            return parse_cpuset(text)
    return set(os.sched_getaffinity(0))


def quota_cores_at(path: Path, mount: Path, version: int) -> float | None:
    """The CPU quota in force on the cgroup at `path` of a cpu hierarchy mounted at `mount`,
    in cores: the smallest of its own and its ancestors' (v1 cpu.cfs_quota_us over
    cpu.cfs_period_us, v2 cpu.max); None: unlimited."""
    quotas = []
    for d in [path, *path.parents]:
        if version == 1:
            quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
        else:
            quota, _, period = (_read(d / "cpu.max") or "max").partition(" ")
        if quota and period and quota not in ("-1", "max"):
            quotas.append(int(quota) / int(period))
        if d == mount or not d.is_relative_to(mount):
            break
    return min(quotas) if quotas else None


def limit_cores(quota_cores: float | None, cpus: int | None) -> float | None:
    """The CPU a process may use, in cores: the tighter of its quota and its cores (a
    cpuset or affinity of that many); None when neither is given."""
    cores = [float(c) for c in (quota_cores, cpus) if c is not None]
    return min(cores) if cores else None


def process_cpu_limit(pid: int, proc: Path = Path("/proc")) -> dict[str, Any]:
    """What limits the CPU of process `pid` (a service knee did not start), read as the
    kernel applies it: its affinity (os.sched_getaffinity: a cpuset or taskset narrows it)
    and the CPU quota of its cgroup, the tightest up its ancestors (`quota_cores_at`, as
    for knee's own cgroups). `cpu_cores`: the tighter of the two, None when the process may
    use every core of the machine without a quota."""
    out: dict[str, Any] = {"cpus": None, "quota_cores": None, "cpu_cores": None}
    try:
        cpus = os.sched_getaffinity(pid)
    except OSError:
        cpus = None
    if cpus is not None and len(cpus) < (os.cpu_count() or len(cpus)):
        out["cpus"] = _cpuset_text(cpus)
    h = hierarchies().get("cpu")
    if h is not None:
        try:
            lines = (proc / str(pid) / "cgroup").read_text().splitlines()
        except OSError:
            lines = []
        for line in lines:
            _, names, path = line.split(":", 2)
            wanted = "cpu" in names.split(",") if h.version == 1 else names == ""
            if wanted:
                out["quota_cores"] = quota_cores_at(h.directory(path), h.mount, h.version)
                break
    n = len(cpus) if out["cpus"] is not None and cpus is not None else None
    out["cpu_cores"] = limit_cores(out["quota_cores"], n)
    return out


def check_limits(limits_list: Iterable[Limits]) -> None:
    """Raises Unsupported, in one line, if this machine cannot give one of these limits:
    a controller not mounted or not writable, a cpuset naming cores that are not there,
    more cores of quota than there are cores."""
    found = hierarchies()
    for limits in limits_list:
        for name in sorted(controllers_for(limits) - {"cpuacct"}):
            h = found.get(name)
            if h is None:
                raise Unsupported(
                    f"cgroup controller {name} is not mounted: {_key(name)} cannot be set"
                )
            if not os.access(h.base, os.W_OK):
                raise Unsupported(
                    f"cgroup {h.base} is not writable: {_key(name)} needs root (or a "
                    "delegated cgroup)"
                )
            if h.version == 2:
                _check_v2(h, name)
        cores = available_cores()
        if limits.cpuset is not None:
            try:
                wanted = parse_cpuset(limits.cpuset)
            except ValueError as e:
                raise Unsupported(f"cpuset: {e}") from None
            if not wanted or not wanted <= cores:
                raise Unsupported(
                    f"cpuset {limits.cpuset!r} names cores this machine does not have "
                    f"(it has {_cpuset_text(cores)})"
                )
            cores = wanted
        if limits.cpu_cores is not None:
            if not limits.cpu_cores >= MIN_CPU_CORES:
                raise Unsupported(f"cpu_cores {limits.cpu_cores} is under {MIN_CPU_CORES}")
            if limits.cpu_cores > len(cores):
                raise Unsupported(
                    f"cpu_cores {limits.cpu_cores} is more than the {len(cores)} cores available"
                )
        if limits.memory_bytes is not None and limits.memory_bytes <= 0:
            raise Unsupported(f"memory_bytes {limits.memory_bytes} is not above 0")


def _check_v2(h: Hierarchy, name: str) -> None:
    if name not in (_read(h.base / "cgroup.controllers") or "").split():
        raise Unsupported(
            f"cgroup v2 controller {name} is not enabled for {h.base}: {_key(name)} cannot be set"
        )
    enabled = (_read(h.base / "cgroup.subtree_control") or "").split()
    # v2 refuses controllers under a cgroup that has processes of its own (but the root).
    if name not in enabled and h.base != h.mount and _read(h.base / "cgroup.procs"):
        raise Unsupported(
            f"cgroup v2: {h.base} has processes, so {name} cannot be enabled under it: "
            "run knee in a cgroup of its own (systemd-run --scope -p Delegate=yes)"
        )


def _key(controller: str) -> str:
    return {"cpu": "cpu_cores", "cpuset": "cpuset", "memory": "memory_bytes"}.get(
        controller, controller
    )


def _cpuset_text(cores: set[int]) -> str:
    return ",".join(map(str, sorted(cores)))


@dataclass
class Cgroup:
    """One cgroup of a run (a host's or a node's), in every hierarchy it needs."""

    parts: tuple[str, ...]
    paths: dict[str, Path]  # controller -> its directory
    versions: dict[str, int]  # controller -> 1 or 2
    limits: Limits
    _mounts: dict[str, Path] = field(default_factory=dict, repr=False)

    @property
    def procs_files(self) -> list[Path]:
        """The cgroup.procs of each hierarchy a process joins to be in this cgroup."""
        return [d / "cgroup.procs" for d in dict.fromkeys(self.paths.values())]

    def pids(self) -> list[int]:
        found: dict[int, None] = {}
        for path in dict.fromkeys(self.paths.values()):
            found.update(dict.fromkeys(cleanup.cgroup_pids(path)))
        return list(found)

    def cpu_usage_s(self) -> float | None:
        """CPU time used by every process that was ever in the cgroup, in seconds."""
        path = self.paths.get("cpuacct")
        if path is None:
            return None
        if self.versions["cpuacct"] == 1:
            text = _read(path / "cpuacct.usage")
            return int(text) / 1e9 if text else None
        for line in (_read(path / "cpu.stat") or "").splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        return None

    def quota_cores(self) -> float | None:
        """The CPU quota in force on this cgroup, in cores: the smallest of its own and its
        ancestors' (None: unlimited)."""
        path = self.paths.get("cpu")
        if path is None:
            return None
        return quota_cores_at(path, self._mounts["cpu"], self.versions["cpu"])

    def describe(self) -> dict[str, Any]:
        cpuset = self.paths.get("cpuset")
        cpus = None
        if cpuset is not None:
            name = (
                "cpuset.effective_cpus" if self.versions["cpuset"] == 1 else "cpuset.cpus.effective"
            )
            cpus = _read(cpuset / name)
        return {
            "versions": sorted(set(self.versions.values())),
            "paths": sorted({str(p) for p in self.paths.values()}),
            "limits": self.limits.as_dict(),
            "quota_cores": self.quota_cores(),
            "cpus": cpus,
        }

    def _apply(self) -> None:
        """Writes this cgroup's own limits."""
        lim = self.limits
        if lim.cpuset is not None:
            self._set("cpuset", "cpuset.cpus", lim.cpuset)
        if lim.cpu_cores is not None:
            period = cfs_period_us(lim.cpu_cores)
            quota = max(MIN_QUOTA_US, round(lim.cpu_cores * period))
            if self.versions["cpu"] == 1:
                self._set("cpu", "cpu.cfs_period_us", str(period))
                self._set("cpu", "cpu.cfs_quota_us", str(quota))
            else:
                self._set("cpu", "cpu.max", f"{quota} {period}")
        if lim.memory_bytes is not None:
            name = "memory.limit_in_bytes" if self.versions["memory"] == 1 else "memory.max"
            self._set("memory", name, str(lim.memory_bytes))

    def _set(self, controller: str, name: str, value: str) -> None:
        _write(self.paths[controller] / name, value)


class RunCgroups:
    """Every cgroup of one run, under ``knee-<run_id>`` in each hierarchy it uses."""

    def __init__(self, run_id: str, found: dict[str, Hierarchy] | None = None) -> None:
        self.run_id = cleanup.check_run_id(run_id)
        self.hierarchies = hierarchies() if found is None else found
        self.tops: list[Path] = []
        self._made: dict[tuple[str, ...], Cgroup] = {}

    def make(self, parts: Sequence[str], limits: Limits) -> Cgroup:
        """The cgroup ``knee-<run_id>/<parts...>`` with ``limits``, made in every hierarchy
        it or a cgroup above it (made before) needs. Make a node's cgroup under its
        host's: a process joins a leaf (v2 has no processes where it has children)."""
        parts = tuple(parts)
        if not parts or not all(PART_RE.match(p) for p in parts):
            raise HostError(f"cgroup {'/'.join(parts)!r}: names are letters, digits, _.-")
        needed = controllers_for(limits)
        for i in range(1, len(parts)):
            above = self._made.get(parts[:i])
            needed |= set(above.paths) if above else set()
        missing = needed - self.hierarchies.keys()
        if missing:
            name = sorted(missing)[0]
            raise Unsupported(
                f"cgroup controller {name} is not mounted: {_key(name)} cannot be set"
            )
        by_hierarchy: dict[Hierarchy, set[str]] = {}
        for name in needed:
            by_hierarchy.setdefault(self.hierarchies[name], set()).add(name)
        paths, versions, mounts = {}, {}, {}
        for h, names in by_hierarchy.items():
            path = self._ensure(h, names, parts)
            for name in names:
                paths[name], versions[name], mounts[name] = path, h.version, h.mount
        cgroup = Cgroup(parts, paths, versions, limits, mounts)
        cgroup._apply()
        self._made[parts] = cgroup
        return cgroup

    def _ensure(self, h: Hierarchy, names: set[str], parts: tuple[str, ...]) -> Path:
        top = h.base / f"knee-{self.run_id}"
        if top not in self.tops:
            cleanup.note(self.run_id, cgroups=[top])  # before it exists
            self.tops.append(top)
        levels = [top.joinpath(*parts[:i]) for i in range(len(parts) + 1)]
        # v2: a controller works in a cgroup only if every parent enables it for children.
        enable = " ".join(f"+{n}" for n in sorted(names & {"cpu", "cpuset", "memory"}))
        for parent, level in zip([h.base, *levels], levels, strict=False):
            if h.version == 2 and enable:
                self._enable(parent, enable)
            if level.is_dir():
                continue
            try:
                level.mkdir()
            except OSError as e:
                raise HostError(f"cgroup: cannot make {level}: {e.strerror}") from None
            if h.version == 1 and "cpuset" in h.controllers:
                # A v1 cpuset starts empty, and no process may join it until it has both.
                for name in ("cpuset.mems", "cpuset.cpus"):
                    _write(level / name, _read(parent / name) or "")
        return levels[-1]

    @staticmethod
    def _enable(parent: Path, enable: str) -> None:
        enabled = set((_read(parent / "cgroup.subtree_control") or "").split())
        if {e[1:] for e in enable.split()} <= enabled:
            return
        _write(parent / "cgroup.subtree_control", enable)

    def remove(self) -> list[str]:
        """Removes every cgroup of the run, children first; what it could not remove (a
        cgroup with processes left in it: they are neither moved nor killed here)."""
        problems: list[str] = []
        for top in list(self.tops):
            if cleanup.remove_cgroup_tree(top, problems):
                cleanup.forget(self.run_id, cgroups=[top])
                self.tops.remove(top)
        self._made.clear()
        return problems


def wrap(argv: list[str], cgroups: Sequence[Cgroup]) -> list[str]:
    """A command that joins ``cgroups`` (in order: a host's then its node's) then execs
    ``argv``: the pid stays the same, and nothing of argv runs outside the cgroups.

    Wrap a host's command, not the other way round: ``wrap(host.command(argv), ...)``.
    Inside `ip netns exec` /sys is mounted anew and /sys/fs/cgroup is empty."""
    files = [str(f) for c in cgroups for f in c.procs_files]
    if not files:
        return list(argv)
    return ["/bin/sh", "-c", JOIN_SCRIPT, "knee-join", *files, "--", *argv]
