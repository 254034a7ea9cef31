"""Per-point statistics for summary.json and the printed table (docs/statistics.md).

Everything is computed from the samples with arrays, all recorders of the point pooled
(never averaged). Distributions cover the post-warm-up requests in send order (intended
time); replies completed inside the point's window count towards throughput whichever
request they answer (knee.stats.rates).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from knee import contract
from knee.contract import STATUSES as STATUS_NAMES
from knee.stats import checks
from knee.stats import connections as conns
from knee.stats.cache import cache_split
from knee.stats.distribution import distribution
from knee.stats.generators import generators
from knee.stats.groups import (
    DROP_CODE,
    OK_CODE,
    TIMEOUT_CODE,
    by_key,
    latency_pair,
    split_parts,
    status_counts,
    status_rates,
)
from knee.stats.rates import Requests, rates, schedule_window
from knee.stats.stability import stability
from knee.stats.summary import Distribution, GroupStats, PointStats, Rates, Waits
from knee.stats.tail import top1

#: The column of the wait each request had for a free HTTP/2 stream or HTTP/1.1 connection
#: (http's name for the record's `service_ns`, knee.contract.columns).
HELD_NS = "held_ns"


@dataclass(frozen=True)
class PointSettings:
    """What `point_stats` needs to know of how a point ran. `schedule` (load.schedule) and
    the offered rate feed the sender and Poisson checks, `late_ms` the late sends,
    `timeout_ms` the backlog at the schedule's end; without them those parts are n/a or
    unknown. `cache_hit_flag`, for a server with a result cache, adds `cache`: its hit
    ratio and the service time of hits and misses (knee.stats.cache). `queue_name` is what
    the system's `queue_ns` column holds (http: `connect_ns`), the key of its distribution.
    `connections`: the generators' connections each carry one request at a time (http), so
    a late send with all of them busy waited for the target (knee.stats.stability); None
    where a connection carries many (the reference systems' open loop). `system` names the
    samples' columns as `knee.results.samples_frame` did (None: the record's names); the
    summary's keys stay the record's (slices' `epoch` is its `detail_ns`)."""

    schedule: str | None = None
    target_rate_per_s: float | None = None
    late_ms: float | None = None
    timeout_ms: float | None = None
    cache_hit_flag: int | None = None
    queue_name: str = "queue_ns"
    connections: int | None = None
    system: str | None = None


def point_stats(samples: pd.DataFrame, settings: PointSettings = PointSettings()) -> PointStats:
    """Statistics of one point's samples (warm-up rows included and marked), as `settings`
    say the point ran."""
    schedule, target_rate_per_s = settings.schedule, settings.target_rate_per_s
    late_ms, timeout_ms, connections = settings.late_ms, settings.timeout_ms, settings.connections
    cache_hit_flag, queue_name, system = (
        settings.cache_hit_flag,
        settings.queue_name,
        settings.system,
    )
    names = contract.columns(system) if system else {}

    def field(name: str) -> str:
        """The column holding the record's field `name` in these samples."""
        return names.get(name, name)

    all_codes = np.asarray(
        pd.Categorical(samples["status"], categories=list(STATUS_NAMES)).codes
    ).astype(np.int64)
    warmup = samples["warmup"].to_numpy()

    def whole(name: str) -> np.ndarray:
        return samples[name].to_numpy()

    requests = Requests(
        intended_ns=whole("intended_ns"),
        sent_ns=whole("sent_ns"),
        received_ns=whole("received_ns"),
        ok=all_codes == OK_CODE,
        timeout=all_codes == TIMEOUT_CODE,
        post=~warmup,
        bytes_out=whole("bytes_out"),
        bytes_in=whole("bytes_in"),
    )
    if connections is not None:
        reason = samples[field("arg")].to_numpy()
        requests = waiting_for_connections(
            requests, samples, all_codes, timeout_ms, connections, reason
        )
    post_rows = np.flatnonzero(~warmup)
    order = post_rows[np.argsort(requests.intended_ns[post_rows], kind="stable")]

    def column(name: str) -> np.ndarray:
        return whole(name)[order]

    codes = all_codes[order]
    ok = codes == OK_CODE
    went = column("sent_ns") >= 0
    counts = status_counts(codes)
    intended = column("intended_ns")
    window = schedule_window(intended)

    def group_rates(mask: np.ndarray | None) -> Rates:
        return rates(requests, window, timeout_ms=timeout_ms, late_ms=late_ms, mask=mask)

    point_rates = group_rates(None)

    def ok_column(name: str) -> np.ndarray:
        return column(name)[ok]

    latency = ok_column("latency_ns")
    server = ok_column("server_ns")
    network = ok_column("network_ns")
    sorted_latency = np.sort(latency)
    # A system whose contract renames `service_ns` records another wait there (http: the
    # wait for a free stream or connection, `held_ns`): its service time is the server's.
    held_name = field("service_ns")
    service = ok_column("service_ns") if held_name == "service_ns" else np.maximum(server, 0)
    held: Waits = {} if held_name == "service_ns" else _held(held_name, ok_column(held_name))
    pair = latency_pair(latency, counts, sorted_latency)
    split = split_parts(server, network)
    entry: GroupStats = {
        "count": len(codes),
        "achieved_rate_per_s": point_rates["achieved_rate_per_s"],
        "throughput_per_s": point_rates["throughput_per_s"],
        "status_rates": status_rates(counts),
        **pair,
        **split,
    }
    cache = (
        cache_split(
            ok_column(field("flags")),
            service,
            intended[ok],
            hit_flag=cache_hit_flag,
        )
        if cache_hit_flag is not None
        else None
    )
    return {
        "count": len(codes),
        "statuses": counts,
        "status_rates": status_rates(counts),
        **point_rates,
        "warmup_count": int(np.count_nonzero(warmup)),
        **pair,
        **split,
        **_queue(queue_name, distribution(ok_column("queue_ns"))),
        "service_ns": distribution(service),
        "detail_ns": distribution(ok_column(field("detail_ns"))),
        **held,
        "stability": stability(
            intended_ok_ns=intended[ok],
            latency_ok_ns=latency,
            window_s=point_rates["window_s"],
            sent_in_window=point_rates["sent_in_window"],
            ok_in_window=point_rates["ok_in_window"],
            backlog=point_rates["backlog"],
            waiting=point_rates["backlog_waiting"],
            intended_sent_ns=intended[went],
            wait_ns=column("sent_ns")[went] - intended[went],
            late_ms=late_ms,
            connections=connections,
        ),
        "checks": [
            checks.sends_check(target_rate_per_s, point_rates, late_ms),
            checks.poisson_check(schedule, column("sent_ns")[column("sent_ns") >= 0]),
            checks.autocorrelation_check(latency),
            checks.support_check(len(latency)),
        ],
        "by_op": by_key(
            column("op"), whole("op"), codes, group_rates, latency, server, network, entry
        ),
        "by_service": by_key(
            column("service"), whole("service"), codes, group_rates, latency, server, network, entry
        ),
        "cache": cache,
        "generators": generators(whole("node"), group_rates, target_rate_per_s, late_ms),
        "top1": top1(
            latency,
            server,
            network,
            ok_column("sent_ns") - intended[ok],
            intended[ok],
            pair["latency_ok_ns"],
            sorted_latency,
        ),
    }


def _queue(name: str, dist: Distribution) -> Waits:
    """The queue's distribution under the key the system names it (PointSettings.queue_name)."""
    if name == "connect_ns":
        return {"connect_ns": dist}
    if name != "queue_ns":
        raise ValueError(f"a queue is named queue_ns or connect_ns, not {name!r}")
    return {"queue_ns": dist}


def _held(name: str, values: np.ndarray) -> Waits:
    """The wait for a free stream or connection, of a system whose `service_ns` holds it."""
    if name != HELD_NS:
        raise ValueError(f"a system's service_ns holds {HELD_NS} or nothing else, not {name!r}")
    return {"held_ns": distribution(values)}


def waiting_for_connections(
    requests: Requests,
    samples: pd.DataFrame,
    codes: np.ndarray,
    timeout_ms: float | None,
    connections: int,
    reason: np.ndarray,
) -> Requests:
    """`requests` with what one request per connection (http) tells: which requests waited,
    unsent, until the generator stopped (a drop with `reason` `stopped`: http's
    `fail_reason`, the record's `arg`), and which were due while every connection of their
    generator was busy, or were late mostly for the target to accept their connection
    (knee.stats.connections)."""
    ends_ns = conns.end_ns(
        requests.sent_ns,
        requests.received_ns,
        requests.timeout,
        codes == DROP_CODE,
        timeout_ms,
    )
    if HELD_NS in samples.columns:  # the wait per request, recorded (HTTP/1.1 and HTTP/2)
        waited = conns.waited(requests.intended_ns, requests.sent_ns, samples[HELD_NS].to_numpy())
    else:
        waited = conns.held(
            samples["node"].to_numpy(),
            requests.intended_ns,
            requests.sent_ns,
            ends_ns,
            connections,
        )
    held = waited | conns.connecting(
        requests.intended_ns, requests.sent_ns, samples["queue_ns"].to_numpy()
    )
    stopped = (codes == DROP_CODE) & (reason == conns.STOPPED_ARG)
    return replace(requests, stopped_unsent=stopped & (requests.sent_ns < 0), held=held)
