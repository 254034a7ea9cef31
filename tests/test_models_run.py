"""Models chosen by the data, over a real run (issue 10): the matrix cache series' fitted
capacity lies within 10% of the throughput measured at saturation.

The run is experiments/matrix.toml's `cache` series (its server, driver and cache settings,
read from the file) at four rates: three below capacity and one over it. The server restarts
with an empty cache at every point: at 20/s the cache hits about 20% of the time, once full
(200 misses, about 255 requests in) about 40%. The old rule fitted the service time at the
lowest rate, cold cache included, and put capacity 25% or more low; the fit pooled over the stable
points with the steady-state hit ratio lands near the measured saturation throughput.

Saturation throughput is measured here from samples.parquet, independently of the stats: OK
replies received per second inside the overloaded point's schedule window (from the first
post-warm-up intended send, over (max - min) n / (n - 1) of the intended times, as in
docs/statistics.md). The long warm-up fills the cache before the window opens, and the queue
never empties in it (requests are still waiting when it closes): the server's output there is
its capacity.

The machine's compute speed drifts: a cache miss took 16.4 ms at saturation in one quiet
run and 19 ms in the next, so either side can move by up to ~10% whatever the model. A run
that misses is repeated once; a second miss fails, with the CPU other processes took in it
(knee's own per-point figures) in the message: a miss is never turned into a skip.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from saturation import Saturation, saturation

import knee
from knee.models import analyze
from knee.runner import run_experiment
from knee.runner.display import Display
from knee.spec import load_spec
from knee.toml_writer import dump_toml

REPO = Path(__file__).resolve().parents[1]
MATRIX = REPO / "experiments" / "matrix.toml"
#: Three loads below the steady-state capacity (~95-100/s on this kind of machine) and one
#: over it. 20/s: few requests, a cold cache (the old rule's fit point); 75 and 85/s: the
#: cache fills during the warm-up, and their service times are measured at a utilization of
#: 0.75-0.9. On this VM a miss computed 10-13% slower at a utilization of 0.6-0.7 than back
#: to back (whatever the model: the host runs a busy vCPU faster), so the fit leans on the
#: busiest stable points, which the count weighting gives the most say. The overloaded
#: point runs between them, so that a drift in the machine's other load touches the fit and
#: the saturation alike.
RATES_PER_S = [20, 75, 120, 85]
#: A long warm-up: at 65/s and above the cache is full (~255 requests) when it ends.
WARMUP_S = 4.5
DURATION_S = 9.0
TOLERANCE = 0.10
#: Other processes' CPU (core-percent, knee's interference figures) beyond which a point's
#: service time is no longer this machine's own: with more than half a core taken on 2
#: cores, service times moved by 10-50% from point to point while this test was written.
#: A second miss with such a point still fails; its message says the CPU was disturbed.
DISTURBED_PERCENT = 50.0


def _spec(tmp: Path) -> Path:
    """The cache series of experiments/matrix.toml, at the rates above."""
    doc = tomllib.loads(MATRIX.read_text())
    cache = doc["series"]["cache"]
    spec = {
        "experiment": {"name": "models-cache", "system": "matrix", "seed": 1},
        "server": doc["server"] | cache.get("server", {}),
        "driver": doc["driver"] | cache.get("driver", {}),
        "load": doc["load"] | {"warmup_s": WARMUP_S, "duration_s": DURATION_S},
        "series": {"cache": {"sweep": {"load.rate_per_s": RATES_PER_S}}},
    }
    assert spec["server"]["cache"] > 0 and spec["load"]["schedule"] == "poisson"
    path = tmp / "cache.toml"
    path.write_text(dump_toml(spec))
    return path


def run_cache_series(tmp: Path) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    spec = load_spec(_spec(tmp))
    return run_experiment(spec, tmp / "runs", Display(Console(quiet=True), enabled=False))


def _points_with_cache(run_dir: Path) -> list[dict[str, Any]]:
    """summary.json's points, each with its "cache" figures (point_stats writes them for a
    matrix server with a cache)."""
    points = knee.open_run(run_dir).points
    assert all(p.get("cache") for p in points), [p.get("cache") for p in points]
    return points


@dataclass
class Outcome:
    fitted_per_s: float
    measured: Saturation
    old_per_s: float  # the old rule: capacity from the lowest load's mean service time
    entry: dict[str, Any]
    points: list[dict[str, Any]]
    foreign_percent: float  # the most CPU other processes used in a point (core-percent)

    @property
    def error(self) -> float:
        return self.fitted_per_s / self.measured.throughput_per_s - 1

    @property
    def saturated(self) -> bool:
        """The overloaded point kept a queue through its window, and its cache was (about)
        full when the window opened: 200 misses fill it, about 255 requests."""
        return self.measured.waiting > 50 and self.measured.before >= 250

    @property
    def ok(self) -> bool:
        return self.saturated and abs(self.error) <= TOLERANCE  # False for a nan fit

    def text(self) -> str:
        (group,) = self.entry["groups"]
        cache = (group["fit"] or {}).get("cache") or {}
        sat = self.measured
        return (
            f"fitted capacity {self.fitted_per_s:.1f}/s (fit points {group['fit_points']}, "
            f"steady hit ratio {cache.get('hit_ratio_steady', float('nan')):.3f}); measured "
            f"saturation {sat.throughput_per_s:.1f}/s (hit ratio {sat.hit_ratio:.3f}, "
            f"{sat.before} served before the window, {sat.waiting} waiting at its end): "
            f"{self.error:+.1%}; lowest-point fit {self.old_per_s:.1f}/s; others' CPU up to "
            f"{self.foreign_percent:.0f}% of a core"
        )


def measure(run_dir: Path) -> Outcome:
    points = _points_with_cache(run_dir)
    run = knee.open_run(run_dir)
    cores = json.loads((run_dir / "env.json").read_text()).get("cores") or os.cpu_count()
    entries = analyze(points, run.spec, cores)
    # No entry: not one point was stable (a machine too busy to keep up even at 20/s).
    entry = entries[0] if entries else {"groups": [{"fit": None, "fit_points": []}]}
    primary = next((m for m in entry.get("models") or [] if m["primary"]), None)
    overloaded = max(points, key=lambda p: p["target_rate_per_s"])
    lowest = min(points, key=lambda p: p["target_rate_per_s"])
    foreign = [(p.get("interference") or {}).get("foreign_cpu_percent_mean") or 0.0 for p in points]
    return Outcome(
        fitted_per_s=primary["capacity_per_s"] if primary else float("nan"),
        measured=saturation(run.samples, overloaded["point"]),
        old_per_s=1e9 / lowest["service_ns"]["mean"],
        entry=entry,
        points=points,
        foreign_percent=max(foreign),
    )


def test_cache_fit_capacity_matches_saturation_throughput(tmp_path: Path) -> None:
    outcome = measure(run_cache_series(tmp_path / "first"))
    print(f"\n{outcome.text()}")
    if not outcome.ok:
        # Once more: this VM's compute speed drifts between points of one run even when
        # nothing else runs (a miss took 16.4 ms at saturation in one run, 19 ms in the
        # next), which moves either side by up to ~10%. A wrong fit (the lowest point's:
        # 22-33% low) misses twice.
        outcome = measure(run_cache_series(tmp_path / "again"))
        print(f"again: {outcome.text()}")
    entry, points = outcome.entry, outcome.points
    (group,) = entry["groups"]
    primary = next((m for m in entry.get("models") or [] if m["primary"]), None)
    assert primary is not None, f"no model: {outcome.text()}"
    overloaded = max(points, key=lambda p: p["target_rate_per_s"])
    # The overloaded point was fitted by no model; the fit used the cache's steady state and
    # M/G/1 for the hit/miss mixture.
    assert overloaded["point"] not in group["fit_points"]
    if "stability" in overloaded:
        assert overloaded["stability"]["verdict"] == "unstable"
        assert overloaded["point"] in group["unstable_points"]
    assert group["fit"]["cache"] is not None and primary["kind"] == "M/G/1"
    disturbed = outcome.foreign_percent > DISTURBED_PERCENT
    why = " (other processes took the CPU this test measures)" if disturbed else ""
    assert outcome.saturated, outcome.text() + why
    assert abs(outcome.error) <= TOLERANCE, outcome.text() + why
    # The test tells the fits apart: the lowest-point fit misses by more than the tolerance.
    assert abs(outcome.old_per_s / outcome.measured.throughput_per_s - 1) > TOLERANCE
