"""What a reference system declares to knee: its parameters, its rules, and the nodes of
one point (its topology). The runner starts the nodes in order and knows nothing else about
the system. A system's correctness checker, when it has one, is in knee.analysis.chaos (the
one path every system's points are checked by)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

from knee.config_values import ConfigTable, integer, number, opt_number, pairs, subtable
from knee.params import Point, Rule, RuleError, Schema


@dataclass
class NodePlan:
    """One knee-node process of a point.

    Nodes start in list order. A node that does not record waits for its ``ready`` line
    before the next one starts; in later nodes' configs, any string ``"{addr:NAME}"`` is
    replaced by NAME's reported address, and ``"{scratch}"`` by the point's scratch folder
    (for files the system generates; removed after the point unless kept on request).
    A recording node (a load generator or a client role) is given ``samples_path`` and
    ``histogram_path`` by the runner, and the point ends when every recording node has
    ended. Every node's stdout lines are kept in nodes/NAME.pNNN.events.jsonl.
    """

    name: str  # unique within the point: "server", "replica-1", "load", ...
    role: str  # knee-node role: "serve", "load", or a system's own role
    config: ConfigTable
    records: bool = False
    #: False: planned but not started with the point; an event of the spec's timeline
    #: starts it (a node that joins later, e.g. a processing node).
    start: bool = True
    #: Files the node writes that the run keeps: config key (dotted for a key inside a
    #: table, e.g. "server.log_path") -> file name. The runner sets the key to
    #: raw/pNNN-<file name> (on the node's host) and brings the file back after the node
    #: ended (e.g. a processing node's log of what it processed).
    outputs: dict[str, str] = field(default_factory=dict)


Topology = Callable[[Point], list[NodePlan]]


def default_topology(point: Point) -> list[NodePlan]:
    """One server and one load generator: the client-server systems."""
    return [
        NodePlan("server", "serve", server_config(point.server)),
        NodePlan(
            "load",
            "load",
            load_config(
                point.load,
                point.driver,
                target="{addr:server}",
                seed=integer(point.experiment, "seed"),
            ),
            records=True,
        ),
    ]


@dataclass(frozen=True)
class System:
    name: str
    summary: str
    server: Schema = field(default_factory=dict)
    driver: Schema = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()  # run on every point after the common rules
    topology: Topology = default_topology
    #: The reply flag bit that marks a reply served from a result cache (matrix), when the
    #: point's `server.cache` is on: its hit ratio then goes into the point's statistics.
    cache_hit_flag: int | None = None
    #: What the samples' `queue_ns` holds, as summary.json names its distribution: the
    #: server's queue wait, or (http, which knows no server queue) `connect_ns`, the time a
    #: request waited for its connection to be made (0 on a connection already open).
    queue_name: str = "queue_ns"
    #: Its replicas report who they believe is primary (``primary`` events), so a timeline
    #: event may name ``node = "primary"`` (the runner resolves it when the event is due).
    reports_primary: bool = False
    #: Each of its load generator's `load.connections` carries one request at a time (http:
    #: HTTP/1.1 without pipelining), so a due request waits for a free connection: a send
    #: late while every connection was busy waited for the target, not for the generator.
    one_request_per_connection: bool = False
    #: Its parts' names, for the resources and the report (knee.resources): (node name or
    #: glob, label), "{n}" the glob's number; the first match names a node.
    parts: tuple[tuple[str, str], ...] = ()
    #: The server config key of a node's worker pool (matrix: "threads"): its workers' busy
    #: time is X_ok x the mean service time.
    pool_key: str | None = None
    #: The part whose time each reply reports as `detail_ns` (chat: the database): from the
    #: point's server config, (name, label, capacity in requests at once; None: unknown).
    detail_part: Callable[[ConfigTable], tuple[str, str, float | None]] | None = None
    #: The URL of a service the point measures but does not start (http's server.target):
    #: the runner finds the process listening there and samples its CPU (knee.resources
    #: .listener).
    external_target: Callable[[Point], str | None] | None = None


#: Names of the nodes every system has (knee.resources labels).
COMMON_PARTS: tuple[tuple[str, str], ...] = (
    ("server", "the server"),
    ("load", "the load generator"),
    ("load-*", "load generator {n}"),
    ("target", "the target"),
)


def part_label(system: System, node: str) -> str:
    """A node's name in the system's words ("the central index", "PN 2"), else its own."""
    for pattern, label in (*system.parts, *COMMON_PARTS):
        if pattern == node:
            return label
        if pattern.endswith("*") and node.startswith(pattern[:-1]):
            return label.replace("{n}", node[len(pattern) - 1 :])
    return node


def plan_nodes(system: System, point: Point) -> list[NodePlan]:
    """The nodes of one point: the system's topology, its load split over
    `load.generators` generator nodes."""
    return split_generators(system.topology(point), integer(point.load, "generators"))


#: Seeds of the generators of one point lie this far apart, so their random streams differ.
GENERATOR_SEED_STRIDE = 1_000_003


def split_generators(plans: list[NodePlan], n: int) -> list[NodePlan]:
    """Each recording node becomes n generators NAME-0 .. NAME-{n-1} that share its load: the
    rate (and the rates of steps) divided by n, the closed loop's clients and the request
    count dealt out, each with its own seed. Their samples are pooled by the analysis (a
    percentile is never averaged over generators)."""
    if n == 1:
        return plans
    out: list[NodePlan] = []
    for plan in plans:
        if not plan.records:
            out.append(plan)
            continue
        if "schedule" not in plan.config and "clients" not in plan.config:
            raise RuleError(
                "load.generators",
                f"{plan.name} is one client of its own (not a rate or a number of clients "
                "to split): this system runs with load.generators = 1",
            )
        for i in range(n):
            config = _generator_share(plan.config, i, n)
            out.append(NodePlan(f"{plan.name}-{i}", plan.role, config, records=True))
    return out


def _generator_share(config: ConfigTable, i: int, n: int) -> ConfigTable:
    """Generator i's part of a recording node's config."""
    cfg = copy.deepcopy(config)
    schedule = subtable(cfg, "schedule")
    if "rate_per_s" in schedule:
        schedule["rate_per_s"] = number(schedule, "rate_per_s") / n
    if "steps" in schedule:
        schedule["steps"] = [[rate / n, d] for rate, d in pairs(schedule, "steps")]
    for table, key in ((schedule, "clients"), (cfg, "clients"), (cfg, "requests")):
        if key in table:
            table[key] = _dealt(integer(table, key), i, n, key)
    if "seed" in cfg:
        cfg["seed"] = integer(cfg, "seed") + i * GENERATOR_SEED_STRIDE
    driver = subtable(cfg, "driver")
    if "client_prefix" in driver:  # chat: client names stay unique over generators
        driver["client_prefix"] = f"{driver['client_prefix']}-{i}"
    return cfg


def _dealt(total: int, i: int, n: int, key: str) -> int:
    share = total // n + (1 if i < total % n else 0)
    if share < 1:
        raise RuleError(
            "load.generators", f"{n} generators cannot share {total} {key}: give each one"
        )
    return share


def server_config(server: ConfigTable) -> ConfigTable:
    """The JSON config of a system's server node (knee-node serve)."""
    return {"server": _present(server)}


