"""Rates from what happened (docs/statistics.md, "Rates"): the send rate from actual sends,
throughput from replies completed inside the point's window, the replies that drained a
backlog after it, and the requests still in flight when it closed.

The *window* of a point is the span its post-warm-up schedule covers: from the first
post-warm-up intended send time t_a to t_b = t_a + (max - min) n / (n - 1) of the n intended
times (n requests at rate r give n / r). A reply completes in the window when it was
received in [t_a, t_b], whichever request it answers (a warm-up request's reply received
after t_a counts, just as a reply after t_b does not): the server's output during the
window, which equals the arrival rate only when the server keeps up.

The *backlog* at the window's end is every post-warm-up request meant to leave by then and
not over: in flight (sent, its reply or timeout still to come), or still waiting to be sent
(sent after the window's end, or never: still queued when the generator stopped). Where a
connection carries one request at a time (http), overload shows up as the waiting kind: the
target holds every connection and due requests queue in the generator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from knee.stats.intervals import poisson_count_ci
from knee.stats.summary import LateSends, Rates, Sends


@dataclass(frozen=True)
class Window:
    start_ns: int
    end_ns: int
    length_s: float


def span_s(times_ns: np.ndarray) -> float:
    """The span n events cover, corrected for the gap after the last one:
    (max - min) * n / (n - 1), so n events at rate r give n / r; 0 below two events."""
    n = len(times_ns)
    if n < 2:
        return 0.0
    return float(times_ns.max() - times_ns.min()) / 1e9 * n / (n - 1)


def schedule_window(intended_ns: np.ndarray) -> Window | None:
    """The window of a point's post-warm-up intended send times; None below two."""
    length_s = span_s(intended_ns)
    if length_s <= 0:
        return None
    start = int(intended_ns.min())
    return Window(start, start + round(length_s * 1e9), length_s)


