"""Experiment specs: read a TOML file, apply a preset, validate, fill defaults, expand sweeps.

Every problem is reported as one SpecError whose str() is a single line
``<file>: <dotted key>: <what was expected, what was given>``.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import math
import os
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from knee.config_values import ConfigValue, items, pairs, text
from knee.hosts.spec import Placement, check_nodes, check_placement, check_rules
from knee.params import (
    EXPERIMENT,
    LOAD,
    REQUIRED,
    SPEC_DIR,
    Param,
    Point,
    Rule,
    RuleError,
    Schema,
    Sections,
    TimelineEvent,
)
from knee.stats import slo
from knee.systems import SYSTEMS, plan_nodes

SECTIONS = ("server", "load", "driver")  # the sections a series overrides and a sweep varies
_HOSTS = ("hosts", "placement", "limits")  # where nodes run (knee.hosts.spec)
_TOP_LEVEL = ("experiment", *SECTIONS, "sweep", "series", "events", *_HOSTS, "presets")
EVENT: Schema = {
    "at_s": Param("float", REQUIRED, "seconds after the point's load started", min=0),
    "action": Param(
        "str",
        REQUIRED,
        "kill: SIGKILL; stop: SIGTERM; start: start it again (on its previous address); "
        "freeze: SIGSTOP; resume: SIGCONT",
        choices=("kill", "stop", "start", "freeze", "resume"),
    ),
    "node": Param(
        "str",
        REQUIRED,
        "a node of the point (e.g. server, replica-0), or 'primary': the replica that is "
        "primary when the event is due (systems whose replicas report it: chat)",
    ),
}


#: The node name an event uses for "the current primary" (resolved by the runner).
PRIMARY = "primary"
_SERIES_KEYS = ("description", *SECTIONS, "sweep", "placement")
_DESCRIPTION = Param("str", "", "one line shown in the report")
Doc = dict[str, Any]  # a TOML table
Schemas = dict[str, Schema]  # {"server": ..., "load": ..., "driver": ...} of one system
_NAME = re.compile(r"[A-Za-z0-9_-]+")
_PAIR = "[rate_per_s, duration_s]"
_PAIRS = f"a non-empty list of {_PAIR} pairs"
#: An experiment's name is the start of its run directory's name (plus a 20-character
#: timestamp): a file name has at most 255 bytes.
MAX_NAME_CHARS = 100
_TOML_TYPES = dict(boolean=bool, integer=int, float=float, string=str, array=list, table=dict)


class SpecError(Exception):
    """A spec that cannot be run. ``str(err)`` is ``f"{path}: {key}: {message}"``, one line."""

    def __init__(self, path: str | os.PathLike[str], key: str, message: str) -> None:
        self.path = os.fspath(path)
        self.key = key
        self.message = " ".join(message.splitlines())
        super().__init__(f"{self.path}: {self.key}: {self.message}")


@dataclass(frozen=True)
class Spec:
    path: str
    preset: str | None
    experiment: dict[str, Any]
    resolved: dict[str, Any]  # merged, defaulted spec without presets; dump_toml() writes it
    points: list[Point]
    presets: list[str]  # preset names defined in the file
    events: list[TimelineEvent]  # the timeline of every point, sorted by at_s
    placement: Placement = Placement()  # hosts, which node runs where, per-node limits


# ---------------------------------------------------------------- cross-field rules


def _load_rule(s: Sections) -> None:
    load = s["load"]
    if load["steps"] is not None:
        load["steps"] = _check_steps(items(load, "steps"))
    schedule = load["schedule"]
    if schedule in ("poisson", "constant") and load["rate_per_s"] is None:
        rate = LOAD["rate_per_s"].expected()
        raise RuleError("load.rate_per_s", f"missing (schedule {schedule!r} needs {rate})")
    if schedule == "steps":
        if load["steps"] is None:
            raise RuleError("load.steps", f"missing (schedule 'steps' needs {_PAIRS})")
        if load["duration_s"] is None:
            load["duration_s"] = float(sum(d for _, d in pairs(load, "steps")))
            if not _in_range(LOAD["duration_s"], load["duration_s"]):
                total, most = load["duration_s"], LOAD["duration_s"].expected()
                raise RuleError("load.steps", f"steps last {total:g} s; expected {most}")
    elif load["duration_s"] is None and load["requests"] is None:
        raise RuleError(
            "load.duration_s", f"missing: give duration_s or requests (schedule {schedule!r})"
        )


def _check_steps(steps: list[ConfigValue]) -> list[ConfigValue]:
    if not steps:
        raise RuleError("load.steps", f"expected {_PAIRS}, got [] (array)")
    pairs: list[list[ConfigValue]] = []
    for i, step in enumerate(steps):
        if not isinstance(step, list) or len(step) != 2:
            raise RuleError(f"load.steps[{i}]", f"expected a {_PAIR} pair, got {_given(step)}")
        pairs.append(step)
    params = (LOAD["rate_per_s"], LOAD["duration_s"])
    return [
        [_coerce(f"load.steps[{i}][{j}]", params[j], v) for j, v in enumerate(step)]
        for i, step in enumerate(pairs)
    ]


def _slo_rule(s: Sections) -> None:
    if s["experiment"].get("slo") is not None:
        try:
            slo.parse(text(s["experiment"], "slo"))
        except slo.SloError as err:
            raise RuleError("experiment.slo", str(err)) from None


COMMON_RULES: list[Rule] = [_load_rule, _slo_rule]


# ---------------------------------------------------------------- values and sections


def _toml_type(value: Any) -> str:
    for name, kind in _TOML_TYPES.items():  # bool first: it is an int to Python
        if isinstance(value, kind):
            return name
    return type(value).__name__  # datetime, date, time


def _show(value: Any, limit: int = 60) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    else:  # TOML dates and times as written; everything else as Python shows it
        text = value.isoformat() if hasattr(value, "isoformat") else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _given(value: Any) -> str:
    return f"{_show(value)} ({_toml_type(value)})"


#: TOML's integers are 64-bit signed; Python's TOML reader takes any size, and knee-node
#: (u64 and i64 fields) would refuse a larger one only after the run has started.
_INT64 = range(-(2**63), 2**63)


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and value in _INT64
    if kind == "float":
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return number and math.isfinite(value)
    return isinstance(value, {"str": str, "bool": bool, "list": list}[kind])


def _in_range(param: Param, value: Any) -> bool:
    if param.choices and value not in param.choices:
        return False
    if param.min is not None and (value <= param.min if param.min_exclusive else value < param.min):
        return False
    return param.max is None or value <= param.max


def _coerce(key: str, param: Param, value: Any) -> Any:
    """The value checked against its Param (ints become floats for float params)."""
    if _type_ok(param.type, value):
        checked = float(value) if param.type == "float" else value
        if _in_range(param, checked):
            return checked
    too_big = isinstance(value, int) and not isinstance(value, bool) and value not in _INT64
    where = " (TOML integers are 64-bit)" if too_big else ""
    raise RuleError(key, f"expected {param.expected()}, got {_given(value)}{where}")


def _did_you_mean(name: str, options: Sequence[str]) -> str:
    close = [o for o in options if o.startswith(name) or name.startswith(o)]
    close = close or difflib.get_close_matches(name, options, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _unknown(what: str, name: str, allowed: Sequence[str]) -> str:
    return f"unknown {what}; expected one of: {', '.join(allowed)}" + _did_you_mean(name, allowed)


def _table(key: str, value: Any) -> Doc:
    if not isinstance(value, dict):
        raise RuleError(key, f"expected a table, got {_given(value)}")
    return value


def _check_section(key: str, schema: Schema, table: Any) -> Doc:
    """Given keys only, each checked; no defaults."""
    out = {}
    for name, value in _table(key, table).items():
        if name not in schema:
            raise RuleError(f"{key}.{name}", _unknown("key", name, list(schema)))
        out[name] = _coerce(f"{key}.{name}", schema[name], value)
    return out


def _fill(schema: Schema, given: Doc) -> Doc:
    """Every key of the schema, in schema order; absent keys get their default."""
    return {name: given.get(name, param.default) for name, param in schema.items()}


def _require(key: str, schema: Schema, values: Doc) -> Doc:
    for name, value in values.items():
        if value is REQUIRED:
            raise RuleError(f"{key}.{name}", f"missing ({schema[name].expected()})")
    return values


def _present(values: Doc) -> Doc:
    return {k: v for k, v in values.items() if v is not None and v is not REQUIRED}


# ---------------------------------------------------------------- sweeps, series, presets


def _sweep_hint(name: str, schemas: Schemas) -> str:
    section = name.partition(".")[0]
    if section not in schemas:
        return "; keys are server.KEY, load.KEY or driver.KEY"
    return _did_you_mean(name, [f"{section}.{p}" for p in schemas[section]])


def _check_sweep(key: str, table: Any, schemas: Schemas) -> dict[str, list[Any]]:
    out = {}
    for name, values in _table(key, table).items():
        section, _, param = name.partition(".")
        where = f"{key}.{name}"
        if param not in schemas.get(section, {}):
            hint = _sweep_hint(name, schemas)
            raise RuleError(where, f"sweep over unknown parameter {name!r}{hint}")
        if not isinstance(values, list) or not values:
            raise RuleError(where, f"expected a non-empty list of values, got {_given(values)}")
        schema = schemas[section][param]
        out[name] = [_coerce(f"{where}[{i}]", schema, v) for i, v in enumerate(values)]
        for i, value in enumerate(out[name]):
            if value in out[name][:i]:
                raise RuleError(f"{where}[{i}]", f"{_show(values[i])} is swept twice")
    return out


def _check_series(name: str, table: Any, schemas: Schemas, placement: Placement) -> Doc:
    key = f"series.{name}"
    if not _NAME.fullmatch(name):
        raise RuleError(key, "a series name may only contain letters, digits, '-' and '_'")
    out: Doc = {}
    for part, value in _table(key, table).items():
        if part not in _SERIES_KEYS:
            raise RuleError(f"{key}.{part}", _unknown("key", part, _SERIES_KEYS))
        if part == "description":
            out[part] = _coerce(f"{key}.description", _DESCRIPTION, value)
        elif part == "sweep":
            out[part] = _check_sweep(f"{key}.sweep", value, schemas)
        elif part == "placement":
            out[part] = check_rules(f"{key}.placement", value, placement.hosts)
        else:
            out[part] = _check_section(f"{key}.{part}", schemas[part], value)
    return out


def _flatten(key: str, table: Doc, stem: str = "") -> Doc:
    """Sweep tables accept dotted keys too: load.rate_per_s = [...] is "load.rate_per_s"."""
    out: Doc = {}
    for name, value in table.items():
        nested = isinstance(value, dict)
        items = _flatten(key, value, f"{stem}{name}.") if nested else {f"{stem}{name}": value}
        for full, v in items.items():
            if full in out:
                raise RuleError(f"{key}.{full}", "given twice (as a quoted and a dotted key)")
            out[full] = v
    return out


def _normalize(doc: Doc, prefix: str = "") -> Doc:
    if isinstance(doc.get("sweep"), dict):
        doc["sweep"] = _flatten(f"{prefix}sweep", doc["sweep"])
    series = doc.get("series")
    for name, table in series.items() if isinstance(series, dict) else ():
        if isinstance(table, dict) and isinstance(table.get("sweep"), dict):
            table["sweep"] = _flatten(f"{prefix}series.{name}.sweep", table["sweep"])
    return doc


def _take_presets(doc: Doc) -> dict[str, Doc]:
    presets = _table("presets", doc.pop("presets", {}))
    for name, preset in presets.items():
        if "presets" in _table(f"presets.{name}", preset):
            raise RuleError(f"presets.{name}.presets", "a preset cannot contain presets")
        _normalize(preset, f"presets.{name}.")
    return presets


def _merge(base: Doc, overlay: Doc, stem: str, origins: set[str]) -> Doc:
    """Deep merge: tables merge recursively, anything else replaces. Records replaced keys."""
    out = dict(base)
    for name, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(name), dict):
            out[name] = _merge(out[name], value, f"{stem}{name}.", origins)
        else:
            out[name] = value
            origins.add(f"{stem}{name}")
    return out


# ---------------------------------------------------------------- validation and expansion


def _validate(doc: Doc) -> tuple[Doc, Schemas]:
    """The merged spec checked key by key: experiment defaulted, sections as given."""
    for name in doc:
        if name not in _TOP_LEVEL:
            raise RuleError(name, _unknown("section", name, _TOP_LEVEL))
    experiment = _check_section("experiment", EXPERIMENT, doc.get("experiment", {}))
    experiment = _require("experiment", EXPERIMENT, _fill(EXPERIMENT, experiment))
    if not 0 < len(experiment["name"]) <= MAX_NAME_CHARS:
        raise RuleError(
            "experiment.name",
            f"expected 1 to {MAX_NAME_CHARS} characters (it names the run directory), "
            f"got {len(experiment['name'])}",
        )
    if experiment["system"] not in SYSTEMS:
        raise RuleError(
            "experiment.system",
            f"unknown system {experiment['system']!r}; expected one of: {', '.join(SYSTEMS)}",
        )
    system = SYSTEMS[experiment["system"]]
    schemas = {"server": system.server, "load": LOAD, "driver": system.driver}
    out: Doc = {"experiment": experiment}
    for section, schema in schemas.items():
        out[section] = _check_section(section, schema, doc.get(section, {}))
    out["placement"] = check_placement(doc, _check_section)
    if "series" in doc:
        if "sweep" in doc:
            raise RuleError(
                "sweep",
                "a top-level [sweep] cannot be used with [series]; "
                "sweeps belong in each series ([series.NAME.sweep])",
            )
        if not _table("series", doc["series"]):
            raise RuleError("series", "expected at least one [series.NAME] table")
        out["series"] = {
            name: _check_series(name, table, schemas, out["placement"])
            for name, table in doc["series"].items()
        }
    elif "sweep" in doc:
        out["sweep"] = _check_sweep("sweep", doc["sweep"], schemas)
    out["events"] = _check_events(doc.get("events", []))
    return out, schemas


def _check_events(events: Any) -> list[TimelineEvent]:
    if not isinstance(events, list):
        raise RuleError("events", f"expected [[events]] tables, got {_given(events)}")
    out = []
    for i, table in enumerate(events):
        key = f"events[{i}]"
        e = _require(key, EVENT, _fill(EVENT, _check_section(key, EVENT, table)))
        out.append(TimelineEvent(at_s=e["at_s"], action=e["action"], node=e["node"]))
    return sorted(out, key=lambda e: e["at_s"])


def _check_nodes(checked: Doc, points: list[Point]) -> None:
    """Every point's nodes can be placed on the spec's hosts, and every event names a node
    that each point starts."""
    system = SYSTEMS[checked["experiment"]["system"]]
    for point in points:
        try:
            names = [plan.name for plan in plan_nodes(system, point)]
        except RuleError as err:
            raise RuleError(err.key, f"{err.message} (in point {point.label!r})") from None
        check_nodes(checked["placement"].for_point(point.placement), names, point.label)
        for i, event in enumerate(checked["events"]):
            if event["node"] == PRIMARY and system.reports_primary:
                if event["action"] == "start":
                    raise RuleError(
                        f"events[{i}].node",
                        "'primary' names a running replica: start a replica by its name",
                    )
                continue
            if event["node"] not in names:
                raise RuleError(
                    f"events[{i}].node",
                    f"{event['node']!r} is not a node of point {point.label!r}; "
                    f"its nodes are: {', '.join(names)}",
                )


def _point_sections(checked: Doc, series: Doc, swept: Doc, schemas: Schemas) -> Sections:
    """Top level, then series overrides, then swept values; defaulted and checked by rules."""
    sections: Sections = {"experiment": dict(checked["experiment"])}
    for section, schema in schemas.items():
        given = {**checked[section], **series.get(section, {})}
        given |= {k.partition(".")[2]: v for k, v in swept.items() if k.startswith(section + ".")}
        sections[section] = _require(section, schema, _fill(schema, copy.deepcopy(given)))
    for rule in COMMON_RULES + list(SYSTEMS[checked["experiment"]["system"]].rules):
        rule(sections)
    return sections


def _expand(checked: Doc, schemas: Schemas) -> list[Point]:
    """Series in file order; in each, the product of its sweep, the last key varying fastest."""
    all_series = checked.get("series") or {"main": {"sweep": checked.get("sweep", {})}}
    points: list[Point] = []
    for name, series in all_series.items():
        prefix = f"series.{name}." if "series" in checked else ""
        sweep = series.get("sweep", {})
        for values in itertools.product(*sweep.values()):
            swept = dict(zip(sweep, values, strict=True))
            try:
                sections = _point_sections(checked, series, swept, schemas)
            except RuleError as err:
                where = ", ".join(f"{k}={_show(v)}" for k, v in swept.items())
                message = err.message + (f" (in sweep point {where})" if where else "")
                raise RuleError(prefix + err.key, message) from None
            placement = series.get("placement", {})
            points.append(Point(len(points), name, swept, **sections, placement=placement))
    return points


def _resolved(checked: Doc, schemas: Schemas) -> Doc:
    resolved: Doc = {"experiment": _present(checked["experiment"])}
    for section, schema in schemas.items():
        resolved[section] = _present(_fill(schema, checked[section]))
    for extra in ("sweep", "series", "events"):
        if checked.get(extra):
            resolved[extra] = copy.deepcopy(checked[extra])
    return resolved | checked["placement"].resolved()


def _read(path: str) -> Doc:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise SpecError(path, "(file)", "no such file") from None
    except OSError as err:
        raise SpecError(path, "(file)", f"cannot read: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise SpecError(path, "(file)", f"not UTF-8 text ({err.reason})") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError(path, "(syntax)", str(err)) from None


def _from_preset(key: str, origins: set[str]) -> bool:
    return any(key == o or key.startswith((o + ".", o + "[")) for o in origins)


def load_spec(path: str | os.PathLike[str], preset: str | None = None) -> Spec:
    """Read, merge the preset into, validate and expand one experiment spec."""
    path = os.fspath(path)
    doc = _read(path)
    origins: set[str] = set()
    token = SPEC_DIR.set(os.path.dirname(os.path.abspath(path)))
    try:
        presets = _take_presets(doc)
        _normalize(doc)
        if preset is not None:
            if preset not in presets:
                available = ", ".join(presets) if presets else "(this file defines none)"
                raise RuleError("presets", f"unknown preset {preset!r}; available: {available}")
            doc = _merge(doc, presets[preset], "", origins)
        checked, schemas = _validate(doc)
        points = _expand(checked, schemas)
        _check_nodes(checked, points)
    except RuleError as err:
        suffix = f" (from preset {preset!r})" if _from_preset(err.key, origins) else ""
        raise SpecError(path, err.key, err.message + suffix) from None
    finally:
        SPEC_DIR.reset(token)
    return Spec(
        path,
        preset,
        checked["experiment"],
        _resolved(checked, schemas),
        points,
        list(presets),
        checked["events"],
        checked["placement"],
    )
