"""The reference systems knee can run, and the parameters of their server and driver."""

from __future__ import annotations

from dataclasses import dataclass, field

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
