"""Every benchmark in bench/ runs to completion in its smoke mode (`--smoke`, seconds) and
prints its ratio line, so that none breaks unnoticed (issue 31: share_throughput.py failed
every time for weeks). Its figures are not judged here: only that it ran (exit 0) and ended
with one JSON line holding at least one ratio (a number under a key naming a ratio, or
"x_over_y"), the figure each bench divides by a baseline it runs.

scripts/test runs this file on its own, one line per bench.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Every bench with its smoke mode.
BENCHES = [
    "share_throughput",
    "matmul",
    "echo_overhead",
    "stats_speed",
    "http_vs_wrk",
    "http_servers",
    "exhaustion",
    "report_scale",
    "bottleneck_truth",
    "find_accuracy",
    "slices_goals",
    "h2_vs_h2load",
    "grpc_vs_ghz",
    "live_cost",
    "host_start",
]
#: Seconds a smoke run may take on a busy 2-core machine (they take 1 to 40 s).
SMOKE_TIMEOUT_S = 240.0


def ratios(value: Any, key: str = "") -> list[float]:
    """The numbers under keys that name a ratio, at any depth of a JSON value."""
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in ratios(v, str(k))]
    named = "ratio" in key or "_over_" in key
    if named and isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)]
    return []


def test_every_bench_has_a_smoke_run_here() -> None:
    """A new bench is added to BENCHES."""
    found = {p.stem for p in (REPO / "bench").glob("*.py")} - {"benchlib"}
    assert set(BENCHES) == found


@pytest.mark.parametrize("bench", BENCHES)
def test_bench_smoke_runs_and_prints_its_ratio_line(bench: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / f"{bench}.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=SMOKE_TIMEOUT_S,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO / "python")},
    )
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr}"
    last = proc.stdout.strip().splitlines()[-1]
    found = ratios(json.loads(last))
    assert found and all(math.isfinite(x) for x in found), last
