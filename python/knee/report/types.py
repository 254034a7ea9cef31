"""The shapes the report reads that knee.stats.summary does not name: the models' fit
(knee.models.analyze), a search's find.json and summary.json's answers document, a
bottleneck (knee.resources.bottleneck.explain) and the summary.json points themselves as
loaded. They describe what those modules write (JSON read back, not checked): they add no
key and drop none. A point's statistics and a group's answers are knee.stats.summary's.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from knee.stats.summary import Distribution, GroupAnswers, PointStats, Resource

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


class CurvePoint(TypedDict):
    """One prediction of a model's curve."""

    x: float
    mean_ns: float
    p50_ns: float | None
    p99_ns: float | None


class ModelPoint(TypedDict):
    """A measured point against a model (analyze._compare)."""

    point: int
    x: float
    target_x: float | None
    stable: bool
    measured_mean_ns: float
    measured_ci: list[float] | None
    predicted_mean_ns: float | None
    predicted_p99_ns: float | None
    flag: bool
    detail: str


class Model(TypedDict):
    """One model of one group of a series (analyze._model_entry)."""

    kind: str  # "M/M/1", "M/G/1", "M/D/1", "M/M/c", "MVA"
    servers: int
    servers_source: str  # "declared", "estimated", "assumed"
    label: str
    primary: bool
    reference: bool
    limited_by: str | None  # "cores"
    group: dict[str, Any]  # the swept settings of its group (values as swept: any JSON)
    service_mean_ns: float
    service_cs2: float
    delay_ns: float
    fit_points: list[int]
    capacity_per_s: float
    capacity_ci_per_s: list[float] | None
    knee_x: float
    knee_ci_x: list[float] | None
    curve: list[CurvePoint]
    points: list[ModelPoint]


class MeasuredKnee(TypedDict):
    """knee.models.measured.measured_knee: the load of highest power of a group."""

    x: float
    point: int
    target_x: float | None
    power_per_s2: float
    power_ci_per_s2: list[float | None]
    interval_x: list[float]
    interval_points: list[int]
    edge: str | None  # "highest", "lowest"
    excluded_unstable: list[int]


class ModelGroup(TypedDict):
    """One group of a series' points (same settings, same thread count)."""

    group: dict[str, Any]  # its swept settings (values as swept: any JSON)
    servers: int
    servers_source: str
    servers_estimate: dict[str, float | int | str | list[float] | None]
    primary: str | None
    fits: bool | None
    fit: dict[str, Any] | None  # knee.models.fit.Fit.to_json
    fit_points: list[int]
    unstable_points: list[int]
    measured_knee: MeasuredKnee | None


class SeriesModels(TypedDict):
    """One series' entry of knee.models.analyze.analyze."""

    series: str
    x: str  # "rate_per_s" or "clients"
    cores: int | None
    models: list[Model]
    groups: list[ModelGroup]
    primary: str  # the kind of most groups' primary model
    note: str


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


class RunAnswersDoc(TypedDict, total=False):
    """summary.json's `find` (a search's, knee.find.run.Finder.answers) or `answers` (a
    sweep's: its slo and groups only)."""

    slo: str | None
    tolerance: float
    budget_s: float | None
    elapsed_s: float
    probe_s: float
    skipped_series: list[str]
    error: str | None
    groups: list[GroupAnswers]


class FindDoc(TypedDict, total=False):
    """find.json as knee.find.run writes it after each probe."""

    version: int
    status: str  # "running", "complete", "failed"
    probes: list[Probe]
    error: str
    answers: RunAnswersDoc


# ------------------------------------------------------------------ a bottleneck


class NamedResource(Resource, total=False):
    """A ranked resource as knee.resources.bottleneck names it (`_named`): some of its
    entry's keys (kind, label, u, u_ci, d_ns, bound_per_s, bound_ci_per_s, capacity,
    capacity_unit, threads), and its name among the point's resources."""

    resource: str


class RankedAt(TypedDict):
    """The resources of one point in the order of their demand."""

    point: int
    rate_per_s: float | None
    ranked: list[str]


class GeneratorShare(TypedDict, total=False):
    """knee.resources.bottleneck.generator: the load generator's own share at a point."""

    cpu_percent: float | None
    cpu_wait_percent: float | None
    late_send_share: float | None
    connections_u: float | None
    all_connections_busy_share: float | None


class Shedding(TypedDict):
    """knee.resources.shedding.shedding: how the target refused work over its capacity."""

    from_rate_per_s: float
    failed_share: list[float]
    statuses: dict[str, int]
    shed_share_of_failures: float
    served_p50_ms: float | None
    points: list[int]


class Bottleneck(TypedDict, total=False):
    """knee.resources.bottleneck.explain: one load curve's bottleneck."""

    at_point: int
    at_rate_per_s: float | None
    bottleneck: NamedResource
    next: NamedResource | None
    measured_per_s: list[float | None]
    agreement: str | None  # "agrees", "below", "above", "unclear"
    bound_ratio: float | None
    unseen: bool
    sheds: Shedding | None
    generator: GeneratorShare
    per_point: list[RankedAt]
    doubling_gain: float
    sentence: str


def bottleneck_read(raw: Any) -> Bottleneck | None:
    """A bottleneck as knee.resources.bottleneck.explain builds it (summary.json's, or
    computed at report time)."""
    return raw


# ------------------------------------------------------------------ the slowest 1%


class Top1Part(TypedDict):
    """What the top 1% (or the rest) of a point's OK latency is made of
    (knee.stats.tail._made_of): shares of its summed latency, and its mean."""

    server_share: float | None
    network_share: float | None
    late_share: float | None
    mean_ns: float | None


class Clustering(TypedDict):
    """knee.stats.tail.clustering: whether the top 1% bunch up in time."""

    index_of_dispersion: float
    longest_run: int
    verdict: str  # "clustered", "scattered"
    detail: str


Top1 = TypedDict(
    "Top1",
    {
        "threshold_ns": "float | None",
        "count": int,
        "with": Distribution,
        "without": Distribution,
        "top": Top1Part,
        "rest": Top1Part,
        "clustering": Clustering,
    },
)
Top1.__doc__ = """knee.stats.tail.top1: a point's slowest 1% of OK requests against the rest
(summary.json's points[].top1)."""


# ------------------------------------------------------------------ http


class HttpDone(TypedDict, total=False):
    """A point's `http` in summary.json (knee.analysis.http.done_fields): the generators'
    `done` fields, the counters summed."""

    protocol: str  # "h2", "http/1.1", "mixed"
    server_max_streams: int | None
    max_streams_in_use: int
    connections_opened: int | None
    connect_failures: int | None
    streams_limit_total: int | None
    goaways: int | None
    resets_received: int | None
    refused_resent: int | None


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
