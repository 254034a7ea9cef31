"""What each point of a run ran with, as the run directory records it: the one place that
writes and reads `plan.json` and `points/pNNN.json`.

    plan.json         written before the first point starts: the experiment, the event
                      timeline and every planned point (also those a failed run never reached)
    points/pNNN.json  one per point that started, rewritten atomically as the point starts,
                      as each of its nodes starts, as each timeline event is applied, and as
                      it ends: its status, its nodes as started and the events applied

Each point holds its resolved sections as `knee.params.Point` has them (experiment, server,
load, driver: every default filled, series overrides and swept values applied, the system's
rules run), its series, label and swept values. The analysis and the report read a point's
parameters only through `point_params` and `setting`, never from the spec or the systems.

A run directory written before these records existed (no plan.json) falls back to spec.toml:
its points are expanded again here, and only here (series in order, the product of each
sweep, the last key fastest; top level, then the series' overrides, then the swept values).
That fallback cannot run a system's rules (values a rule completes are as the spec gave them)
and says so: ``PointParams.recorded`` is False.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from knee.config_values import ConfigTable
from knee.params import AppliedEvent, Point, TimelineEvent
from knee.results import Run, write_json

PLAN = "plan.json"
POINTS = "points"
#: The sections of a point, as in knee.params.Point.
SECTIONS = ("experiment", "server", "load", "driver")
#: A point's status: planned (never started), running (the run stopped inside it without
#: saying how: the runner itself was killed), complete, failed, interrupted.
STATUSES = ("planned", "running", "complete", "failed", "interrupted")


class StartedNode(TypedDict):
    """A node of a point as started (knee.runner.lifecycle)."""

    name: str
    role: str
    records: bool
    host: NotRequired[str]  # (a run directory before placement has neither)
    limits: NotRequired[dict[str, str | float]]  # knee.hosts.RunHosts.limits_of
    config: ConfigTable  # its JSON config, every placeholder replaced


@dataclass
class PlannedPoint:
    """A point of plan.json: what it was planned to run with."""

    point: int
    series: str
    label: str
    swept: ConfigTable
    experiment: ConfigTable
    server: ConfigTable
    load: ConfigTable
    driver: ConfigTable


@dataclass
class PointParams(PlannedPoint):
    """One point: what it was planned to run with and, once started, what it ran."""

    status: str = "planned"
    #: Seconds since the run's start (the clock of events.parquet); None until it happens.
    started_s: float | None = None
    ended_s: float | None = None
    #: Each node as started, in start order: name, role, records (bool), config (JSON, every
    #: placeholder replaced).
    topology: list[StartedNode] = field(default_factory=list)
    #: The timeline events as applied: at_s, action, node, t_s, outcome.
    events: list[AppliedEvent] = field(default_factory=list)
    #: False when re-derived from spec.toml (a run directory older than these records).
    recorded: bool = True

    def setting(self, key: str) -> Any:
        """The value of "section.name" (e.g. "server.threads"); None when absent."""
        return setting(self, key)


def setting(params: PointParams | None, key: str) -> Any:
    """A point's value of "section.name" (e.g. "server.threads"); None when the point or the
    key is unknown."""
    if params is None:
        return None
    section, _, name = key.partition(".")
    if section not in SECTIONS:
        raise KeyError(f"{key!r}: expected section.name with section in {', '.join(SECTIONS)}")
    return getattr(params, section).get(name)


# ------------------------------------------------------------------ writing (the runner)


def from_point(point: Point) -> PointParams:
    """A planned point's record."""
    return PointParams(
        point=point.index,
        series=point.series,
        label=point.label,
        swept=dict(point.swept),
        experiment=dict(point.experiment),
        server=dict(point.server),
        load=dict(point.load),
        driver=dict(point.driver),
    )


def write_plan(
    run_dir: Path, experiment: ConfigTable, events: list[TimelineEvent], points: list[Point]
) -> None:
    """plan.json: the experiment, the event timeline and every planned point."""
    (run_dir / POINTS).mkdir(exist_ok=True)
    plan = {
        "experiment": experiment,
        "events": events,
        "points": [_planned_dict(from_point(p)) for p in points],
    }
    write_json(run_dir / PLAN, plan)


