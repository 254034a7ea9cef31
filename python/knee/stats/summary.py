"""The shapes of one point's statistics as summary.json holds them (docs/statistics.md):
TypedDicts, so that the type checker reads every key the code takes from them. They add
no key and drop none: each is the dict that was written before, named.

`PointStats` is total=False: a key a system, a run or a search does not produce is absent
(the runner adds its keys after `knee.stats.point_stats`, `knee find` adds its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NotRequired, TypedDict

from knee.config_values import ConfigTable

#: The key and role of the machine's shared cores among a point's `resources`
#: (knee.resources.usage).
MACHINE = "machine"


class Percentiles(TypedDict):
    """A distribution's percentiles (knee.stats.distribution.QUANTILES)."""

    p50: float | None
    p90: float | None
    p99: float | None
    p999: float | None


class Distribution(Percentiles):
    """`knee.stats.distribution.distribution`: one set of durations (ns)."""

    n: int
    mean: float | None
    std: float | None
    max: float | None
    #: per statistic: [lo, hi], None when too few; a headline's hi is None past the successes
    ci: dict[str, Sequence[float | None] | None]
    supported: dict[str, bool]  # per percentile
    #: A headline distribution (every request, failures ranked above every success):
    failures: NotRequired[int]
    failed: NotRequired[dict[str, str]]  # per percentile landing on one: "timeout"/"failed"


class Check(TypedDict):
    """One of `knee.stats.checks`: a named check and its verdict."""

    name: str
    verdict: str  # "pass", "warn", "fail", "n/a"
    value: float | None
    detail: str
    limit: NotRequired[str | None]  # the sender check: "generator" or "target"


class Stability(TypedDict):
    """`knee.stats.stability.stability`: is the system keeping up at this point?"""

    verdict: str  # "stable", "unstable", "n/a"
    reasons: list[str]
    detail: str
    trend_ns_per_s: float | None
    trend_p: float | None
    growth_ns: float | None
    backlog: int
    backlog_waiting: int
    wait_trend_ns_per_s: float | None
    wait_trend_p: float | None
    wait_growth_ns: float | None
    sent_in_window: int
    ok_in_window: int
    ok_share: float | None
    queueing: bool  # a sign of a queue (latency, backlog or wait growing), not only failures


class SloVerdict(TypedDict):
    """`knee.stats.slo.decide`: the point's decision on its SLO."""

    slo: str  # the SLO as normalised, "p99<50ms"
    verdict: str  # "met", "missed", "undecided"
    value_ns: float | None
    ci_ns: list[float | None] | None  # one-sided 99% [lower, upper]
    confidence: float
    limit_ns: float
    detail: str


class Drain(TypedDict):
    """`knee.stats.rates`: the replies after the window's end, and until when."""

    replies: int
    ok: int
    until_s: float | None


class LateSends(TypedDict):
    """`knee.stats.rates.late_sends`: None where no late threshold was set."""

    late_sends: int | None
    late_send_share: float | None
    late_sends_held: int | None
    late_sends_free: int | None
    late_send_held_share: float | None
    late_send_free_share: float | None


class Sends(LateSends):
    """The sends of `knee.stats.rates.rates`, with or without a window."""

    sent: int
    send_window_s: float
    scheduled_rate_per_s: float
    achieved_rate_per_s: float
    achieved_rate_ci_per_s: list[float] | None
    bytes_out_per_s: float


class Rates(Sends):
    """`knee.stats.rates.rates`: the sends, the window's throughput, drain and backlog."""

    window_s: float
    throughput_per_s: float
    completion_rate_per_s: float
    bytes_in_per_s: float
    throughput_bytes_per_s: float
    ok_in_window: int
    sent_in_window: int
    drain: Drain
    backlog: int
    backlog_waiting: int


class GroupStats(TypedDict):
    """One entry of a point's `by_op` or `by_service` (knee.stats.groups.group_entry)."""

    count: int
    achieved_rate_per_s: float
    throughput_per_s: float
    status_rates: dict[str, float]
    latency_ns: Distribution
    latency_ok_ns: Distribution
    server_ns: Distribution
    network_ns: Distribution


class CacheSegment(TypedDict):
    n: int
    hits: int


