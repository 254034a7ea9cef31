"""Parameter schemas: what a spec section may contain, its type, default and range; and
`Point`, one measurement with every section resolved. Plain data: the spec validator
(spec.py) builds points against these schemas, the systems read them to plan their nodes,
and neither imports the other.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NotRequired, TypedDict

from knee import contract
from knee.config_values import ConfigTable, opt_text
from knee.stats.slo import Slo
from knee.stats.slo import parse as parse_slo


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""Default of a parameter that has none: the spec must give it (or a rule makes it optional)."""

OPTIONAL: Any = None
"""Default of a parameter that may be absent (its value is then None)."""


@dataclass(frozen=True)
class Param:
    """One key of a spec section."""

    type: str  # "int" | "float" | "str" | "bool" | "list"
    default: Any = OPTIONAL
    help: str = ""
    choices: tuple[Any, ...] | None = None
    min: float | None = None  # inclusive
    max: float | None = None  # inclusive
    min_exclusive: bool = False  # min is exclusive (e.g. a rate must be > 0)
    #: The node config key this spec key is passed to ("section.name" of knee-node
    #: describe, system-relative; None: no node reads it, the spec's own key).
    node: str | None = None
    #: The fields the spec sets apart from the node's (`from_node` overrides), e.g. a
    #: planning default the node has none of; tests/test_contract.py lists each one.
    own: tuple[str, ...] = ()

    def expected(self) -> str:
        """Human description of what a value must be, for error messages."""
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        kind = {
            "int": "an integer",
            "float": "a number",
            "str": "a string",
            "bool": "true or false",
            "list": "a list",
        }[self.type]
        bounds = []
        if self.min is not None:
            bounds.append(f"{'>' if self.min_exclusive else '>='} {self.min:g}")
        if self.max is not None:
            bounds.append(f"<= {self.max:g}")
        return kind + (" " + " and ".join(bounds) if bounds else "")


Schema = dict[str, Param]

_TYPES = {"int", "float", "str", "bool", "list"}


def from_node(
    system: str | None,
    node: str,
    help: str,
    **own: Any,  # noqa: A002 (Param's field)
) -> Param:
    """A spec key passed to node config key `node` of `system` (None: the load generator):
    its type, default, bounds and choices are the node's, from knee-node describe
    (knee.contract). A key whose node default is derived from others (`derived`) takes 0 in
    the spec, for "apply the rule". `own` overrides a field (default, min, max); each such
    override is listed in tests/test_contract.py."""
    k = contract.key(system, node)
    if k["type"] not in _TYPES:
        raise ValueError(f"{node}: a {k['type']} is not a spec value")
    fields: dict[str, Any] = {
        "type": k["type"],
        "default": REQUIRED if k["required"] else k["default"],
        "min": k["min"],
        "max": k["max"],
        "min_exclusive": bool(k.get("min_exclusive", False)),
        "choices": tuple(k["choices"]) if k.get("choices") else None,
    }
    if k.get("derived"):  # 0: the rule's value (knee.systems computes it)
        fields |= {"default": 0, "min": 0}
    if k["type"] == "list":  # a list's max is its length, checked by the system's rule
        fields["max"] = None
    fields |= own
    return Param(help=help, node=node, own=tuple(sorted(own)), **fields)


Sections = dict[str, ConfigTable]  # {"experiment": ..., "server": ..., "load": ..., ...}
Rule = Callable[[Sections], None]
"""Checks (and may complete) the fully defaulted sections of one point; raises RuleError."""


#: The folder of the spec file being loaded (knee.spec.load_spec sets it): a rule may find
#: a file the spec names relative to it when it is not relative to where knee runs.
SPEC_DIR: ContextVar[str | None] = ContextVar("SPEC_DIR", default=None)


def spec_relative(path: str) -> str:
    """`path` made absolute: relative to where knee runs, else to the spec's folder when
    only there does it exist."""
    if os.path.isabs(path) or os.path.exists(path):
        return os.path.abspath(path)
    spec_dir = SPEC_DIR.get()
    if spec_dir is not None and os.path.exists(os.path.join(spec_dir, path)):
        return os.path.abspath(os.path.join(spec_dir, path))
    return os.path.abspath(path)


