"""CPU and memory of each node process, sampled by the runner once per interval.

Network bytes per node come from the nodes' own counters (their `stats`/`progress` lines):
on loopback every process shares one interface, so only the node knows its own bytes.
"""

from __future__ import annotations

import psutil


class Monitor:
    def __init__(self) -> None:
        self._procs: dict[str, psutil.Process] = {}

    def add(self, name: str, pid: int) -> None:
        try:
            proc = psutil.Process(pid)
            proc.cpu_percent(None)  # the first call only sets the reference point
            self._procs[name] = proc
        except psutil.Error:
            pass

    def sample(self) -> dict[str, dict[str, float]]:
        """CPU % since the previous sample (100 = one core busy) and resident memory."""
        out: dict[str, dict[str, float]] = {}
        for name, proc in list(self._procs.items()):
            try:
                with proc.oneshot():
                    out[name] = {
                        "cpu_percent": proc.cpu_percent(None),
                        "rss_bytes": float(proc.memory_info().rss),
                    }
            except psutil.Error:
                self._procs.pop(name, None)
        return out