class CacheSplit(TypedDict):
    """`knee.stats.cache.cache_split`: a result cache's hit ratio and service times."""

    hit_ratio: float
    n_hits: int
    n_misses: int
    hit_ratio_steady: float
    hit_ratio_steady_ci: list[float]
    n_steady: int
    n_hits_steady: int
    hit_service_mean_ns: float | None
    hit_service_std_ns: float | None
    miss_service_mean_ns: float | None
    miss_service_std_ns: float | None
    steady_rule: str
    segments: list[CacheSegment]


class GeneratorStats(TypedDict):
    """One entry of a point's `generators` (knee.stats.generators): a node's own sending."""

    node: str
    sent: int
    achieved_rate_per_s: float
    achieved_rate_ci_per_s: list[float] | None
    late_sends: int | None
    late_send_share: float | None
    late_sends_held: int | None
    late_sends_free: int | None
    target_rate_per_s: float | None
    sender: Check


class MadeOf(TypedDict):
    """`knee.stats.tail`: the shares of a set of requests' summed latency."""

    server_share: float | None
    network_share: float | None
    late_share: float | None
    mean_ns: float | None


class Clustering(TypedDict):
    """`knee.stats.tail.clustering`: do the slowest 1% bunch up in time?"""

    index_of_dispersion: float
    longest_run: int
    verdict: str  # "clustered", "scattered"
    detail: str


#: `knee.stats.tail.top1`: the slowest 1% of OK requests and the rest.
Top1 = TypedDict(
    "Top1",
    {
        "threshold_ns": float | None,
        "count": int,
        "with": Distribution,  # a keyword: hence the functional form
        "without": Distribution,
        "top": MadeOf,
        "rest": MadeOf,
        "clustering": Clustering,
    },
)


class PointInterference(TypedDict):
    """`knee.stats.interference.interference`: others' use of the machine during a point."""

    foreign_cpu_percent_mean: float | None
    foreign_cpu_percent_max: float | None
    steal_percent_mean: float | None
    iowait_percent_mean: float | None
    tick_error_percent: float | None
    samples: int


class Resource(TypedDict, total=False):
    """One entry of a point's `resources` (knee.resources.usage.entry): a CPU, a pool, a
    link, a part or the connections, with its mean busy amount (in units of its capacity),
    its utilisation U, its demand D and the bound 1 / D; then what its kind adds."""

    kind: str  # "cpu", "pool", "link", "part", "connections"
    label: str
    busy: float | None
    capacity: float | None
    capacity_unit: str
    u: float | None
    u_ci: list[float] | None
    d_ns: float | None
    bound_per_s: float | None
    bound_ci_per_s: list[float | None] | None
    role: str
    node: str
    generator: bool
    cpu_percent: float | None
    cpu_wait_percent: float | None
    cpu_percent_of_quota: float | None
    cpu_samples: int
    machine_cores: float
    foreign_cpu_percent: float | None
    left_by_others: bool  # the machine: others' processes left it fewer cores
    host_cpu_percent: float | None
    bytes_rx_per_s: float | None
    bytes_tx_per_s: float | None
    on_cpu: float | None
    contended: bool
    includes_waiting: bool
    all_busy_share: float | None
    busy_with_waits: float | None
    direction: str
    connections: int
    detail: str
    point: int
    # knee.resources.bottleneck's, on the entries it ranks (never in summary.json's)
    cpu_u: float | None  # a CPU that a CPU-bound pool stands for: its own U
    threads: float | None  # ... and that pool's size
    held_at_low_load: bool  # its demand read at low load
    shared_by: list[str]  # the machine's cores: the nodes folded into them


class HttpDone(TypedDict):
    """A point's `http` (knee.analysis.http.done_fields): the generators' `done` fields,
    the counters summed (None where no generator reported one)."""

    protocol: str  # "h2", "http/1.1", "mixed"
    server_max_streams: int | None
    max_streams_in_use: int
    connections_opened: int | None
    connect_failures: int | None
    streams_limit_total: int | None
    goaways: int | None
    resets_received: int | None
    refused_resent: int | None


class Target(TypedDict, total=False):
    """A point's `target` (knee.runner.target.watch_target): the external target's
    process tree as found, or why it was not."""

    found: bool
    reason: str  # when not found
    name: str
    root_pid: int
    pids: list[int]
    workers: int | None
    cpus: str | None  # knee.hosts.cgroups.process_cpu_limit's
    quota_cores: float | None
    cpu_cores: float | None