def load_config(
    load: ConfigTable,
    driver: ConfigTable,
    *,
    target: str,
    seed: int,
) -> ConfigTable:
    """The JSON config of a load generator node (knee-node load) for one point, without its
    output paths (the runner adds samples_path and histogram_path)."""
    kind = load["schedule"]
    if kind == "closed":
        schedule = {
            "kind": kind,
            "clients": load["clients"],
            "think_ms": load["think_ms"],
            "think": load["think"],
        }
    elif kind == "steps":
        schedule = {"kind": kind, "steps": [[float(r), float(d)] for r, d in pairs(load, "steps")]}
    else:
        schedule = {"kind": kind, "rate_per_s": load["rate_per_s"]}
    cfg: ConfigTable = {
        "target": target,
        "schedule": schedule,
        "connections": load["connections"],
        "timeout_ms": load["timeout_ms"],
        "late_ms": load["late_ms"],
        "max_outstanding": load["max_outstanding"],
        "seed": seed,
        "warmup_s": load["warmup_s"],
        "driver": _present(driver),
    }
    for key in ("duration_s", "requests"):
        if load.get(key) is not None:
            cfg[key] = load[key]
    return cfg


def expected_requests(load: ConfigTable) -> int | None:
    """How many requests a point will send, when the schedule says (for progress bars)."""
    if load.get("requests"):
        return integer(load, "requests")
    duration_s = opt_number(load, "duration_s")
    if load["schedule"] in ("poisson", "constant") and duration_s:
        return int(number(load, "rate_per_s") * duration_s)
    if load["schedule"] == "steps":
        return int(sum(rate * d for rate, d in pairs(load, "steps")))
    return None


def target_rate_per_s(load: ConfigTable) -> float | None:
    """The offered rate of an open-loop point with one rate; None otherwise."""
    if load["schedule"] in ("poisson", "constant"):
        return number(load, "rate_per_s")
    return None


def _present(values: ConfigTable) -> ConfigTable:
    return {k: v for k, v in values.items() if v is not None}
