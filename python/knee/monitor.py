"""CPU and memory of each node process, and the host's CPU, sampled by the runner once per
interval.

Network bytes per node come from the nodes' own counters (their `stats`/`progress` lines):
on loopback every process shares one interface, so only the node knows its own bytes.

The host's CPU comes from /proc/stat, read right next to the processes. CPU busy on the
host that is neither a node of the run nor the runner is "foreign" (docs/statistics.md,
Interference):

    foreign = host busy - nodes - runner, clamped at 0   (100 = one core)

A node that exits between two samples is reaped by the runner, and the kernel then adds
its whole CPU time to the runner's children times: the part not yet seen in a sample (its
last slice) is counted as the nodes', not as foreign.

A process tree sampled as one node (`Monitor.add_tree`: the target of `knee http` on this
machine, a server and its workers, found by knee.hosts.listener) counts in "nodes" too:
the target is part of the experiment, not interference. It is not the runner's child, so a
worker of it that exits between two samples loses its last slice (at most one interval of
that worker's CPU), which then shows as foreign.

Beside each node's CPU, the time its threads spent runnable but waiting for a CPU: the
kernel's run_delay (the 2nd field of /proc/PID/task/TID/schedstat, ns; a throttled CPU
quota counts too), summed over its threads as `cpu_wait_percent` (100 = one thread waited
the whole interval). A thread that exits between two samples loses its last slice, as a
tree's worker does; without schedstat (a kernel without CONFIG_SCHED_INFO) it is None.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

#: The fields of /proc/stat's "cpu" line, in order (proc(5)).
PROC_STAT_FIELDS = (
    "user",
    "nice",
    "system",
    "idle",
    "iowait",
    "irq",
    "softirq",
    "steal",
    "guest",
    "guest_nice",
)
#: Busy time. Guest time is already inside user and nice, so it is not added again; iowait
#: is idle time with I/O pending, and steal is time the hypervisor ran someone else.
BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq")
#: The node and role of the host's rows in timeseries.parquet.
HOST_NODE = "host"
HOST_ROLE = "host"

PROC_STAT = Path("/proc/stat")
PROC = Path("/proc")


def parse_schedstat(text: str) -> int:
    """run_delay of a /proc/PID/schedstat line: `on_cpu_ns run_delay_ns timeslices`."""
    return int(text.split()[1])


def read_run_delay_ns(pid: int, proc: Path = PROC) -> dict[int, int] | None:
    """Each thread's run_delay (ns waiting on a run queue since it started), by thread id;
    None when the process is gone or the kernel keeps no schedstat."""
    tasks = proc / str(pid) / "task"
    out: dict[int, int] = {}
    try:
        tids = [int(t) for t in os.listdir(tasks) if t.isdigit()]
    except OSError:
        return None
    for tid in tids:
        try:
            out[tid] = parse_schedstat((tasks / str(tid) / "schedstat").read_text())
        except (OSError, ValueError, IndexError):
            continue  # exited since listed
    return out or None


def run_delay_since(seen: dict[int, int], now: dict[int, int] | None) -> float:
    """ns the threads waited for a CPU since `seen` (per thread); a thread not seen before
    counts from its start."""
    if not now:
        return 0.0
    return float(sum(max(0, ns - seen.get(tid, 0)) for tid, ns in now.items()))


def parse_proc_stat(text: str) -> dict[str, int]:
    """Ticks (USER_HZ) of the aggregate "cpu" line of /proc/stat, all cores summed. Fields
    an older kernel lacks are 0."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            ticks = [int(v) for v in parts[1:]]
            ticks += [0] * (len(PROC_STAT_FIELDS) - len(ticks))
            return dict(zip(PROC_STAT_FIELDS, ticks, strict=False))
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def read_host_ticks(path: Path = PROC_STAT) -> dict[str, int] | None:
    """/proc/stat's CPU ticks, or None where there is no /proc/stat (not Linux)."""
    try:
        return parse_proc_stat(path.read_text())
    except (OSError, ValueError):
        return None


def host_percent(
    before: dict[str, int], after: dict[str, int], wall_s: float, tick_s: float
) -> dict[str, float]:
    """The host's busy, steal, iowait and irq time between two readings, in core-percent
    (100 = one core busy for the whole interval)."""

    def pct(fields: tuple[str, ...]) -> float:
        ticks = sum(after[f] - before[f] for f in fields)
        return 100.0 * ticks * tick_s / wall_s

    return {
        "cpu_percent": pct(BUSY_FIELDS),
        "steal_percent": pct(("steal",)),
        "iowait_percent": pct(("iowait",)),
        "irq_percent": pct(("irq", "softirq")),
    }


def foreign_cpu_percent(
    host_busy_percent: float, nodes_cpu_percent: float, runner_cpu_percent: float
) -> float:
    """CPU of everything that is neither a node nor the runner. Clamped at 0: the host's
    ticks and the processes' ticks are counted separately and can differ by a tick or two."""
    return max(0.0, host_busy_percent - nodes_cpu_percent - runner_cpu_percent)