class Gaps(TypedDict, total=False):
    """knee.analysis.chat_checker.distribution: the unavailability after each failure."""

    count: int
    unanswered: int
    p50_ms: float
    p90_ms: float
    max_ms: float


class SystemCheck(TypedDict, total=False):
    """A point's `check` (knee.analysis.chaos): a system checker's verdict, then what
    chat's (knee.analysis.chat_checker) adds."""

    name: str
    verdict: str  # "PASS", "FAIL", "UNCHECKED"
    counts: dict[str, int]
    detail: str
    database: str  # "postgres", "sqlite"
    failures: dict[str, int]  # per kind of failure event
    unavailability: Gaps
    unavailability_each_ms: list[float | None]
    reason: str  # UNCHECKED's
    acknowledged_writes: int
    applied_writes: int
    lost: int
    applied_twice: int


class Waits(TypedDict, total=False):
    """A point's named waits: the queue under the name its system gives it, and http's wait
    for a free stream or connection (`knee.stats.point`)."""

    queue_ns: Distribution
    connect_ns: Distribution  # http's name for the queue (knee.contract.columns)
    held_ns: Distribution  # http: the wait for a free stream or connection


class PointStats(LateSends, Waits, total=False):
    """One point of summary.json's `points`: `knee.stats.point_stats`'s keys, then the
    runner's (point, series, label, swept, target, resources, slo, ...)."""

    # knee.stats.point_stats
    count: int
    statuses: dict[str, int]
    status_rates: dict[str, float]
    warmup_count: int
    sent: int
    send_window_s: float | None
    achieved_rate_per_s: float | None
    scheduled_rate_per_s: float | None
    achieved_rate_ci_per_s: list[float] | None
    bytes_out_per_s: float | None
    bytes_in_per_s: float | None
    window_s: float | None
    throughput_per_s: float | None
    completion_rate_per_s: float | None
    throughput_bytes_per_s: float | None
    ok_in_window: int
    sent_in_window: int
    drain: Drain | None
    backlog: int
    backlog_waiting: int
    latency_ns: Distribution
    latency_ok_ns: Distribution
    server_ns: Distribution
    network_ns: Distribution
    service_ns: Distribution
    detail_ns: Distribution
    stability: Stability
    checks: list[Check]
    by_op: dict[str, GroupStats]
    by_service: dict[str, GroupStats]
    cache: CacheSplit | None
    generators: list[GeneratorStats]
    top1: Top1 | None
    # the runner's (knee.runner.local)
    point: int
    series: str
    label: str
    swept: ConfigTable
    target_rate_per_s: float | None
    target: Target
    http_statuses: dict[str, int]
    http: HttpDone | None
    resources: dict[str, Resource]
    check: SystemCheck
    cut_short: str
    slo: SloVerdict
    interference: PointInterference | None
    # knee find's (knee.find.run)
    stopped_early: str


class Answer(TypedDict):
    """A capacity or an SLO capacity of one group (knee.analysis.answers): the highest rate
    shown good, with its bracket."""

    rate_per_s: float | None
    interval_per_s: list[float | None]  # [lo, hi]; an open end is None
    state: str  # "decided", "undecided", "partial" (a search that stopped before its hold)
    decided: bool
    limited_by: str | None  # "target", "errors", "generator"
    detail: str
    slo: NotRequired[str]  # the SLO capacity's SLO
    # a search's (knee.find.run.mark_state)
    held: NotRequired[bool]
    hold_probe: NotRequired[int | None]
    partial: NotRequired[str]


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


class ModelKnee(TypedDict):
    """knee.models.analyze.model_knee: the knee of one group's primary model."""

    kind: str
    label: str
    servers: int
    servers_source: str | None  # "declared", "estimated", "assumed"
    x: float
    interval: list[float] | None
    capacity_per_s: float
    capacity_interval_per_s: list[float] | None
    fits: bool | None


class Knee(TypedDict):
    """The knee of one group's curve: the load of highest power (knee.models.measured), or
    the fitted model's (`method`), with its interval and why."""

    rate_per_s: float
    interval_per_s: list[float] | None
    method: str  # "power", "model"
    why: str
    power: MeasuredKnee | None
    model: ModelKnee | None