class RuleError(Exception):
    """Raised by validation and rule functions with a key relative to the spec (or point);
    load_spec turns it into a SpecError naming the file."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


EXPERIMENT: Schema = {
    "name": Param("str", REQUIRED, "experiment name; the run directory is named after it"),
    "system": Param("str", REQUIRED, "which reference system runs (see knee.systems)"),
    "description": Param("str", "", "one line shown in the report"),
    "seed": Param("int", 1, "seed of every random choice (schedules, request contents)", min=0),
    "slo": Param(
        "str",
        OPTIONAL,
        "a latency objective, e.g. 'p99<50ms': each point is judged met, missed or undecided "
        "at one-sided 99% confidence, and `knee run` exits with its own code when one is missed",
    ),
}

#: At most this many load generator nodes per point: each is a process with its own
#: connections, and more than this on one run is a configuration mistake, not a cluster.
MAX_GENERATORS = 64

#: The longest wait a spec may ask of one request (timeout, think time, lateness): the
#: load generator's bound (knee-node describe).
MAX_WAIT_MS = contract.key(None, "load.timeout_ms")["max"]

LOAD: Schema = {
    "schedule": from_node(
        None,
        "load.schedule.kind",
        "arrival schedule",
        default="poisson",  # the node has no default schedule
    ),
    "rate_per_s": from_node(None, "load.schedule.rate_per_s", "target rate (poisson, constant)"),
    "steps": from_node(None, "load.schedule.steps", "[[rate_per_s, duration_s], ...] (steps)"),
    "clients": from_node(
        None,
        "load.schedule.clients",
        "closed loop: number of clients",
        default=1,  # required by a closed schedule only
    ),
    "think_ms": from_node(
        None, "load.schedule.think_ms", "closed loop: think time between reply and next request"
    ),
    "think": from_node(None, "load.schedule.think", "closed loop: think-time distribution"),
    "connections": from_node(
        None, "load.connections", "open loop: TCP connections the requests are spread over"
    ),
    "duration_s": from_node(None, "load.duration_s", "stop after this long (warm-up included)"),
    "requests": from_node(
        None, "load.requests", "stop after this many requests (warm-up included)"
    ),
    "timeout_ms": from_node(None, "load.timeout_ms", "per-request timeout, counted from the send"),
    "late_ms": from_node(
        None, "load.late_ms", "a send this far behind its intended time counts as late"
    ),
    "max_outstanding": from_node(
        None,
        "load.max_outstanding",
        "open loop: requests in flight beyond this are dropped, not sent",
    ),
    "warmup_s": from_node(
        None,
        "load.warmup_s",
        "seconds at the start of each point excluded from statistics",
        default=1.0,  # a spec measures after a warm-up; a bare node has none
    ),
    "warmup_requests": Param(
        "int",
        0,
        "the first requests of each point excluded as well",
        min=0,
        max=contract.key(None, "load.requests")["max"],
    ),
    "generators": Param(
        "int",
        1,
        "load generator nodes that split the point's rate, clients and requests between them"
        " (placed on hosts by [placement]); their samples are pooled",
        min=1,
        max=MAX_GENERATORS,
    ),
}


class TimelineEvent(TypedDict):
    """One of the spec's [[events]] (knee.spec.EVENT), as checked."""

    at_s: float
    action: str  # "kill", "stop", "start", "freeze", "resume"
    node: str  # a node of the point, or knee.spec.PRIMARY
    resolved: NotRequired[str]  # the runner's: the replica that was primary


class AppliedEvent(TimelineEvent):
    """A timeline event as the runner applied (or skipped) it in one point."""

    t_s: float  # seconds since the run's start
    outcome: str


@dataclass(frozen=True)
class Point:
    """One measurement: fully defaulted sections after series overrides and sweep values."""

    index: int
    series: str
    swept: ConfigTable
    experiment: ConfigTable
    server: ConfigTable
    load: ConfigTable
    driver: ConfigTable
    #: The series' own [placement] rules (node glob -> host or hosts), instead of the
    #: spec's; empty: the spec's (knee.hosts.spec).
    placement: dict[str, str | list[str]] = field(default_factory=dict)

    @cached_property
    def slo(self) -> Slo | None:
        """The point's latency objective (`experiment.slo`, checked by the spec's rules),
        read once: every decision on this point uses this object."""
        text = opt_text(self.experiment, "slo")
        return parse_slo(text) if text else None

    @property
    def label(self) -> str:
        """Series name plus the swept values, e.g. ``"rate rate_per_s=10 threads=2"``."""
        shorts = [k.partition(".")[2] for k in self.swept]
        parts = [self.series]
        for key, value in self.swept.items():
            short = key.partition(".")[2]
            parts.append(f"{short if shorts.count(short) == 1 else key}={fmt_value(value)}")
        return " ".join(parts)


def fmt_value(value: Any) -> str:
    """Short, unambiguous rendering of a swept value for labels."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    if isinstance(value, list):
        return "[" + ",".join(fmt_value(v) for v in value) + "]"
    return str(value)
