"""Parameter schemas: what a spec section may contain, its type, default and range; and
`Point`, one measurement with every section resolved. Plain data: the spec validator
(spec.py) builds points against these schemas, the systems read them to plan their nodes,
and neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


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

Sections = dict[str, dict[str, Any]]  # {"experiment": ..., "server": ..., "load": ..., ...}
Rule = Callable[[Sections], None]
"""Checks (and may complete) the fully defaulted sections of one point; raises RuleError."""


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
        "at 95% confidence, and `knee run` exits with its own code when one is missed",
    ),
}

#: At most this many load generator nodes per point: each is a process with its own
#: connections, and more than this on one run is a configuration mistake, not a cluster.
MAX_GENERATORS = 64

#: The longest wait a spec may ask of one request (timeout, think time, lateness): an hour.
#: knee-node turns these into durations, which need a finite bound, and a longer wait is a
#: unit mistake rather than an experiment.
MAX_WAIT_MS = 3_600_000

LOAD: Schema = {
    "schedule": Param(
        "str", "poisson", "arrival schedule", choices=("poisson", "constant", "steps", "closed")
    ),
    "rate_per_s": Param(
        "float",
        OPTIONAL,
        "target rate (poisson, constant)",
        min=0,
        min_exclusive=True,
        max=10_000_000,
    ),
    "steps": Param("list", OPTIONAL, "[[rate_per_s, duration_s], ...] (steps)"),
    "clients": Param("int", 1, "closed loop: number of clients", min=1, max=4096),
    "think_ms": Param(
        "float",
        0.0,
        "closed loop: think time between reply and next request",
        min=0,
        max=MAX_WAIT_MS,
    ),
    "think": Param(
        "str", "fixed", "closed loop: think-time distribution", choices=("fixed", "exponential")
    ),
    "connections": Param(
        "int", 1, "open loop: TCP connections the requests are spread over", min=1, max=1024
    ),
    "duration_s": Param(
        "float",
        OPTIONAL,
        "stop after this long (warm-up included)",
        min=0,
        min_exclusive=True,
        max=86_400,
    ),
    "requests": Param(
        "int",
        OPTIONAL,
        "stop after this many requests (warm-up included)",
        min=1,
        max=1_000_000_000,
    ),
    "timeout_ms": Param(
        "float",
        5000.0,
        "per-request timeout, counted from the send",
        min=0,
        min_exclusive=True,
        max=MAX_WAIT_MS,
    ),
    "late_ms": Param(
        "float",
        1.0,
        "a send this far behind its intended time counts as late",
        min=0,
        min_exclusive=True,
        max=MAX_WAIT_MS,
    ),
    "max_outstanding": Param(
        "int",
        100_000,
        "open loop: requests in flight beyond this are dropped, not sent",
        min=1,
        max=10_000_000,
    ),
    "warmup_s": Param(
        "float",
        1.0,
        "seconds at the start of each point excluded from statistics",
        min=0,
        max=86_400,  # as duration_s
    ),
    "warmup_requests": Param(
        "int",
        0,
        "the first requests of each point excluded as well",
        min=0,
        max=1_000_000_000,  # as requests
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


@dataclass(frozen=True)
class Point:
    """One measurement: fully defaulted sections after series overrides and sweep values."""

    index: int
    series: str
    swept: dict[str, Any]
    experiment: dict[str, Any]
    server: dict[str, Any]
    load: dict[str, Any]
    driver: dict[str, Any]
    #: The series' own [placement] rules (node glob -> host or hosts), instead of the
    #: spec's; empty: the spec's (knee.hosts.spec).
    placement: dict[str, Any] = field(default_factory=dict)

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
