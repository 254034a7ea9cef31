"""Waiting for a connection (docs/statistics.md, "Late sends: held and free").

Where each of a generator's `load.connections` carries one request at a time (http over
HTTP/1.1), a due request waits for a free connection; over HTTP/2 it waits for a free
stream. When the samples carry that wait per request (http's `held_ns`), it says which
requests were held (`waited`); else the in-flight count against the connections does. A
send late while every connection of its generator was busy waited for the target (*held*);
one late with a connection free was the generator's own doing: its CPU, or its pacing
(*free*).

In flight, per generator node, at an instant t: the requests sent at or before t whose end
is after t, counted with two binary searches over sorted send and end times (no loop per
request). The end of a request: its reply; for a timeout, its send plus the timeout; for a
drop that was sent and never answered (in flight when the generator stopped, or lost with
its connection), never (busy to the last: the generator gave up on it, the target did not
answer); for a failure without a reply (a connection closed under it), its send (unknown,
and not counted as the target's hold).
"""

from __future__ import annotations

import numpy as np

from knee.contract import HTTP_ARGS

#: http's reason for a request the generator still held (waiting, connecting or in flight)
#: when it stopped (docs/samples.md).
STOPPED_ARG = next(code for code, name in HTTP_ARGS.items() if name == "stopped")
#: An end that never came.
NEVER_NS = np.iinfo(np.int64).max


def end_ns(
    sent_ns: np.ndarray,
    received_ns: np.ndarray,
    timeout: np.ndarray,
    drop: np.ndarray,
    timeout_ms: float | None,
) -> np.ndarray:
    """When each sent request stopped holding its connection (module docstring); -1 where
    it was never sent."""
    timeout_ns = round(timeout_ms * 1e6) if timeout_ms is not None else 0
    unanswered = np.where(drop, NEVER_NS, sent_ns)
    ends = np.where(received_ns >= 0, received_ns, unanswered)
    ends = np.where(timeout & (received_ns < 0), sent_ns + timeout_ns, ends)
    return np.where(sent_ns >= 0, ends, -1)


def in_flight_at(at_ns: np.ndarray, sent_ns: np.ndarray, ends_ns: np.ndarray) -> np.ndarray:
    """Requests in flight (sent at or before, ended after) at each instant of `at_ns`, over
    the sent requests given (one generator's)."""
    sends = np.sort(sent_ns)
    ends = np.sort(ends_ns)
    return np.searchsorted(sends, at_ns, side="right") - np.searchsorted(ends, at_ns, side="right")


def held(
    nodes: np.ndarray,
    intended_ns: np.ndarray,
    sent_ns: np.ndarray,
    ends_ns: np.ndarray,
    connections: int,
) -> np.ndarray:
    """Per request: were `connections` or more of its generator's requests in flight at its
    intended time? Each generator node has its own connections (load.generators); warm-up
    requests hold connections too, so every row counts."""
    labels = np.asarray(nodes).astype(str)
    out = np.zeros(len(intended_ns), dtype=bool)
    for name in np.unique(labels):  # per generator, never per request
        mine = labels == name
        went = mine & (sent_ns >= 0)
        busy = in_flight_at(intended_ns[mine], sent_ns[went], ends_ns[went])
        out[mine] = busy >= connections
    return out


def waited(intended_ns: np.ndarray, sent_ns: np.ndarray, held_ns: np.ndarray) -> np.ndarray:
    """Per request, from the wait the generator recorded (http's `held_ns`: for a free
    HTTP/2 stream or HTTP/1.1 connection, from its intended time): was it late mostly for
    that, the wait at least half the time from its intended to its actual send? Right for
    HTTP/2, where a connection carries many requests and the in-flight count against
    `connections` (`held`) says nothing."""
    late_ns = np.where(sent_ns >= 0, sent_ns - intended_ns, 0)
    return (sent_ns >= 0) & (held_ns > 0) & (2 * held_ns >= late_ns)


def connecting(intended_ns: np.ndarray, sent_ns: np.ndarray, connect_ns: np.ndarray) -> np.ndarray:
    """Per request: was it late mostly for its connection to be made, the connect time (the
    target accepting it) at least half the time from its intended to its actual send?"""
    late_ns = np.where(sent_ns >= 0, sent_ns - intended_ns, 0)
    return (sent_ns >= 0) & (connect_ns > 0) & (2 * connect_ns >= late_ns)
