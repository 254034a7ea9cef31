"""knee.analysis.matrix on a run directory written here (spec.toml and summary.json with
hand-picked numbers): the series found by what they sweep, the knee, the thread pool where
capacity stops growing, the cache's gain; and nothing but the run directory is read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import knee
from knee.analysis import matrix

SPEC = """
[experiment]
name = "matrix-analysis"
system = "matrix"

[server]
threads = 1
cache = 0

[series.rate]
sweep = { "load.rate_per_s" = [100, 200, 300] }

[series.cached]
server = { cache = 200 }
sweep = { "load.rate_per_s" = [100, 200] }

[series.pool]
sweep = { "server.threads" = [1, 2, 4], "load.rate_per_s" = [300] }
"""


def _point(n: int, series: str, swept: dict, mean_ms: float, service_ms: float, **kw) -> dict:
    return {
        "point": n,
        "series": series,
        "swept": swept,
        "target_rate_per_s": swept.get("load.rate_per_s"),
        "latency_ok_ns": {"mean": mean_ms * 1e6},
        "service_ns": {"mean": service_ms * 1e6},
        **kw,
    }


@pytest.fixture
def run(tmp_path: Path) -> knee.Run:
    rate = "load.rate_per_s"
    points = [
        # Flat, then past the knee (2x the first mean) at the third; the compute time of
        # the same work doubles at 300/s: the cores were shared.
        _point(0, "rate", {rate: 100}, 4.0, 3.0, achieved_rate_per_s=99.0),
        _point(1, "rate", {rate: 200}, 6.0, 3.0, achieved_rate_per_s=201.0),
        _point(2, "rate", {rate: 300}, 40.0, 6.0, achieved_rate_per_s=290.0),
        _point(3, "cached", {rate: 100}, 1.0, 1.0, cache={"hit_ratio": 0.6}),
        _point(4, "cached", {rate: 200}, 1.5, 1.0, cache={"hit_ratio": 0.8}),
        # Capacity 1/3 ms = 333/s, 2/4 ms = 500/s, 4/7.5 ms = 533/s: beyond 2 threads no
        # pool gains more than 10%.
        _point(5, "pool", {"server.threads": 1, rate: 300}, 30.0, 3.0),
        _point(6, "pool", {"server.threads": 2, rate: 300}, 9.0, 4.0),
        _point(7, "pool", {"server.threads": 4, rate: 300}, 8.0, 7.5),
    ]
    (tmp_path / "spec.toml").write_text(SPEC)
    (tmp_path / "summary.json").write_text(json.dumps({"points": points}))
    return knee.open_run(tmp_path)


def test_series_are_found_by_what_they_sweep(run: knee.Run) -> None:
    assert matrix.roles(run) == matrix.Roles(None, "rate", "cached", "pool")
    assert matrix.setting(run, run.points[3], "server.cache") == 200  # the series' override
    assert matrix.setting(run, run.points[0], "server.cache") == 0  # the top level


def test_rate_curve_knee_and_contention(run: knee.Run) -> None:
    curve = matrix.rate_curve(run, "rate")
    assert list(curve["rate_per_s"]) == [99.0, 201.0, 290.0]  # achieved, where models put x
    assert list(curve["mean_ms"]) == [4.0, 6.0, 40.0]
    assert matrix.past_knee(curve["mean_ms"]) == 2
    c = matrix.contention(curve)
    assert c == matrix.Contention(3e6, 100.0, 6e6, 300.0)


def test_threads_capacity_stops_growing(run: knee.Run) -> None:
    table = matrix.threads_table(run, "pool")
    assert list(table["threads"]) == [1, 2, 4]
    assert list(table["capacity_per_s"]) == pytest.approx([1000 / 3, 500.0, 4000 / 7.5])
    assert matrix.threads_stop(table["capacity_per_s"]) == 1
    assert matrix.core_bound_per_s(2, 3.0) == pytest.approx(2000 / 3)


def test_cache_hits_comparison_and_gain(run: knee.Run) -> None:
    hits = matrix.cache_hits(run, "cached")
    assert hits.entries == 200 and hits.hit_ratio == pytest.approx(0.7)
    both = matrix.cache_comparison(run, "rate", "cached")
    assert both.values.tolist() == [[100.0, 4.0, 1.0], [200.0, 6.0, 1.5]]
    gain = matrix.cache_gain(run, "rate", "cached")
    assert gain is not None and gain.gain == pytest.approx(4.0)  # mean 4 ms vs 1 ms


def test_the_analysis_reads_the_run_directory_only() -> None:
    code = (
        "import sys, knee.analysis.matrix; "
        "print([m for m in sys.modules if m.startswith(('knee.spec', 'knee.systems'))])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
