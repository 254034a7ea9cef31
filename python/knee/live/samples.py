"""A recorder's samples file read as it grows: the counts and the latency histogram of every
record flushed so far (knee-node flushes its samples before each progress line).

The runner reads these files already (at each point's end, and `knee find`'s early watch
during a probe); the live page reads only the bytes added since its last look, vectorized,
and keeps counts, never the records: its memory does not grow with the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from knee import contract
from knee.results import SAMPLE_DTYPE

#: The classic buckets of the latency histogram, upper bounds in seconds (1-2.5-5 per
#: decade from 100 us to 10 s, then 30 s and 60 s: timeouts are seconds). Prometheus adds
#: +Inf. Fixed, so every point's and node's histogram can be summed.
BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
_BOUNDS_NS = np.array([round(b * 1e9) for b in BUCKETS_S], dtype=np.int64)
#: Records read per look at most (96 B each: 19 MB): a burst is read over several looks,
#: so one look never holds more than this in memory.
MAX_RECORDS_PER_LOOK = 200_000
STATUS_OK = contract.STATUSES.index("ok")
_NONE = np.zeros(0, dtype=np.int64)


def failure_names(system: str) -> dict[int, str] | None:
    """A system's failure reasons by code (`fail_reason` of http and grpc: "connect",
    "status_5xx", ...), or None when its samples carry only their status."""
    described = contract.SYSTEMS.get(system) or {}
    columns = described.get("columns") or {}
    if (columns.get("arg") or {}).get("name") != "fail_reason":
        return None
    return {int(code): name for name, code in (described.get("args") or {}).items()}


def has_held(system: str) -> bool:
    """Whether the system's samples say how long a send was held (HTTP/2's streams)."""
    columns = (contract.SYSTEMS.get(system) or {}).get("columns") or {}
    return (columns.get("service_ns") or {}).get("name") == "held_ns"


@dataclass
class Tail:
    """One recorder's samples file and what its records said so far."""

    path: Path
    late_ns: int  # a send further than this behind its intended time is late
    reasons: dict[int, str] | None  # failure reasons by code, else the status names
    held: bool  # the records' service_ns is the time held waiting for a stream
    offset: int = 0  # bytes read
    records: int = 0  # completed: every record is a request over
    sent: int = 0
    ok: int = 0
    late: int = 0
    held_sends: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    buckets: np.ndarray = field(default_factory=lambda: np.zeros(len(BUCKETS_S) + 1, np.int64))
    latency_sum_ns: int = 0  # of the OK replies, for the histogram's _sum

    def look(self) -> np.ndarray:
        """Reads the whole records added since the last look (at most
        MAX_RECORDS_PER_LOOK; a file not there yet has none); returns their OK latencies
        (ns), the window the page's moving p50 and p99 are of."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return _NONE
        count = min((size - self.offset) // SAMPLE_DTYPE.itemsize, MAX_RECORDS_PER_LOOK)
        if count <= 0:
            return _NONE
        records = np.fromfile(self.path, dtype=SAMPLE_DTYPE, count=count, offset=self.offset)
        self.offset += count * SAMPLE_DTYPE.itemsize
        return self._add(records)

    def _add(self, records: np.ndarray) -> np.ndarray:
        intended = records["intended_ns"].astype(np.int64)
        sent_ns = records["sent_ns"].astype(np.int64)
        received = records["received_ns"].astype(np.int64)
        status = records["status"]
        was_sent = sent_ns > 0
        ok = (status == STATUS_OK) & (received > 0)
        self.records += len(records)
        self.sent += int(was_sent.sum())
        self.ok += int(ok.sum())
        self.late += int((was_sent & (sent_ns - intended > self.late_ns)).sum())
        if self.held:
            self.held_sends += int((records["service_ns"] > 0).sum())
        failed = ~ok
        if failed.any():
            # A failure's reason where the system records one (http, grpc), else its status.
            reason = records["arg"] if self.reasons is not None else np.zeros(len(records))
            by_reason = failed & (reason > 0)
            names = self.reasons or {}
            codes, counts = np.unique(records["arg"][by_reason], return_counts=True)
            for code, n in zip(codes.tolist(), counts.tolist(), strict=True):
                self._fail(names.get(code, f"reason {code}"), n)
            codes, counts = np.unique(status[failed & ~by_reason], return_counts=True)
            for code, n in zip(codes.tolist(), counts.tolist(), strict=True):
                self._fail(contract.STATUSES[code], n)
        latency = received[ok] - intended[ok]
        self.buckets += np.bincount(
            np.searchsorted(_BOUNDS_NS, latency, side="left"), minlength=len(BUCKETS_S) + 1
        )
        self.latency_sum_ns += int(latency.sum())
        return latency

    def drain(self) -> None:
        """Reads the file to its end (the point is over: its last records are flushed)."""
        while len(self.look()) or self._unread():
            pass

    def _unread(self) -> bool:
        try:
            left = self.path.stat().st_size - self.offset
        except FileNotFoundError:
            return False
        return left >= SAMPLE_DTYPE.itemsize

    def _fail(self, reason: str, n: int) -> None:
        self.failures[reason] = self.failures.get(reason, 0) + n
