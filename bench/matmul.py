#!/usr/bin/env python3
"""GFLOP/s of knee-node's 50 x 50 f64 matrix product against numpy's `a @ b` (OpenBLAS).

Both do the same number of 50 x 50 products, one after the other; the two alternate,
3 times, and the medians are compared. A product counts 2 n^3 flops.

    python3 bench/matmul.py
    python3 bench/matmul.py --smoke     # 2,000 products, once each: a second or two
"""

import argparse
import json
import resource
import sys
import time

import numpy as np
from benchlib import BenchError, find_knee_node, json_lines, median, run_child

N = 50
PRODUCTS = 20_000
REPEATS = 3
KNEE_TIMEOUT_S = 120.0


def knee_gflops() -> float:
    cmd = [str(find_knee_node()), "gemm-rate", str(N), str(PRODUCTS)]
    lines = json_lines(run_child(cmd, timeout_s=KNEE_TIMEOUT_S).stdout)
    if not lines or "gflop_per_s" not in lines[-1]:
        raise BenchError("knee-node gemm-rate printed no gflop_per_s")
    return float(lines[-1]["gflop_per_s"])


def stochastic_matrix(rng: np.random.Generator) -> np.ndarray:
    """Rows sum to 1, like knee-node's matrix: repeated products stay finite."""
    m = rng.random((N, N))
    return m / m.sum(axis=1, keepdims=True)


def numpy_gflops(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """GFLOP/s of PRODUCTS `a @ b`, and the loop's CPU/wall ratio (1.0 = one busy thread)."""
    cpu0, t0 = _self_cpu_s(), time.perf_counter()
    for _ in range(PRODUCTS):
        _ = a @ b
    wall = time.perf_counter() - t0
    return 2.0 * N**3 * PRODUCTS / wall / 1e9, (_self_cpu_s() - cpu0) / wall


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _listed(values: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in values)


def main() -> int:
    global PRODUCTS, REPEATS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="2,000 products, once each")
    if parser.parse_args().smoke:
        PRODUCTS, REPEATS = 2_000, 1
    rng = np.random.default_rng(1)
    a, b = stochastic_matrix(rng), stochastic_matrix(rng)
    knee_runs: list[float] = []
    numpy_runs: list[float] = []
    cpu_per_wall: list[float] = []
    try:
        for i in range(REPEATS):
            if i % 2 == 1:  # swap the order every other round
                knee_runs.append(knee_gflops())
            gflops, busy = numpy_gflops(a, b)
            numpy_runs.append(gflops)
            cpu_per_wall.append(busy)
            if i % 2 == 0:
                knee_runs.append(knee_gflops())
    except (BenchError, OSError) as e:
        print(f"matmul: broken: {e}", file=sys.stderr)
        return 1
    k, n = median(knee_runs), median(numpy_runs)
    print(f"{N}x{N} f64 products, {PRODUCTS} per run, medians of {REPEATS} runs")
    print(f"  knee-node gemm-rate: {k:7.2f} GFLOP/s   runs: {_listed(knee_runs)}")
    print(f"  numpy a @ b:         {n:7.2f} GFLOP/s   runs: {_listed(numpy_runs)}")
    print(f"  numpy loop CPU/wall: {median(cpu_per_wall):.2f} (1 = one busy thread)")
    print(f"  ratio knee/numpy:    {k / n:.3f}")
    summary = {"knee_gflop_per_s": k, "numpy_gflop_per_s": n, "ratio_knee_over_numpy": k / n}
    print(json.dumps({key: round(v, 4) for key, v in summary.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
