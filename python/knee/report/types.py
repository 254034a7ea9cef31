"""The shapes the report reads that its producers do not name: a search's find.json,
summary.json's answers document, env.json's hosts, a spec's series, and the typed views of
JSON read back (`points_read`, `models_read`, `bottleneck_read`: what those modules wrote,
not checked). A point's statistics, a group's answers and a bottleneck are
knee.stats.summary's; the models' fit is knee.models.types'.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from knee.models.types import SeriesModels
from knee.stats.summary import Bottleneck, PointStats, RunAnswers

#: A point's distributions of durations (knee.stats.summary.PointStats' Distribution keys).
DistName = Literal[
    "latency_ns",
    "latency_ok_ns",
    "server_ns",
    "network_ns",
    "queue_ns",
    "connect_ns",
    "service_ns",
    "detail_ns",
    "held_ns",
]
#: A statistic of a Distribution that has a value and (but max) an interval.
StatName = Literal["mean", "std", "p50", "p90", "p99", "p999", "max"]


def points_read(raw: list[Any]) -> list[PointStats]:
    """summary.json's points (or a list of them from elsewhere) as the statistics they are:
    written by knee.stats.point_stats and the runner, read back as JSON."""
    return raw


# ------------------------------------------------------------------ knee.models.analyze


def models_read(raw: list[Any]) -> list[SeriesModels]:
    """knee.models.analyze.analyze's entries, as that module builds them."""
    return raw


# ------------------------------------------------------------------ a search (knee.find)


class ProbeDecision(TypedDict, total=False):
    """knee.stats.decision.Decision.to_json."""

    capacity: str  # "stable", "unstable", "undecided"
    limit: str | None
    slo: str | None
    reason: str


class Probe(TypedDict, total=False):
    """One probe of find.json's path (knee.find.search.Probe.to_json, with its group)."""

    group: str
    point: int
    rate_per_s: float
    duration_s: float
    phase: str
    decision: ProbeDecision
    sent_per_s: float | None
    throughput_per_s: float | None
    cut_short: str | None
    stopped_early: str | None
    samples: int | None
    window_s: float | None
    wall_s: float
    brackets: dict[str, list[float | None]]


class FindDoc(TypedDict, total=False):
    """find.json as knee.find.run writes it after each probe."""

    version: int
    status: str  # "running", "complete", "failed"
    probes: list[Probe]
    error: str
    answers: RunAnswers


# ------------------------------------------------------------------ a bottleneck


def bottleneck_read(raw: Any) -> Bottleneck | None:
    """A bottleneck as knee.resources.bottleneck.explain builds it (summary.json's, or
    computed at report time)."""
    return raw


# ------------------------------------------------------------------ the slowest 1%


# ------------------------------------------------------------------ chat's checker


class Unavailability(TypedDict):
    """knee.analysis.chat_checker.distribution: the gaps from each replica failure to the
    next successful reply (the percentiles only when one followed)."""

    count: int
    unanswered: int
    p50_ms: NotRequired[float]
    p90_ms: NotRequired[float]
    max_ms: NotRequired[float]


class ChatCheck(TypedDict):
    """A chat point's `check` (knee.analysis.chat_checker.check_point) that read the
    database: the integrity counts beside the failures and the unavailability."""

    name: str
    database: str  # "postgres", "sqlite"
    failures: dict[str, int]  # per kind of failure (kill, stop, freeze)
    unavailability: Unavailability
    unavailability_each_ms: list[float | None]
    acknowledged_writes: int
    applied_writes: int
    lost: int
    applied_twice: int
    verdict: str  # "PASS", "FAIL"
    detail: str


# ------------------------------------------------------------------ what ran (env.json, spec)


class Limits(TypedDict, total=False):
    """A host's or a node's resource limits (knee.hosts: Limits.as_dict)."""

    cpu_cores: float | None
    cpuset: str | None
    memory_bytes: int | None


class HostEnv(TypedDict, total=False):
    """One host of env.json's `hosts` (knee.hosts: a host's describe()): the keys the
    report reads."""

    name: str
    kind: str  # "local", "netns", "docker", "ssh"
    address: str | None
    limits: Limits
    rate_mbit: float | None
    loss_percent: float | None
    delay_ms: float | None
    clock_offset_ns: float | None
    clock_uncertainty_ns: float | None


class HostsEnv(TypedDict, total=False):
    """env.json's `hosts` (knee.hosts.Hosts.describe)."""

    run_id: str
    hosts: list[HostEnv]
    placement: dict[str, str]  # node group -> host
    node_limits: dict[str, Limits]  # node group -> its own limits


class SeriesSpec(TypedDict, total=False):
    """One `[series.<name>]` of a spec: the keys the report reads."""

    description: str
    placement: dict[str, str]
