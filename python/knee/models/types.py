"""The shapes the models write (knee.models.analyze.analyze and the `to_json` of their
parts): TypedDicts, so that the type checker reads every key their readers take. They add
no key and drop none. A group's knee (model_knee, measured_knee) is in knee.stats.summary,
since summary.json's answers carry it.
"""

from __future__ import annotations

from typing import TypedDict

from knee.config_values import ConfigTable
from knee.stats.summary import MeasuredKnee


class CurvePoint(TypedDict):
    """One prediction of a model's curve."""

    x: float
    mean_ns: float
    p50_ns: float | None
    p99_ns: float | None


class ModelPoint(TypedDict):
    """A measured point against a model (analyze._compare)."""

    point: int
    x: float
    target_x: float | None
    stable: bool
    measured_mean_ns: float
    measured_ci: list[float] | None
    predicted_mean_ns: float | None
    predicted_p99_ns: float | None
    flag: bool
    detail: str


class Model(TypedDict):
    """One model of one group of a series (analyze._model_entry)."""

    kind: str  # "M/M/1", "M/G/1", "M/D/1", "M/M/c", "MVA"
    servers: int
    servers_source: str  # "declared", "estimated", "assumed"
    label: str
    primary: bool
    reference: bool
    limited_by: str | None  # "cores"
    group: ConfigTable  # the swept settings of its group (values as swept: any TOML)
    service_mean_ns: float
    service_cs2: float
    delay_ns: float
    fit_points: list[int]
    capacity_per_s: float
    capacity_ci_per_s: list[float] | None
    knee_x: float
    knee_ci_x: list[float] | None
    curve: list[CurvePoint]
    points: list[ModelPoint]


class ServersEstimateJson(TypedDict):
    """knee.models.servers.ServersEstimate.to_json: the servers c = X_sat E[S]."""

    c: int
    value: float | None
    interval: list[float] | None
    throughput_per_s: float | None
    throughput_ci_per_s: list[float] | None
    throughput_point: int | None
    service_ns: float | None
    service_ci_ns: list[float] | None
    service_from: str | None  # "server_ns", "low_load_latency"
    detail: str


class CachePointJson(TypedDict):
    """knee.models.fit.CachePoint.to_json: one point's cache figures as the fit saw them."""

    point: int
    x: float
    hit_ratio_steady: float
    n_steady: int
    n_hits_steady: int
    hit_ratio_whole: float
    full: bool


class CacheFitJson(TypedDict):
    """knee.models.fit.CacheFit.to_json: a result cache's steady state over a group."""

    hit_ratio_steady: float
    hit_ratio_steady_ci: list[float]
    n_steady: int
    hit_ratio_whole: float
    hit_service_mean_ns: float
    miss_service_mean_ns: float
    points: list[CachePointJson]


class FitJson(TypedDict):
    """knee.models.fit.Fit.to_json: the fitted service time and delay."""

    service_mean_ns: float
    service_ci_ns: list[float] | None
    service_cs2: float
    delay_ns: float
    points: list[int]
    n: int
    cache: CacheFitJson | None


class ModelGroup(TypedDict):
    """One group of a series' points (same settings, same thread count)."""

    group: ConfigTable  # its swept settings (values as swept: any TOML)
    servers: int
    servers_source: str
    servers_estimate: ServersEstimateJson
    primary: str | None
    fits: bool | None
    fit: FitJson | None
    fit_points: list[int]
    unstable_points: list[int]
    measured_knee: MeasuredKnee | None


class SeriesModels(TypedDict):
    """One series' entry of knee.models.analyze.analyze."""

    series: str
    x: str  # "rate_per_s" or "clients"
    cores: int | None
    models: list[Model]
    groups: list[ModelGroup]
    primary: str  # the kind of most groups' primary model
    note: str
