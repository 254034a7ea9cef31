"""What the report reads from a run directory, loaded once: the run, its points, the
successful post-warm-up samples, the models' fit, and how each series is plotted (its x
axis and the factors that split it into lines)."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from knee.models import analyze
from knee.results import Run, open_run
from knee.run_params import PointParams, point_params, setting

#: Columns the report's figures read from samples.parquet.
SAMPLE_COLUMNS = (
    "point",
    "service",
    "op",
    "intended_ns",
    "received_ns",
    "latency_ns",
    "server_ns",
    "network_ns",
    "queue_ns",
    "service_ns",
    "status",
    "flags",
    "arg",
    "warmup",
)

#: Swept keys that mean "offered load" on an x axis, best first.
LOAD_KEYS = ("load.rate_per_s", "load.clients")


@dataclass
class SeriesAxis:
    """How one series is plotted: x from each point, lines split by the other factors."""

    series: str
    key: str  # "target_rate_per_s" or a swept key such as "driver.p"
    title: str
    factors: list[str]  # the other swept keys: one line per combination

    def x(self, point: dict[str, Any]) -> Any:
        if self.key == "target_rate_per_s":
            return point.get("target_rate_per_s")
        return (point.get("swept") or {}).get(self.key)

    def group(self, point: dict[str, Any]) -> str:
        swept = point.get("swept") or {}
        return " ".join(f"{k.partition('.')[2]}={swept.get(k)}" for k in self.factors)


@dataclass
class ReportRun:
    """A run as the report sections see it (also what system hooks receive)."""

    run: Run
    points: list[dict[str, Any]]
    ok: pd.DataFrame  # status ok, warm-up excluded
    samples: pd.DataFrame  # every sample (time series need the failures too)
    models: list[dict[str, Any]]
    models_error: str | None
    cores: int | None
    axes: dict[str, SeriesAxis] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.run.path

    @property
    def system(self) -> str:
        return str(
            self.run.summary.get("system") or self.run.spec.get("experiment", {}).get("system", "")
        )

    def series(self) -> list[str]:
        """Series names in the order their first point ran."""
        return list(dict.fromkeys(str(p.get("series", "")) for p in self.points))

    def points_of(self, series: str) -> list[dict[str, Any]]:
        return [p for p in self.points if str(p.get("series", "")) == series]

    def model_for(self, series: str) -> dict[str, Any] | None:
        return next((m for m in self.models if m.get("series") == series), None)

    @cached_property
    def params(self) -> dict[int, PointParams]:
        """What each point ran with, as the run directory records it (`knee.run_params`)."""
        return point_params(self.run)

    def setting(self, point: dict[str, Any], key: str) -> Any:
        """A point's value of "section.name" (e.g. "server.threads") as it ran (recorded in
        the run directory; None for a point it does not know)."""
        return setting(self.params.get(int(point["point"])), key)


def load(run_dir: Path) -> ReportRun:
    run = open_run(run_dir)
    points = run.points
    samples = run.samples
    if len(samples):
        samples = samples[[c for c in SAMPLE_COLUMNS if c in samples.columns]]
        samples = samples.assign(status=samples["status"].astype(str))
        ok = samples[(samples["status"] == "ok") & ~samples["warmup"].astype(bool)]
    else:
        ok = samples
    cores = run.env.get("cores")
    models, error = _models(points, run.spec, cores if isinstance(cores, int) else None)
    rr = ReportRun(run, points, ok, samples, models, error, cores)
    rr.axes = {s: series_axis(s, rr.points_of(s)) for s in rr.series()}
    return rr


def _models(
    points: list[dict[str, Any]], spec: dict[str, Any], cores: int | None
) -> tuple[list[dict[str, Any]], str | None]:
    """knee.models.analyze's fit, or no models and why (the report still renders)."""
    if not points:
        return [], None
    try:
        return list(analyze(points, spec, cores)), None
    except Exception as e:  # a model bug must not cost the whole report
        last = traceback.format_exception_only(e)[-1].strip()
        return [], f"knee.models.analyze failed: {last}"


def series_axis(series: str, points: list[dict[str, Any]]) -> SeriesAxis:
    """The x axis of a series: the offered load (rate, else clients) when it is swept or
    fixed, else the last swept key; the other swept keys split it into lines."""
    swept_keys = list(dict.fromkeys(k for p in points for k in (p.get("swept") or {})))
    if "load.rate_per_s" in swept_keys or (
        not swept_keys and all(p.get("target_rate_per_s") is not None for p in points)
    ):
        key = "target_rate_per_s"
    else:
        key = next((k for k in LOAD_KEYS if k in swept_keys), None) or (
            swept_keys[-1] if swept_keys else "target_rate_per_s"
        )
    factors = [
        k
        for k in swept_keys
        if k != key and not (key == "target_rate_per_s" and k == "load.rate_per_s")
    ]
    title = "offered load (requests/s)" if key == "target_rate_per_s" else _title(key)
    return SeriesAxis(series, key, title, factors)


def _title(key: str) -> str:
    if key == "load.clients":
        return "clients (closed loop)"
    return key.partition(".")[2] or key
