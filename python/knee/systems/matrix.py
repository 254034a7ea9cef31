"""matrix (report 004): a server computes M^P for an n x n f64 matrix."""

from __future__ import annotations

from knee.config_values import opt_integer
from knee.params import RuleError, Sections, from_node
from knee.stats.cache import CACHE_HIT_FLAG
from knee.systems.base import System


def _matrix_rule(s: Sections) -> None:
    d = s["driver"]
    p, lo, hi = opt_integer(d, "p"), opt_integer(d, "p_min"), opt_integer(d, "p_max")
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
        "algorithm": from_node(
            "matrix", "server.algorithm", "naive: P-1 multiplications; squaring: O(log P)"
        ),
        "threads": from_node(
            "matrix", "server.threads", "1 = one request at a time in arrival order; N = a pool"
        ),
        "cache": from_node(
            "matrix", "server.cache", "FIFO result cache entries keyed by (matrix, P); 0 = off"
        ),
        "max_queue": from_node(
            "matrix", "server.max_queue", "requests waiting beyond this are refused"
        ),
    },
    driver={
        "n": from_node("matrix", "driver.n", "matrix size n x n"),
        "same_matrix": from_node(
            "matrix", "driver.same_matrix", "send one matrix always, or a new one per request"
        ),
        "p": from_node("matrix", "driver.p", "fixed exponent P (give p or p_min and p_max)"),
        "p_min": from_node("matrix", "driver.p_min", "P drawn uniformly from [p_min, p_max]"),
        "p_max": from_node("matrix", "driver.p_max", "P drawn uniformly from [p_min, p_max]"),
    },
    rules=(_matrix_rule,),
    cache_hit_flag=CACHE_HIT_FLAG,
)
