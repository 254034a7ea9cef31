"""What a reference system declares to knee: its parameters, its rules, and the nodes of
one point (its topology). The runner starts the nodes in order and knows nothing else about
the system."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from knee.params import Point, Rule, Schema


@dataclass
class NodePlan:
    """One knee-node process of a point.

    Nodes start in list order. A node that does not record waits for its ``ready`` line
    before the next one starts; in later nodes' configs, any string ``"{addr:NAME}"`` is
    replaced by NAME's reported address, and ``"{scratch}"`` by the point's scratch folder
    (for files the system generates; removed after the point unless kept on request).
    A recording node (a load generator or a client role) is given ``samples_path`` and
    ``histogram_path`` by the runner, and the point ends when every recording node has
    ended.
    """

    name: str  # unique within the point: "server", "replica-1", "load", ...
    role: str  # knee-node role: "serve", "load", or a system's own role
    config: dict[str, Any]
    records: bool = False


Topology = Callable[[Point], list[NodePlan]]


def default_topology(point: Point) -> list[NodePlan]:
    """One server and one load generator: the client-server systems."""
    return [
        NodePlan("server", "serve", server_config(point.server)),
        NodePlan(
            "load",
            "load",
            load_config(
                point.load, point.driver, target="{addr:server}", seed=point.experiment["seed"]
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


def server_config(server: dict[str, Any]) -> dict[str, Any]:
    """The JSON config of a system's server node (knee-node serve)."""
    return {"server": _present(server)}


def load_config(
    load: dict[str, Any],
    driver: dict[str, Any],
    *,
    target: str,
    seed: int,
) -> dict[str, Any]:
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
        schedule = {"kind": kind, "steps": [list(map(float, s)) for s in load["steps"]]}
    else:
        schedule = {"kind": kind, "rate_per_s": load["rate_per_s"]}
    cfg: dict[str, Any] = {
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


def expected_requests(load: dict[str, Any]) -> int | None:
    """How many requests a point will send, when the schedule says (for progress bars)."""
    if load.get("requests"):
        return int(load["requests"])
    duration_s = load.get("duration_s")
    if load["schedule"] in ("poisson", "constant") and duration_s:
        return int(load["rate_per_s"] * duration_s)
    if load["schedule"] == "steps":
        return int(sum(rate * d for rate, d in load["steps"]))
    return None


def target_rate_per_s(load: dict[str, Any]) -> float | None:
    """The offered rate of an open-loop point with one rate; None otherwise."""
    if load["schedule"] in ("poisson", "constant"):
        return float(load["rate_per_s"])
    return None


def _present(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}