def per_s(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


@dataclass(frozen=True)
class Requests:
    """Columns of every request of a point, warm-up included (times in ns since the run's
    start, -1 where the event did not happen)."""

    intended_ns: np.ndarray
    sent_ns: np.ndarray
    received_ns: np.ndarray
    ok: np.ndarray
    timeout: np.ndarray
    post: np.ndarray  # after warm-up
    bytes_out: np.ndarray
    bytes_in: np.ndarray
    #: Never sent because the generator stopped while it waited (http: a drop with reason
    #: `stopped`); None where no request waits unsent (every unsent one was shed at once).
    stopped_unsent: np.ndarray | None = None
    #: Were all its generator's connections busy at its intended time (knee.stats.connections)?
    #: None where a connection carries many requests.
    held: np.ndarray | None = None


def rates(
    r: Requests,
    window: Window | None,
    *,
    timeout_ms: float | None,
    late_ms: float | None,
    mask: np.ndarray | None = None,
) -> Rates:
    """Send rate, late sends, throughput, byte rates, drain and backlog of the requests in
    `mask` (all when None). The window is the whole point's, also for a subset."""
    mine = np.ones(len(r.intended_ns), dtype=bool) if mask is None else mask
    post = mine & r.post
    sent = post & (r.sent_ns >= 0)
    sent_times = r.sent_ns[sent]
    sent_count = len(sent_times)
    send_window_s = span_s(sent_times)
    achieved = per_s(sent_count, send_window_s)
    rate_ci = (
        [bound / send_window_s for bound in poisson_count_ci(sent_count)]
        if send_window_s > 0
        else None
    )
    # What the schedule itself made due after warm-up (sent or not), over the span of its
    # intended times: a random (Poisson) schedule's own draw, against which the sends are
    # judged (knee.stats.checks.sender_check).
    intended = r.intended_ns[post]
    bytes_out_per_s = per_s(float(r.bytes_out[sent].sum()), send_window_s)
    sends: Sends = {
        "sent": sent_count,
        "send_window_s": send_window_s,
        "scheduled_rate_per_s": per_s(len(intended), span_s(intended)),
        "achieved_rate_per_s": achieved,
        "achieved_rate_ci_per_s": rate_ci,
        **late_sends(r, sent, late_ms),
        "bytes_out_per_s": bytes_out_per_s,
    }
    if window is None:
        return {
            **sends,
            "window_s": 0.0,
            "throughput_per_s": 0.0,
            "completion_rate_per_s": 0.0,
            "bytes_in_per_s": 0.0,
            "throughput_bytes_per_s": bytes_out_per_s,
            "ok_in_window": 0,
            "sent_in_window": 0,
            "drain": {"replies": 0, "ok": 0, "until_s": None},
            "backlog": 0,
            "backlog_waiting": 0,
        }
    answered = mine & (r.received_ns >= 0)
    inside = answered & (r.received_ns >= window.start_ns) & (r.received_ns <= window.end_ns)
    ok_inside = inside & r.ok
    after = post & answered & (r.received_ns > window.end_ns)
    bytes_in = float(r.bytes_in[inside].sum())
    in_flight = backlog(r, window.end_ns, timeout_ms, sent)
    waiting = waiting_to_send(r, window.end_ns, post)
    return {
        **sends,
        "window_s": window.length_s,
        "throughput_per_s": per_s(int(ok_inside.sum()), window.length_s),
        "completion_rate_per_s": per_s(int(inside.sum()), window.length_s),
        "bytes_in_per_s": per_s(bytes_in, window.length_s),
        "throughput_bytes_per_s": bytes_out_per_s + per_s(bytes_in, window.length_s),
        "ok_in_window": int(ok_inside.sum()),
        "sent_in_window": int(np.count_nonzero(sent & (r.sent_ns <= window.end_ns))),
        "drain": {
            "replies": int(after.sum()),
            "ok": int((after & r.ok).sum()),
            "until_s": (
                float(r.received_ns[after].max() - window.end_ns) / 1e9 if after.any() else None
            ),
        },
        "backlog": in_flight + waiting,
        "backlog_waiting": waiting,
    }


def late_sends(r: Requests, sent: np.ndarray, late_ms: float | None) -> LateSends:
    """Sends later than `late_ms` after their intended time, and (with `r.held`) how many of
    them waited for a connection the target held and how many did not."""
    if late_ms is None:
        return {
            "late_sends": None,
            "late_send_share": None,
            "late_sends_held": None,
            "late_sends_free": None,
            "late_send_held_share": None,
            "late_send_free_share": None,
        }
    late = sent & (r.sent_ns - r.intended_ns > late_ms * 1e6)
    count = int(np.count_nonzero(late))
    n = int(np.count_nonzero(sent))

    def share(k: int | None) -> float | None:
        return None if k is None or not n else k / n

    held = int(np.count_nonzero(late & r.held)) if r.held is not None else None
    free = count - held if held is not None else None
    return {
        "late_sends": count,
        "late_send_share": share(count),
        "late_sends_held": held,
        "late_sends_free": free,
        "late_send_held_share": share(held),
        "late_send_free_share": share(free),
    }


def backlog(r: Requests, at_ns: int, timeout_ms: float | None, sent: np.ndarray) -> int:
    """Requests sent by `at_ns` and not yet over by then: their reply came later, or they
    timed out later (a timeout is over at send + timeout). A request lost with its
    connection has no known end and is not counted."""
    by_then = sent & (r.sent_ns <= at_ns)
    replied_later = r.received_ns > at_ns
    timed_out_later = (
        r.timeout & (r.sent_ns + timeout_ms * 1e6 > at_ns) if timeout_ms is not None else False
    )
    return int(np.count_nonzero(by_then & (replied_later | timed_out_later)))


def waiting_to_send(r: Requests, at_ns: int, post: np.ndarray) -> int:
    """Requests meant to leave by `at_ns` and not sent by then: sent after it, or never
    (still waiting when the generator stopped, `r.stopped_unsent`). A request shed at its
    intended time (over max_outstanding) is over, not waiting."""
    due = post & (r.intended_ns <= at_ns)
    sent_after = r.sent_ns > at_ns
    never = (r.sent_ns < 0) & r.stopped_unsent if r.stopped_unsent is not None else False
    return int(np.count_nonzero(due & (sent_after | never)))
