"""The shapes the live page reads and serves: what the runner hands it (a recorder's
progress line, the monitor's rows), and the JSON of /state.json and of /metrics' data
(knee.live.state). They name the dicts that were built before: no key added or dropped.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict


class ProgressLine(TypedDict, total=False):
    """A recorder's progress line as the runner reads it (knee-node's "progress" event):
    the keys the page reads."""

    event: str
    t_s: float
    sent: int
    completed: int
    target_rate_per_s: float | None
    sent_rate_per_s: float | None
    rate_per_s: float | None
    p99_ns: float | None


class MonitorRow(TypedDict, total=False):
    """One row of knee.runner.sampling.sample (knee.monitor): a node's, the machine's or
    an emulated link's usage over the last interval."""

    t_s: float
    role: str
    node: str
    cpu_percent: float | None
    cpu_quota_cores: float | None
    bytes_rx: float
    bytes_tx: float


class NodeCounters(TypedDict):
    """What /metrics says of one node of a point (NodeLive.counters)."""

    node: str
    sent: int
    completed: int
    ok: int
    late: int
    held: int
    failures: dict[str, int]  # per reason
    buckets: NotRequired[list[int]]  # per BUCKETS_S bucket, then +Inf (not on the page)
    latency_sum_s: float
    in_flight: int


class Second(TypedDict):
    """The running point's row for one second."""

    t_s: float
    sent_per_s: float
    done_per_s: float
    target_per_s: float | None
    p50_ms: float | None
    p99_ms: float | None
    p99_so_far_ms: float | None
    in_flight: int
    backlog: int
    late: int
    held: int


class PointDone(TypedDict):
    """A finished point as the latency-against-load figure draws it."""

    index: int
    label: str
    series: str
    target_per_s: float | None
    sent_per_s: float | None
    done_per_s: float | None
    p50_ms: float | None
    p99_ms: float | None
    verdict: str


class MetricPoint(TypedDict):
    """A point's nodes as /metrics exposes them."""

    point: int
    series: str
    backlog: int
    nodes: list[NodeCounters]


class MetricsData(TypedDict):
    """LiveState.metric_nodes(): what /metrics is written from."""

    experiment: str
    points: list[MetricPoint]
    resources: dict[str, float]  # each resource's latest U
    buckets_s: list[float]


class ProbeShown(TypedDict):
    """One probe of a search's path as the page shows it."""

    point: int | None
    group: str | None
    rate_per_s: float | None
    phase: str | None
    verdict: str | None
    slo: str | None
    brackets: dict[str, list[float | None]]


class RateShown(TypedDict):
    """One answer (capacity, SLO capacity, knee): its rate, interval and state."""

    rate_per_s: float | None
    interval_per_s: list[float | None] | list[float] | None
    state: str | None


class GroupShown(TypedDict):
    label: str | None
    capacity: RateShown | None
    slo_capacity: RateShown | None
    knee: RateShown | None


class SearchShown(TypedDict):
    """A search's path and answers as the page shows them."""

    status: str | None
    probes: list[ProbeShown]
    answers: list[GroupShown]
    slo: str | None


class CurrentPoint(TypedDict):
    """The running point."""

    index: int
    label: str
    series: str
    target_per_s: float | None
    expected_requests: int | None
    seconds: list[Second]
    nodes: list[NodeCounters]
    failures: dict[str, int]
    backlog: int


class Usage(TypedDict):
    """A resource's U over the last HISTORY_S seconds."""

    t_s: list[float]
    u: list[float]


class Snapshot(TypedDict):
    """/state.json: the page's whole state."""

    experiment: str
    system: str
    kind: str
    status: str
    run_dir: str | None
    report: str | None
    n_points: int
    current: CurrentPoint | None
    points: list[PointDone]
    search: SearchShown | None
    resources: dict[str, Usage]
    busiest: str | None
    version: int