def _busy_s(times: Any) -> float:
    """User + system seconds of psutil's cpu_times (children's times apart)."""
    return float(times.user + times.system)


@dataclass
class _Tracked:
    name: str
    proc: psutil.Process
    seen_cpu_s: float = 0.0  # CPU seconds counted in samples so far
    seen_wait_ns: dict[int, int] = field(default_factory=dict)  # per thread: run_delay seen
    t: float = field(default_factory=time.monotonic)  # the last sample (or the start)
    waits: bool = True  # schedstat readable


@dataclass
class _Tree:
    """A process and its descendants, sampled as one node. Each sample finds the tree anew
    (a server restarts its workers: gunicorn's max_requests) and counts each process's CPU
    seconds since it was last seen, keyed by pid and start time; a process not seen before
    counts from its start (its times start at 0 when it forks)."""

    name: str
    root: psutil.Process
    seen_cpu_s: dict[psutil.Process, float]  # per process: CPU seconds counted so far
    t: float  # monotonic time of the last sample (or of the start)
    seen_wait_ns: dict[psutil.Process, dict[int, int]] = field(default_factory=dict)

    @staticmethod
    def start(name: str, root: psutil.Process) -> _Tree:
        tree = _Tree(name, root, {}, 0.0)
        tree.rebase()
        return tree

    def members(self) -> list[psutil.Process]:
        """The root and its descendants now; raises psutil.Error once the root is gone."""
        return [self.root, *self.root.children(recursive=True)]

    def rebase(self) -> None:
        """Counts from now: CPU spent so far is not the next sample's."""
        self.seen_cpu_s, self.seen_wait_ns = {}, {}
        self.t = time.monotonic()
        try:
            members = self.members()
        except psutil.Error:
            return
        for proc in members:
            try:
                self.seen_cpu_s[proc] = _busy_s(proc.cpu_times())
            except psutil.Error:
                continue  # gone: nothing more of it to count
            self.seen_wait_ns[proc] = read_run_delay_ns(proc.pid) or {}

    def sample(self, now: float) -> tuple[dict[str, float | None], float]:
        """The tree's row (cpu_percent since the last sample, rss_bytes and processes now)
        and the CPU seconds it spent since then. A process that exited between two samples
        is gone from the tree: its last slice is lost (at most one interval). RSS is summed,
        so pages the workers share with their master (copy-on-write) count once per process.
        `cpu_wait_percent`: its threads' run-queue delay, summed (module docstring).
        Raises psutil.Error once the root is gone."""
        seen: dict[psutil.Process, float] = {}
        seen_wait: dict[psutil.Process, dict[int, int]] = {}
        spent_s = rss = wait_ns = 0.0
        waits = True
        for proc in self.members():
            try:
                with proc.oneshot():
                    cpu_s = _busy_s(proc.cpu_times())
                    rss += float(proc.memory_info().rss)
            except psutil.Error:
                if proc is self.root:
                    raise
                continue  # exited since the tree was listed
            # psutil.Process compares pid and start time: a reused pid is a new process.
            spent_s += max(0.0, cpu_s - self.seen_cpu_s.get(proc, 0.0))
            seen[proc] = cpu_s
            delays = read_run_delay_ns(proc.pid)
            waits = waits and delays is not None
            wait_ns += run_delay_since(self.seen_wait_ns.get(proc, {}), delays)
            seen_wait[proc] = delays or {}
        wall_s, self.t, self.seen_cpu_s = now - self.t, now, seen
        self.seen_wait_ns = seen_wait
        cpu_percent = 100.0 * spent_s / wall_s if wall_s > 0 else 0.0
        row: dict[str, float | None] = {
            "cpu_percent": cpu_percent,
            "rss_bytes": rss,
            "processes": len(seen),
        }
        row["cpu_wait_percent"] = _wait_percent(wait_ns, wall_s) if waits else None
        return row, spent_s


def _wait_percent(wait_ns: float, wall_s: float) -> float:
    return 100.0 * wait_ns / 1e9 / wall_s if wall_s > 0 else 0.0