def write_point(run_dir: Path, params: PointParams) -> None:
    """points/pNNN.json, atomically (a crashed run leaves the last complete version)."""
    record = {k: v for k, v in asdict(params).items() if k != "recorded"}
    write_json(run_dir / POINTS / f"p{params.point:03d}.json", record)


def _planned_dict(params: PointParams) -> dict[str, object]:
    """The planned part of a point's record: PlannedPoint's fields, in their order."""
    return {f.name: getattr(params, f.name) for f in fields(PlannedPoint)}


# ------------------------------------------------------------------ reading


def planned(run: Run | str | os.PathLike[str]) -> list[PointParams]:
    """Every planned point, in order (from plan.json, else expanded from spec.toml)."""
    run_dir = _path(run)
    plan = _read_json(run_dir / PLAN)
    if plan is not None:
        return [_params(p) for p in plan.get("points", [])]
    spec_path = run_dir / "spec.toml"
    if not spec_path.exists():
        return []
    return _from_spec(tomllib.loads(spec_path.read_text()))


def point_params(run: Run | str | os.PathLike[str]) -> dict[int, PointParams]:
    """Every planned point by index, each replaced by its record once it started (read
    again only when the records changed: an atomic rewrite changes the folder's mtime)."""
    run_dir = _path(run)
    return dict(_point_params(run_dir, _mtime_ns(run_dir / PLAN), _mtime_ns(run_dir / POINTS)))


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0


#: Runs whose records are kept in memory (a report reads one or two).
@functools.lru_cache(maxsize=8)
def _point_params(run_dir: Path, _plan_ns: int, _points_ns: int) -> dict[int, PointParams]:
    out = {p.point: p for p in planned(run_dir)}
    for path in sorted((run_dir / POINTS).glob("p*.json")):
        record = _read_json(path)
        if record is not None:
            params = _params(record)
            out[params.point] = params
    return dict(sorted(out.items()))


def timeline(run: Run | str | os.PathLike[str]) -> list[TimelineEvent]:
    """The spec's event timeline (the same for every point): at_s, action, node."""
    run_dir = _path(run)
    plan = _read_json(run_dir / PLAN)
    if plan is not None:
        return list(plan.get("events", []))
    spec_path = run_dir / "spec.toml"
    spec = tomllib.loads(spec_path.read_text()) if spec_path.exists() else {}
    return list(spec.get("events", []))


def _path(run: Run | str | os.PathLike[str]) -> Path:
    return run.path if isinstance(run, Run) else Path(run)


def _params(record: dict[str, Any]) -> PointParams:
    """A record as written by this or a later version (keys this one does not know are
    left out)."""
    known = {f.name for f in fields(PointParams)}
    return PointParams(**{k: v for k, v in record.items() if k in known})


def _read_json(path: Path) -> Any:
    """The file's JSON, or None when it is absent or cut short."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _from_spec(spec: dict[str, Any]) -> list[PointParams]:
    """The points of an older run directory, expanded from its resolved spec.toml (which has
    every top-level default filled)."""
    experiment = dict(spec.get("experiment", {}))
    all_series = spec.get("series") or {"main": {"sweep": spec.get("sweep", {})}}
    out: list[PointParams] = []
    for name, series in all_series.items():
        sweep = series.get("sweep") or {}
        for values in itertools.product(*sweep.values()):
            swept = dict(zip(sweep, values, strict=True))
            sections: dict[str, dict[str, Any]] = {}
            for section in SECTIONS[1:]:
                merged = {**spec.get(section, {}), **series.get(section, {})}
                merged |= {
                    k.partition(".")[2]: v for k, v in swept.items() if k.startswith(section + ".")
                }
                sections[section] = merged
            point = Point(len(out), name, swept, experiment, **sections)
            params = from_point(point)
            params.recorded = False
            out.append(params)
    return out