class Interference(TypedDict):
    """How many of a group's points ran while other processes used the machine."""

    points: int
    of: int
    foreign_cpu_percent_max: float
    detail: str


class SaturatedThroughput(TypedDict):
    """knee.analysis.answers.saturated_throughput: OK completions per second while over
    capacity, pooled, with Garwood's 95% interval."""

    per_s: float
    ci_per_s: list[float]
    points: list[int]


class Shedding(TypedDict):
    """knee.resources.shedding.shedding: how the target refused work over its capacity."""

    from_rate_per_s: float
    failed_share: list[float]  # [lowest, highest] over the points
    statuses: dict[str, int]  # per HTTP status code
    shed_share_of_failures: float
    served_p50_ms: float | None
    points: list[int | None]


class NamedResource(TypedDict):
    """A ranked resource as knee.resources.bottleneck names it (`_named`): some of its
    entry's keys (None where the entry has none) and its name among the point's resources."""

    resource: str
    kind: str | None
    label: str | None
    u: float | None
    u_ci: list[float] | None
    d_ns: float | None
    bound_per_s: float | None
    bound_ci_per_s: list[float | None] | None
    capacity: float | None
    capacity_unit: str | None
    threads: NotRequired[float]  # a CPU with its CPU-bound pool folded in


class RankedAt(TypedDict):
    """The resources of one point in the order of their demand."""

    point: int | None
    rate_per_s: float
    ranked: list[str]


class GeneratorShare(TypedDict):
    """knee.resources.bottleneck.generator: the load generator's own share at a point."""

    cpu_percent: float | None
    cpu_wait_percent: float | None
    late_send_share: float | None
    connections_u: float | None
    all_connections_busy_share: float | None


class Bottleneck(TypedDict):
    """knee.resources.bottleneck.explain: one load curve's bottleneck."""

    at_point: int | None
    at_rate_per_s: float
    bottleneck: NamedResource
    next: NamedResource | None
    measured_per_s: list[float | None]  # [lo, hi]
    agreement: str | None  # "agrees", "below", "above", "unclear"
    bound_ratio: float | None
    unseen: bool
    sheds: Shedding | None
    generator: GeneratorShare
    per_point: list[RankedAt]
    doubling_gain: NotRequired[float]
    sentence: NotRequired[str]  # set last, from the rest


class Hold(TypedDict):
    """A search's holds of one group (knee.find.run): the answer repeated with fresh probes."""

    rate_per_s: float | None
    answers: list[str]  # "capacity", "slo"
    probes: list[int]
    phases: list[str]
    verdicts: list[str]
    duration_s: list[float]
    throughput_per_s: list[float | None]


class SearchEnd(TypedDict):
    """How a search of one group ended (knee.find.run)."""

    stopped: str  # "done", "budget", "generator", ...
    detail: str
    probes: int
    wall_s: float
    service_s: float | None
    first_model_per_s: float | None


class GroupAnswers(TypedDict, total=False):
    """The answers of one group of a curve's points (knee.analysis.answers.group_answers),
    then what a search adds (knee.find.run)."""

    label: str
    capacity: Answer
    saturated_throughput: SaturatedThroughput | None
    slo_capacity: Answer | None
    knee: Knee | None
    interference: Interference | None
    points: list[int]
    bottleneck: Bottleneck | None
    # knee find's
    model_error: str | None
    hold: Hold
    search: SearchEnd


class RunAnswers(TypedDict):
    """summary.json's `find` (knee.find.run.Finder.answers): a search's answers per group."""

    slo: str | None
    tolerance: float
    budget_s: float | None
    elapsed_s: float
    probe_s: float
    skipped_series: list[str]
    error: str | None
    groups: list[GroupAnswers]


class SweepAnswers(TypedDict):
    """summary.json's `answers` (knee run): a sweep's answers, in the shape of a search's."""

    slo: str | None
    groups: list[GroupAnswers]


class SummaryExtra(TypedDict, total=False):
    """What a run adds to summary.json besides its points: a search's answers (`find`) or
    a sweep's (`answers`)."""

    find: RunAnswers
    answers: SweepAnswers


class Summary(SummaryExtra, total=False):
    """summary.json (knee.runner.local)."""

    experiment: str
    system: str
    preset: str | None
    status: str  # "running", "complete", "failed", "interrupted"
    points: list[PointStats]
