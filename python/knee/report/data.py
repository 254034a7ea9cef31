"""What the report reads from a run directory: the run and its points, the models' fit,
and how each series is plotted (its x axis and the factors that split it into lines),
loaded once; the samples a point at a time, only the columns and rows a figure needs, so
a run of any size is reported in the memory of its largest point."""

from __future__ import annotations

import json
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.compute as pc

from knee import contract
from knee.models import analyze
from knee.models.fit import Settings
from knee.models.types import SeriesModels
from knee.report.types import FindDoc, Probe, models_read, points_read
from knee.results import Run, open_run
from knee.run_params import PointParams, point_params, setting
from knee.stats.summary import PointStats, RunAnswers

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
    # What flags and arg are called in the systems that name them (knee.contract.columns).
    *sorted(
        {
            n
            for s in contract.SYSTEMS
            for f, n in contract.columns(s).items()
            if f in ("flags", "arg")
        }
    ),
    "warmup",
)

#: The rows most figures read: successful requests after the warm-up.
OK_AFTER_WARMUP = (pc.field("status") == "ok") & ~pc.field("warmup")

#: A search's path and answers (written by knee.find.run).
FIND = "find.json"

#: Swept keys that mean "offered load" on an x axis, best first.
LOAD_KEYS = ("load.rate_per_s", "load.clients")


@dataclass
class SeriesAxis:
    """How one series is plotted: x from each point, lines split by the other factors."""

    series: str
    key: str  # "target_rate_per_s" or a swept key such as "driver.p"
    title: str
    factors: list[str]  # the other swept keys: one line per combination

    def x(self, point: PointStats) -> Any:
        if self.key == "target_rate_per_s":
            return point.get("target_rate_per_s")
        return (point.get("swept") or {}).get(self.key)

    def group(self, point: PointStats) -> str:
        swept = point.get("swept") or {}
        return " ".join(f"{k.partition('.')[2]}={swept.get(k)}" for k in self.factors)


@dataclass
class ReportRun:
    """A run as the report sections see it (also what system hooks receive)."""

    run: Run
    points: list[PointStats]
    models: list[SeriesModels]
    models_error: str | None
    cores: int | None
    axes: dict[str, SeriesAxis] = field(default_factory=dict)

    @cached_property
    def samples(self) -> pd.DataFrame:
        """Every sample of the run (SAMPLE_COLUMNS, status as text), read whole on first
        use: for small runs. The standard sections read a point at a time instead
        (`point_samples`, `point_ok`), which a run of any size fits in memory."""
        samples = self.run.samples
        if not len(samples):
            return samples
        samples = samples[[c for c in SAMPLE_COLUMNS if c in samples.columns]]
        return samples.assign(status=samples["status"].astype(str))

    @cached_property
    def ok(self) -> pd.DataFrame:
        """Every successful post-warm-up sample of the run, read whole on first use (see
        `samples`)."""
        samples = self.samples
        if not len(samples):
            return samples
        return samples[(samples["status"] == "ok") & ~samples["warmup"].astype(bool)]

    def sample_points(self) -> list[int]:
        """The points that have samples."""
        return self.run.sample_points()

    def point_samples(self, point: Any, columns: Sequence[str]) -> pd.DataFrame:
        """One point's samples, `columns` only (failures and warm-up included)."""
        return self.run.point_samples(int(point), columns)

    def point_ok(self, point: Any, columns: Sequence[str]) -> pd.DataFrame:
        """One point's successful post-warm-up samples, `columns` only (none for a point
        without samples)."""
        if point is None:
            return pd.DataFrame(columns=list(columns))
        return self.run.point_samples(int(point), columns, OK_AFTER_WARMUP)

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

    def points_of(self, series: str) -> list[PointStats]:
        return [p for p in self.points if str(p.get("series", "")) == series]

    def model_for(self, series: str) -> SeriesModels | None:
        return next((m for m in self.models if m.get("series") == series), None)

    @cached_property
    def find(self) -> RunAnswers | None:
        """summary.json's `find` (a search's answers), None for a run that is not a search."""
        return self.run.summary.get("find")

    @cached_property
    def find_probes(self) -> list[Probe]:
        """find.json's probes (the search path, in the order they ran); [] without it."""
        path = self.path / FIND
        if not path.is_file():
            return []
        doc: FindDoc = json.loads(path.read_text(encoding="utf-8"))
        probes = doc.get("probes")
        return list(probes) if isinstance(probes, list) else []

    @property
    def slo(self) -> str | None:
        """The run's latency objective (`experiment.slo`, or a search's --slo)."""
        found = self.find.get("slo") if self.find is not None else None
        spec_slo = self.run.spec.get("experiment", {}).get("slo")
        return str(found or spec_slo) if (found or spec_slo) else None

    @cached_property
    def params(self) -> dict[int, PointParams]:
        """What each point ran with, as the run directory records it (`knee.run_params`)."""
        return point_params(self.run)

    def setting(self, point: PointStats, key: str) -> Any:
        """A point's value of "section.name" (e.g. "server.threads") as it ran (recorded in
        the run directory; None for a point it does not know)."""
        return setting(self.params.get(int(point["point"])), key)


def load(run_dir: Path) -> ReportRun:
    """The run as the report sees it; its samples are read later, a point at a time."""
    run = open_run(run_dir)
    points = points_read(run.points)
    cores = run.env.get("cores")
    params = point_params(run)
    models, error = _models(
        points,
        lambda p, key: setting(params.get(int(p["point"])), key),
        cores if isinstance(cores, int) else None,
    )
    rr = ReportRun(run, points, models, error, cores)
    rr.axes = {s: series_axis(s, rr.points_of(s)) for s in rr.series()}
    return rr


def _models(
    points: list[PointStats], settings: Settings, cores: int | None
) -> tuple[list[SeriesModels], str | None]:
    """knee.models.analyze's fit, or no models and why (the report still renders)."""
    if not points:
        return [], None
    try:
        return models_read(analyze(points, settings, cores)), None
    except Exception as e:  # a model bug must not cost the whole report
        last = traceback.format_exception_only(e)[-1].strip()
        return [], f"knee.models.analyze failed: {last}"


def series_axis(series: str, points: list[PointStats]) -> SeriesAxis:
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