class Monitor:
    def __init__(self) -> None:
        self._procs: dict[int, _Tracked] = {}
        self._trees: dict[str, _Tree] = {}
        self._runner = psutil.Process()
        self._tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
        self.host: dict[str, float] | None = None  # the last sample's host row fields
        self.reset()

    def reset(self) -> None:
        """Starts the host's next interval now, e.g. at a point's start, so the time between
        points (statistics, stopping and starting nodes) is not charged to the next point."""
        # Nodes reaped before now are in the children times read below: forget them, or
        # their seen CPU would be subtracted again from the new interval's reaped nodes.
        for pid, node in list(self._procs.items()):
            if not node.proc.is_running():
                del self._procs[pid]
        for tree in self._trees.values():
            tree.rebase()  # long-lived, unlike nodes: its CPU between points is not counted
        self._host_ticks = read_host_ticks()
        self._host_t = time.monotonic()
        self._runner_s, self._children_s = self._runner_times()
        self._gone_seen_s = 0.0  # seen CPU of nodes reaped since the interval started

    def add(self, name: str, pid: int) -> None:
        try:
            proc = psutil.Process(pid)
            proc.cpu_percent(None)  # the first call only sets the reference point
            # seen_cpu_s stays 0: the node was started just now, so all its CPU time,
            # start-up included, falls in the current interval.
            self._procs[pid] = _Tracked(name, proc)
        except psutil.Error:
            pass

    def add_tree(self, name: str, root_pid: int) -> None:
        """Samples `root_pid` and its descendants, as they are at each sample, as one node
        `name` (a row like a node's, plus `processes`); from now on. Its CPU counts as the
        nodes' in the host's row, not as foreign. A root already gone is not added."""
        try:
            self._trees[name] = _Tree.start(name, psutil.Process(root_pid))
        except psutil.Error:
            pass

    def remove_tree(self, name: str) -> None:
        """Stops sampling the tree `name` (nothing when it is not sampled)."""
        self._trees.pop(name, None)

    def sample(self) -> dict[str, dict[str, float | None]]:
        """Per node and per tree (add_tree): CPU % since the previous sample (100 = one core
        busy) and resident memory. The host's row for the same interval is left in
        `self.host` (None without /proc/stat)."""
        host_ticks, now = read_host_ticks(), time.monotonic()
        out: dict[str, dict[str, float | None]] = {}
        nodes_s = 0.0
        for pid, node in list(self._procs.items()):
            try:
                with node.proc.oneshot():
                    cpu_percent = node.proc.cpu_percent(None)
                    cpu_s = _busy_s(node.proc.cpu_times())
                    rss = float(node.proc.memory_info().rss)
            except psutil.Error:
                self._gone_seen_s += node.seen_cpu_s
                del self._procs[pid]
                continue
            nodes_s += cpu_s - node.seen_cpu_s
            node.seen_cpu_s = cpu_s
            out[node.name] = {"cpu_percent": cpu_percent, "rss_bytes": rss}
            out[node.name]["cpu_wait_percent"] = self._node_wait(node, now)
        processes = len(out)
        for name, tree in list(self._trees.items()):
            try:
                out[name], spent_s = tree.sample(now)
            except psutil.Error:
                del self._trees[name]  # the root is gone: the tree with it
                continue
            nodes_s += spent_s
            processes += int(out[name]["processes"] or 0)

        self.host = self._host_row(host_ticks, now, nodes_s)
        if self.host is not None:
            # The host, the runner and each process are counted in whole ticks: the foreign
            # figure of this interval may be off by one tick of each.
            ticks = processes + 2
            self.host["tick_error_percent"] = 100.0 * self._tick_s * ticks / self.host["interval_s"]
        return out

    @staticmethod
    def _node_wait(node: _Tracked, now: float) -> float | None:
        """The node's run-queue delay since its last sample, in core-percent."""
        delays = read_run_delay_ns(node.proc.pid)
        wall_s, node.t = now - node.t, now
        if delays is None or not node.waits:
            node.waits = False
            return None
        wait_ns = run_delay_since(node.seen_wait_ns, delays)
        node.seen_wait_ns = delays
        return _wait_percent(wait_ns, wall_s)

    def _runner_times(self) -> tuple[float, float]:
        """The runner's own CPU seconds (every thread) and its reaped children's."""
        t = self._runner.cpu_times()
        return float(t.user + t.system), float(t.children_user + t.children_system)

    def _host_row(
        self, host_ticks: dict[str, int] | None, now: float, nodes_s: float
    ) -> dict[str, float] | None:
        runner_s, children_s = self._runner_times()
        before, wall_s = self._host_ticks, now - self._host_t
        # Reaped nodes' last slices: their lifetime CPU, now in the children times, less
        # what the samples already counted.
        last_slices_s = max(0.0, children_s - self._children_s - self._gone_seen_s)
        own_s = runner_s - self._runner_s
        self._host_ticks, self._host_t = host_ticks, now
        self._runner_s, self._children_s, self._gone_seen_s = runner_s, children_s, 0.0
        if before is None or host_ticks is None or wall_s <= 0:
            return None
        row = host_percent(before, host_ticks, wall_s, self._tick_s)
        nodes_percent = 100.0 * (nodes_s + last_slices_s) / wall_s
        runner_percent = 100.0 * own_s / wall_s
        row["nodes_cpu_percent"] = nodes_percent
        row["runner_cpu_percent"] = runner_percent
        row["foreign_cpu_percent"] = foreign_cpu_percent(
            row["cpu_percent"], nodes_percent, runner_percent
        )
        row["interval_s"] = wall_s
        return row
