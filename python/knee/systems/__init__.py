"""The reference systems knee can run, and the parameters of their server and driver."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from knee.params import Param, Schema


@dataclass(frozen=True)
class System:
    name: str
    summary: str
    server: Schema = field(default_factory=dict)
    driver: Schema = field(default_factory=dict)


_ECHO = System(
    name="echo",
    summary="calibration: replies with reply_bytes bytes at once",
    server={
        "threads": Param(
            "int", 0, "0 = reply on the connection's own thread; N = a pool", min=0, max=256
        ),
    },
    driver={
        "request_bytes": Param("int", 16, "request body size", min=4, max=16 << 20),
        "reply_bytes": Param("int", 16, "reply body size", min=0, max=16 << 20),
    },
)

_MATRIX = System(
    name="matrix",
    summary="computes M^P for an n x n f64 matrix (report 004)",
    server={
        "algorithm": Param(
            "str",
            "naive",
            "naive: P-1 multiplications; squaring: O(log P)",
            choices=("naive", "squaring"),
        ),
        "threads": Param(
            "int", 1, "1 = one request at a time in arrival order; N = a pool", min=1, max=256
        ),
        "cache": Param(
            "int",
            0,
            "FIFO result cache entries keyed by (matrix, P); 0 = off",
            min=0,
            max=1_000_000,
        ),
        "max_queue": Param(
            "int", 100_000, "requests waiting beyond this are refused", min=1, max=10_000_000
        ),
    },
    driver={
        "n": Param("int", 50, "matrix size n x n", min=1, max=1024),
        "same_matrix": Param("bool", True, "send one matrix always, or a new one per request"),
        "p": Param(
            "int", None, "fixed exponent P (give p or p_min and p_max)", min=1, max=1_000_000
        ),
        "p_min": Param("int", None, "P drawn uniformly from [p_min, p_max]", min=1, max=1_000_000),
        "p_max": Param("int", None, "P drawn uniformly from [p_min, p_max]", min=1, max=1_000_000),
    },
)

SYSTEMS: dict[str, System] = {s.name: s for s in (_ECHO, _MATRIX)}


def server_config(server: dict[str, Any]) -> dict[str, Any]:
    """The JSON config of a system's server node (knee-node serve)."""
    return {"server": _present(server)}


def load_config(
    load: dict[str, Any],
    driver: dict[str, Any],
    *,
    target: str,
    seed: int,
    warmup_s: float,
    samples_path: str,
    histogram_path: str,
) -> dict[str, Any]:
    """The JSON config of a load generator node (knee-node load) for one point."""
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
        "warmup_s": warmup_s,
        "samples_path": samples_path,
        "histogram_path": histogram_path,
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
