"""matrix (report 004): a server computes M^P for an n x n f64 matrix."""

from __future__ import annotations

from knee.params import Param, RuleError, Sections
from knee.stats.cache import CACHE_HIT_FLAG
from knee.systems.base import System


def _matrix_rule(s: Sections) -> None:
    p, lo, hi = s["driver"]["p"], s["driver"]["p_min"], s["driver"]["p_max"]
    if p is not None:
        if lo is not None or hi is not None:
            raise RuleError("driver.p", "give either p or both p_min and p_max, not both forms")
        return
    if lo is None and hi is None:
        raise RuleError("driver.p", "missing: give either p or both p_min and p_max")
    if lo is None or hi is None:
        given, other = ("p_min", "p_max") if hi is None else ("p_max", "p_min")
        raise RuleError(f"driver.{other}", f"missing: {given} needs {other} (or give p alone)")
    if lo > hi:
        raise RuleError("driver.p_min", f"p_min ({lo}) must be <= p_max ({hi})")


SYSTEM = System(
    name="matrix",
    pool_key="threads",
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
    rules=(_matrix_rule,),
    cache_hit_flag=CACHE_HIT_FLAG,
)
